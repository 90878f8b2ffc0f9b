"""Event -> feature dict, for events shaped ``{"id": str, "text": str, "features": {str: value}}``.

`EventFeaturizer` builds one dict for count/presence models: text token counts, ``"f=v"``
indicator features (count 1) for categorical fields and float values for numeric fields.
`CategoricalFeaturizer` builds ``{field: category}`` for CategoricalNB, `NumericFeaturizer`
``{field: float}`` for GaussianNB; both can refuse an event that carries text (`text_refusal`),
so text sent to a model that cannot read it is an error, not silently ignored.

Value rules shared by both:

- ``None`` (JSON null) or an absent field: the field contributes nothing;
- booleans are categories ``"true"`` / ``"false"``, never numbers;
- a number used as a category is written without a fractional part when integral
  (``3`` and ``3.0`` are both category ``"3"``), else as ``repr(float)``;
- lists, dicts, other objects, NaN and infinities are a `ValueError` naming the field.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from stream_nb.features.text import TextFeaturizer

__all__ = ["CategoricalFeaturizer", "EventFeaturizer", "NumericFeaturizer"]


def _field_names(option: str, fields: Any) -> tuple[str, ...] | None:
    if fields is None:
        return None
    if isinstance(fields, (str, bytes)) or not isinstance(fields, Iterable):
        raise ValueError(f"{option} must be None or a list of field names, got {fields!r}")
    names = tuple(fields)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(f"{option} must contain non-empty strings, got {name!r}")
    if len(set(names)) != len(names):
        raise ValueError(f"{option} lists a field more than once: {list(names)}")
    return names


def _check_field_name(option: str, name: Any) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"{option} must be a non-empty string, got {name!r}")
    return name


def category_of(field: str, value: Any) -> str:
    """The category string of `value` (see the module rules); `ValueError` for other types."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"field {field!r}: category value must be finite, got {value!r}")
        return str(int(value)) if value.is_integer() else repr(value)
    raise ValueError(
        f"field {field!r}: expected a string, number or boolean, got {type(value).__name__}"
    )


def number_of(field: str, value: Any) -> float:
    """`value` as a finite float; `ValueError` for booleans, strings, other types, NaN, inf."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"field {field!r}: expected a number, got {type(value).__name__}")
    try:
        number = float(value)
    except OverflowError:
        raise ValueError(f"field {field!r}: number too large for a float") from None
    if not math.isfinite(number):
        raise ValueError(f"field {field!r}: number must be finite, got {value!r}")
    return number


def _structured_fields(event: Any, features_field: str) -> Mapping[str, Any]:
    if not isinstance(event, Mapping):
        raise TypeError(f"an event must be a mapping, got {type(event).__name__}")
    fields = event.get(features_field)
    if fields is None:
        return {}
    if not isinstance(fields, Mapping):
        raise ValueError(
            f"field {features_field!r}: expected a mapping of feature name to value, "
            f"got {type(fields).__name__}"
        )
    return fields


def _refuse_text(event: Any, refusal: str | None) -> None:
    if refusal is not None and isinstance(event, Mapping) and event.get("text") is not None:
        raise ValueError(refusal)


_DEFAULT_TEXT: Any = object()  # marks "text featuriser not given": use TextFeaturizer()


class EventFeaturizer:
    """Turns an event into one feature dict: text counts, ``"f=v"`` indicators, numeric floats.

    Parameters
    ----------
    text
        The featuriser for ``event[text_field]``; omitted: ``TextFeaturizer()``; ``None``: the text
        is ignored. A missing or null text gives no text features; a non-string is a `ValueError`.
    categorical, numeric
        Field names of ``event[features_field]``.

        *Both None* (inferred): every field is used; strings and booleans become indicator
        features ``"f=v"`` with count 1, ints and floats become float values under ``"f"``.

        *Either given* (declared): only the listed fields are used (``None`` counts as an empty
        list); a categorical field becomes ``"f=<category>"`` (numbers allowed, see module rules),
        a numeric field must hold a number (a string is a `ValueError`). Other fields are ignored.
    text_field, features_field
        Where the text and the structured features live in the event.

    Key collisions: an ``"f=v"`` indicator adds 1 to a text token with the same key (the default
    token patterns cannot produce ``=``); a numeric value replaces a text token count with the
    same key, so do not name numeric fields like words when combining them with text.
    """

    def __init__(
        self,
        text: TextFeaturizer | None = _DEFAULT_TEXT,
        categorical: Iterable[str] | None = None,
        numeric: Iterable[str] | None = None,
        text_field: str = "text",
        features_field: str = "features",
    ) -> None:
        if text is _DEFAULT_TEXT:
            text = TextFeaturizer()
        if text is not None and not isinstance(text, TextFeaturizer):
            raise ValueError(f"text must be a TextFeaturizer or None, got {text!r}")
        self.text = text
        self.categorical = _field_names("categorical", categorical)
        self.numeric = _field_names("numeric", numeric)
        both = set(self.categorical or ()) & set(self.numeric or ())
        if both:
            raise ValueError(f"fields listed as both categorical and numeric: {sorted(both)}")
        self.text_field = _check_field_name("text_field", text_field)
        self.features_field = _check_field_name("features_field", features_field)
        self.infers_kinds = self.categorical is None and self.numeric is None

    def transform_one(self, event: Mapping[str, Any]) -> dict[str, int | float]:
        """The feature dict of one event (see the class docstring for the rules)."""
        fields = _structured_fields(event, self.features_field)
        features: dict[str, int | float] = {}
        if self.text is not None:
            text = event.get(self.text_field)
            if text is not None:
                if not isinstance(text, str):
                    raise ValueError(
                        f"field {self.text_field!r}: expected a string, got {type(text).__name__}"
                    )
                features = self.text.transform_one(text)  # type: ignore[assignment]  # fresh dict

        if self.infers_kinds:
            for name, value in fields.items():
                if value is None:
                    continue
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    features[name] = number_of(name, value)
                else:
                    key = f"{name}={category_of(name, value)}"
                    features[key] = features.get(key, 0) + 1
            return features

        for name in self.categorical or ():
            value = fields.get(name)
            if value is not None:
                key = f"{name}={category_of(name, value)}"
                features[key] = features.get(key, 0) + 1
        for name in self.numeric or ():
            value = fields.get(name)
            if value is not None:
                features[name] = number_of(name, value)
        return features

    __call__ = transform_one

    def transform_many(self, events: Iterable[Mapping[str, Any]]) -> list[dict[str, int | float]]:
        """The feature dict of each event, in order."""
        return [self.transform_one(event) for event in events]

    def to_config(self) -> dict[str, Any]:
        """Every option as JSON-able values; `from_config` rebuilds an identical featuriser."""
        return {
            "text": None if self.text is None else self.text.to_config(),
            "categorical": None if self.categorical is None else list(self.categorical),
            "numeric": None if self.numeric is None else list(self.numeric),
            "text_field": self.text_field,
            "features_field": self.features_field,
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> EventFeaturizer:
        """Rebuild from `to_config` output; ``"text": None`` means no text featuriser."""
        known = {"text", "categorical", "numeric", "text_field", "features_field"}
        if not isinstance(config, Mapping):
            raise ValueError(f"EventFeaturizer config must be a mapping, got {type(config).__name__}")
        unknown = sorted(set(config) - known)
        if unknown:
            raise ValueError(f"unknown EventFeaturizer config keys: {unknown}")
        options = dict(config)
        text_config = options.pop("text", None)
        text = None if text_config is None else TextFeaturizer.from_config(text_config)
        return cls(text=text, **options)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, EventFeaturizer):
            return NotImplemented
        return self.to_config() == other.to_config()

    __hash__ = None  # type: ignore[assignment]


class CategoricalFeaturizer:
    """Turns an event into ``{field: category}`` for CategoricalNB.

    ``fields=None`` uses every field of ``event[features_field]``; otherwise only the listed
    ones. Values follow the module rules (``True`` -> ``"true"``, ``3.0`` -> ``"3"``, null or
    absent -> no entry; lists, dicts, NaN, inf -> `ValueError` naming the field).
    """

    def __init__(
        self, fields: Iterable[str] | None = None, features_field: str = "features",
        text_refusal: str | None = None,
    ) -> None:
        self.fields = _field_names("fields", fields)
        self.features_field = _check_field_name("features_field", features_field)
        self.text_refusal = text_refusal

    def transform_one(self, event: Mapping[str, Any]) -> dict[str, str]:
        """The ``{field: category}`` dict of one event."""
        _refuse_text(event, self.text_refusal)
        values = _structured_fields(event, self.features_field)
        names = values.keys() if self.fields is None else self.fields
        categories: dict[str, str] = {}
        for name in names:
            value = values.get(name)
            if value is not None:
                categories[name] = category_of(name, value)
        return categories

    __call__ = transform_one

    def transform_many(self, events: Iterable[Mapping[str, Any]]) -> list[dict[str, str]]:
        """The ``{field: category}`` dict of each event, in order."""
        return [self.transform_one(event) for event in events]

    def to_config(self) -> dict[str, Any]:
        """Every option as JSON-able values."""
        return {
            "fields": None if self.fields is None else list(self.fields),
            "features_field": self.features_field,
        }

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> CategoricalFeaturizer:
        """Rebuild from `to_config` output."""
        if not isinstance(config, Mapping):
            raise ValueError(
                f"CategoricalFeaturizer config must be a mapping, got {type(config).__name__}"
            )
        unknown = sorted(set(config) - {"fields", "features_field"})
        if unknown:
            raise ValueError(f"unknown CategoricalFeaturizer config keys: {unknown}")
        return cls(**config)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, CategoricalFeaturizer):
            return NotImplemented
        return self.to_config() == other.to_config()

    __hash__ = None  # type: ignore[assignment]


class NumericFeaturizer:
    """Turns an event into ``{field: float}`` for GaussianNB.

    ``fields=None`` uses every field of ``event[features_field]``, each of which must then be a
    number; otherwise only the listed ones (other fields are ignored). A string or boolean in a
    used field is a `ValueError` naming the field; null or absent: no entry.
    """

    def __init__(self, fields: Iterable[str] | None = None, features_field: str = "features",
                 text_refusal: str | None = None) -> None:
        self.fields = _field_names("fields", fields)
        self.features_field = _check_field_name("features_field", features_field)
        self.text_refusal = text_refusal

    def transform_one(self, event: Mapping[str, Any]) -> dict[str, float]:
        """The ``{field: value}`` dict of one event."""
        _refuse_text(event, self.text_refusal)
        values = _structured_fields(event, self.features_field)
        names = values.keys() if self.fields is None else self.fields
        return {name: number_of(name, values[name]) for name in names if values.get(name) is not None}

    __call__ = transform_one

    def transform_many(self, events: Iterable[Mapping[str, Any]]) -> list[dict[str, float]]:
        return [self.transform_one(event) for event in events]

    def to_config(self) -> dict[str, Any]:
        return {"numeric": None if self.fields is None else list(self.fields), "features_field": self.features_field}

"""Models by name, so configurations (TOML, the CLI) can name a variant and its options."""

from __future__ import annotations

import inspect

from stream_nb.model.categorical import CategoricalNB
from stream_nb.model.counting import BernoulliNB, ComplementNB, MultinomialNB
from stream_nb.model.gaussian import GaussianNB

MODEL_KINDS = {
    "multinomial": MultinomialNB,
    "bernoulli": BernoulliNB,
    "complement": ComplementNB,
    "categorical": CategoricalNB,
    "gaussian": GaussianNB,
}


def build_model(kind: str, options: dict | None = None):
    """A fresh model of `kind` with `options`; unknown kinds or options raise ValueError naming them."""
    if kind not in MODEL_KINDS:
        raise ValueError(f"unknown model kind {kind!r}; expected one of {', '.join(MODEL_KINDS)}")
    cls = MODEL_KINDS[kind]
    options = dict(options or {})
    accepted = set(inspect.signature(cls.__init__).parameters) - {"self"}
    unknown = sorted(set(options) - accepted)
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(unknown)} for model kind {kind!r}; "
                         f"accepted: {', '.join(sorted(accepted))}")
    return cls(**options)


def kind_of(class_name: str):
    """(kind, class) for a model class name as stored in a state's meta["kind"]."""
    for kind, cls in MODEL_KINDS.items():
        if cls.__name__ == class_name:
            return kind, cls
    raise ValueError(f"unknown model kind {class_name!r} (expected one of "
                     f"{', '.join(cls.__name__ for cls in MODEL_KINDS.values())})")


def model_from_state(state: dict):
    """Rebuild a model of whatever kind `state` (from `to_state()`) holds."""
    return kind_of(state["meta"].get("kind"))[1].from_state(state)

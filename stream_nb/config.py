"""Configuration as data: TOML files under configs/, validated on load, errors naming the key.

Sections so far: [model] (kind and the model's options) and [features] (TextFeaturizer's
options). `--set section.key=value` overrides a key; the value is read as TOML (1, 0.5, true,
"text", [1, 2]) and, failing that, taken as a string.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from stream_nb.features import TextFeaturizer
from stream_nb.model.registry import build_model

SECTIONS = ("model", "features")
TEXT_MODEL_KINDS = ("multinomial", "bernoulli", "complement")


class ConfigError(ValueError):
    """A configuration that cannot be used; the message starts with the offending key."""


@dataclass
class Config:
    model: dict = field(default_factory=lambda: {"kind": "multinomial"})
    features: dict = field(default_factory=dict)
    source: str = "defaults"

    def build_model(self):
        options = {key: value for key, value in self.model.items() if key != "kind"}
        try:
            return build_model(self.model.get("kind", "multinomial"), options)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"model: {error}") from None

    def build_featurizer(self) -> TextFeaturizer:
        try:
            return TextFeaturizer.from_config(self.features)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"features: {error}") from None

    def to_dict(self) -> dict:
        return {"model": dict(self.model), "features": dict(self.features)}


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> Config:
    """Read a TOML file (or start from the defaults), apply overrides, validate everything."""
    data: dict = {}
    source = "defaults"
    if path is not None:
        path = Path(path)
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ConfigError(f"{path}: no such file") from None
        except tomllib.TOMLDecodeError as error:
            raise ConfigError(f"{path}: not valid TOML ({error})") from None
        source = str(path)
    for override in overrides:
        _apply_override(data, override)
    for section in data:
        if section not in SECTIONS:
            raise ConfigError(f"{section}: unknown section (expected {', '.join(SECTIONS)})")
        if not isinstance(data[section], dict):
            raise ConfigError(f"{section}: must be a table of keys")
    config = Config(model={"kind": "multinomial", **data.get("model", {})},
                    features=dict(data.get("features", {})), source=source)
    kind = config.model["kind"]
    if kind not in TEXT_MODEL_KINDS:
        raise ConfigError(f"model.kind: {kind!r} is not a text model (expected {', '.join(TEXT_MODEL_KINDS)})")
    config.build_model()  # validates every option now, not at the first event
    config.build_featurizer()
    return config


def _apply_override(data: dict, override: str) -> None:
    key, separator, raw = override.partition("=")
    if not separator or "." not in key:
        raise ConfigError(f"--set {override!r}: expected section.key=value")
    section, name = key.strip().split(".", 1)
    try:
        value = tomllib.loads(f"value = {raw}")["value"]
    except tomllib.TOMLDecodeError:
        value = raw
    table = data.setdefault(section, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{section}: must be a table of keys")
    table[name] = value

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

"""Models by name, so configurations (TOML, the CLI) can name a variant and its options."""

from __future__ import annotations

import inspect

from stream_nb.model.categorical import CategoricalNB
from stream_nb.model.counting import BernoulliNB, ComplementNB, MultinomialNB
from stream_nb.model.gaussian import GaussianNB
from stream_nb.model.state_check import InvalidState, check_state

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


def _class_of_state(state) -> type:
    meta = state.get("meta") if isinstance(state, dict) else None
    if not isinstance(meta, dict):
        raise InvalidState("state must be {'meta': dict, 'arrays': dict}")
    try:
        return kind_of(meta.get("kind"))[1]
    except ValueError as error:
        raise InvalidState(str(error)) from None


def _is_experts(state) -> bool:
    return isinstance(state, dict) and isinstance(state.get("meta"), dict) and state["meta"].get("kind") == "Experts"


def model_from_state(state: dict):
    """Rebuild a model of whatever kind `state` (from `to_state()`) holds, several views' experts
    too (stream_nb.model.experts); InvalidState (a ValueError, one line) when the state breaks
    the model's invariants (see state_check)."""
    if _is_experts(state):
        from stream_nb.model.experts import Experts  # it builds its experts through this module

        return Experts.from_state(state)
    return _class_of_state(state).from_state(state)


def check_model_state(state: dict) -> None:
    """`model_from_state`'s checks alone, building nothing: InvalidState naming the broken invariant."""
    if _is_experts(state):
        model_from_state(state)
        return
    check_state(_class_of_state(state), state)

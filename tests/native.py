"""The optional C extensions in tests: a test of one needs it built.

Where it is not built the test skips, with the reason; under CI (``CI=true``), where
`pip install -e .` builds every extension with the machine's compiler, it fails instead.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


# make sanitize sets STREAM_NB_SANITIZED=1: under AddressSanitizer and UBSan the C runs several
# times slower, and the tests that hold C to Python over whole corpora take every
# SANITIZED_STRIDE-th message there (hundreds to thousands of messages still, of every kind the
# corpus has); the plain suite reads every message.
SANITIZED = os.environ.get("STREAM_NB_SANITIZED") == "1"
SANITIZED_STRIDE = 8


def corpus_sample(items: list) -> list:
    """`items`, or every SANITIZED_STRIDE-th of them under make sanitize."""
    return items[::SANITIZED_STRIDE] if SANITIZED else items


def require_extension(module, name: str) -> None:
    """Skip (fail under CI) unless `module`, the import of extension `name`, is there."""
    if module is not None:
        return
    reason = f"the C extension {name} is not built (pip install -e . builds it)"
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(reason)
    pytest.skip(reason)


def replay_spam_toml(rows: list[tuple[str, str]], mode: str, unlabeled_every: int | None,
                     batch_size: int, python_featurizer: bool = False):
    """configs/spam.toml as shipped (training.mode set to `mode`) replayed over (label, text)
    rows, every `unlabeled_every`-th event unlabeled (batches that mix learned and predicted-only
    events); (the contender, the probabilities of the unlabeled events). With
    `python_featurizer`, the featuriser's C extension stays out."""
    from stream_nb.config import load_config
    from stream_nb.replay.prequential import Contender, replay_contenders

    config = load_config(REPO / "configs" / "spam.toml", [f'training.mode="{mode}"'])
    featurizer = config.build_featurizer()
    if python_featurizer:
        featurizer._native_plan = None
    contender = Contender("spam.toml", config.build_model(), featurizer, config.build_event_featurizer(),
                          training=dict(config.training))
    predictions = []
    contender.on_unlabeled = lambda event, probabilities, n_features: predictions.append(probabilities)
    events = [{"id": i, "text": text, "label": label} for i, (label, text) in enumerate(rows)]
    if unlabeled_every:
        for event in events[unlabeled_every - 1 :: unlabeled_every]:
            event["label"] = None
    replay_contenders(events, [contender], batch_size=batch_size)
    return contender, predictions

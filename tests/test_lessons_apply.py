"""stream_nb.lessons.apply: the forgetting epoch the memory records for each learned event,
when a labeled event of a batch is refused by the model (it takes no place on the labeled
clock), against hand-worked epochs and against the same stream one event per batch."""

from __future__ import annotations

from pathlib import Path

from stream_nb.checkpoint import state_digest
from stream_nb.config import load_config
from stream_nb.lessons import Learned
from stream_nb.replay.cli import _contender
from stream_nb.replay.evaluation import EvaluationRecorder
from stream_nb.replay.prequential import replay_contenders

SPAM_CONFIG = Path(__file__).resolve().parents[1] / "configs" / "spam.toml"
OTHER = {"ham": "spam", "spam": "ham"}
TEXTS = [("ham", f"see you at {hour} for lunch") if i % 3 else ("spam", f"win {hour} cash prizes now")
         for i, hour in enumerate(range(40))]


def replayed(events: list[dict], batch_size: int):
    # mode "all", decay every 10 labeled events: the epoch of the k-th counted labeled event is k // 10
    config = load_config(SPAM_CONFIG, ["training.mode=\"all\"", "model.half_life=100", "model.evict_every=10"])
    contender = _contender("r", config, EvaluationRecorder)
    replay_contenders([dict(event) for event in events], [contender], batch_size=batch_size)
    return contender


def stream() -> list[dict]:
    """m0..m39 learned, a labeled event the model refuses (an overflowing feature value) right
    after m7, then m8..m19 corrected."""
    events = []
    for i, (label, text) in enumerate(TEXTS):
        events.append({"id": f"m{i}", "text": text, "label": label})
        if i == 7:
            events.append({"id": "refused", "text": "x", "features": {"x": 1e308}, "label": "ham"})
    for i in range(8, 20):
        label, text = TEXTS[i]
        events.append({"id": f"m{i}", "text": text, "label": OTHER[label], "unlearn": label})
    return events


def test_a_refused_labeled_event_takes_no_place_on_the_forgetting_clock():
    whole = replayed(stream(), batch_size=1000)  # one batch: the epochs are read off the clock before it
    assert whole.refused == {"rejected_by_model": 1}  # the refused event alone: every take-back honoured
    assert +whole.lessons.outcomes == {"learned": 40, "corrected": 12}
    assert whole.model.forgetting_epoch == 5  # 52 counted labeled events: the refused one is not among them
    # hand-worked: m<i> is the i-th counted labeled event (epoch i // 10), the corrections the
    # 40th to 51st, moved to the end
    corrected = range(8, 20)
    expected = [(f"m{i}", Learned(TEXTS[i][0], i // 10, 1.0)) for i in range(40) if i not in corrected]
    expected += [(f"m{i}", Learned(OTHER[TEXTS[i][0]], (40 + k) // 10, 1.0)) for k, i in enumerate(corrected)]
    assert list(whole.lessons.memory.items()) == expected
    # and the batch size changes nothing: one event per batch reads the clock before each
    alone = replayed(stream(), batch_size=1)
    assert alone.lessons.memory == whole.lessons.memory
    assert state_digest(alone.model.to_state()) == state_digest(whole.model.to_state())

"""What the worker learned by id, and the rules for duplicates and corrections (issue 24).

Pure logic, no I/O and no model: `memory.LearnedIds` is the bounded memory of learned ids
(saved in checkpoints and snapshots as JSON-able lists), `rules.plan` decides what one labeled
event takes back and learns, `rules.settle` writes back what was learned, `apply.LabeledLessons` runs them on a model
batch by batch (the worker's and replay's labeled path). The model's side
(``unlearn_one`` / ``unlearn_many``, ``forgetting_epoch``) is the model's.
"""

from stream_nb.lessons.apply import REFUSED, LabeledLessons, Lessons, learning_epochs
from stream_nb.lessons.memory import (
    DEFAULT_REMEMBER_IDS,
    Learned,
    LearnedIds,
    LearnedIdsStateError,
    id_of_keyed,
)
from stream_nb.lessons.rules import (
    CORRECTED,
    CORRECTION_MISMATCH,
    CORRECTION_OF_UNKNOWN,
    DUPLICATE,
    LEARNED,
    OUTCOMES,
    RELEARNED,
    Plan,
    plan,
    settle,
)

__all__ = [
    "CORRECTED",
    "CORRECTION_MISMATCH",
    "CORRECTION_OF_UNKNOWN",
    "DEFAULT_REMEMBER_IDS",
    "DUPLICATE",
    "LEARNED",
    "OUTCOMES",
    "REFUSED",
    "RELEARNED",
    "LabeledLessons",
    "Learned",
    "LearnedIds",
    "LearnedIdsStateError",
    "Lessons",
    "Plan",
    "plan",
    "id_of_keyed",
    "learning_epochs",
    "settle",
]

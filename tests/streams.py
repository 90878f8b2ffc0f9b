"""Seeded synthetic streams for parity and equivalence tests."""

from __future__ import annotations

import random


def prequential_loop(model, X, y) -> list[dict]:
    """The per-event loop every batch path must equal: predict with the state so far, then learn
    the event if it is labeled (works for River's models and ours)."""
    predictions = []
    for x, label in zip(X, y):
        predictions.append(model.predict_proba_one(x))
        if label is not None:
            model.learn_one(x, label)
    return predictions


def maintained_loop(model, X, y, mode: str, margin: float) -> list[dict]:
    """The per-event meaning of a model's maintenance, which every batch path must equal:
    predict; if labeled, decide under the training mode, learn, and after every evict_every-th
    labeled event decay by 2^(-evict_every / half_life) (when it forgets), then evict down to
    90% of max_features if over it (when it has a budget)."""
    from stream_nb.model.training import should_learn

    out = []
    for x, label in zip(X, y):
        out.append(model.predict_proba_one(x))
        if label is None:
            continue
        if should_learn(model.joint_log_likelihood(x), label, mode, margin):
            model._learn_labeled(x, label)
        model.labeled_seen += 1
        if model.labeled_seen % model.evict_every == 0:
            if model.half_life is not None:
                model.decay(0.5 ** (model.evict_every / model.half_life))
            if model.max_features is not None and model.n_features > model.max_features:
                model.evict_features(int(model.max_features * 0.9))
    return out


def text_stream(seed: int, n_events: int, n_classes: int = 3, vocabulary: int = 300,
                labeled_fraction: float = 0.6, max_count: int = 3,
                class_names: list | None = None) -> tuple[list[dict], list]:
    """Word-count events whose word distribution depends on the class; some unlabeled. Class k
    is called class_names[k] (default "class<k>")."""
    rng = random.Random(seed)
    words = [f"w{k}" for k in range(vocabulary)]
    X, y = [], []
    for _ in range(n_events):
        label = rng.randrange(n_classes)
        x: dict = {}
        for _ in range(rng.randint(0, 12)):
            # class-dependent bias: each class prefers its own slice of the vocabulary
            if rng.random() < 0.5:
                word = words[rng.randrange(label * vocabulary // n_classes, (label + 1) * vocabulary // n_classes)]
            else:
                word = rng.choice(words)
            x[word] = x.get(word, 0) + rng.randint(1, max_count)
        X.append(x)
        name = f"class{label}" if class_names is None else class_names[label]
        y.append(name if rng.random() < labeled_fraction else None)
    return X, y


def gaussian_stream(seed: int, n_events: int, n_classes: int = 3, n_features: int = 4,
                    labeled_fraction: float = 0.6) -> tuple[list[dict], list]:
    rng = random.Random(seed)
    centres = [[rng.uniform(-3, 3) for _ in range(n_features)] for _ in range(n_classes)]
    X, y = [], []
    for _ in range(n_events):
        label = rng.randrange(n_classes)
        X.append({f"f{j}": rng.gauss(centres[label][j], 1.0 + j * 0.5) for j in range(n_features)})
        y.append(label if rng.random() < labeled_fraction else None)
    return X, y


# Seed 004's worked example: five short reviews, "-" and "+".
SEED_004_TRAIN = [
    ("-", "just plain boring"),
    ("-", "entirely predictable and lacks energy"),
    ("-", "no surprises and very few laughs"),
    ("+", "very powerful"),
    ("+", "the most fun film of the summer"),
]


def word_counts(text: str) -> dict:
    """{word: count} of a text split on white space."""
    counts: dict = {}
    for word in text.split():
        counts[word] = counts.get(word, 0) + 1
    return counts

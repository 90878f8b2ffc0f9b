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


def text_stream(seed: int, n_events: int, n_classes: int = 3, vocabulary: int = 300,
                labeled_fraction: float = 0.6, max_count: int = 3) -> tuple[list[dict], list]:
    """Word-count events whose word distribution depends on the class; some unlabeled."""
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
        y.append(f"class{label}" if rng.random() < labeled_fraction else None)
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

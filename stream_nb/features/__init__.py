"""Featurisers: event fields -> feature dicts for the naive Bayes models."""

from stream_nb.features.fields import CategoricalFeaturizer, EventFeaturizer, NumericFeaturizer
from stream_nb.features.text import (
    CHAR_NGRAM_PREFIX,
    EMAIL_TOKEN,
    NUMBER_TOKEN,
    URL_DOMAIN_PREFIX,
    URL_TOKEN,
    TextFeaturizer,
)

__all__ = [
    "CHAR_NGRAM_PREFIX",
    "EMAIL_TOKEN",
    "NUMBER_TOKEN",
    "URL_DOMAIN_PREFIX",
    "URL_TOKEN",
    "CategoricalFeaturizer",
    "EventFeaturizer",
    "NumericFeaturizer",
    "TextFeaturizer",
]

"""The model: naive Bayes as pure math over arrays. No I/O; nothing here knows about Kafka."""

from stream_nb.model.base import NaiveBayes, NotLearned, SparseBatch
from stream_nb.model.categorical import CategoricalNB
from stream_nb.model.counting import BernoulliNB, ComplementNB, MultinomialNB
from stream_nb.model.gaussian import GaussianNB
from stream_nb.model.state_check import InvalidState

__all__ = ["NaiveBayes", "NotLearned", "SparseBatch", "MultinomialNB", "BernoulliNB", "CategoricalNB", "ComplementNB", "GaussianNB", "InvalidState"]

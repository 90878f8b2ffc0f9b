"""stream_nb: streaming, checkpointable naive Bayes over Kafka."""

from stream_nb.model import BernoulliNB, CategoricalNB, ComplementNB, GaussianNB, MultinomialNB

__version__ = "0.1.0"
__all__ = ["MultinomialNB", "BernoulliNB", "CategoricalNB", "ComplementNB", "GaussianNB"]

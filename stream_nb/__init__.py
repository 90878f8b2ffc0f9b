"""stream_nb: streaming, checkpointable naive Bayes over Kafka."""

__version__ = "0.1.0"
__all__ = ["MultinomialNB", "BernoulliNB", "CategoricalNB", "ComplementNB", "GaussianNB"]


def __getattr__(name: str):
    """The model classes, imported when first asked for: a process that reads mail alone (a
    replay's mail reader, stream_nb.replay.mail_reader) starts without numpy."""
    if name in __all__:
        from stream_nb import model

        return getattr(model, name)
    raise AttributeError(f"module 'stream_nb' has no attribute {name!r}")

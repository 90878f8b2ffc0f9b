"""stream_nb: streaming, checkpointable naive Bayes over Kafka."""

__version__ = "0.1.0"

"""Configuration as data: TOML files under configs/, validated on load, errors naming the key.

Sections: [model] (kind and the model's options), [features] (the text featuriser's options,
plus `categorical`/`numeric` field lists for events' structured features), and for the worker
[kafka] (with [kafka.client] for security options passed through to kafka-python),
[checkpoint] and [worker]; [personal] turns on a model per event key (stream_nb.model.personal);
[views.NAME] adds feature views, each an expert of its own, combined as [combine] says
(stream_nb.model.experts).
`--set section.key=value` overrides a key; the value is read as TOML (1, 0.5, true, "text",
[1, 2]) and, failing that, taken as a string.

A file may start with `extends = "other.toml"` (a path relative to the file): the other file's
sections are read first and this file's keys replace theirs, key by key (configs/personal.toml
is configs/mail.toml plus [personal]); [views] is replaced whole (an empty [views]: one view).

Every size, count and interval has a lowest and a highest value (`BOUNDS`, with the reason for
each highest), checked on load: a value outside is refused with one line naming the key, the
value and the bound, instead of failing later in a client, a decoder or memory.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from stream_nb.events.raw_mail import VALUE_FORMATS
from stream_nb.features import CategoricalFeaturizer, EventFeaturizer, NumericFeaturizer, TextFeaturizer
from stream_nb.lessons.memory import DEFAULT_REMEMBER_IDS
from stream_nb.model.experts import (
    DEFAULT_LEARNING_RATE,
    DEFAULT_OFFSET_STEP,
    DEFAULT_SHARE,
    DEFAULT_SOFT_CLIP,
    INPUT_SCALES,
    Experts,
    LogLinearPool,
    check_view_names,
)
from stream_nb.model.personal import SHRINKAGES
from stream_nb.model.registry import build_model
from stream_nb.model.scale import SCORE_SCALES

SECTIONS = ("model", "features", "views", "combine", "training", "kafka", "checkpoint", "worker", "evaluation",
            "personal", "milter")
EXTENDS_DEPTH = 8  # files extending files: more is a loop or a maze
EVENT_FIELD_KEYS = ("categorical", "numeric")

# key -> (accepted types, default); a default of ... means required
KAFKA_KEYS = {
    # None: found at start (--bootstrap, $STREAM_NB_BOOTSTRAP, ./.kafka; stream_nb.kafka.discovery)
    "bootstrap_servers": ((str, list), None),
    "group_id": ((str,), "stream-nb"),
    "labeled_topics": ((list,), []),
    "unlabeled_topics": ((list,), []),
    "predictions_topic": ((str,), None),  # the worker's outputs: required by require_kafka, not by
    "dead_letter_topic": ((str,), None),  # replay --topic, which reads one topic
    "create_topics": ((bool,), True),
    "partitions": ((int,), 1),  # of the topics the worker creates, but the labeled ones:
    "labeled_partitions": ((int,), 1),  # one labeled order (see training.mode)
    "replication_factor": ((int,), 1),
    # of the topics the worker creates; 0: one less than replication_factor (at least 1), so one
    # broker may be away while writes with acks=all go on and an acknowledged write has two copies
    "min_insync_replicas": ((int,), 0),
    "max_message_bytes": ((int,), 1_000_000),
    "poll_max_records": ((int,), 1000),
    "poll_timeout_ms": ((int,), 200),
    # exactly_once: predictions, dead letters and the group's offsets in one transaction per
    # commit; at_least_once: outputs flushed, then offsets committed (a crash may repeat outputs).
    "processing_guarantee": ((str,), "exactly_once"),
    "commit_interval_ms": ((int,), 100),  # how much traffic one transaction (or commit) covers
    # A checkpoint's labeled offset that the topic cannot have (recreated topic, records deleted
    # by retention): "fail" stops with one line; "from_beginning" reads that partition anew.
    "on_lost_position": ((str,), "fail"),
    # The client library: kafka-python (pure Python, always installed) or confluent-kafka
    # (librdkafka, several times faster; pip install 'stream_nb[confluent]').
    "transport": ((str,), "kafka-python"),
    # What a record's value is: "json", an event of the contract (stream_nb.events.codec); "mail",
    # a raw RFC 5322 message, its id the key and its label the header named label_header
    # (stream_nb.events.raw_mail), for mail systems that publish messages as they are; a
    # correction names the class to take back in the header unlearn_header.
    "value_format": ((str,), "json"),
    "label_header": ((str,), "label"),
    "unlearn_header": ((str,), "unlearn"),
    # Under [personal], whose a raw message is (its event key): "" the record's Kafka key, else the
    # mail header of this name, e.g. "Delivered-To" (its address; the producer must key the record
    # by the same value, so that a user's mail and labels share a partition).
    "mail_key_header": ((str,), ""),
}
PROCESSING_GUARANTEES = ("exactly_once", "at_least_once")
TRANSPORTS = ("kafka-python", "confluent-kafka")
# Passed to every kafka-python client as they are (SASL/SSL and timeouts).
KAFKA_CLIENT_KEYS = {
    "security_protocol", "sasl_mechanism", "sasl_plain_username", "sasl_plain_password",
    "sasl_kerberos_service_name", "sasl_kerberos_domain_name", "ssl_cafile", "ssl_certfile",
    "ssl_keyfile", "ssl_password", "ssl_crlfile", "ssl_check_hostname", "ssl_ciphers",
    "client_id", "request_timeout_ms", "bootstrap_timeout_ms", "connections_max_idle_ms",
    "reconnect_backoff_ms", "reconnect_backoff_max_ms", "metadata_max_age_ms",
}
# Passed to the producer only, and to the consumers only (kafka-python refuses foreign keys).
KAFKA_PRODUCER_KEYS = {
    "buffer_memory", "delivery_timeout_ms", "max_block_ms", "transaction_timeout_ms", "linger_ms",
    "batch_size", "compression_type", "max_in_flight_requests_per_connection",
}
KAFKA_CONSUMER_KEYS = {
    "session_timeout_ms", "heartbeat_interval_ms", "max_poll_interval_ms", "fetch_max_bytes",
    "fetch_max_wait_ms", "fetch_min_bytes",
}
CHECKPOINT_KEYS = {
    "dir": ((str,), "checkpoints"),
    "interval_s": ((int, float), 30.0),
    "every_events": ((int,), 0),
    "keep": ((int,), 3),
    # Write scheduled checkpoints on a thread of their own: the loop only copies the state
    # (false: the loop writes them itself, as before).
    "background": ((bool,), True),
    # A compacted topic of model snapshots: a worker with an empty checkpoint directory loads the
    # newest one instead of re-learning the labeled topic ("" = none).
    "snapshot_topic": ((str,), ""),
    "snapshot_interval_s": ((int, float), 300.0),
}
WORKER_KEYS = {
    "log_interval_s": ((int, float), 10.0),
    "clues": ((int,), 0),  # the strongest N clues in each prediction (0: none)
    # Static group membership and the transactional id: unique per worker, stable across its
    # restarts. None: the host name (a container's, under docker compose --scale).
    "instance_id": ((str,), None),
    # Labels first: before predicting, catch up with the labeled log for at most this long.
    "labels_first_wait_s": ((int, float), 5.0),
    # Prometheus /metrics, /healthz and /readyz on this port (0: off), on this address.
    "metrics_port": ((int,), 0),
    "metrics_host": ((str,), "127.0.0.1"),
    # /readyz says 503 when a partition with records left to read has not advanced for this long.
    "stall_after_s": ((int, float), 120.0),
    # "json": one JSON object per log line (for log shippers); "text": plain lines.
    "log_format": ((str,), "text"),
}
# `stream-nb milter` (stream_nb.verdicts.milter): not part of the model, so not of a checkpoint's
# fingerprint (a worker and its milters share one configuration file).
MILTER_KEYS = {
    # Postfix's notation: inet:HOST:PORT or unix:PATH (smtpd_milters names the same).
    "listen": ((str,), "inet:127.0.0.1:11340"),
    # What a message judged spam gets: "tag" (headers only), "reject" (5xx at end of data) or
    # "tempfail" (4xx). Every message is tagged whatever the action.
    "action": ((str,), "tag"),
    # The published score at or above which a message is spam for `action`; None: when its
    # X-Spam-Status is Yes (the band's verdict, else the most probable class).
    "threshold": ((int, float), None),
    "reply": ((str,), "5.7.1 Message refused as spam"),  # after the code: 550 or 451
    # Before the replica has a model (nothing learned, no snapshot): "accept" untagged, or "tempfail".
    "no_model": ((str,), "accept"),
    # Also publish each message to the first unlabeled topic, named by its Message-ID, so the
    # predictions stream sees every mail the milter judged.
    "publish": ((bool,), False),
    # The replica learns the labeled log this many records at a time (a verdict waits one batch at most).
    "follow_batch": ((int,), 100),
    # /metrics, /healthz, /readyz (the replica's lag) on this port (0: off), on this address.
    "metrics_port": ((int,), 0),
    "metrics_host": ((str,), "127.0.0.1"),
}
MILTER_ACTIONS = ("tag", "reject", "tempfail")
ORDER_DEPENDENT_MODES = ("on_error", "thick_threshold")
TRAINING_KEYS = {
    "mode": ((str,), "all"),  # all | on_error | thick_threshold
    "margin": ((int, float), 0.0),  # thick_threshold: nats of log-odds
    "margin_scale": ((str,), "none"),  # none | sqrt_features: the margin is per sqrt(distinct features)
    # How many learned ids (and as what) the worker remembers, for duplicates and corrections
    # (stream_nb.lessons); 0: none, every event is learned and no correction takes anything back.
    # Kept as Config.remember_ids, out of `training` (predict_learn's options, the fingerprint).
    "remember_ids": ((int,), DEFAULT_REMEMBER_IDS),
}
EVALUATION_KEYS = {
    "positive": ((str, int), None),  # the positive (spam) class of the binary measures
    "window": ((int,), 500),  # events per point of the rolling curves
    "unsure_band": ((list,), None),  # [low, high]: P(positive) between them is "unsure"
    # [low, high] in nats of log-odds: a score between them is "unsure" (instead of unsure_band)
    "unsure_score_band": ((list,), None),
    # the score's scale (stream_nb.model.scale): "none", the log-odds; "sqrt_features", the
    # log-odds per sqrt(the event's distinct features), in the worker's messages, its verdict
    # (unsure_score_band is on this scale) and replay's scores, ROC and unsure summary
    "score_scale": ((str,), "none"),
}
# [views.NAME]: more feature views of the same events, each an expert of its own ([features] with the
# view's keys replaced; stream_nb.model.experts); [combine]: how their predictions are weighed.
BASE_VIEW = "base"  # the expert of [features] itself
COMBINE_KEYS = {
    "learning_rate": ((int, float), DEFAULT_LEARNING_RATE),  # eta of the weights' exponentiated gradient
    "share": ((int, float), DEFAULT_SHARE),  # every weight stays >= share / k (0: none)
    "soft_clip": ((int, float), DEFAULT_SOFT_CLIP),  # an expert's log-odds input is soft-clipped to +-this
    "scale": ((str,), "sqrt_features"),  # each expert's log posteriors per sqrt(its features), or "none"
    "offset_step": ((int, float), DEFAULT_OFFSET_STEP),  # the decision's zero point moves this far on a mistake
}
# A model per event key with the global model as its prior (stream_nb.model.personal); the
# defaults are what benchmarks/personal_quality.py measured best on Enron-Spam's six mailboxes.
PERSONAL_KEYS = {
    "beta": ((int, float), 30_000.0),  # weight of the global likelihoods, in feature occurrences
    "prior_beta": ((int, float), 10.0),  # weight of the global class prior, in events
    "shrinkage": ((str,), "key"),  # key | class: see stream_nb.model.personal
    "max_key_features": ((int,), 20_000),  # a key's feature budget (0: none): the most counted stay
    "idle_after": ((int,), 0),  # labeled events (of all keys) without one of a key evict it (0: never)
    # ids a key remembers (what its counts learned), so that a correction is taken back from them
    "remember_ids": ((int,), 10_000),
}
# One line a key of the schemas above, for the configuration reference (stream_nb.reference writes
# docs/reference/configuration.md from the schemas, BOUNDS and these; tests/test_reference_docs.py
# fails when a key has no line or a line no key).
KEY_DOCS = {
    "kafka.bootstrap_servers": "the brokers; none: found at start (--bootstrap, $STREAM_NB_BOOTSTRAP, then the "
                               "broker `stream-nb kafka start` runs in ./.kafka)",
    "kafka.group_id": "the consumer group of the unlabeled topics; also names the per-key topics under [personal]",
    "kafka.labeled_topics": "topics of labeled events, learned by every worker",
    "kafka.unlabeled_topics": "topics of events to predict, split among the group's workers",
    "kafka.predictions_topic": "where each unlabeled event's prediction goes (required by `run`, not by `replay --topic`)",
    "kafka.dead_letter_topic": "where refused records go, with their reason (required by `run`)",
    "kafka.create_topics": "create missing topics at start (false: change no topic, warn instead)",
    "kafka.partitions": "partitions of the topics the worker creates, but the labeled ones",
    "kafka.labeled_partitions": "partitions of a labeled topic the worker creates for a global model: one labeled "
                                "order (see training.mode; under [personal] kafka.partitions applies)",
    "kafka.replication_factor": "replicas of the topics the worker creates",
    "kafka.min_insync_replicas": "min.insync.replicas of the topics the worker creates; 0: one less than "
                                 "replication_factor (at least 1), so one broker may be away",
    "kafka.max_message_bytes": "the largest JSON event read; a larger one is dead-lettered as too_large",
    "kafka.poll_max_records": "records one poll returns at most",
    "kafka.poll_timeout_ms": "how long a poll waits for records",
    "kafka.processing_guarantee": "exactly_once: outputs and the group's offsets in one transaction; at_least_once: "
                                  "outputs flushed, then offsets committed",
    "kafka.commit_interval_ms": "how much traffic one transaction (or commit) covers",
    "kafka.on_lost_position": "a checkpoint's offset the topic no longer has: fail (stop with one line) or "
                              "from_beginning (read that partition anew)",
    "kafka.transport": "the client library: kafka-python (pure Python) or confluent-kafka (librdkafka)",
    "kafka.value_format": "json: a record is an event of the contract; mail: a raw RFC 5322 message",
    "kafka.label_header": "with value_format = mail: the record header holding the label",
    "kafka.unlearn_header": "with value_format = mail: the record header naming the class a correction takes back",
    "kafka.mail_key_header": "under [personal], raw mail: \"\" keys a message by its record key, else by this "
                             "mail header's address (e.g. Delivered-To)",
    "checkpoint.dir": "where checkpoints are written; {instance_id} is replaced by the worker's instance id",
    "checkpoint.interval_s": "seconds between scheduled checkpoints",
    "checkpoint.every_events": "also checkpoint after this many learned events (0: by time only)",
    "checkpoint.keep": "how many of the newest checkpoints are kept",
    "checkpoint.background": "write scheduled checkpoints on a thread of their own; the loop only copies the state",
    "checkpoint.snapshot_topic": "a compacted topic of model snapshots a new worker starts from (\"\": none)",
    "checkpoint.snapshot_interval_s": "seconds between snapshots",
    "worker.log_interval_s": "seconds between progress lines",
    "worker.clues": "the strongest N clues in each prediction (0: none)",
    "worker.instance_id": "static group membership and the transactional id, unique per worker and stable "
                          "across its restarts; none: the host name",
    "worker.labels_first_wait_s": "before predicting, catch up with the labeled log for at most this long",
    "worker.metrics_port": "port of /metrics, /healthz and /readyz (0: off)",
    "worker.metrics_host": "address the metrics port listens on",
    "worker.stall_after_s": "/readyz says 503 when a partition with records left has not advanced for this long",
    "worker.log_format": "text: plain lines; json: one JSON object a line, for log shippers",
    "milter.listen": "where `stream-nb milter` listens, in Postfix's notation: inet:HOST:PORT or unix:PATH",
    "milter.action": "what a message judged spam gets: tag (headers only), reject (5xx) or tempfail (4xx)",
    "milter.threshold": "the score at or above which a message is spam for action; none: when X-Spam-Status is Yes",
    "milter.reply": "the text after the code of a reject or tempfail",
    "milter.no_model": "before the replica has a model: accept (untagged) or tempfail",
    "milter.publish": "also publish each judged message to the first unlabeled topic, by its Message-ID",
    "milter.follow_batch": "the replica learns the labeled log this many records at a time",
    "milter.metrics_port": "port of the milter's /metrics, /healthz and /readyz (0: off)",
    "milter.metrics_host": "address the milter's metrics port listens on",
    "training.mode": "which labeled events are learned: all, on_error or thick_threshold",
    "training.margin": "thick_threshold: learn when the label's log-odds are below this many nats",
    "training.margin_scale": "none, or sqrt_features: the margin is per sqrt(distinct features)",
    "training.remember_ids": "learned ids remembered (and as what) for duplicates and corrections; 0: none",
    "evaluation.positive": "the positive (spam) class of the binary measures and of the score",
    "evaluation.window": "events per point of the rolling curves",
    "evaluation.unsure_band": "[low, high]: P(positive) between them is the verdict unsure",
    "evaluation.unsure_score_band": "[low, high] on the score instead of on P",
    "evaluation.score_scale": "none: the score is the log-odds; sqrt_features: the log-odds per "
                              "sqrt(distinct features)",
    "combine.learning_rate": "eta of the views' weights' exponentiated-gradient step",
    "combine.share": "every weight stays at least share / k (0: none)",
    "combine.soft_clip": "an expert's log-odds input is soft-clipped to plus or minus this",
    "combine.scale": "each expert's log posteriors per sqrt(its features) (sqrt_features), or none",
    "combine.offset_step": "how far the decision's zero point moves on a mistake",
    "personal.beta": "weight of the global likelihoods in a key's estimate, in feature occurrences",
    "personal.prior_beta": "weight of the global class prior in a key's, in events",
    "personal.shrinkage": "key: one weight a key; class: the Dirichlet form, one weight a class",
    "personal.max_key_features": "a key's feature budget (0: none): the most counted stay",
    "personal.idle_after": "labeled events of all keys without one of a key evict it (0: never)",
    "personal.remember_ids": "ids a key remembers, so that a correction is taken back from its counts",
}

# [model] and [features]: the options of the model kinds (stream_nb.model.registry) and of the
# featurisers, checked by their builders; one line each for the reference (stream_nb.reference).
BUILDER_KEY_DOCS = {
    "model.kind": "the variant: multinomial, bernoulli or complement (text), categorical or gaussian "
                  "(an event's structured features)",
    "model.classes": "the labels it may learn; any other is dead-lettered as undeclared_label (none: any "
                     "label, up to max_classes)",
    "model.max_classes": "with no classes declared, the most distinct labels it learns; a label beyond "
                         "is dead-lettered",
    "model.alpha": "Lidstone smoothing λ of the likelihoods, (N_fc + λ) / (N_c + λ|V|) for multinomial "
                   "(1: Laplace)",
    "model.prior_alpha": "smoothing of the prior, (N_c + λ) / (N + Kλ); 0: the MLE N_c / N",
    "model.unknown": "a feature never learned: ignore (dropped from the score, the textbook rule) or smooth "
                     "(River's rule: it counts as λ / (T_c + λ|V|))",
    "model.n_hash_buckets": "hash features (crc32) into this many columns: bounded memory, collisions "
                            "shared (none: exact names)",
    "model.max_features": "a feature budget: past it the rarest, stalest features are evicted down to "
                          "0.9 of it (none: unbounded)",
    "model.evict_every": "labeled events between two checks of the feature budget",
    "model.half_life": "every count halves over this many labeled events (none or 0: no forgetting)",
    "model.true_threshold": "Bernoulli: a feature is present when its value is above this",
    "model.categories": "categorical: {field: [values]}, the only values learned (none: the values seen)",
    "model.var_smoothing": "gaussian: epsilon = var_smoothing x the largest variance, added to every variance",
    "features.lowercase": "lowercase the text before tokenising",
    "features.strip_accents": "strip accents (NFKD, combining marks dropped) before tokenising",
    "features.token_pattern": "the regular expression a token matches",
    "features.ngram_range": "[min, max] word n-grams: [1, 2] is words and word bigrams",
    "features.char_ngrams": "[min, max] character n-grams within each word, as #c:... features "
                            "(none: no character n-grams)",
    "features.stop_words": "words dropped before the n-grams are made (none: none dropped)",
    "features.normalize_urls": "a URL becomes the token #url",
    "features.normalize_emails": "an e-mail address becomes the token #email",
    "features.normalize_numbers": "a number becomes the token #num",
    "features.url_domains": "with normalize_urls, each URL's domain (without www.) also as #url:DOMAIN",
    "features.max_tokens": "only the first this many tokens of a text are used, a bound on huge messages "
                           "(none: all)",
    "features.binary": "presence, not counts: each feature counts once a text",
    "features.subject_features": "the subject line's features counted again as #s:FEATURE",
    "features.osb_window": "orthogonal sparse bigrams (word pairs with the gap between them) within "
                           "this window (none: no pairs)",
    "features.categorical": "fields of an event's structured features read as categories (none: inferred)",
    "features.numeric": "fields of an event's structured features read as numbers (none: inferred)",
}
TEXT_MODEL_KINDS = ("multinomial", "bernoulli", "complement")
# Every class costs a column of counts in the state, each checkpoint and every prediction's
# probabilities: 1,000 labels made a 117 MB checkpoint and 34 KB predictions. A spam filter has 2.
DEFAULT_MAX_CLASSES = 50

INT32_MAX = 2**31 - 1
TRANSACTION_TIMEOUT_MS = 60_000  # kafka-python's and librdkafka's default transaction_timeout_ms
# librdkafka's message.max.bytes stops at 1,000,000,000, and the worker's producer asks for
# 2 * max_message_bytes + 65,536 (a dead letter carries the original bytes: kafka/clients.py).
# Kafka's own limit is an int32, the decoders' a Py_ssize_t: both hold more.
MAX_MESSAGE_BYTES = (1_000_000_000 - 65_536) // 2

# "section.key" -> (lowest, highest, why the highest): every size, count and interval, inclusive.
# Limits of Kafka, librdkafka and the decoders where they exist; elsewhere a bound that stops a
# typo (a day for a second, a million for a thousand) before it costs memory or a worker. For
# [model] and [features] only values present and numeric are checked (their builders check types).
BOUNDS = {
    "kafka.partitions": (1, 10_000, "each partition costs the broker files and memory; more is a typo"),
    "kafka.labeled_partitions": (1, 10_000, "each partition costs the broker files and memory; more is a typo"),
    "kafka.replication_factor": (1, 32_767, "Kafka's replication factor is an int16"),
    "kafka.max_message_bytes": (1, MAX_MESSAGE_BYTES, "a dead letter of twice it must fit librdkafka's "
                                "message.max.bytes, 1,000,000,000"),
    "kafka.poll_max_records": (1, 1_000_000, "librdkafka's consume() takes at most 1,000,000 messages"),
    "kafka.poll_timeout_ms": (1, 30_000, "a poll holds up checkpoints and logs, and /healthz says stuck after 60 s"),
    "kafka.commit_interval_ms": (1, 900_000, "the broker's default transaction.max.timeout.ms"),
    "kafka.client.request_timeout_ms": (10, 300_000, "librdkafka's socket.timeout.ms"),
    "kafka.client.bootstrap_timeout_ms": (1, INT32_MAX, "an int32 of milliseconds"),
    "kafka.client.connections_max_idle_ms": (0, INT32_MAX, "librdkafka's connections.max.idle.ms"),
    "kafka.client.reconnect_backoff_ms": (0, 3_600_000, "librdkafka's reconnect.backoff.ms"),
    "kafka.client.reconnect_backoff_max_ms": (0, 3_600_000, "librdkafka's reconnect.backoff.max.ms"),
    "kafka.client.metadata_max_age_ms": (1, 3_600_000, "librdkafka's topic.metadata.refresh.interval.ms"),
    "kafka.client.buffer_memory": (1, INT32_MAX, "an int32 of bytes"),
    "kafka.client.delivery_timeout_ms": (1, INT32_MAX, "librdkafka's delivery.timeout.ms"),
    "kafka.client.max_block_ms": (0, INT32_MAX, "an int32 of milliseconds"),
    "kafka.client.transaction_timeout_ms": (1_000, INT32_MAX, "librdkafka's transaction.timeout.ms"),
    "kafka.client.linger_ms": (0, 900_000, "librdkafka's linger.ms"),
    "kafka.client.batch_size": (1, INT32_MAX, "librdkafka's batch.size"),
    "kafka.client.max_in_flight_requests_per_connection": (1, 5, "the worker's producers are idempotent"),
    "kafka.client.session_timeout_ms": (1, 3_600_000, "librdkafka's session.timeout.ms"),
    "kafka.client.heartbeat_interval_ms": (1, 3_600_000, "librdkafka's heartbeat.interval.ms"),
    "kafka.client.max_poll_interval_ms": (1, 86_400_000, "librdkafka's max.poll.interval.ms"),
    "kafka.client.fetch_max_bytes": (1, 2_147_483_135, "librdkafka's fetch.max.bytes"),
    "kafka.client.fetch_max_wait_ms": (0, 300_000, "librdkafka's fetch.wait.max.ms"),
    "kafka.client.fetch_min_bytes": (1, INT32_MAX, "librdkafka's fetch.min.bytes"),
    "checkpoint.interval_s": (0, 86_400, "a day of labels re-read at a restart"),
    "checkpoint.every_events": (0, 2**53, "float64 counts events exactly up to 2**53"),
    "checkpoint.keep": (1, 1_000, "each kept checkpoint is a whole model on disk"),
    "checkpoint.snapshot_interval_s": (0.1, 86_400, "a day of labels re-read by a new worker"),
    "worker.log_interval_s": (0.1, 86_400, "a day without a progress line"),
    "worker.clues": (0, 100, "every clue is written into every prediction"),
    "worker.labels_first_wait_s": (0, 3_600, "predictions held back an hour are not live"),
    "worker.metrics_port": (0, 65_535, "a TCP port (0: off)"),
    "worker.stall_after_s": (1, 86_400, "a partition stuck for a day is long past an alert"),
    "milter.follow_batch": (1, 100_000, "a verdict waits for one batch of learning at most"),
    "milter.metrics_port": (0, 65_535, "a TCP port"),
    "training.margin": (0, 1e6, "nats of log-odds, far beyond a message's: to learn every event, mode = \"all\""),
    "training.remember_ids": (0, 10**7, "each remembered id costs about 280 bytes of memory and 60 in every checkpoint"),
    "evaluation.window": (1, 1_000_000, "events per point of the rolling curves"),
    "evaluation.unsure_score_band": (-1e6, 1e6, "nats of log-odds, far beyond a message's"),
    "model.max_classes": (2, 10_000, "each class is a column in the state, each checkpoint and every prediction"),
    "model.n_hash_buckets": (1, 2**26, "every bucket has its row from the start: 512 MiB of counts a class"),
    "model.max_features": (2, 10**8, "800 MB of counts a class at the budget"),
    "model.evict_every": (1, 10**9, "labeled events between maintenance points"),
    "model.half_life": (0, 10**12, "labeled events; longer than any stream (0: no forgetting)"),
    "features.max_tokens": (1, MAX_MESSAGE_BYTES, "a message holds no more tokens than bytes"),
    "features.ngram_range": (1, 10, "each token starts max_n - min_n + 1 features"),
    "features.char_ngrams": (1, 20, "each character starts max_n - min_n + 1 features"),
    "features.osb_window": (3, 10, "each token starts window - 2 word pairs"),
    "combine.learning_rate": (0, 100, "a step multiplies a weight by up to exp(rate x soft_clip): more is a typo"),
    "combine.share": (0, 1, "a share of the weights spread evenly each step"),
    "combine.soft_clip": (0.01, 1_000, "nats of log-odds per sqrt(feature), far beyond a message's"),
    "combine.offset_step": (0, 100, "nats of log-odds a mistake moves the decision: more is a typo"),
    "personal.beta": (0, 1e12, "feature occurrences; beyond, every key is the global model"),
    "personal.prior_beta": (0, 1e12, "events; beyond, every key has the global prior"),
    "personal.max_key_features": (0, 10**8, "800 MB of counts a class for one key"),
    "personal.idle_after": (0, 10**12, "labeled events; longer than any stream (0: never)"),
    "personal.remember_ids": (0, 10**7, "about 70 bytes an id in a key's state: 700 MB for one key"),
}


class ConfigError(ValueError):
    """A configuration that cannot be used; the message starts with the offending key."""


def beyond_max_classes(label, known, max_classes: int) -> str | None:
    """Why a label is refused as a class beyond [model] max_classes, or None when it is a class
    already `known` (the str of each: 1 and "1" are one JSON name) or there is room for it."""
    if str(label) in known or len(known) < max_classes:
        return None
    return f"label {label!r} would be class {len(known) + 1}; [model] max_classes = {max_classes}"


def _check_declared_classes(config: Config) -> None:
    """[model] classes: at least two labels as events carry them (a non-empty str or an int),
    no two with one JSON name (1 and "1"), no more than max_classes."""
    declared = config.model.get("classes")
    if declared is None:
        return
    if not isinstance(declared, list) or not all(
            (isinstance(label, str) and label) or (isinstance(label, int) and not isinstance(label, bool))
            for label in declared):
        raise ConfigError(f"model.classes: expected a list of labels (non-empty strings or integers), got {declared!r}")
    names = [str(label) for label in declared]
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise ConfigError(f"model.classes: {twice!r} is declared twice (1 and \"1\" are one class name), got {declared!r}")
    if not 2 <= len(declared) <= config.max_classes:
        raise ConfigError(f"model.classes: {len(declared)} classes, expected from 2 to model.max_classes "
                          f"({config.max_classes})")


def _text_refusal(kind: str, reads: str) -> str:
    return (f"the event has text, but model.kind = {kind!r} reads the event's features as {reads} only: "
            f"send features, or choose a text model ({', '.join(TEXT_MODEL_KINDS)})")


def _check_features_fit_the_model(config: Config) -> None:
    """What can be known before the first event: [features] options the model kind cannot use."""
    kind = config.model["kind"]
    if kind in TEXT_MODEL_KINDS:
        return
    text_options = sorted(key for key in config.features if key not in EVENT_FIELD_KEYS)
    if text_options:
        raise ConfigError(f"features.{text_options[0]}: a text option, but model.kind = {kind!r} reads no text "
                          f"(remove [features] {', '.join(text_options)}, or choose a text model: "
                          f"{', '.join(TEXT_MODEL_KINDS)})")
    other = {"categorical": "numeric", "gaussian": "categorical"}[kind] if kind in ("categorical", "gaussian") else None
    if other is not None and config.features.get(other) is not None:
        raise ConfigError(f"features.{other}: model.kind = {kind!r} reads "
                          f"{'categories' if kind == 'categorical' else 'numbers'} only; "
                          f"list its fields under features.{'categorical' if kind == 'categorical' else 'numeric'}")


@dataclass
class Config:
    model: dict = field(default_factory=lambda: {"kind": "multinomial"})
    features: dict = field(default_factory=dict)
    kafka: dict | None = None  # None: no [kafka] section (replay and demo need none)
    kafka_client: dict = field(default_factory=dict)
    checkpoint: dict = field(default_factory=dict)
    worker: dict = field(default_factory=lambda: {"log_interval_s": 10.0, "clues": 0, "instance_id": None,
                                                  "labels_first_wait_s": 5.0, "metrics_port": 0,
                                                  "metrics_host": "127.0.0.1", "log_format": "text",
                                                  "stall_after_s": 120.0})
    evaluation: dict = field(default_factory=lambda: {"positive": None, "window": 500, "unsure_band": None,
                                                      "unsure_score_band": None, "score_scale": "none"})
    training: dict = field(default_factory=lambda: {"mode": "all", "margin": 0.0})
    milter: dict = field(default_factory=lambda: {key: default for key, (_, default) in MILTER_KEYS.items()})
    personal: dict | None = None  # [personal]: a model per event key; None: one global model
    # [views.NAME]: each view's [features] keys replaced (name -> keys), in the file's order; {}: one view
    views: dict = field(default_factory=dict)
    combine: dict = field(default_factory=lambda: {key: default for key, (_, default) in COMBINE_KEYS.items()})
    source: str = "defaults"
    # [training] remember_ids: the capacity of the worker's LearnedIds (stream_nb.lessons). Not
    # part of the fingerprint: the model never sees it, and the memory saves its own capacity.
    remember_ids: int = DEFAULT_REMEMBER_IDS

    @property
    def classes(self) -> frozenset | None:
        """[model] classes: the labels a labeled event may carry (any other is refused as
        undeclared_label by the event decoder, for the worker and replay alike); None: classes
        appear as they are learned."""
        declared = self.model.get("classes")
        return None if declared is None else frozenset(declared)

    @property
    def max_classes(self) -> int:
        """[model] max_classes: a labeled event whose label would be a class beyond it is set
        aside (dead-lettered by the worker, refused by replay) instead of growing the model."""
        return self.model.get("max_classes", DEFAULT_MAX_CLASSES)

    def _model_options(self) -> dict:
        """[model] as the model's constructor takes it; half_life = 0 is no forgetting (how --set
        turns off a configuration's half_life)."""
        options = {key: value for key, value in self.model.items() if key not in ("kind", "max_classes", "classes")}
        if options.get("half_life") == 0 and type(options["half_life"]) in (int, float):
            del options["half_life"]
        return options

    @property
    def view_names(self) -> list[str]:
        """The feature views' names, the experts' order: [features]'s own ("base"), then each
        [views.NAME] as the file lists them. One name: one plain model."""
        return [BASE_VIEW, *self.views]

    def view_features(self, view: str = BASE_VIEW) -> dict:
        """[features] as view `view` reads them: the view's keys replace [features]'s."""
        return dict(self.features) if view == BASE_VIEW else {**self.features, **self.views[view]}

    def build_model(self):
        """The model of [model]; with [views], an `Experts` of one such model per view."""
        options = self._model_options()
        try:
            if not self.views:
                return build_model(self.model.get("kind", "multinomial"), options)
            models = [build_model(self.model.get("kind", "multinomial"), options) for _ in self.view_names]
            return Experts(self.view_names, models, LogLinearPool(len(models), **self.combine))
        except (TypeError, ValueError) as error:
            raise ConfigError(f"model: {error}") from None

    def build_featurizer(self, view: str = BASE_VIEW) -> TextFeaturizer:
        section = "features" if view == BASE_VIEW else f"views.{view}"
        text_options = {k: v for k, v in self.view_features(view).items() if k not in EVENT_FIELD_KEYS}
        try:
            return TextFeaturizer.from_config(text_options)
        except (TypeError, ValueError) as error:
            raise ConfigError(f"{section}: {error}") from None

    @property
    def reads_text(self) -> bool:
        """Whether the model kind reads text (the count models); categorical and gaussian read
        an event's structured features only."""
        return self.model.get("kind", "multinomial") in TEXT_MODEL_KINDS

    def build_event_featurizer(self, view: str = BASE_VIEW):
        """The featuriser of whole events for the model kind: text plus the events' structured
        features (categorical/numeric lists, or inferred) for the count models; {field:
        category} for categorical; {field: number} for gaussian. The last two refuse an event
        with text, naming the key to change. `view`: as that feature view reads events."""
        kind = self.model.get("kind", "multinomial")
        text = self.build_featurizer(view) if kind in TEXT_MODEL_KINDS else None  # its errors say "features: "
        try:
            if kind == "categorical":
                return CategoricalFeaturizer(fields=self.features.get("categorical"),
                                             text_refusal=_text_refusal(kind, "categories"))
            if kind == "gaussian":
                return NumericFeaturizer(fields=self.features.get("numeric"),
                                         text_refusal=_text_refusal(kind, "numbers"))
            return EventFeaturizer(text=text, categorical=self.features.get("categorical"),
                                   numeric=self.features.get("numeric"))
        except (TypeError, ValueError) as error:
            raise ConfigError(f"features: {error}") from None

    def resolved(self) -> dict:
        """The learning configuration with every default filled in, as the model and the
        featuriser see it: what a checkpoint's fingerprint is taken of, so spelling out a
        default (alpha = 1.0) does not change it."""
        model = self.build_model()
        params = (model.models[0] if self.views else model)._params()
        resolved = {"model": {"kind": self.model.get("kind", "multinomial"), **params},
                    "features": self.build_event_featurizer().to_config()}
        if self.views:  # only then, so fingerprints of before stay as they were
            resolved["views"] = {name: self.build_event_featurizer(name).to_config() for name in self.views}
            resolved["combine"] = dict(self.combine)
        if self.max_classes != DEFAULT_MAX_CLASSES:  # only then, so fingerprints of before stay as they were
            resolved["model"]["max_classes"] = self.max_classes
        if self.classes is not None:  # likewise; the order they are written in does not matter
            resolved["model"]["classes"] = sorted(self.classes, key=lambda label: (type(label) is str, label))
        if self.training["mode"] != "all":  # only then, so fingerprints of before stay as they were
            resolved["training"] = dict(self.training)
        if self.personal is not None:
            resolved["personal"] = dict(self.personal)
        return resolved

    def build_personal(self, global_model):
        """The per-key models over `global_model` ([personal]), or None without the section."""
        if self.personal is None:
            return None
        from stream_nb.model.personal import PersonalMultinomialNB
        from stream_nb.model.personal_experts import PersonalExperts

        def over(model) -> PersonalMultinomialNB:
            return PersonalMultinomialNB(model, self.personal["beta"], self.personal["prior_beta"],
                                         shrinkage=self.personal["shrinkage"], training=dict(self.training),
                                         max_key_features=self.personal["max_key_features"] or None,
                                         idle_after=self.personal["idle_after"] or None,
                                         remember_ids=self.personal["remember_ids"])

        if self.views:  # a per-key model over each view's expert, combined by the global pool
            return PersonalExperts(global_model, [over(model) for model in global_model.models])
        return over(global_model)

    @property
    def order_dependence(self) -> tuple[str, str] | None:
        """(why, remedy) when what the model learns depends on the order of the labeled events,
        else None. An order-dependent training mode decides each event by what came before; a
        feature budget's evictions and forgetting's decay run on the labeled-event clock, so
        which events fall before the n-th labeled event changes the state."""
        if self.training["mode"] in ORDER_DEPENDENT_MODES:
            return "training.mode is order-dependent", 'training.mode = "all"'
        options = self._model_options()
        if options.get("max_features") is not None:
            return ("model.max_features evicts on the labeled-event clock",
                    "feature hashing (model.n_hash_buckets) instead of a feature budget")
        if options.get("half_life") is not None:
            return "model.half_life decays on the labeled-event clock", "model.half_life = 0"
        return None

    @property
    def order_dependent(self) -> bool:
        """Whether what the model learns depends on the order of the labeled events."""
        return self.order_dependence is not None

    def instance_id(self) -> str:
        """This worker's stable identity in the group: [worker] instance_id, else the host name."""
        import socket

        return self.worker["instance_id"] or socket.gethostname()

    def require_kafka(self) -> dict:
        if self.kafka is None:
            raise ConfigError(f"kafka: the worker needs a [kafka] section ({self.source})")
        if not self.kafka["bootstrap_servers"]:
            raise ConfigError("kafka.bootstrap_servers: not set (`stream-nb run` finds the broker: --bootstrap, "
                              "$STREAM_NB_BOOTSTRAP, or the one `stream-nb kafka start` runs in ./.kafka)")
        for key in ("predictions_topic", "dead_letter_topic"):
            if not self.kafka[key]:
                raise ConfigError(f"kafka.{key}: required ({self.source})")
        if not self.kafka["labeled_topics"] and not self.kafka["unlabeled_topics"]:
            raise ConfigError("kafka.labeled_topics: no topic to read (labeled_topics and unlabeled_topics are empty)")
        return self.kafka


def min_insync_replicas(kafka: dict) -> int:
    """kafka.min_insync_replicas, its 0 read as one less than the replication factor (at least 1)."""
    return kafka.get("min_insync_replicas") or max(1, kafka.get("replication_factor", 1) - 1)


def load_config(path: str | Path | None = None, overrides: list[str] = ()) -> Config:
    """Read a TOML file (or start from the defaults), apply overrides, validate everything."""
    data: dict = {}
    source = "defaults"
    if path is not None:
        data = _read_extended(Path(path), [])
        source = str(path)
    for override in overrides:
        _apply_override(data, override)
    for section in data:
        if section not in SECTIONS:
            raise ConfigError(f"{section}: unknown section (expected {', '.join(SECTIONS)})")
        if not isinstance(data[section], dict):
            raise ConfigError(f"{section}: must be a table of keys")
    kafka = None
    kafka_client: dict = {}
    if "kafka" in data:
        kafka_table = dict(data["kafka"])
        kafka_client = kafka_table.pop("client", {})
        if isinstance(kafka_client, str):
            raise ConfigError(f"kafka.client: a table of client options; the client library is chosen with "
                              f"kafka.transport = {kafka_client!r}")
        if not isinstance(kafka_client, dict):
            raise ConfigError("kafka.client: must be a table of kafka-python options")
        accepted = KAFKA_CLIENT_KEYS | KAFKA_PRODUCER_KEYS | KAFKA_CONSUMER_KEYS
        for key in kafka_client:
            if key not in accepted:
                raise ConfigError(f"kafka.client.{key}: not a supported kafka-python option "
                                  f"(accepted: {', '.join(sorted(accepted))})")
        kafka = _validated("kafka", kafka_table, KAFKA_KEYS)
        for key in ("labeled_topics", "unlabeled_topics"):
            if not all(isinstance(topic, str) and topic for topic in kafka[key]):
                raise ConfigError(f"kafka.{key}: must be a list of topic names")
        check_bounds("kafka", kafka)
        _check_client_numbers(kafka_client)
        transaction_timeout_ms = kafka_client.get("transaction_timeout_ms", TRANSACTION_TIMEOUT_MS)
        if kafka["processing_guarantee"] == "exactly_once" and kafka["commit_interval_ms"] >= transaction_timeout_ms:
            raise ConfigError(f"kafka.commit_interval_ms: {kafka['commit_interval_ms']:,} must be below "
                              f"kafka.client.transaction_timeout_ms ({transaction_timeout_ms:,}): a transaction "
                              "open that long is aborted by the broker")
        problem = None if kafka["bootstrap_servers"] is None else bootstrap_problem(kafka["bootstrap_servers"])
        if problem is not None:
            raise ConfigError(f"kafka.bootstrap_servers: {problem}")
        if kafka["processing_guarantee"] not in PROCESSING_GUARANTEES:
            raise ConfigError(f"kafka.processing_guarantee: {kafka['processing_guarantee']!r} is not one of "
                              f"{', '.join(PROCESSING_GUARANTEES)}")
        if kafka["transport"] not in TRANSPORTS:
            raise ConfigError(f"kafka.transport: {kafka['transport']!r} is not one of {', '.join(TRANSPORTS)}")
        if kafka["value_format"] not in VALUE_FORMATS:
            raise ConfigError(f"kafka.value_format: {kafka['value_format']!r} is not one of {', '.join(VALUE_FORMATS)}")
        for key in ("label_header", "unlearn_header"):
            if not kafka[key] or not kafka[key].isprintable() or kafka[key].strip() != kafka[key]:
                raise ConfigError(f"kafka.{key}: {kafka[key]!r} is not a header name (printable, "
                                  "no surrounding spaces, not empty)")
        header = kafka["mail_key_header"]
        if header and (not header.isprintable() or header.strip() != header or ":" in header or " " in header):
            raise ConfigError(f"kafka.mail_key_header: {header!r} is not a mail header name (printable, no spaces "
                              "or colon; \"\" reads the record key)")
        if kafka["unlearn_header"] == kafka["label_header"]:
            raise ConfigError(f"kafka.unlearn_header: {kafka['unlearn_header']!r} is also kafka.label_header: a "
                              "correction names the class to take back in a header of its own")
        if kafka["on_lost_position"] not in ("fail", "from_beginning"):
            raise ConfigError(f"kafka.on_lost_position: {kafka['on_lost_position']!r} is not one of fail, from_beginning")
        if kafka["min_insync_replicas"] < 0:
            raise ConfigError(f"kafka.min_insync_replicas: {kafka['min_insync_replicas']} is negative (0: one less "
                              "than kafka.replication_factor)")
        if kafka["min_insync_replicas"] > kafka["replication_factor"]:
            raise ConfigError(f"kafka.min_insync_replicas: {kafka['min_insync_replicas']} is more than "
                              f"kafka.replication_factor ({kafka['replication_factor']}): no write could be acknowledged")
        overlap = set(kafka["labeled_topics"]) & set(kafka["unlabeled_topics"])
        if overlap:
            raise ConfigError(f"kafka.unlabeled_topics: {', '.join(sorted(overlap))} is also a labeled topic")
    checkpoint = _validated("checkpoint", dict(data.get("checkpoint", {})), CHECKPOINT_KEYS)
    check_bounds("checkpoint", checkpoint)
    worker = _validated("worker", dict(data.get("worker", {})), WORKER_KEYS)
    evaluation = _validated("evaluation", dict(data.get("evaluation", {})), EVALUATION_KEYS)
    training = _validated("training", dict(data.get("training", {})), TRAINING_KEYS)
    score_band = evaluation["unsure_score_band"]
    if score_band is not None and (len(score_band) != 2 or not all(_number(b) for b in score_band)
                                   or not all(math.isfinite(b) for b in score_band) or score_band[0] > score_band[1]):
        raise ConfigError(f"evaluation.unsure_score_band: expected [low, high] in nats of log-odds, finite numbers "
                          f"with low <= high, got {score_band!r}")
    if training["remember_ids"] < 0:
        raise ConfigError(f"training.remember_ids: {training['remember_ids']!r} is negative (a number of ids to "
                          "remember; 0 remembers none)")
    for section, table in (("worker", worker), ("evaluation", evaluation), ("training", training)):
        check_bounds(section, table)
    remember_ids = training.pop("remember_ids")
    if evaluation["score_scale"] not in SCORE_SCALES:
        raise ConfigError(f"evaluation.score_scale: {evaluation['score_scale']!r} is not one of "
                          f"{', '.join(SCORE_SCALES)}")
    if training["mode"] not in ("all", "on_error", "thick_threshold"):
        raise ConfigError(f"training.mode: {training['mode']!r} is not one of all, on_error, thick_threshold")
    if training["margin_scale"] not in ("none", "sqrt_features"):
        raise ConfigError(f"training.margin_scale: {training['margin_scale']!r} is not one of none, sqrt_features")
    if training["margin_scale"] == "none":  # kept only when set, so fingerprints of before stay as they were
        del training["margin_scale"]
    band = evaluation["unsure_band"]
    if band is not None:
        if (len(band) != 2 or not all(isinstance(b, (int, float)) and not isinstance(b, bool) for b in band)
                or not 0 <= band[0] <= band[1] <= 1):
            raise ConfigError(f"evaluation.unsure_band: expected [low, high] with 0 <= low <= high <= 1, got {band!r}")
        if evaluation["positive"] is None:
            raise ConfigError("evaluation.unsure_band: needs evaluation.positive (the class the band is about)")
    if score_band is not None:
        if band is not None:
            raise ConfigError("evaluation.unsure_score_band: set either it (on the log-odds) or unsure_band "
                              "(on P(positive)), not both")
        if evaluation["positive"] is None:
            raise ConfigError("evaluation.unsure_score_band: needs evaluation.positive (the class the band is about)")
    if worker["log_format"] not in ("text", "json"):
        raise ConfigError(f"worker.log_format: {worker['log_format']!r} is not one of text, json")
    if worker["instance_id"] is not None and not worker["instance_id"].strip():
        raise ConfigError("worker.instance_id: must not be empty (leave it out to use the host name)")
    milter = _validated("milter", dict(data.get("milter", {})), MILTER_KEYS)
    check_bounds("milter", milter)
    if milter["action"] not in MILTER_ACTIONS:
        raise ConfigError(f"milter.action: {milter['action']!r} is not one of {', '.join(MILTER_ACTIONS)}")
    if milter["no_model"] not in ("accept", "tempfail"):
        raise ConfigError(f"milter.no_model: {milter['no_model']!r} is not one of accept, tempfail")
    if milter["threshold"] is not None and not math.isfinite(milter["threshold"]):
        raise ConfigError(f"milter.threshold: {milter['threshold']!r} is not a finite score")
    if not milter["listen"].startswith(("inet:", "unix:")):
        raise ConfigError(f"milter.listen: {milter['listen']!r} is not inet:HOST:PORT or unix:PATH")
    if not milter["reply"].isascii() or any(ch in milter["reply"] for ch in "\r\n"):
        raise ConfigError("milter.reply: one line of ASCII text (an SMTP reply)")
    personal = None
    if "personal" in data:
        personal = _validated("personal", dict(data["personal"]), PERSONAL_KEYS)
        for key in ("beta", "prior_beta"):
            if not math.isfinite(personal[key]) or personal[key] < 0:
                raise ConfigError(f"personal.{key}: {personal[key]!r} is not a finite number >= 0 (pseudo-counts of "
                                  "the global model)")
        check_bounds("personal", personal)
        kind = data.get("model", {}).get("kind", "multinomial")
        if kind != "multinomial":
            raise ConfigError(f"personal: per-key models are defined over model.kind = \"multinomial\", not {kind!r}")
        if personal["shrinkage"] not in SHRINKAGES:
            raise ConfigError(f"personal.shrinkage: {personal['shrinkage']!r} is not one of {', '.join(SHRINKAGES)}")
    views = _validated_views(data.get("views", {}), data.get("model", {}).get("kind", "multinomial"))
    combine = _validated("combine", dict(data.get("combine", {})), COMBINE_KEYS)
    check_bounds("combine", combine)
    if combine["scale"] not in INPUT_SCALES:
        raise ConfigError(f"combine.scale: {combine['scale']!r} is not one of {', '.join(INPUT_SCALES)}")
    config = Config(evaluation=evaluation, training=training, model={"kind": "multinomial", **data.get("model", {})},
                    features=dict(data.get("features", {})), kafka=kafka, kafka_client=dict(kafka_client),
                    checkpoint=checkpoint, worker=worker, source=source, remember_ids=remember_ids,
                    personal=personal, milter=milter, views=views, combine=combine)
    max_classes = config.model.get("max_classes", DEFAULT_MAX_CLASSES)
    if isinstance(max_classes, bool) or not isinstance(max_classes, int) or max_classes < 2:
        raise ConfigError(f"model.max_classes: must be a whole number >= 2, got {max_classes!r}")
    _check_declared_classes(config)
    _check_features_fit_the_model(config)
    config.build_model()  # validates every option now, not at the first event
    config.build_event_featurizer()
    check_bounds("model", config.model)  # after the builders, whose messages say what a type or sign must be
    check_bounds("features", config.features)
    for name, keys in views.items():
        config.build_event_featurizer(name)  # its errors name views.NAME
        try:
            check_bounds("features", keys)
        except ConfigError as error:
            raise ConfigError(f"views.{name}.{str(error).removeprefix('features.')}") from None
    return config


def _validated_views(views, kind: str) -> dict:
    """[views]: NAME -> a table of [features] text keys, each name a view's (not "base", the
    name of [features]'s own); only for the count models that read text, and not yet with
    [personal]."""
    if not isinstance(views, dict):
        raise ConfigError("views: must be a table of views ([views.NAME] with [features] keys)")
    for name, keys in views.items():
        if not isinstance(keys, dict):
            raise ConfigError(f"views.{name}: must be a table of [features] keys (e.g. [views.{name}] "
                              "osb_window = 5), not a value")
        if name == BASE_VIEW:
            raise ConfigError(f"views.{name}: {BASE_VIEW!r} is the view of [features] itself; name the view otherwise")
        try:
            check_view_names([name])
        except ValueError as error:
            raise ConfigError(f"views.{name}: {error}") from None
        fields = sorted(set(keys) & set(EVENT_FIELD_KEYS))
        if fields:
            raise ConfigError(f"views.{name}.{fields[0]}: an event's structured fields are read once, "
                              "in [features], for every view")
    if views and kind not in TEXT_MODEL_KINDS:
        raise ConfigError(f"views: feature views are text views, for the count models ({', '.join(TEXT_MODEL_KINDS)}), "
                          f"not model.kind = {kind!r}")
    return {name: dict(keys) for name, keys in views.items()}


def _read_toml(path: Path) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except tomllib.TOMLDecodeError as error:
        raise ConfigError(f"{path}: not valid TOML ({error})") from None


def _read_extended(path: Path, chain: list[Path]) -> dict:
    """The file's tables over those of the file it `extends` (recursively), key by key
    ([kafka.client] too); ConfigError for a loop, a chain deeper than EXTENDS_DEPTH, or a
    missing or malformed file in it."""
    data = _read_toml(path)
    base = data.pop("extends", None)
    if base is None:
        return data
    if not isinstance(base, str) or not base:
        raise ConfigError(f"{path}: extends: expected the path of a configuration file, got {base!r}")
    base_path = (path.parent / base).resolve()
    chain = [*chain, path.resolve()]
    if base_path in chain:
        raise ConfigError(f"{path}: extends {base!r}, which extends it back (a loop)")
    if len(chain) >= EXTENDS_DEPTH:
        raise ConfigError(f"{path}: extends more than {EXTENDS_DEPTH} files deep")
    merged = _read_extended(base_path, chain)
    for section, table in data.items():
        below = merged.get(section)
        if section == "views":  # a set of views is one choice: this file's replaces the other's ([views] alone: none)
            merged[section] = table
        elif isinstance(table, dict) and isinstance(below, dict):
            merged[section] = {**below, **table}
            if isinstance(table.get("client"), dict) and isinstance(below.get("client"), dict):
                merged[section]["client"] = {**below["client"], **table["client"]}
        else:
            merged[section] = table
    return merged


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_bounds(section: str, table: dict) -> None:
    """ConfigError naming the key, the value and the bound for a value of `section` ("kafka",
    "kafka.client", ...) outside its BOUNDS; a pair (ngram_range) is checked item by item."""
    prefix = f"{section}."
    for key, (low, high, why) in BOUNDS.items():
        if not key.startswith(prefix) or "." in key[len(prefix):] or key[len(prefix):] not in table:
            continue
        value = table[key[len(prefix):]]
        items = value if isinstance(value, (list, tuple)) else [value]
        for item in items:
            if _number(item) and not low <= item <= high:
                raise ConfigError(f"{key}: {value!r} is outside {low:,} to {high:,} ({why})")


def _check_client_numbers(kafka_client: dict) -> None:
    """The [kafka.client] options with bounds are whole numbers within them."""
    for key, value in kafka_client.items():
        if f"kafka.client.{key}" in BOUNDS and not (isinstance(value, int) and not isinstance(value, bool)):
            raise ConfigError(f"kafka.client.{key}: expected a whole number, got {type(value).__name__} {value!r}")
    check_bounds("kafka.client", kafka_client)


def bootstrap_problem(servers) -> str | None:
    """What is wrong with bootstrap servers ("host:port[,host:port...]" or a list of them), or
    None: each is a host, and a port from 1 to 65535 when one is given (both clients take 9092
    otherwise; "[::1]:9092" for an IPv6 address)."""
    entries = servers.split(",") if isinstance(servers, str) else list(servers)
    if not entries:
        return "no server given (host:port)"
    for entry in entries:
        text = str(entry).strip()
        host, colon, port = text.rpartition(":")
        if not colon:
            host, port = text, "9092"
        if not host or not port.isdigit() or not 1 <= int(port) <= 65535:
            return (f"{str(entry).strip()!r} is not host:port with a port from 1 to 65535 "
                    "(a local broker's address: `stream-nb kafka start` or `stream-nb kafka status`)")
    return None


def _validated(section: str, table: dict, schema: dict) -> dict:
    """The table with defaults filled in; unknown keys, missing required keys, wrong types raise."""
    for key in table:
        if key not in schema:
            raise ConfigError(f"{section}.{key}: unknown key (expected one of {', '.join(schema)})")
    result = {}
    for key, (types, default) in schema.items():
        if key not in table or (table[key] is None and default is None):
            if default is ...:
                raise ConfigError(f"{section}.{key}: required")
            result[key] = default
            continue
        value = table[key]
        if isinstance(value, bool) and bool not in types or not isinstance(value, types):
            names = " or ".join("number" if t is float else t.__name__ for t in types)
            raise ConfigError(f"{section}.{key}: expected {names}, got {type(value).__name__} {value!r}")
        result[key] = value
    return result


def _apply_override(data: dict, override: str) -> None:
    key, separator, raw = override.partition("=")
    if separator and "." not in key and key.strip() in SECTIONS:  # SECTION={...}: the whole table replaced
        try:
            table = tomllib.loads(f"value = {raw}")["value"]
        except tomllib.TOMLDecodeError:
            table = None
        if not isinstance(table, dict):
            raise ConfigError(f"--set {override!r}: a whole section takes an inline table, e.g. {key.strip()}={{}}")
        data[key.strip()] = table
        return
    if not separator or "." not in key:
        raise ConfigError(f"--set {override!r}: expected section.key=value")
    section, name = key.strip().split(".", 1)
    try:
        value = tomllib.loads(f"value = {raw}")["value"]
    except tomllib.TOMLDecodeError:
        value = raw
    table = data.setdefault(section, {})
    if not isinstance(table, dict):
        raise ConfigError(f"{section}: must be a table of keys")
    if section == "views":  # views.NAME.KEY: a key of one view
        view, dot, name = name.partition(".")
        if not dot:
            raise ConfigError(f"--set {override!r}: expected views.NAME.KEY=value")
        table = table.setdefault(view, {})
        if not isinstance(table, dict):
            raise ConfigError(f"views.{view}: must be a table of keys")
    table[name] = value


def with_bootstrap(config_path, overrides: list[str], command_line: str | None):
    """(config, Bootstrap): the configuration with the broker every command finds the same way
    (stream_nb.kafka.discovery: --bootstrap or --set kafka.bootstrap_servers, then
    $STREAM_NB_BOOTSTRAP, then the configuration, then ./.kafka) written into
    kafka.bootstrap_servers. ConfigError for a malformed address; NoBroker when none is found."""
    from stream_nb.kafka.discovery import find_bootstrap

    config = load_config(config_path, overrides)
    configured = (config.kafka or {}).get("bootstrap_servers")
    set_on_command_line = any(item.split("=", 1)[0].strip() == "kafka.bootstrap_servers" for item in overrides)
    bootstrap = find_bootstrap(command_line or (configured if set_on_command_line else None),
                               configured, str(config_path or "the defaults"))
    if set_on_command_line and not command_line:
        bootstrap = type(bootstrap)(bootstrap.servers, "--set kafka.bootstrap_servers")
    problem = bootstrap_problem(bootstrap.servers)
    if problem is not None:
        where = "--bootstrap" if bootstrap.source == "--bootstrap" else bootstrap.source
        raise ConfigError(f"{where}: {problem}")
    if config.kafka is not None and bootstrap.servers != configured:
        config.kafka["bootstrap_servers"] = bootstrap.servers
    return config, bootstrap

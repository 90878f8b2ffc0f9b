"""`stream-nb publish FILE --topic T`: load a recorded stream (TSV, CSV, JSON Lines) into a topic.

Each event becomes one message in the worker's event contract (`stream_nb.events.codec`):
the value is compact UTF-8 JSON, ``{"id","key","text","features","label"}`` (key, text and
features as the file has them, and a correction's ``"unlearn"``) or, with ``--no-label``, the same
without the label. The message key (UTF-8) is chosen by ``--key``: ``event`` (the default) the
event's ``"key"`` (who it belongs to: a user, a mailbox; ``--key-field``) when it has one, else
its id, so one key's events share a partition and stay in order; ``id`` always the id; ``none``
no key.
Mail (a directory, Maildir, mbox or tarball of messages: `stream_nb.mail.sources`; or a JSONL
file of mail events) is published as mail events: ``"mail"`` when the message is UTF-8, else
``"mail_base64"`` (its exact bytes), labeled by folder. FILE ``-`` is one message on stdin (a
mail system's pipe), its id ``--id``, else its Message-ID, else ``sha256:<first 16 hex digits>``
of its bytes, and its label ``--label`` (a correction: ``--unlearn CLASS`` as well, the class
it was learned as; without ``--label``, a take-back only). ``--value-format mail`` publishes the
messages raw instead, for a topic read with ``[kafka] value_format = "mail"``: the value is the
message's bytes, the key its id (whatever ``--key`` says but ``none``; the topic reads the id
from the message itself, so ``--id`` has no place there; an event's ``"key"`` is not sent), the label the ``--label-header``
header and a correction's class to take back the ``--unlearn-header`` header
(`stream_nb.events.raw_mail`). With ``--key-header NAME`` (per-user models keyed by a mail header,
``[kafka] mail_key_header``) the key is the mailbox in that header, as the worker reads it, so a
user's mail and corrections share the partition of the user's state.

A first pass checks (and encodes) every event before anything is sent, so a malformed line at
the end of a file does not leave half of it in the topic; the encoded messages are kept in
memory up to `MEMORY_CAP_BYTES`, beyond that the file is read again for sending. Sending does
not wait per message; the producer is flushed once at the end. Errors (a missing
or malformed file, an unreachable broker, a rejected message) are one line on stderr and exit 2.

Bootstrap servers: found as every command finds them (`stream_nb.kafka.discovery`):
``--bootstrap``, else $STREAM_NB_BOOTSTRAP, else the broker that `stream-nb kafka start` left
running in ./.kafka.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from stream_nb.config import bootstrap_problem
from stream_nb.events.raw_mail import VALUE_FORMATS
from stream_nb.kafka.discovery import BOOTSTRAP_ENV, NoBroker, check_reachable, find_bootstrap
from stream_nb.mail.identity import mail_id, mailbox_of
from stream_nb.replay.sources import add_field_options, field_options

EXIT_ERROR = 2
EXIT_INTERRUPTED = 130
FORMATS = ("tsv", "csv", "jsonl", "mail")
#: --key: the event's "key" field, else its id; always the id; no message key.
KEY_CHOICES = ("event", "id", "none")
MEMORY_CAP_BYTES = 256 * 1024 * 1024
# The worker's default kafka.max_message_bytes: it dead-letters larger values as too_large.
DEFAULT_MAX_BYTES = 1_000_000


class PublishError(RuntimeError):
    """Anything that stops a publish; the message is the one line printed."""


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "publish",
        help="publish a TSV/CSV/JSONL file of events to a Kafka topic",
        description="Publish a recorded stream to a Kafka topic as the worker's JSON events "
                    "(message key: the event's key, else its id). The whole file is checked before the "
                    "first message is sent.",
    )
    parser.add_argument("file", type=Path, metavar="FILE",
                        help="events: .tsv (label<TAB>text, no header), .csv (header row) or .jsonl; or mail: "
                             "a directory of messages, a Maildir, an mbox or a .tar.gz of them (labeled by folder)")
    parser.add_argument("--topic", required=True, help="topic to publish to")
    parser.add_argument("--bootstrap", default=None, metavar="HOST:PORT[,...]",
                        help=f"bootstrap servers (default: ${BOOTSTRAP_ENV}, else the broker that "
                             "`stream-nb kafka start` runs in ./.kafka)")
    parser.add_argument("--format", dest="file_format", choices=FORMATS, default=None,
                        help="file format (default: from the extension; none means tsv)")
    add_field_options(parser)
    parser.add_argument("--no-label", dest="with_labels", action="store_false",
                        help="publish unlabeled events {id, text, features} (for the unlabeled topic)")
    parser.add_argument("--value-format", choices=VALUE_FORMATS, default="json",
                        help="json: the worker's JSON events (default); mail: raw messages (value = the message, key "
                             "= id, label in the --label-header header) for [kafka] value_format = \"mail\"")
    parser.add_argument("--label-header", default="label", metavar="NAME",
                        help="(--value-format mail) the record header that carries the label (default: label)")
    parser.add_argument("--unlearn-header", default="unlearn", metavar="NAME",
                        help="(--value-format mail) the record header that carries a correction's class to take "
                             "back (default: unlearn)")
    parser.add_argument("--key-header", default="", metavar="NAME",
                        help="(--value-format mail) key each message by the mailbox in this mail header "
                             "(Delivered-To, X-Original-To), as a worker with [kafka] mail_key_header reads it, "
                             "so that a user's mail goes to the partition of the user's state; a message "
                             "without it is keyed by its id")
    parser.add_argument("--label", dest="stdin_label", default=None, metavar="LABEL",
                        help="(FILE -) the label of the message read from stdin")
    parser.add_argument("--unlearn", dest="stdin_unlearn", default=None, metavar="CLASS",
                        help="(FILE -) a correction: the class the message was learned as, taken back before it is "
                             "learned as --label (no --label: only taken back)")
    parser.add_argument("--id", dest="stdin_id", default=None, metavar="ID",
                        help="(FILE -) the id of the message read from stdin (default: its Message-ID, else "
                             "sha256:<16 hex digits of its bytes>)")
    parser.add_argument("--limit", type=_positive_int, default=None, metavar="N",
                        help="publish only the first N events")
    parser.add_argument("--key", choices=KEY_CHOICES, default="event",
                        help="message key: event (default): the event's key (--key-field) when it has one, else "
                             "its id; id: always the id; none: no key. --value-format mail: the id unless none")
    parser.add_argument("--create-topic", action="store_true",
                        help="create the topic with the admin client if it does not exist")
    parser.add_argument("--partitions", type=_positive_int, default=None, metavar="N",
                        help="partitions of a topic made by --create-topic (default: the broker's)")
    parser.add_argument("--max-bytes", type=_positive_int, default=DEFAULT_MAX_BYTES, metavar="N",
                        help="refuse the file if an event's value is larger (default: 1000000, the "
                             "worker's kafka.max_message_bytes default)")
    parser.add_argument("--transport", choices=("kafka-python", "confluent-kafka"), default="kafka-python",
                        help="client library (confluent-kafka: pip install 'stream_nb[confluent]')")
    parser.add_argument("--connect-timeout", type=float, default=5.0, metavar="SECONDS",
                        help="give up if the broker cannot be reached within this long (default: 5)")
    parser.set_defaults(func=publish_command)


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


# ---------------------------------------------------------------------------------------------
# Events -> messages (no Kafka here)


def encode_event(event: dict, *, with_labels: bool) -> bytes:
    """The event contract's value: compact UTF-8 JSON of the event's id, key, text, features and
    mail (whichever it has) and, `with_labels`, its label; non-ASCII kept as is."""
    body = {"id": event["id"]}
    for name in ("key", "text", "features"):
        if event.get(name) is not None:
            body[name] = event[name]
    mail = event.get("mail")
    if mail is not None:  # the message as a JSON string when it is UTF-8, else its exact bytes
        try:
            body["mail"] = mail.decode("utf-8")
        except UnicodeDecodeError:
            body["mail_base64"] = base64.b64encode(mail).decode("ascii")
    if with_labels:
        body["label"] = event["label"]  # null beside unlearn: a take-back only
        if event.get("unlearn") is not None:
            body["unlearn"] = event["unlearn"]
    return json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode("utf-8")


def stdin_event(data: bytes, *, event_id: str | None, label: str | None, with_labels: bool,
                unlearn: str | None = None) -> dict:
    """The mail event of one message piped in: its id `event_id`, else its Message-ID (in the
    headers, before the first blank line), else sha256:<16 hex digits> of its bytes; a
    correction when `unlearn` is given (the class it was learned as)."""
    if with_labels and label is None and unlearn is None:
        raise PublishError("-: a message from stdin needs --label LABEL, or --unlearn CLASS to take it back "
                           "(or --no-label for the unlabeled topic)")
    if not with_labels and unlearn is not None:
        raise PublishError("-: --unlearn corrects a labeled message; it has no place beside --no-label")
    if event_id is None:
        event_id = mail_id(data)  # the id a folder publish and a raw record give it too
    event = {"id": event_id, "text": None, "features": None, "label": label if with_labels else None, "mail": data}
    if unlearn is not None:
        event["unlearn"] = unlearn
    return event


def encode_raw_mail(event: dict, *, with_labels: bool, label_header: str,
                    unlearn_header: str = "unlearn") -> tuple[bytes, list]:
    """(value, headers) of a mail event on a raw-mail topic: the message's bytes, and
    (`with_labels`) the label as the `label_header` header (none on a take-back only) and a
    correction's class to take back as the `unlearn_header` header."""
    if event.get("mail") is None:
        raise PublishError(f"event {event['id']!r} is not mail: --value-format mail publishes messages only")
    headers = []
    if with_labels:
        for name, value in ((label_header, event["label"]), (unlearn_header, event.get("unlearn"))):
            if value is not None:
                headers.append((name, str(value).encode("utf-8")))
    return event["mail"], headers


def message_key(event: dict, keys: str, value_format: str = "json") -> bytes | None:
    """The message key of `event` by `keys` (`KEY_CHOICES`): "event" its "key" when it has one,
    else its id; "id" its id; "none" None. A raw message (`value_format` "mail") is keyed by its
    id whatever `keys` says but "none" (the key only partitions: the raw-mail decoder reads the id,
    the Message-ID, from the message itself)."""
    if keys not in KEY_CHOICES:
        raise ValueError(f"keys must be one of {', '.join(KEY_CHOICES)}, got {keys!r}")
    if keys == "none":
        return None
    if keys == "event" and value_format != "mail" and event.get("key") is not None:
        return event["key"].encode("utf-8")
    return event["id"].encode("utf-8")


def iter_messages(path: Path, *, file_format: str | None, with_labels: bool, limit: int | None,
                  keys: str = "event", max_bytes: int | None = None, fields: dict | None = None,
                  value_format: str = "json", label_header: str = "label", stdin: dict | None = None,
                  unlearn_header: str = "unlearn", key_header: str = "") -> Iterator[tuple]:
    """(key, value) per event (and its headers with `value_format` "mail"), in file order;
    PublishError names the file and the event. Each event is checked by the worker's event
    contract first (the reason codes of its dead letters). `keys`: the message key, see
    `message_key`. `fields`: read_events' field names (text_field, label_field, key_field, ...);
    `stdin`: {"data", "event_id", "label", "unlearn"} for FILE "-". `key_header` (raw mail): the
    key is the mailbox in that header when the message has one (`mailbox_of`, the worker's)."""
    from stream_nb.replay.sources import SourceError, read_events

    if stdin is not None:
        events = iter([stdin_event(stdin["data"], event_id=stdin["event_id"], label=stdin["label"],
                                   with_labels=with_labels, unlearn=stdin.get("unlearn"))])
    else:
        events = read_events(path, **(fields or {}), file_format=file_format,
                             labels="required" if with_labels else "dropped")
    count = 0
    try:
        for event in events:
            if limit is not None and count >= limit:
                return
            count += 1
            key = message_key(event, keys, value_format)
            if value_format == "mail":
                value, headers = encode_raw_mail(event, with_labels=with_labels, label_header=label_header,
                                                 unlearn_header=unlearn_header)
                mailbox = mailbox_of(value, key_header) if key_header and keys != "none" else None
                key = mailbox.encode("utf-8") if mailbox is not None else key
            else:
                value, headers = encode_event(event, with_labels=with_labels), None
            if max_bytes is not None and len(value) > max_bytes:
                raise PublishError(f"{path}: event {count} (id {event['id']!r}) is {len(value):,} bytes "
                                   f"as {'a message' if headers is not None else 'JSON'}, over the {max_bytes:,}-byte "
                                   "limit (--max-bytes)")
            yield (key, value) if headers is None else (key, value, headers)
    except SourceError as error:
        raise PublishError(str(error)) from None
    except UnicodeDecodeError as error:
        raise PublishError(f"{path}: not UTF-8 text ({error.reason} at byte {error.start})") from None
    except OSError as error:
        raise PublishError(f"{path}: cannot read ({error.strerror or error})") from None


def check_messages(messages: Iterator[tuple[bytes | None, bytes]],
                   cap_bytes: int = MEMORY_CAP_BYTES) -> tuple[int, list | None]:
    """Run through every message (raising on the first bad one); return the count and the
    messages themselves while they fit in `cap_bytes`, else None (read the file again)."""
    kept: list | None = []
    size = total = 0
    for message in messages:
        key, value = message[0], message[1]
        total += 1
        if kept is not None:
            size += len(value) + (len(key) if key else 0) + 100  # rough per-tuple overhead
            if size > cap_bytes:
                kept = None
            else:
                kept.append(message)
    return total, kept


# ---------------------------------------------------------------------------------------------
# Progress


class Progress:
    """One updating line on a terminal; elsewhere a plain line every `interval` seconds."""

    def __init__(self, total: int, topic: str, stream: TextIO = sys.stderr,
                 interval: float | None = None) -> None:
        self.total = total
        self.topic = topic
        self.stream = stream
        self.tty = stream.isatty()
        self.interval = interval if interval is not None else (0.1 if self.tty else 5.0)
        self.started = time.monotonic()
        self._next = self.started + self.interval
        self._shown = False

    def _line(self, count: int, now: float) -> str:
        elapsed = max(now - self.started, 1e-9)
        percent = 100.0 * count / self.total if self.total else 100.0
        return (f"publishing to {self.topic}: {count:,}/{self.total:,} events ({percent:.0f}%), "
                f"{count / elapsed:,.0f} events/s")

    def update(self, count: int) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.interval
        if self.tty:
            self.stream.write("\r\033[K" + self._line(count, now))
            self._shown = True
        else:
            self.stream.write(self._line(count, now) + "\n")
        self.stream.flush()

    def clear(self) -> None:
        if self.tty and self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._shown = False


# ---------------------------------------------------------------------------------------------
# Kafka


def _ensure_topic(bootstrap: str, topic: str, partitions: int | None, timeout_ms: int) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError, TopicAlreadyExistsError

    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="stream-nb-publish",
                                 bootstrap_timeout_ms=timeout_ms)
    except (KafkaError, OSError) as error:
        raise _unreachable(bootstrap, timeout_ms, error) from None
    try:
        if topic in set(admin.list_topics()):
            return
        spec = {"num_partitions": partitions or -1, "replication_factor": -1}  # -1: broker default
        try:
            admin.create_topics({topic: spec}, wait_for_metadata=True)
        except TopicAlreadyExistsError:
            return  # made by someone else meanwhile
        print(f"created topic {topic}"
              + (f" ({partitions} partitions)" if partitions else " (the broker's default partitions)"),
              file=sys.stderr)
    except KafkaError as error:
        raise PublishError(f"cannot create topic {topic!r}: {_describe(error)}") from None
    finally:
        admin.close()


def _describe(error: BaseException) -> str:
    """"KafkaTimeoutError: Unable to bootstrap ..." (kafka-python's str() may already name the class)."""
    name = type(error).__name__
    text = str(error).strip()
    if text.startswith(name):
        text = text[len(name):].lstrip(": ")
    return f"{name}: {text}" if text else name


def _unreachable(bootstrap: str, timeout_ms: int, error: BaseException) -> PublishError:
    return PublishError(f"cannot reach a Kafka broker at {bootstrap} within {timeout_ms / 1000:g}s "
                        f"({_describe(error)})")


def publish(messages: Iterator[tuple[bytes | None, bytes]], *, total: int, topic: str, bootstrap: str,
            timeout_ms: int = 5000, max_bytes: int = DEFAULT_MAX_BYTES, transport: str = "kafka-python",
            progress_stream: TextIO = sys.stderr) -> tuple[int, float]:
    """Send every message, flush, and return (events acknowledged, seconds spent sending)."""
    from kafka.errors import KafkaError

    from stream_nb.kafka.clients import KafkaSetupError, close_producer, make_producer

    kafka = {"bootstrap_servers": bootstrap, "transport": transport, "max_message_bytes": max_bytes}
    client = {"client_id": "stream-nb-publish", "bootstrap_timeout_ms": timeout_ms,
              # acks=all with idempotence (make_producer): a retry never duplicates.
              "linger_ms": 50,  # measured: fewer, fuller requests leave the GIL to the send() loop
              # send() blocks only while the buffer is full or the topic's metadata is unknown.
              "max_block_ms": max(30_000, timeout_ms)}
    try:
        producer = make_producer(kafka, client)
    except KafkaSetupError as error:
        raise PublishError(f"cannot reach a Kafka broker at {bootstrap} within {timeout_ms / 1000:g}s ({error})") from None
    failures: list[BaseException] = []
    record_failure = failures.append
    progress = Progress(total, topic, progress_stream)
    sent = 0
    started = time.monotonic()
    try:
        try:
            for key, value, *headers in messages:  # (key, value) or, raw mail, (key, value, headers)
                producer.send(topic, value=value, key=key, headers=headers[0] if headers else None
                              ).add_errback(record_failure)
                sent += 1
                progress.update(sent)
                if failures:  # e.g. the topic refuses writes: stop early, do not send the rest
                    break
            producer.flush()
        except KafkaError as error:
            progress.clear()
            raise PublishError(f"cannot publish to {topic!r} after {sent} events: {_describe(error)}") from None
        finally:
            progress.clear()
    finally:
        close_producer(producer, timeout_s=5)
    elapsed = time.monotonic() - started
    if failures:
        raise PublishError(f"{len(failures)} of {sent} events were not published to {topic!r} "
                           f"(first error: {_describe(failures[0])})")
    return sent, elapsed


def publish_command(args: argparse.Namespace) -> int:
    # kafka-python logs connection trouble as warnings; this command reports it in one line.
    kafka_log = logging.getLogger("kafka")
    if not kafka_log.handlers:
        kafka_log.addHandler(logging.NullHandler())
        kafka_log.propagate = False
    timeout_ms = max(1, int(args.connect_timeout * 1000))
    options = dict(file_format=args.file_format, fields=field_options(args),
                   with_labels=args.with_labels, limit=args.limit, keys=args.key,
                   max_bytes=args.max_bytes, value_format=args.value_format, label_header=args.label_header,
                   unlearn_header=args.unlearn_header, key_header=args.key_header)
    if str(args.file) == "-":  # one message piped in: read once, kept for both passes
        options["stdin"] = {"data": sys.stdin.buffer.read(), "event_id": args.stdin_id, "label": args.stdin_label,
                            "unlearn": args.stdin_unlearn}
    try:
        if args.key_header and args.value_format != "mail":
            raise PublishError("--key-header keys raw mail (--value-format mail) by a mail header; a JSON event's "
                               "key is its --key-field")
        if args.stdin_id is not None and args.value_format == "mail":
            raise PublishError("--id has no place with --value-format mail: a raw message's id is its Message-ID "
                               "(else a digest of its bytes), read from the message on every route")
        if args.partitions is not None and not args.create_topic:
            raise PublishError("--partitions applies to a topic made by --create-topic; add it")
        total, kept = check_messages(iter_messages(args.file, **options))
        try:
            found = find_bootstrap(args.bootstrap)
        except NoBroker as error:
            raise PublishError(str(error)) from None
        problem = bootstrap_problem(found.servers)
        if problem is not None:
            raise PublishError(f"{found.source}: {problem}")
        try:
            check_reachable(found, within_s=args.connect_timeout)
        except NoBroker as error:
            raise PublishError(str(error)) from None
        print(f"stream-nb publish: broker {found}", file=sys.stderr, flush=True)
        bootstrap = found.servers
        if args.create_topic:
            _ensure_topic(bootstrap, args.topic, args.partitions, timeout_ms)
        messages = iter(kept) if kept is not None else iter_messages(args.file, **options)
        count, elapsed = publish(messages, total=total, topic=args.topic, bootstrap=bootstrap,
                                 timeout_ms=timeout_ms, max_bytes=args.max_bytes, transport=args.transport)
    except PublishError as error:
        print(f"stream-nb publish: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    except KeyboardInterrupt:
        print("stream-nb publish: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    if count != total:  # the file changed between the two passes
        print(f"stream-nb publish: error: {args.file} changed while publishing "
              f"({total} events checked, {count} sent)", file=sys.stderr)
        return EXIT_ERROR
    rate = count / elapsed if elapsed > 0 else float("inf")
    print(f"{count} events in {elapsed:.2f}s ({rate:,.0f} events/s)", file=sys.stderr)
    print(f"published {count} events to {args.topic}")
    return 0

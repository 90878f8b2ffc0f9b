"""`stream-nb milter`: verdicts inside the SMTP transaction, for Postfix (smtpd_milters,
non_smtpd_milters) and Sendmail (INPUT_MAIL_FILTER), from a live replica of the workers' model.

    stream-nb milter --config configs/mail.toml          # [milter] listen = "inet:127.0.0.1:11340"

Each message, at its end of data:
- its verdict from the replica (stream_nb.worker.replica: the model every worker holds at the
  same labeled offset, following the labeled log), by the worker's own rules
  (stream_nb.verdicts.filter.MessageJudge): X-Spam-Flag / X-Spam-Score / X-Spam-Status added,
  any of those the sender wrote taken out;
- an action ([milter] action): "tag" accepts every message with its headers; "reject" answers
  550 and "tempfail" 451 (with [milter] reply) to a message that is spam: its published score
  at or above [milter] threshold, or, with no threshold, its X-Spam-Status Yes;
- before the replica has a model (nothing learned yet), [milter] no_model: accept untagged, or
  tempfail so the MTA retries later;
- with [milter] publish, the message also goes to the first unlabeled topic named by its
  Message-ID, as `stream-nb publish -` sends it: the workers' predictions see every message, and
  their prediction of it is this verdict when the model is at the same offset.

With [personal] (per-user models) the replica holds every key's state, and a message to one
recipient is judged by that mailbox's model: the key is the envelope recipient, lower-cased, and
under kafka.mail_key_header that header (X-Original-To, Delivered-To) is put on top of what is
judged and published, so the workers read the same key from it. A message to several recipients
gets the global model's verdict (one set of headers serves them all).

The message is read as the MTA hands it over (its headers in order, then the body, CRLF line
ends), up to the mail parser's read cap plus one byte, which marks it truncated: a verdict is
given on what the parser reads, as for large records (stream_nb.verdicts.rules).

The milter protocol's messages are kilter.protocol's (parsed, packed, their order checked);
the session loop is this module's, on asyncio: the MTA sends recipients, headers and body with
no reply to each (one round trip a message, at its end), and the answer goes out in one write,
so no small packet waits on Nagle's algorithm. kilter.service's framework around the same
protocol cost about 10 ms of Python a message in its per-header machinery; pymilter (Debian's
libmilter) stalled 88 ms a message over TCP here (Nagle and delayed ACKs), and is GPL with a C
library to build. Judging runs on a worker thread, so sessions' I/O goes on while one is judged;
one lock keeps judging and the replica's learning apart. An error while judging answers 451: the
MTA keeps the message and retries; a session the peer breaks ends with a warning line, and the
MTA applies its milter_default_action (tempfail in examples/postfix). Nothing is lost.
"""

from __future__ import annotations

import argparse
import logging
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from stream_nb.config import Config, ConfigError, with_bootstrap
from stream_nb.kafka.discovery import NoBroker
from stream_nb.verdicts.filter import MessageJudge
from stream_nb.verdicts.headers import VERDICT_HEADERS

if TYPE_CHECKING:  # imported when the milter runs: `stream-nb filter` starts without the worker's modules
    from stream_nb.worker.replica import Replica

log = logging.getLogger("stream_nb.milter")

LATENCY_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)


def milter_metrics(registry):
    """The milter's own metrics on `registry` (its replica's: served beside the replica's lag):
    (messages answered by action, time to judge). Also what the metrics reference lists."""
    from prometheus_client import Counter, Histogram

    decided = Counter("stream_nb_milter_messages", "Messages the milter answered, by action", ["action"],
                      registry=registry)
    seconds = Histogram("stream_nb_milter_verdict_seconds", "Time to judge a message (the lock's wait "
                        "included)", buckets=LATENCY_BUCKETS, registry=registry)
    return decided, seconds


@dataclass
class Decision:
    """What the milter answers for one message: `action` accept | reject | tempfail, the
    headers to add (empty: none), the SMTP reply of a refusal."""

    action: str
    headers: list[tuple[str, str]]
    reply: str | None = None
    status: str | None = None  # Yes | No | Unsure; None: no verdict (no model)
    score: float | None = None


class MilterVerdicts:
    """The decision for a message, from the replica and [milter] (no I/O but the optional
    publish): what the protocol side (serve) asks for each message."""

    def __init__(self, config: Config, replica: Replica, publisher=None) -> None:
        self.config = config
        self.policy = config.milter
        self.replica = replica
        self.judge = MessageJudge(config, replica.model)
        self.read_cap = self.judge.featurizer.max_bytes
        self.publisher = publisher
        self.decided, self.seconds = milter_metrics(replica.telemetry.registry)

    def keyed_message(self, message: bytes, recipients: list[str]) -> tuple[bytes, str | None]:
        """(the bytes judged and published, the key) of a message to `recipients`: with per-user
        models and one recipient, that mailbox (lower-cased, as the worker reads a key header);
        under kafka.mail_key_header the message is judged with that header on top, so that the
        workers read the same key from what is published. Otherwise (no [personal], several
        recipients) the message as it came, with no key: the global model's verdict."""
        if self.replica.keyed is None or len(recipients) != 1:
            return message, None
        mailbox = recipients[0].strip().strip("<>").strip().lower()
        if not mailbox or any(ch in mailbox for ch in "\r\n\0"):
            return message, None
        header = (self.config.kafka or {}).get("mail_key_header", "")
        if header:
            message = f"{header}: {mailbox}\r\n".encode("utf-8") + message
        return message, mailbox

    def decide(self, message: bytes, recipients: list[str] = ()) -> Decision:
        started = time.perf_counter()
        message, key = self.keyed_message(message, list(recipients))
        with self.replica.lock:
            if not self.replica.has_model:
                decision = (Decision("tempfail", [], "451 4.7.1 no spam model yet, try again later")
                            if self.policy["no_model"] == "tempfail" else Decision("accept", []))
            else:
                if self.judge.model is not self.replica.model:  # replaced by a restore
                    self.judge.model = self.replica.model
                status, score, headers = self.judge.verdict(message, key, self.replica.keyed)
                decision = Decision("accept", headers, status=status, score=score)
        if decision.status is not None and self.policy["action"] != "tag" and self._spam(decision):
            code = "550" if self.policy["action"] == "reject" else "451"
            reply = self.policy["reply"]
            if code == "451" and reply.startswith("5."):  # a temporary failure's enhanced code is 4.x.x
                reply = "4." + reply[2:]
            decision.action, decision.reply = self.policy["action"], f"{code} {reply}"
        self.seconds.observe(time.perf_counter() - started)
        self.decided.labels(decision.action).inc()
        if self.publisher is not None and decision.action != "tempfail":
            self.publisher.send(message, key)
        return decision

    def _spam(self, decision: Decision) -> bool:
        threshold = self.policy["threshold"]
        if threshold is None:
            return decision.status == "Yes"
        return decision.score is not None and decision.score >= threshold


class Publisher:
    """Messages to the first unlabeled topic as `stream-nb publish -` sends them: the raw bytes
    under kafka.value_format = "mail", else a JSON mail event; keyed by the Message-ID."""

    def __init__(self, config: Config) -> None:
        from stream_nb.kafka.clients import make_producer

        kafka = config.require_kafka()
        self.topic = kafka["unlabeled_topics"][0]
        self.raw = kafka["value_format"] == "mail"
        self.max_bytes = kafka["max_message_bytes"]
        self.producer = make_producer(kafka, config.kafka_client)
        self.refused = 0

    def send(self, message: bytes, key: str | None = None) -> None:
        """The message, keyed by `key` (a mailbox: per-user models) else by its id."""
        from stream_nb.kafka.publish import encode_event, stdin_event

        event = stdin_event(message, event_id=None, label=None, with_labels=False)
        event["key"] = key
        value = message if self.raw else encode_event(event, with_labels=False)
        if len(value) > self.max_bytes:  # the worker would dead-letter it: not sent
            self.refused += 1
            return
        self.producer.send(self.topic, value=value, key=(key or event["id"]).encode("utf-8"))

    def close(self) -> None:
        self.producer.flush()
        self.producer.close()


def reassembled(headers: list[tuple[str, bytes]], body: list[bytes]) -> bytes:
    """The message as the MTA hands it to a milter: each header `name: value` (a folded value
    keeps its line breaks), a blank line, the body; CRLF line ends."""
    head = b"".join(name.encode("ascii") + b": " + value.replace(b"\r\n", b"\n").replace(b"\n", b"\r\n") + b"\r\n"
                    for name, value in headers)
    return head + b"\r\n" + b"".join(body)


def parse_listen(listen: str) -> tuple[str, str | int]:
    """("inet", (host, port)) or ("unix", path) of [milter] listen (Postfix's notation)."""
    kind, _, where = listen.partition(":")
    if kind == "unix" and where:
        return "unix", where
    host, _, port = where.rpartition(":")
    if kind != "inet" or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"milter.listen: {listen!r} is not inet:HOST:PORT or unix:PATH")
    return "inet", (host, int(port))


# What the milter asks of the MTA: recipients, headers and body, none of them answered one by one
# (the MTA sends them on without waiting: one round trip a message, at its end); no connect, HELO,
# MAIL FROM or DATA events. And what it may do: add headers, and change (remove) them.
WANTED_EVENTS = ("NO_CONNECT", "NO_HELO", "NO_SENDER", "NO_DATA", "NO_UNKNOWN", "NO_END_OF_HEADERS",
                 "NR_RECIPIENT", "NR_HEADER", "NR_BODY")
BUFFER_BYTES = 2 * 1024 * 1024  # an MTA's milter packets are 64 KiB at most unless a larger size is negotiated


class MilterSession:
    """One MTA connection: the milter protocol's messages (kilter.protocol: parsing, packing, the
    order checked) in, a Decision for each message at its end of data, the answer out."""

    def __init__(self, verdicts: MilterVerdicts) -> None:
        from kilter.protocol import FilterProtocol
        from kilter.protocol.buffer import SimpleBuffer

        self.verdicts = verdicts
        self.cap = verdicts.read_cap + 1  # one byte more than the parser reads: the verdict says truncated
        self.protocol = FilterProtocol(abort_on_unknown=True)
        self.incoming, self.outgoing = SimpleBuffer(BUFFER_BYTES), SimpleBuffer(BUFFER_BYTES)
        self.reset()

    def reset(self) -> None:
        self.recipients: list[str] = []
        self.headers: list[tuple[str, bytes]] = []
        self.body: list[bytes] = []
        self.size = 0

    async def run(self, reader, writer) -> None:
        import asyncio

        from kilter.protocol import messages as m

        loop = asyncio.get_running_loop()
        try:
            while True:
                data = await reader.read(self.incoming.available)
                if not data:
                    return
                self.incoming[:] = data
                for message in self.protocol.read_from(self.incoming):
                    if isinstance(message, m.Negotiate):
                        self.send(self.negotiated(message))
                    elif isinstance(message, m.EnvelopeRecipient):
                        self.recipients.append(bytes(message.recipient).decode("utf-8", "replace"))
                    elif isinstance(message, m.Header):
                        self.read_header(message.name, bytes(message.value))
                    elif isinstance(message, (m.Body, m.EndOfMessage)):
                        self.read_body(message.content)
                        if isinstance(message, m.EndOfMessage):
                            message_bytes, recipients = reassembled(self.headers, self.body), self.recipients
                            headers = [name for name, _ in self.headers]
                            self.reset()
                            try:
                                decision = await loop.run_in_executor(None, self.verdicts.decide, message_bytes,
                                                                      recipients)
                            except Exception as error:  # no verdict: the MTA keeps the message and retries
                                log.warning("no verdict (%s: %s): answered 451", type(error).__name__, error)
                                decision = Decision("tempfail", [], "451 4.3.0 the spam filter failed, try again later")
                            self.answer(decision, headers)
                    elif isinstance(message, m.Abort):
                        self.reset()
                        continue
                    elif isinstance(message, m.Close):
                        await self.flush(writer)
                        return
                    if self.protocol.needs_response(message) and self.protocol.state is not None:
                        self.send(m.Continue())
                await self.flush(writer)
        finally:
            writer.close()

    async def flush(self, writer) -> None:
        """What is to be sent, in one write: no small packet held back (Nagle's algorithm)."""
        if self.outgoing.filled:
            writer.write(self.outgoing[:].tobytes())
            del self.outgoing[:]
            await writer.drain()

    def negotiated(self, offer):
        from kilter.protocol.messages import ActionFlags, Negotiate, ProtocolFlags

        wanted = ProtocolFlags.NONE
        for flag in WANTED_EVENTS:
            wanted |= ProtocolFlags[flag]
        actions = ActionFlags.ADD_HEADERS | ActionFlags.CHANGE_HEADERS
        if actions & ~offer.action_flags:
            raise ConnectionError(f"the MTA does not let a milter add and change headers (it offers {offer.action_flags!r})")
        return Negotiate(6, actions, wanted & offer.protocol_flags, {})

    def read_header(self, name: str, value: bytes) -> None:
        self.headers.append((name, value))
        self.size += len(name) + len(value) + 4

    def read_body(self, chunk) -> None:
        if self.size < self.cap and len(chunk):
            piece = bytes(chunk[:self.cap - self.size])
            self.body.append(piece)
            self.size += len(piece)

    def answer(self, decision: Decision, headers: list[str]) -> None:
        """The end of data's answer: a refusal, or the sender's verdict headers removed (each
        by its occurrence of that name, as the protocol counts them) and ours added, then accept."""
        from kilter.protocol import messages as m

        if decision.action in ("reject", "tempfail"):
            self.send(m.ReplyCode(decision.reply.encode("ascii") + b"\0"))
            return
        ours = {name.lower() for name in VERDICT_HEADERS}
        seen: dict[str, int] = {}
        for name in headers:
            seen[name.lower()] = seen.get(name.lower(), 0) + 1
            if name.lower() in ours:
                self.send(m.ChangeHeader(seen[name.lower()], name, b""))
        for name, value in decision.headers:
            self.send(m.AddHeader(name, value.encode("ascii")))
        self.send(m.Accept())

    def send(self, message) -> None:
        self.protocol.write_to(self.outgoing, message)


def serve(verdicts: MilterVerdicts, listen: str, ready=None) -> None:
    """Answer milter sessions on `listen` (one asyncio task each) until SIGTERM / SIGINT."""
    import asyncio

    async def session(reader, writer) -> None:
        try:
            await MilterSession(verdicts).run(reader, writer)
        except Exception as error:  # a broken or hostile peer: its session ends, the MTA applies its default
            log.warning("milter session ended: %s: %s", type(error).__name__, error)

    async def main() -> None:
        kind, where = parse_listen(listen)
        if kind == "unix":
            Path(where).unlink(missing_ok=True)
            server = await asyncio.start_unix_server(session, where)
            # the MTA's user (postfix) connects: the socket is open to all, its directory decides who reaches it
            Path(where).chmod(0o666)
        else:
            server = await asyncio.start_server(session, where[0].strip("[]"), where[1], reuse_address=True)
        stopping = asyncio.Event()
        loop = asyncio.get_running_loop()

        def stop(signum: int) -> None:
            log.info("stopping (%s)", signal.Signals(signum).name)
            stopping.set()

        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop, signum)
        if ready is not None:
            ready()
        async with server:
            await stopping.wait()

    asyncio.run(main())


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "milter", help="judge mail in Postfix's or Sendmail's SMTP transaction (a milter), by a live replica",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, required=True, help="the workers' configuration (e.g. configs/mail.toml)")
    parser.add_argument("--bootstrap", default=None, metavar="HOST:PORT[,...]",
                        help="the broker (default: as `run` finds it: $STREAM_NB_BOOTSTRAP, the configuration)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a configuration value, as `run` takes them")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"],
                        help="the least severe log lines written to stderr")
    parser.set_defaults(func=run_milter)


def run_milter(args: argparse.Namespace) -> int:
    from stream_nb.worker.cli import configure_logging

    configure_logging(args.log_level, "text")  # kafka-python's own lines at DEBUG only, as the worker's
    try:
        config, found = with_bootstrap(args.config, args.set, args.bootstrap)
        configure_logging(args.log_level, config.worker["log_format"])
        parse_listen(config.milter["listen"])
        import kilter.protocol  # noqa: F401  (the extra: pip install 'stream_nb[milter]')
    except (ConfigError, NoBroker) as error:
        print(f"stream-nb milter: error: {error}", file=sys.stderr)
        return 2
    except ImportError:
        print("stream-nb milter: error: the milter needs kilter.protocol: pip install 'stream_nb[milter]'",
              file=sys.stderr)
        return 2
    from stream_nb.worker.replica import Follower, Replica

    keys = tempfile.mkdtemp(prefix="stream-nb-milter-keys-") if config.personal is not None else None
    replica = Replica(config, follow_batch=config.milter["follow_batch"], keys_directory=keys)
    publisher = server = None
    follower = Follower(replica)
    try:
        replica.start()
        publisher = Publisher(config) if config.milter["publish"] else None
        verdicts = MilterVerdicts(config, replica, publisher)
        if config.milter["metrics_port"]:
            from stream_nb.worker.metrics import MetricsServer

            server = MetricsServer(replica.telemetry, config.milter["metrics_host"], config.milter["metrics_port"],
                                   alive_within_s=60.0)
        follower.start()
        listen = config.milter["listen"]
        serve(verdicts, listen, ready=lambda: log.info("milter listening on %s (action %s, %s)", listen,
                                                       config.milter["action"],
                                                       "a model" if replica.has_model else "no model yet"))
    except Exception as error:  # one line: the broker, a checkpoint, the socket
        print(f"stream-nb milter: error: {type(error).__name__}: {error}", file=sys.stderr)
        return 2
    finally:
        follower.stop()
        if publisher is not None:
            publisher.close()
        if server is not None:
            server.close()
        replica.close()
        if keys is not None:
            shutil.rmtree(keys, ignore_errors=True)
    return 0

"""`stream-nb filter`: one message on stdin, its verdict from the newest checkpoint, bogofilter's way.

For the delivery side of a mail system (procmail, maildrop, Dovecot's sieve `extprograms`), where a
program is run once a message:

    stream-nb filter --config configs/mail.toml -p < message > message-with-headers

- exit status: 0 spam, 1 ham, 2 unsure (inside the configured band), 3 error (bogofilter's codes);
- `-p` (passthrough): the message on stdout with X-Spam-Flag / X-Spam-Score / X-Spam-Status
  (stream_nb.verdicts.headers; forged ones taken out). On an error the message is written
  unchanged and the status is 3: a filter in a delivery pipe must never lose the mail;
- `-v`: the headers alone on stdout; neither: the exit status alone;
- `-e` (embed, bogofilter's): exit 0 whatever the verdict, 3 on an error, for procmail's `:0fw`
  and maildrop's `xfilter`, which take any other status as a failed filter (procmail then keeps
  the message as it was; maildrop defers it, and the MTA tries again). examples/procmail and
  examples/maildrop file spam by the X-Spam-Flag header it writes.

The model is the newest valid checkpoint of the configuration's checkpoint.dir (or
--checkpoint-dir), written by a worker (`stream-nb run`) of the same configuration (its
fingerprint is checked), so the verdict is the one the worker's prediction of that message
carries at that checkpoint: the same featuriser, the same rules (stream_nb.verdicts.rules), the
message named by its Message-ID as on every other route. With [personal] the global model's
verdict is given (what a message of a key with no counts of its own gets); per-user verdicts
need the keys' state, which the worker keeps in its changelog.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stream_nb.checkpoint import config_fingerprint
from stream_nb.checkpoint.store import CheckpointError, CheckpointStore, FingerprintMismatch
from stream_nb.config import Config, ConfigError, load_config, with_bootstrap
from stream_nb.events.codec import Event, SourcePosition
from stream_nb.features.mail import MailFeaturizer
from stream_nb.kafka.discovery import NoBroker
from stream_nb.mail.identity import mail_id
from stream_nb.model.base import ViewBatch
from stream_nb.model.registry import model_from_state
from stream_nb.verdicts.headers import status_of, verdict_headers, with_verdict_headers
from stream_nb.verdicts.rules import VerdictRules

EXIT_SPAM, EXIT_HAM, EXIT_UNSURE, EXIT_ERROR = 0, 1, 2, 3
EXIT_OF_STATUS = {"Yes": EXIT_SPAM, "No": EXIT_HAM, "Unsure": EXIT_UNSURE}
STDIN_SOURCE = SourcePosition("stdin", 0, 0)  # where a prediction says its event came from


class FilterError(RuntimeError):
    """The filter cannot give a verdict (no model, a configuration it cannot read); one line."""


class MessageJudge:
    """A model and a configuration's featuriser and verdict rules: the verdict of one message."""

    def __init__(self, config: Config, model) -> None:
        self.model = model
        self.featurizer = MailFeaturizer(config.build_event_featurizer())
        # [views]: an Experts model reads the message in every view (one parse)
        self.views = [self.featurizer] + [MailFeaturizer(config.build_event_featurizer(name), reader=self.featurizer)
                                          for name in config.views]
        self.rules = VerdictRules.of(config, self.featurizer.max_bytes)

    @classmethod
    def from_checkpoint(cls, config: Config, directory: Path) -> MessageJudge:
        """The newest valid checkpoint in `directory`, written with `config` (same fingerprint)."""
        if not directory.is_dir():
            raise FilterError(f"no checkpoint directory {directory} (a worker of this configuration writes it: "
                              f"stream-nb run --config ...)")
        try:
            checkpoint = CheckpointStore(directory).load_latest(config_fingerprint(config.resolved()))
        except (CheckpointError, FingerprintMismatch) as error:
            raise FilterError(f"checkpoint: {error}") from None
        if checkpoint is None:
            raise FilterError(f"no valid checkpoint in {directory} yet: nothing learned to judge by")
        return cls(config, model_from_state(checkpoint.model_state))

    @classmethod
    def from_snapshot(cls, config: Config, bootstrap: str | None = None) -> MessageJudge:
        """The newest snapshot on the configuration's checkpoint.snapshot_topic (the one a worker
        with no checkpoint directory starts from), written with `config` (same fingerprint)."""
        from stream_nb.checkpoint.store import CheckpointError
        from stream_nb.worker.snapshots import load_snapshot

        topic = config.checkpoint["snapshot_topic"]
        if not topic:
            raise FilterError("--from-snapshot: the configuration names no checkpoint.snapshot_topic")
        kafka = dict(config.require_kafka())
        if bootstrap is not None:
            kafka["bootstrap_servers"] = bootstrap
        try:
            loaded = load_snapshot(kafka, config.kafka_client, topic)
        except (CheckpointError, OSError) as error:
            raise FilterError(f"snapshot topic {topic}: {error}") from None
        except Exception as error:  # kafka-python's errors: the broker away
            raise FilterError(f"snapshot topic {topic}: {type(error).__name__}: {error}") from None
        if loaded is None:
            raise FilterError(f"no snapshot on {topic} yet: nothing learned to judge by")
        checkpoint, manifest = loaded
        if checkpoint.fingerprint != config_fingerprint(config.resolved()):
            raise FilterError(f"snapshot {manifest['id']} on {topic} was written for another configuration "
                              f"(fingerprint {checkpoint.fingerprint[:12]}...)")
        return cls(config, model_from_state(checkpoint.model_state))

    def judge(self, message: bytes) -> tuple[str, list[tuple[str, str]]]:
        """("Yes" | "No" | "Unsure", the verdict headers) of `message`, as the worker's prediction
        of it says (its label, score, band verdict and clues)."""
        status, _, headers = self.verdict(message)
        return status, headers

    def verdict(self, message: bytes, key: str | None = None,
                keyed=None) -> tuple[str, float | None, list[tuple[str, str]]]:
        """judge's status and headers, with the published score between them (None: no
        positive class). With `keyed` (the per-key state of every partition,
        stream_nb.worker.keyed) and a `key`, by that key's model, as the worker predicts a keyed
        event (a key with no counts: the global model's verdict)."""
        event = Event(mail_id(message), None, None, None, STDIN_SOURCE, mail=message, key=key)
        batch = [{"text": None, "features": None, "mail": message}]
        X = ViewBatch.by_view(self.model, self.views, lambda featurizers, experts: MailFeaturizer.transform_batch_views(
            featurizers, batch, [getattr(expert, "vocabulary", None) for expert in experts], number_unknown=False))
        if keyed is not None and key is not None:
            probabilities = keyed.personal.predict_many(X, [key], [keyed.table_of(key)])
        else:
            probabilities = self.model.predict_proba_many(X)
        judged = self.rules.judge(self.model, [event], X, probabilities)
        proba = probabilities[0]
        label = max(proba, key=proba.get) if proba else None
        verdict = judged.verdicts[0] if judged.verdicts is not None else None
        status = status_of(verdict, label, judged.positive)
        score = judged.published[0] if judged.published is not None else None
        clues = judged.clues[0] if judged.clues is not None else None
        return status, score, verdict_headers(status, score, verdict, clues)


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "filter", help="judge one message on stdin by the newest checkpoint (exit 0 spam, 1 ham, 2 unsure, 3 error)",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, required=True, help="the worker's configuration (e.g. configs/mail.toml)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--checkpoint-dir", type=Path, default=None,
                        help="where the worker writes its checkpoints (default: the configuration's checkpoint.dir)")
    source.add_argument("--from-snapshot", action="store_true",
                        help="the newest snapshot on the configuration's checkpoint.snapshot_topic instead (a host "
                             "with no worker; one read from the broker a message)")
    parser.add_argument("--bootstrap", default=None, metavar="HOST:PORT[,...]",
                        help="with --from-snapshot: the broker (default: as `run` finds it)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a configuration value, as `run` takes them")
    output = parser.add_mutually_exclusive_group()
    output.add_argument("-p", "--passthrough", action="store_true",
                        help="write the message with the verdict headers (unchanged on an error)")
    output.add_argument("-v", "--verbose", action="store_true", help="write the verdict headers alone")
    parser.add_argument("-e", "--embed", action="store_true",
                        help="exit 0 for every verdict, 3 on an error (bogofilter's -e: for procmail's and "
                             "maildrop's filter recipes, which take a non-zero exit as a failed filter)")
    parser.set_defaults(func=run_filter)


def run_filter(args: argparse.Namespace) -> int:
    message = sys.stdin.buffer.read()
    out = sys.stdout.buffer
    try:
        if args.from_snapshot:
            config, found = with_bootstrap(args.config, args.set, args.bootstrap)
            judge = MessageJudge.from_snapshot(config, found.servers)
        else:
            config = load_config(args.config, args.set)
            directory = args.checkpoint_dir if args.checkpoint_dir is not None else Path(config.checkpoint["dir"])
            judge = MessageJudge.from_checkpoint(config, directory)
        status, headers = judge.judge(message)
    except (FilterError, ConfigError, NoBroker, OSError, ValueError, TypeError, MemoryError) as error:
        # (MemoryError: parse_mail raises it rather than judge a reading cut short; the mail goes on unjudged)
        print(f"stream-nb filter: {str(error) or type(error).__name__}", file=sys.stderr)
        if args.passthrough:
            out.write(message)
            out.flush()
        return EXIT_ERROR
    if args.passthrough:
        out.write(with_verdict_headers(message, headers))
    elif args.verbose:
        out.write(b"".join(f"{name}: {value}\n".encode("ascii") for name, value in headers))
    out.flush()
    return 0 if args.embed else EXIT_OF_STATUS[status]

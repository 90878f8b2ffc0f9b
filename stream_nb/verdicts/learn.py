"""`stream-nb learn`: one message on stdin, taught as spam or ham, or corrected, from a mail system.

What a user's "this is spam" / "not spam" becomes, run by Dovecot's IMAPSieve when a message is
moved into or out of the Junk folder (rspamd's `rspamc learn_spam`, bogofilter's `-s` / `-n`):

    stream-nb learn --config mail.toml --spam < message               # moved into Junk
    stream-nb learn --config mail.toml --ham --unlearn spam < message  # moved out of Junk

The message is published to the configuration's (first) labeled topic as the worker reads it:
raw with the label in its kafka.label_header header under kafka.value_format = "mail", else a
JSON mail event; named by its Message-ID (else a digest of its bytes), the id every other route
gives it, so a correction finds what the message taught (`--unlearn` the class it was learned
as: spam-then-ham is taken back and relearned, not counted twice). Keyed by the mailbox in
kafka.mail_key_header when the configuration has one (per-user models), else by its id.
Exit 0 when the broker acknowledged it; 2 (one line on stderr) otherwise: nothing half-sent.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from stream_nb.config import ConfigError, with_bootstrap
from stream_nb.kafka.discovery import NoBroker, check_reachable
from stream_nb.kafka.publish import EXIT_ERROR, PublishError, check_messages, iter_messages, publish


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "learn", help="teach one message on stdin as spam or ham (or correct it), for IMAPSieve and the like",
        description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", type=Path, required=True, help="the worker's configuration (e.g. configs/mail.toml)")
    label = parser.add_mutually_exclusive_group(required=True)
    label.add_argument("--spam", dest="label", action="store_const", const="spam", help="learn it as spam")
    label.add_argument("--ham", dest="label", action="store_const", const="ham", help="learn it as ham")
    label.add_argument("--label", dest="label", metavar="CLASS", help="learn it as CLASS (any declared class)")
    label.add_argument("--forget", dest="label", action="store_const", const=None,
                       help="take it back only (with --unlearn CLASS)")
    parser.add_argument("--unlearn", default=None, metavar="CLASS",
                        help="a correction: the class it was learned as, taken back first")
    parser.add_argument("--bootstrap", default=None, metavar="HOST:PORT[,...]",
                        help="the broker (default: as `run` finds it: $STREAM_NB_BOOTSTRAP, the configuration)")
    parser.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                        help="override a configuration value, as `run` takes them")
    parser.add_argument("--connect-timeout", type=float, default=5.0, metavar="SECONDS",
                        help="give up (exit 2, nothing sent) if the broker cannot be reached within this long")
    parser.set_defaults(func=run_learn)


def run_learn(args: argparse.Namespace) -> int:
    data = sys.stdin.buffer.read()
    try:
        if args.label is None and args.unlearn is None:
            raise PublishError("--forget takes a message back: say which class it was learned as (--unlearn CLASS)")
        if args.unlearn is not None and args.unlearn == args.label:
            raise PublishError(f"--unlearn {args.unlearn} and the label are the same class: nothing to correct")
        try:
            config, found = with_bootstrap(args.config, args.set, args.bootstrap)
        except (ConfigError, NoBroker) as error:
            raise PublishError(str(error)) from None
        kafka = config.require_kafka()
        classes = config.classes
        for name in (args.label, args.unlearn):
            if name is not None and classes and name not in classes:
                raise PublishError(f"class {name!r} is not one of the configuration's model.classes "
                                   f"({', '.join(sorted(map(str, classes)))}): the worker would dead-letter it")
        topic = kafka["labeled_topics"][0]
        messages = iter_messages(Path("-"), file_format=None, with_labels=True, limit=None, keys="id",
                                 max_bytes=kafka["max_message_bytes"], value_format=kafka["value_format"],
                                 label_header=kafka["label_header"], unlearn_header=kafka["unlearn_header"],
                                 key_header=kafka["mail_key_header"],
                                 stdin={"data": data, "event_id": None, "label": args.label, "unlearn": args.unlearn})
        total, kept = check_messages(messages)
        try:
            check_reachable(found, within_s=args.connect_timeout)
        except NoBroker as error:
            raise PublishError(str(error)) from None
        count, _ = publish(iter(kept), total=total, topic=topic, bootstrap=found.servers,
                           timeout_ms=max(1, int(args.connect_timeout * 1000)), max_bytes=kafka["max_message_bytes"],
                           transport=kafka["transport"])
    except PublishError as error:
        print(f"stream-nb learn: error: {error}", file=sys.stderr)
        return EXIT_ERROR
    what = f"as {args.label}" if args.label is not None else "taken back"
    correction = f", {args.unlearn} taken back first" if args.unlearn is not None and args.label is not None else ""
    print(f"stream-nb learn: {count} message {what}{correction} on {topic}", file=sys.stderr)
    return 0

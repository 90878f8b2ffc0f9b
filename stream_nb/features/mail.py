"""Mail event -> feature dict: what a count model reads of an RFC 5322 message.

A mail event's features are, summed into one dict::

    text featuriser("Subject: <subject>\\n<body>")      (so ``subject_features`` sees the subject)
  + {evidence: 1 for each '#hdr:', '#mime:', '#html:', '#defect:', ... feature of the message}
  + the event's structured ``features``, as `EventFeaturizer` reads them for any event

where subject, body and evidence are `stream_nb.mail.parse_mail`'s reading of the bytes. The
result is the same kind of dict the text and structured paths make, so the model, the worker
and replay need not know what mail is.

Unreadable mail
---------------
A message is refused with `UnreadableMail` (reason ``unreadable_mail``; the worker dead-letters
it, replay counts it) only when nothing of it could be read:

- it is empty or only whitespace (`parse_mail`'s defect ``empty``);
- the MIME parser itself failed on it (a defect ``unreadable:<error>``);
- reading its headers or its parts failed (a defect ``read_error:<error>``) and neither a
  subject nor any body text came out.

Anything else is read as far as it goes, its faults become '#defect:' features: a message of
garbage bytes with no header is a body without headers (``missing_header_body_separator``),
a message of headers only is its header evidence.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Mapping
from typing import Any

from stream_nb.features.fields import EventFeaturizer
from stream_nb.features.text import transform_sparse_views
from stream_nb.mail import DEFAULT_MAX_BYTES, ParsedMail, parse_mail
from stream_nb.model.base import PendingView, SparseBatch

__all__ = ["UNREADABLE_MAIL", "MailFeaturizer", "UnreadableMail", "mail_text", "unreadable_detail"]

UNREADABLE_MAIL = "unreadable_mail"


class UnreadableMail(ValueError):
    """A message of which nothing can be read (see the module doc); `reason` names it."""

    reason = UNREADABLE_MAIL


def mail_text(parsed: ParsedMail) -> str:
    """The text the text featuriser reads of a message: its subject line, then its body."""
    return f"Subject: {parsed.subject}\n{parsed.body}"


def unreadable_detail(parsed: ParsedMail) -> str | None:
    """Why nothing of the message could be read (one ASCII line), or None when something could."""
    defects = parsed.defects
    if "empty" in defects:
        return "the message is empty or only whitespace"
    for defect in defects:
        if defect.startswith("unreadable:"):
            return f"the MIME parser failed ({defect})"
    if not parsed.subject.strip() and not parsed.body.strip():
        failed = [defect for defect in defects if defect.startswith("read_error:")]
        if failed:
            return f"no subject and no body could be read ({', '.join(failed)})"
    return None


# A batch that one event spoils is featurised again event by event, then without it (the worker
# and replay do that): the messages read last are kept, so each is parsed, and counted, once.
RECENT_MESSAGES = 5_000  # a poll's worth (kafka.poll_max_records: 1,000 by default) and more
RECENT_BYTES = 32 << 20


class MailFeaturizer:
    """The feature dict of a mail event (see the module doc), over a count model's
    `EventFeaturizer`. `max_bytes`: what is read of one message (`parse_mail`'s cap).
    `on_parsed`, when given, sees each message read, once however often it is featurised (the
    worker counts its defects there): the readings of the messages featurised last (the same
    bytes object; at most RECENT_MESSAGES of them and RECENT_BYTES of mail) are kept. `ahead`,
    when given, has readings made ahead in other processes (stream_nb.replay.parse_ahead:
    `prepare(mails)` before a batch, `take(mail)` a reading or None), used when it reads with
    this featuriser's `max_bytes`; the readings are parse_mail's all the same."""

    def __init__(self, event_featurizer: Any, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 on_parsed: Callable[[ParsedMail], None] | None = None, reader: MailFeaturizer | None = None,
                 ahead: Any = None) -> None:
        self.event_featurizer = event_featurizer
        self.max_bytes = max_bytes
        self.on_parsed = on_parsed
        self._recent: OrderedDict[int, tuple[bytes, ParsedMail]] = OrderedDict()
        self._recent_bytes = 0
        # Several feature views of one message read one parse: theirs through the first's
        # (its readings kept and its on_parsed), so a message is parsed and counted once.
        self._reader = reader
        self._ahead = ahead if ahead is not None and ahead.max_bytes == max_bytes else None

    def parse(self, mail: bytes) -> ParsedMail:
        """`parse_mail` of `mail`, or its reading kept from a moment ago (`on_parsed` sees it once)."""
        if self._reader is not None:
            return self._reader.parse(mail)
        kept = self._recent.get(id(mail))
        if kept is not None and kept[0] is mail:  # the entry holds the bytes, so the id is theirs
            return kept[1]
        parsed = None if self._ahead is None else self._ahead.take(mail)
        if parsed is None:
            parsed = parse_mail(mail, max_bytes=self.max_bytes)
        if self.on_parsed is not None:
            self.on_parsed(parsed)
        self._recent[id(mail)] = (mail, parsed)
        self._recent_bytes += len(mail)
        while len(self._recent) > RECENT_MESSAGES or self._recent_bytes > RECENT_BYTES:
            self._recent_bytes -= len(self._recent.popitem(last=False)[1][0])
        return parsed

    def transform_one(self, mail: bytes, features: Mapping[str, Any] | None = None) -> dict[str, int | float]:
        """The features of one message (and its event's structured `features`). Raises
        `UnreadableMail` for a message of which nothing can be read, ValueError when the model
        reads no text (categorical, gaussian: a mail is text)."""
        if not isinstance(self.event_featurizer, EventFeaturizer) or self.event_featurizer.text is None:
            raise ValueError("a mail event is text: this model kind reads structured features only "
                             "(use a count model: [model] kind = \"multinomial\", \"bernoulli\" or \"complement\")")
        parsed = self.parse(mail)
        detail = unreadable_detail(parsed)
        if detail is not None:
            raise UnreadableMail(detail)
        vector = self.event_featurizer.transform_one({"text": mail_text(parsed), "features": features})
        for name in parsed.features:  # each once in parsed.features: count 1, as an "f=v" indicator
            vector[name] = vector.get(name, 0) + 1
        return vector

    def transform_event(self, event: Mapping[str, Any]) -> dict[str, int | float]:
        """The features of an event dict {"text", "features", "mail"}: a mail event through
        `transform_one`, any other as the event featuriser reads it."""
        mail = event.get("mail")
        if mail is None:
            return self.event_featurizer.transform_one({"text": event.get("text"), "features": event.get("features")})
        return self.transform_one(mail, event.get("features"))

    def transform_many(self, events: list[Mapping[str, Any]]) -> list[dict[str, int | float]]:
        """`transform_event` of each event dict, in order."""
        return [self.transform_event(event) for event in events]

    def transform_batch(self, events: list[Mapping[str, Any]], vocabulary=None,
                        number_unknown: bool = True) -> SparseBatch | list[dict[str, int | float]]:
        """The features of a batch of event dicts for the models' batch methods: what
        `transform_many` gives, as a SparseBatch when no event carries structured features (the
        texts through the text featuriser's `transform_sparse`, each mail event's evidence names
        as its text's `extra_names`; the C path where it has one, given the model's `vocabulary`
        and `number_unknown` to look the names up as it makes them), else as `transform_many`'s
        dicts. The model's answers are the same either way (SparseBatch: names in order of first
        appearance, repeats adding up, as the dict path adds evidence to a text feature)."""
        text = getattr(self.event_featurizer, "text", None)
        if text is None or any(event.get("features") is not None for event in events):
            return self.transform_many(events)
        texts, evidence = self._texts_and_evidence(events)
        return text.transform_sparse(texts, vocabulary=vocabulary, number_unknown=number_unknown,
                                     extra_names=evidence)

    def _texts_and_evidence(self, events: list[Mapping[str, Any]]) -> tuple[list[str], list]:
        """Each event's text (a mail's subject and body) and its evidence names (a text event's
        none); UnreadableMail for the first message of which nothing can be read."""
        texts, evidence = [], []
        if self._ahead is not None:
            self._ahead.prepare([event["mail"] for event in events if event.get("mail") is not None])
        for event in events:
            mail = event.get("mail")
            if mail is None:
                texts.append(event.get("text") or "")
                evidence.append(())
                continue
            parsed = self.parse(mail)
            detail = unreadable_detail(parsed)
            if detail is not None:
                raise UnreadableMail(detail)
            texts.append(mail_text(parsed))
            evidence.append(parsed.features)
        return texts, evidence

    @staticmethod
    def transform_batch_views(featurizers: list[MailFeaturizer], events: list[Mapping[str, Any]], vocabularies: list,
                              number_unknown: bool = True,
                              pending: bool = False) -> list[SparseBatch | PendingView | list[dict[str, int | float]]]:
        """Each view's `transform_batch(events, vocabularies[v], number_unknown)`, the same batches,
        for several feature views of one batch. Where every view reads the batch as text (a text
        featuriser, no structured features) and the views after the first read messages through
        it (`reader`), each message is parsed, and its text tokenised, once for all of them
        (`transform_sparse_views`, which `pending` is passed to); otherwise each view runs on its own."""
        first = featurizers[0]
        texts = [getattr(featurizer.event_featurizer, "text", None) for featurizer in featurizers]
        if (len(featurizers) < 2 or any(text is None for text in texts)
                or any(featurizer is not first and featurizer._reader is not first for featurizer in featurizers)
                or any(event.get("features") is not None for event in events)):
            return [featurizer.transform_batch(events, vocabulary=vocabulary, number_unknown=number_unknown)
                    for featurizer, vocabulary in zip(featurizers, vocabularies, strict=True)]
        read, evidence = first._texts_and_evidence(events)
        return transform_sparse_views(texts, read, vocabularies, number_unknown=number_unknown, extra_names=evidence,
                                      pending=pending)

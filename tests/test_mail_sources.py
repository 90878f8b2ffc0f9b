"""Mail where it lives: mbox, Maildir, folders of message files and tarballs of them, read as
labeled mail events in a documented order; files that are not messages or cannot be read are
counted, never fatal."""

from __future__ import annotations

import io
import json
import tarfile
from collections import Counter

import pytest

from stream_nb.events import Event, SourcePosition, decode_record
from stream_nb.kafka.publish import encode_event
from stream_nb.mail.sources import is_mail_source, parse_label_folders, read_mail
from stream_nb.replay.sources import Rejections, SourceError, read_events
from tests.corpora import spamassassin_2003_path


def message(subject: str, body: str = "body") -> bytes:
    return f"From: a@example.com\r\nSubject: {subject}\r\n\r\n{body}\r\n".encode()


MBOX = (b"From alice@example.com Mon Jan  1 00:00:00 2024\n"
        b"Subject: one\n\nfirst body\nFrom here on, a line that only looks like a separator\n\n"
        b"From bob@example.com Mon Jan  1 00:00:01 2024\n"
        b"Subject: two\n\n>From quoted\n\n"
        b"From carol@example.com Mon Jan  1 00:00:02 2024\n"
        b"Subject: three\n\nlast\n")


def make_tree(root):
    """A corpus as mail systems keep it: folders of .eml files, a Maildir, mboxes, and files that
    are not messages."""
    (root / "spam").mkdir(parents=True)
    (root / "spam" / "b.eml").write_bytes(message("cheap meds"))
    (root / "spam" / "a.eml").write_bytes(message("win cash", "caf\xe9".encode("latin-1").decode("latin-1")))
    (root / "spam" / "gone.eml").symlink_to(root / "nowhere.eml")  # cannot be read
    maildir = root / "ham" / "Maildir"
    for sub in ("cur", "new", "tmp"):
        (maildir / sub).mkdir(parents=True)
    (maildir / "new" / "1700000002.M2.host").write_bytes(message("lunch?"))
    (maildir / "cur" / "1700000001.M1.host:2,S").write_bytes(message("minutes"))
    (maildir / "tmp" / "1700000003.M3.host").write_bytes(message("being delivered"))
    (root / "ham" / "lists.mbox").write_bytes(MBOX)
    (root / "inbox").mkdir()
    (root / "inbox" / "c.eml").write_bytes(message("unsorted"))
    (root / "README.txt").write_bytes(b"# a corpus of mail\n")
    (root / ".DS_Store").write_bytes(b"\x00\x01")
    (root / "spam.mbox").write_bytes(MBOX.replace(b"Subject: one", b"Subject: uno"))
    return root


EXPECTED = [  # (id, label, subject): depth first, each folder's entries sorted by name
    ("ham/Maildir/cur/1700000001.M1.host:2,S", "ham", "minutes"),
    ("ham/Maildir/new/1700000002.M2.host", "ham", "lunch?"),
    ("ham/lists.mbox#1", "ham", "one"),
    ("ham/lists.mbox#2", "ham", "two"),
    ("ham/lists.mbox#3", "ham", "three"),
    ("inbox/c.eml", None, "unsorted"),
    ("spam/a.eml", "spam", "win cash"),
    ("spam/b.eml", "spam", "cheap meds"),
    ("spam.mbox#1", "spam", "uno"),  # labeled by its own name
    ("spam.mbox#2", "spam", "two"),
    ("spam.mbox#3", "spam", "three"),
]


def subject_of(mail: bytes) -> str:
    for line in mail.decode("latin-1").splitlines():
        if line.startswith("Subject: "):
            return line[len("Subject: "):]
    raise AssertionError(mail)


def test_a_folder_tree_reads_every_message_labeled_by_folder_in_sorted_order(tmp_path):
    skipped = Rejections()
    events = list(read_mail(make_tree(tmp_path / "corpus"), skipped=skipped))
    assert [(e["path"], e["label"], subject_of(e["mail"])) for e in events] == EXPECTED
    assert dict(skipped) == {"not_a_message": 1, "unreadable_file": 1}  # README.txt, the dangling link
    assert skipped.first["unreadable_file"].startswith("spam/gone.eml: ")
    mbox = {e["path"]: e["mail"] for e in events}
    assert mbox["ham/lists.mbox#1"] == (b"Subject: one\n\nfirst body\n"
                                         b"From here on, a line that only looks like a separator\n")
    assert mbox["ham/lists.mbox#2"] == b"Subject: two\n\n>From quoted\n"  # as stored: no unquoting
    assert mbox["spam/a.eml"] == message("win cash", "caf\xe9")  # bytes as they are


def test_label_folders_replace_the_defaults_and_the_nearest_folder_wins(tmp_path):
    root = make_tree(tmp_path / "corpus")
    folders = parse_label_folders(["spam=inbox", "ham=Maildir"])
    labels = {e["path"]: e["label"] for e in read_mail(root, label_folders=folders)}
    assert labels["inbox/c.eml"] == "spam"
    assert labels["ham/Maildir/new/1700000002.M2.host"] == "ham"
    assert labels["ham/lists.mbox#1"] is None and labels["spam/a.eml"] is None  # the defaults are gone
    assert {e["label"] for e in read_mail(root / "spam")} == {"spam"}  # the source's own name counts


@pytest.mark.parametrize("pairs, error", [
    (["spam"], "expected LABEL=FOLDER"), (["=spam"], "expected LABEL=FOLDER"), (["spam=a/b"], "expected LABEL=FOLDER"),
    (["spam=x", "ham=x"], "folder 'x' is given two labels"),
])
def test_bad_label_folders_are_named(pairs, error):
    with pytest.raises(ValueError, match=error):
        parse_label_folders(pairs)


def test_a_tarball_holds_the_same_messages_in_archive_order(tmp_path):
    root = make_tree(tmp_path / "corpus")
    archive_path = tmp_path / "corpus.tar.gz"
    with tarfile.open(archive_path, "w:gz") as archive:
        for event_id, _, _ in reversed(EXPECTED):  # archive order is not sorted order
            name = event_id.split("#")[0]
            if f"corpus/{name}" not in archive.getnames():
                archive.add(root / name, arcname=f"corpus/{name}")
        archive.add(root / "README.txt", arcname="corpus/README.txt")
        archive.add(root / "ham" / "Maildir" / "tmp", arcname="corpus/ham/Maildir/tmp")
    skipped = Counter()
    events = list(read_mail(archive_path, skipped=skipped))
    from_tree = {e["path"]: (e["label"], e["mail"]) for e in read_mail(root)}
    assert [e["path"] for e in events] == [
        "corpus/spam.mbox#1", "corpus/spam.mbox#2", "corpus/spam.mbox#3", "corpus/spam/b.eml", "corpus/spam/a.eml",
        "corpus/inbox/c.eml", "corpus/ham/lists.mbox#1", "corpus/ham/lists.mbox#2", "corpus/ham/lists.mbox#3",
        "corpus/ham/Maildir/new/1700000002.M2.host", "corpus/ham/Maildir/cur/1700000001.M1.host:2,S"]
    assert {e["path"].removeprefix("corpus/"): (e["label"], e["mail"]) for e in events} == from_tree
    assert skipped == {"not_a_message": 1}  # README.txt; the Maildir's tmp/ is not read


def gzipped_spam_folder(bodies: list[str]) -> bytes:
    """A .tar.gz of spam/NN.eml, one message a body."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for i, body in enumerate(bodies):
            data = message(f"m{i}", body)
            info = tarfile.TarInfo(f"spam/{i:02d}.eml")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_a_truncated_tarball_gives_what_it_holds_and_counts_the_rest_unreadable(tmp_path):
    whole = gzipped_spam_folder(["x" * 3000 + str(i) for i in range(40)])
    cut = tmp_path / "cut.tar.gz"
    cut.write_bytes(whole[: len(whole) // 2])
    skipped = Counter()
    events = list(read_mail(cut, skipped=skipped))
    assert 0 < len(events) < 40
    assert [e["path"] for e in events] == [f"spam/{i:02d}.eml" for i in range(len(events))]
    assert skipped == {"unreadable_file": 1}
    (tmp_path / "junk.tar.gz").write_bytes(b"not a tarball at all")
    assert list(read_mail(tmp_path / "junk.tar.gz", skipped=skipped)) == [] and skipped["unreadable_file"] == 2


def test_a_gzip_cut_or_damaged_anywhere_is_counted_unreadable_never_raised(tmp_path):
    """A .tar.gz cut anywhere, inside its first member too (gzip's EOFError comes from
    tarfile.open itself), or with its deflate stream damaged (zlib.error) gives the messages
    before the fault and counts the rest unreadable_file (a cut in the end blocks loses none)."""
    whole = gzipped_spam_folder(["body " * 2000 + str(i) for i in range(3)])
    damaged = bytearray(whole)
    for at in range(len(whole) // 3, len(whole) // 3 + 8):
        damaged[at] ^= 0x5A
    cases = {f"cut{cut}": whole[:cut] for cut in range(11, len(whole), max(1, len(whole) // 40))}
    cases["damaged"] = bytes(damaged)
    for name, data in cases.items():
        (tmp_path / f"{name}.tar.gz").write_bytes(data)
        skipped = Counter()
        events = list(read_mail(tmp_path / f"{name}.tar.gz", skipped=skipped))
        assert set(skipped) <= {"unreadable_file"} and (skipped or len(events) == 3), (name, len(events), skipped)
        assert [e["path"] for e in events] == [f"spam/{i:02d}.eml" for i in range(len(events))], name


def test_what_is_read_as_mail(tmp_path):
    make_tree(tmp_path / "corpus")
    (tmp_path / "mbox").write_bytes(MBOX)
    (tmp_path / "SMSSpamCollection").write_text("ham\thello\n")
    (tmp_path / "events.jsonl").write_text("{}\n")
    assert [is_mail_source(tmp_path / name) for name in ("corpus", "corpus/spam.mbox", "mbox", "SMSSpamCollection",
                                                         "events.jsonl", "missing.tar.gz")] == \
        [True, True, True, False, False, False]


def test_read_events_takes_mail_with_the_label_rules_of_any_file(tmp_path):
    root = make_tree(tmp_path / "corpus")
    rejected = Rejections()
    events = list(read_events(root, labels="optional", rejected=rejected))
    assert [(e["path"], e["label"]) for e in events] == [(i, label) for i, label, _ in EXPECTED]
    assert all(e["text"] is None and e["features"] is None for e in events)
    assert dict(rejected) == {"not_a_message": 1, "unreadable_file": 1}
    with pytest.raises(SourceError, match=r"inbox/c.eml: under no label folder \(spam=spam, ham=ham"):
        list(read_events(root, labels="required"))
    assert {e["label"] for e in read_events(root, labels="dropped")} == {None}
    declared = Rejections()
    kept = list(read_events(root, labels="optional", rejected=declared, classes=frozenset({"spam"}),
                            label_folders=["spam=spam", "junk=ham"]))
    assert len(kept) == 6 and declared["undeclared_label"] == 5  # the five under ham/ (now "junk")


def test_publish_encodes_mail_as_a_string_or_as_its_exact_bytes_and_the_worker_reads_it_back(tmp_path):
    source = SourcePosition("t", 0, 0)
    for mail, field in ((message("utf-8 \u00e9"), "mail"), (b"Subject: caf\xe9\r\n\r\n\xff\r\n", "mail_base64")):
        value = encode_event({"id": "m", "text": None, "features": None, "label": "spam", "mail": mail},
                             with_labels=True)
        assert set(json.loads(value)) == {"id", field, "label"}
        assert decode_record(value, b"m", None, source, labeled=True) == Event("m", None, None, "spam", source, mail)


def test_the_spamassassin_archive_reads_as_2796_labeled_messages():
    rejected = Rejections()
    events = list(read_events(spamassassin_2003_path(), labels="required", rejected=rejected,
                              label_folders=["spam=spam-2", "ham=easy-ham-2"]))
    assert len(events) == 2796
    assert Counter(e["label"] for e in events) == {"ham": 1400, "spam": 1396}
    assert dict(rejected) == {"not_a_message": 1}  # SHA256SUMS
    assert events[0]["path"] == "spamassassin_2003/easy-ham-2/00930.d20e3d61ecf2c7f599c99808529b333c.txt"


def test_a_piped_message_is_named_by_its_id_its_message_id_or_its_digest():
    from stream_nb.kafka.publish import PublishError, encode_raw_mail, stdin_event

    mail = b"Subject: s\r\nMessage-ID:  <abc.123@example.com> \r\n\r\nMessage-ID: <not-this@x>\r\n"
    assert stdin_event(mail, event_id=None, label="spam", with_labels=True) == {
        "id": "abc.123@example.com", "text": None, "features": None, "label": "spam", "mail": mail}
    assert stdin_event(mail, event_id="given", label=None, with_labels=False)["id"] == "given"
    bare = b"Subject: s\r\n\r\nMessage-ID: <in-the-body@x>\r\n"
    assert stdin_event(bare, event_id=None, label=None, with_labels=False)["id"] == \
        "sha256:" + __import__("hashlib").sha256(bare).hexdigest()[:16]
    with pytest.raises(PublishError, match="needs --label LABEL"):
        stdin_event(mail, event_id=None, label=None, with_labels=True)
    event = stdin_event(mail, event_id=None, label="spam", with_labels=True)
    assert encode_raw_mail(event, with_labels=True, label_header="X-Class") == (mail, [("X-Class", b"spam")])
    with pytest.raises(PublishError, match="is not mail"):
        encode_raw_mail({"id": "t", "text": "x", "label": "ham"}, with_labels=True, label_header="label")


@pytest.mark.parametrize("head, expected", [
    (b"Message-ID: <Abc.123@Example.COM>", "Abc.123@example.com"),  # the domain folds case, the local part not
    (b"message-id:<x@y>", "x@y"),
    (b"Message-Id:   \r\n <folded@host.example>", "folded@host.example"),  # a folded field
    (b"Message-ID: <a b@c> (a comment)", "ab@c"),  # whitespace inside removed, comments outside dropped
    (b"Message-ID: no-brackets@Host", "no-brackets@host"),
    (b"Message-ID: <>", None),
    (b"Message-ID:", None),
    (b"X-Message-ID: <not@this>", None),
    (b"Message-ID: <first@x>\r\nMessage-ID: <second@x>", "first@x"),
])
def test_a_message_id_is_read_and_normalised(head, expected):
    from stream_nb.mail.identity import message_id_of

    assert message_id_of(b"Subject: s\r\n" + head + b"\r\n\r\nMessage-ID: <in-body@x>\r\n") == expected


def test_a_hostile_message_id_is_named_by_its_digest_and_the_header_search_is_bounded():
    from stream_nb.mail.identity import MAX_ID_CHARS, mail_id, message_id_of

    long_id = b"<" + b"a" * 100_000 + b"@x>"
    named = message_id_of(b"Message-ID: " + long_id + b"\r\n\r\nbody")
    assert named.startswith("msgid-sha256:") and len(named) == len("msgid-sha256:") + 16
    assert message_id_of(b"Message-ID: <" + b"a" * (MAX_ID_CHARS - 2) + b"@x>\r\n\r\n") == "a" * (MAX_ID_CHARS - 2) + "@x"
    # a field past the first 256 KiB of headers is not looked for: the digest names the message
    buried = b"X-Pad: " + b"p" * 300_000 + b"\r\nMessage-ID: <late@x>\r\n\r\nbody"
    assert mail_id(buried).startswith("sha256:")


def test_one_message_has_one_id_on_every_route(tmp_path):
    """A folder, an mbox, a tarball, `publish -` and a raw record name a message alike, so a
    correction sent one way finds what another way taught (issue 33)."""
    from stream_nb.events.raw_mail import raw_mail_decoder
    from stream_nb.kafka.publish import stdin_event

    with_id = b"From: a@example.com\r\nMessage-ID: <Route.Test@Example.org>\r\nSubject: hi\r\n\r\nbody\r\n"
    without = message("no id here")
    (tmp_path / "spam").mkdir()
    (tmp_path / "spam" / "1.eml").write_bytes(with_id)
    (tmp_path / "spam" / "2.eml").write_bytes(without)
    (tmp_path / "box.mbox").write_bytes(b"From x Mon Jan  1 00:00:00 2024\n" + with_id.replace(b"\r\n", b"\n"))
    with tarfile.open(tmp_path / "corpus.tar.gz", "w:gz") as archive:
        archive.add(tmp_path / "spam", arcname="corpus/spam")
    folder = [e["id"] for e in read_mail(tmp_path / "spam")]
    tarball = [e["id"] for e in read_mail(tmp_path / "corpus.tar.gz")]
    piped = [stdin_event(data, event_id=None, label="spam", with_labels=True)["id"] for data in (with_id, without)]
    decode = raw_mail_decoder(labeled=False)
    raw = [decode(data, b"queue-id-7", (), SourcePosition("mail", 0, 5)).id for data in (with_id, without)]
    expected = ["Route.Test@example.org", "sha256:" + __import__("hashlib").sha256(without).hexdigest()[:16]]
    assert folder == tarball == piped == raw == expected
    assert [e["id"] for e in read_mail(tmp_path / "box.mbox")] == expected[:1]  # the same id in an mbox
    assert [e["path"] for e in read_mail(tmp_path / "spam")] == ["1.eml", "2.eml"]


def test_the_header_block_ends_where_the_blank_line_pattern_finds_it():
    """identity._header_block_end against the pattern it replaces (_BLANK_LINE.search), on
    generated bytes of line breaks, carriage returns and text."""
    import random

    from stream_nb.mail.identity import _BLANK_LINE, _header_block_end

    rng = random.Random(7)
    pieces = [b"\n", b"\r", b"\r\n", b"a", b"Message-ID: <x@y>", b" ", b"\n\n", b"\r\r"]
    ended = 0
    for _ in range(20_000):
        head = b"".join(rng.choice(pieces) for _ in range(rng.randint(0, 12)))
        found = _BLANK_LINE.search(head)
        assert _header_block_end(head) == (None if found is None else found.start()), head
        ended += found is not None
    assert ended > 5_000


def test_the_first_field_is_the_patterns_first_match():
    """identity._first_field (the pattern tried where the name starts a line) against the
    pattern's own search, on generated header blocks."""
    import random

    from stream_nb.mail.identity import _FIELD, _first_field, _header_block_end, _header_field

    rng = random.Random(11)
    names = [b"Message-ID", b"message-id", b"MESSAGE-IDx", b"Delivered-To", b"delivered-TO", b"X", b"", b" "]
    values = [b"", b" <a@B.c>", b"\xc3\xa9", b"\r", b"x:", b"\n\tfolded", b"\r\n continued"]
    breaks = [b"\n", b"\r\n", b"\n\n", b"\r\n\r\n", b"\r"]
    found_some = 0
    for _ in range(20_000):
        data = b"".join(rng.choice(names) + rng.choice([b"", b" ", b"\t"]) + rng.choice([b":", b""])
                        + rng.choice(values) + rng.choice(breaks) for _ in range(rng.randint(0, 5)))
        end = _header_block_end(data)
        block = data if end is None else data[:end]
        for field, name in ((_FIELD, b"message-id"), (_header_field("Delivered-To"), b"delivered-to")):
            found = field.search(block)
            expected = None if found is None else found.group(1).decode("utf-8", "replace")
            assert _first_field(data, field, name) == expected, data
            found_some += found is not None
    assert found_some > 3_000


def tar_member(rng, index: int) -> tuple[tarfile.TarInfo, bytes | None]:
    """A member of a generated archive: message files (some in label, tmp or dot-named
    places, some with long or non-ASCII names), mboxes, files that are no message,
    directories, links and fifos."""
    folder = rng.choice(["spam", "ham", "x/spam", "Maildir/tmp", "Maildir/new", "", "a" * 120, "caf\xe9"])
    base = rng.choice([f"{index}.eml", f".{index}", f"{index}.mbox", "mbox", "b" * 150 + str(index), f"{index}",
                       f"{index}.eml/", f"{index}.mbox/", f"./{index}", f"{index}//x", f"{index}.MBox"])
    name = f"{folder}/{base}" if folder else base
    kind = rng.choice("ffffffdlsp")
    info = tarfile.TarInfo(name)
    if name.endswith("/") and rng.random() < 0.5:  # (tarfile reads an AREGTYPE one as a directory)
        info.type = tarfile.AREGTYPE
    if kind == "d":
        info.type = tarfile.DIRTYPE
        return info, None
    if kind in "ls":
        info.type = tarfile.LNKTYPE if kind == "l" else tarfile.SYMTYPE
        info.linkname = "spam/0.eml"
        return info, None
    if kind == "p":
        info.type = tarfile.FIFOTYPE
        return info, None
    if base.endswith("mbox"):
        data = b"".join(b"From a@b\n" + message(f"m{index}.{n}", "x" * rng.randint(0, 900)) + b"\n"
                        for n in range(rng.randint(0, 3)))
    else:
        data = rng.choice([message(f"m{index}", "y" * rng.randint(0, 3000)), b"not mail", b""])
    info.size = len(data)
    info.mtime = rng.choice([0, 1_700_000_000, 8**11 - 1])
    return info, data


def generated_archive(rng) -> bytes:
    buffer = io.BytesIO()
    tar_format = rng.choice([tarfile.USTAR_FORMAT, tarfile.GNU_FORMAT, tarfile.PAX_FORMAT])
    pax_headers = None
    if tar_format == tarfile.PAX_FORMAT and rng.random() < 0.3:  # a global header, which every member takes
        pax_headers = rng.choice([{"comment": "global"}, {"path": "spam/global.eml"}, {"size": "10"}])
    with tarfile.open(fileobj=buffer, mode="w", format=tar_format, pax_headers=pax_headers) as archive:
        for index in range(rng.randint(0, 12)):
            info, data = tar_member(rng, index)
            try:
                archive.addfile(info, None if data is None else io.BytesIO(data))
            except ValueError:  # a name ustar cannot hold
                continue
    return buffer.getvalue()


def with_checksum(mutable: bytearray, header: int, signed: bool) -> None:
    """The checksum field of the header at `header` made right (as tar writes it, or as the
    sum of signed bytes some old tars wrote)."""
    block = mutable[header:header + 512]
    if len(block) < 512:
        return
    total = 256 + sum((b - 256 if signed and b > 127 else b) for b in block[:148] + block[156:])
    mutable[header + 148:header + 156] = b"%06o\0 " % (total % 8**6)


def damaged(raw: bytes, rng) -> bytes:
    """An archive truncated anywhere (often at or near a block boundary), with bytes flipped
    (in a header's fields, its checksum then made right or not), or as it was."""
    kind = rng.randrange(4)
    if kind == 2 and len(raw) >= 512:
        mutable = bytearray(raw)
        headers = [at for at in range(0, len(raw) - 511, 512) if raw[at + 257:at + 262] == b"ustar"]
        for _ in range(rng.randint(1, 3)):
            header = rng.choice(headers or [0])
            at = header + rng.choice([0, 50, 99, 100, 107, 108, 116, 124, 130, 135, 136, 156, 329, 337, 345, 400])
            mutable[at] = rng.choice([0, 0x20, 0x2B, 0x2F, 0x30, 0x35, 0x37, 0x38, 0x5F, 0x80, 0xE9, 0xFF])
            with_checksum(mutable, header, signed=rng.random() < 0.2)
        return bytes(mutable)
    if kind == 0 and raw:
        cut = rng.randrange(len(raw) + 1)
        return raw[: rng.choice([cut, cut - cut % 512, cut - cut % 512 + rng.choice([1, 511])])]
    if kind == 1 and raw:
        mutable = bytearray(raw)
        for _ in range(rng.randint(1, 6)):
            at = rng.randrange(len(mutable))
            if rng.random() < 0.5:  # within a header's fields or its checksum
                at = at - at % 512 + rng.choice([0, 99, 100, 124, 130, 148, 150, 156, 257, 345])
                at = min(at, len(mutable) - 1)
            mutable[at] = rng.choice([0, 0x20, 0x30, 0x37, 0x38, 0x80, 0xFF, rng.randrange(256)])
        return bytes(mutable)
    return raw


def test_generated_and_damaged_tarballs_read_as_tarfile_reads_them(tmp_path):
    """read_mail's tarball reader (plain members read without tarfile's objects) gives the
    same events and the same skips, each with its reason and where, as the reader that takes
    every member from tarfile: on generated archives of every format (long names, pax and
    global headers, links, directories, mboxes), truncated or with bytes flipped, plain and
    gzipped."""
    import gzip
    import random

    from tests.mail_reference.sources import read_tarball_reference

    class Skips(Counter):
        def add(self, reason, where):
            self[reason] += 1
            self.setdefault("where", []).append((reason, where))

    def reading(read, path):
        skipped = Skips()
        try:
            events = [(e["id"], e["label"], e["path"], e["mail"]) for e in read(path, folders, skipped)]
        except Exception as error:  # the same failure either way, if any
            events = [(type(error).__name__, str(error))]
        return events, skipped

    from stream_nb.mail.sources import _read_tarball

    folders = {"spam": "spam", "ham": "ham"}
    rng = random.Random(5)
    plain_members = 0
    for number in range(400):
        raw = damaged(generated_archive(rng), rng)
        compressed = rng.random() < 0.3
        path = tmp_path / (f"{number}.tar.gz" if compressed else f"{number}.tar")
        path.write_bytes(damaged(gzip.compress(raw), rng) if compressed else raw)
        expected = reading(read_tarball_reference, path)
        assert reading(_read_tarball, path) == expected, number
        plain_members += len(expected[0])
    assert plain_members > 250

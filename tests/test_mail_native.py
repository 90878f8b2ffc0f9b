"""stream_nb.mail._native against its Python definitions (html.py, parse.py).

`scan` either gives up on a document (None: `_scan` reads it) or hands on exactly the tokens
`_scan` hands the reader, blank texts left out (the reader ignores them); `read` (those tokens
read by the C reader) makes `read_html` give what it gives with the extension switched off;
`bounded_markup` is `_bounded_markup`; `relay_words` is `_relay_words`; `header_fields` is
`_header_fields` and `header_table` `_header_table`; `content_type_cut` is
`_cut_before_nth_content_type`; and parse_mail reads the corpus and hostile
mail alike either way. The extension is optional: where it is not built these tests skip (under
CI=true they fail).
"""

from __future__ import annotations

import random
import struct
import sys
from collections import Counter
from html import unescape

import pytest

from stream_nb.mail import ParsedMail, html, parse_mail
from stream_nb.replay import mail_reader
from tests.corpora import load_spamassassin_2003
from tests.test_mail_parse import MARKUP_PIECES, reading

from native import SANITIZED, corpus_sample, require_extension

# Beside the tricky pieces of the html.parser comparison: Unicode whitespace (where `\s`
# reads it, the tag-name rule does not), non-ASCII names, characters that match 's' or 'k'
# under re.I, attribute shapes the tolerant grammar backtracks on.
MORE_PIECES = [
    "\x0b", "\xa0", "\u2028", "<b\x0bx>", "<a hr\xe9f=1>", "<\xe9>", "</\u017fcript>",
    "</script\x0c>",
    "<a b='x\"y'>", "<a b=x'y c>", "<a b==c>", "<a b c=d/>", "<a b='c'd=e>", "<a\x1cb>",
    '<A HREF="HTTP://X.COM/&amp;">', "&#x41;", "<!doctype", "<?", "<!", "<!-", "-", "--",
    "<a b= c>", "<a b=>", "<a b= >", "<p\x00>", "<a\tb\nc\rd\fe>", "</style >", "</ style>",
    "</sty", "<b/>", "<b / >", "<b/x>", "<B>", "</B>", "<x:y>", "</x.y-z_1>",
    "<a href='&lt;&#65;'>", "<style>", "<script>", "</script>",
    # shapes spam writes, which the tolerant grammar reads its own way
    '<A "x">', '</font color="blue">', '<HTTP-EQUIV="PRAGMA" CONTENT="NO-CACHE">',
    '<fontface="Arial" color="#000000">', "<a href=x!\nw.y.com/m.html>", "<cente=\nr>",
    '<b c=3D"x" d=3D"y z">', '<a b="7"" c=d>', "<a =b>", "<a b/ c>", "<a b//>", "<a/b>",
    "</ font x>", "</3 x>", "<a<b>", "<a b=c/ >", "</a<b>", "</a\x00b>", "</\xe9>", "</a\xe9>",
    "<a b='c'/d>", "<x \"=y>", "<a\x0bb>",
]
CHARACTERS = list("<>/=!?-'\"& \t\n\x0b\x00abstyleripcSCRIPT;#x1\xa0\u2028\u017f\u212a\u0130")


@pytest.fixture
def scan():
    require_extension(html._native, "stream_nb.mail._native")
    return html._native.scan


class Recorder:
    """The reader's three calls as the flat token list `scan` gives."""

    def __init__(self) -> None:
        self.tokens: list = []

    def start(self, tag, attributes):
        self.tokens += [1, tag, attributes]

    def end(self, tag):
        self.tokens += [2, tag, None]

    def text(self, data):
        if data.strip():
            self.tokens += [0, data, None]


def python_tokens(markup: str):
    recorder = Recorder()
    try:
        html._scan(markup, recorder)
    except AssertionError:  # a marked section html.parser gives up on
        return "gave up"
    return recorder.tokens


def compared(scan, documents) -> int:
    """How many of `documents` the C tokeniser read; each exactly as `_scan` reads it."""
    read = 0
    for markup in documents:
        bounded = html._bounded_markup(markup)
        tokens = scan(bounded, unescape)
        if tokens is not None:
            assert tokens == python_tokens(bounded), markup
            read += 1
    return read


def test_generated_markup_gives_the_tokens_of_scan(scan):
    rng = random.Random(23)
    pieces = MARKUP_PIECES + MORE_PIECES
    documents = [
        "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40))) for _ in range(20_000)
    ]
    # measured: the C path reads 8,713 of the 20,000; the rest hold a construct it leaves
    assert compared(scan, documents) == 8713


def test_plain_generated_markup_is_read_in_c(scan):
    rng = random.Random(23)
    plain = [piece for piece in MARKUP_PIECES + MORE_PIECES if html._native.scan(piece, unescape)]
    documents = [
        "".join(rng.choice(plain) for _ in range(rng.randint(0, 40))) for _ in range(5_000)
    ]
    # pieces read alone may still meet in a construct the C path leaves ('<a' + 'b>')
    assert compared(scan, documents) == 4996  # measured (94 of the 131 pieces)


def test_random_characters_never_crash_and_give_the_tokens_of_scan(scan):
    rng = random.Random(23)
    documents = [
        "".join(rng.choice(CHARACTERS) for _ in range(rng.randint(0, 30))) for _ in range(50_000)
    ]
    assert compared(scan, documents) == 49_275  # measured


def corpus_html_parts() -> list[str]:
    from email import message_from_bytes
    from email.policy import compat32

    documents = []
    for _, data in load_spamassassin_2003():
        for part in message_from_bytes(data, policy=compat32).walk():
            payload = part.get_payload(decode=True)
            if part.get_content_type() == "text/html" and isinstance(payload, bytes):
                documents.append(payload.decode("latin-1"))
    return documents


def test_corpus_html_parts_give_the_tokens_of_scan(scan):
    documents = corpus_html_parts()
    assert len(documents) == 779
    assert compared(scan, documents) == 779  # measured: every one is read in C


# What the reader judges: colours, hiding styles, tiny fonts, links, anchors naming a domain,
# password inputs, evidence elements, unseen elements, nesting past MAX_OPEN_ELEMENTS.
READER_PIECES = [
    "<div style='color:red;background:red'>", "<font color=RED bgcolor=red>", "<font size=' -2 '>",
    "<span style='font-size:1px'>", "<p style='font-size:\u00b2px'>", "<td bgcolor=\"#FFFFFF\">",
    "<font color=\"#ffffff\">", "<span style='display: none'>", "<b style=''>", "<a href=''>",
    "<a href=http://1.2.3.4/>", "<a href='http://bank.com'>", "www.other.com", "bank.com", "</a>",
    "<a>", "<input type=PASSWORD>", "<input type='pass&#119;ord'>", "<form>", "<iframe>", "<base>",
    "<map>", "<embed>", "<object>", "<title>", "</title>", "<noscript>", "<template>", "<img>",
    "<b>" * 70, "</b>", "<font color=\u0130>", "<font color=\u0131 bgcolor=\u0130>", "word ",
]


def read_outcomes(documents) -> list:
    read = []
    for markup in documents:
        try:
            evidence = html.read_html(markup)
            read.append((evidence.text, evidence.features))
        except Exception as error:  # html.parser's give-ups, a style float() cannot read
            read.append((type(error).__name__, str(error)))
    return read


def test_read_html_is_the_same_with_the_extension_switched_off(scan, monkeypatch):
    rng = random.Random(5)
    pieces = MARKUP_PIECES + MORE_PIECES + READER_PIECES
    documents = [
        "".join(rng.choice(pieces) for _ in range(rng.randint(0, 40))) for _ in range(10_000)
    ] + [  # and documents of the reader's pieces alone, which the C path nearly always reads
        "".join(rng.choice(READER_PIECES) for _ in range(rng.randint(0, 40))) for _ in range(5_000)
    ]
    monkeypatch.delenv("STREAM_NB_NATIVE", raising=False)
    native = read_outcomes(documents)
    read_in_c = sum(
        html._native.read(html._bounded_markup(markup), html._NATIVE_HELPERS) is not None
        for markup in documents
        if "<p style='font-size:\u00b2px'>" not in markup  # raises ValueError, as in Python
    )
    monkeypatch.setenv("STREAM_NB_NATIVE", "0")
    assert read_outcomes(documents) == native
    assert read_in_c == 7_296  # measured
    assert sum(outcome[0] == "ValueError" for outcome in native) == 1_255  # measured


def test_corpus_html_parts_read_the_same_with_the_extension_switched_off(scan, monkeypatch):
    documents = corpus_html_parts()
    monkeypatch.delenv("STREAM_NB_NATIVE", raising=False)
    native = read_outcomes(documents)
    read_in_c = sum(
        html._native.read(html._bounded_markup(markup), html._NATIVE_HELPERS) is not None
        for markup in documents
    )
    monkeypatch.setenv("STREAM_NB_NATIVE", "0")
    assert read_outcomes(documents) == native
    assert read_in_c == 779  # measured: every one


def test_megabyte_hostile_documents_are_given_up_or_read_as_scan_reads_them(scan):
    """Each look-ahead ends at its construct or gives the document up (growth with size is
    held by test_mail_parse's hostile families, which run through this path). Unbounded, the
    unclosed constructs make the C path give up; bounded, it reads them all as `_scan` does."""
    pieces = ("<a b='", "</x", "<!--", "<!doctype", "<script>", "</", "<a ", "--  ", "<p>x")
    # under make sanitize a quarter of the size (72 s of its run at a megabyte): still past every
    # bound of html.py (at most MAX_COMMENT_CHARS, 65,536), and the outcomes are the same (as they
    # are down to 100,000 characters)
    size = 250_000 if SANITIZED else 1_000_000
    given_up = []
    for piece in pieces:
        markup = piece * (size // len(piece))
        given_up.append(scan(markup, unescape) is None)
        bounded = html._bounded_markup(markup)
        assert scan(bounded, unescape) == python_tokens(bounded), piece
    assert given_up == [True, True, True, True, False, True, True, False, False]


BOUNDING_PIECES = [
    "<", ">", "<!--", "-->", "--", "<![", "a", "<b>", "x" * 50, "x" * 3000, "\u2028", "\U0001f600",
    "<a<a", "</", "<?",
]


def test_bounded_markup_is_that_of_the_python_definition(scan, monkeypatch):
    rng = random.Random(23)
    documents = [
        "".join(rng.choice(BOUNDING_PIECES) for _ in range(rng.randint(0, 30)))
        for _ in range(20_000)
    ]
    native = [
        html._native.bounded_markup(
            markup, html.MAX_TAG_CHARS, html.MAX_COMMENT_CHARS, html.MAX_LT_IN_TAG
        )
        for markup in documents
    ]
    monkeypatch.setenv("STREAM_NB_NATIVE", "0")
    assert native == [html._bounded_markup(markup) for markup in documents]
    changed = sum(bounded != markup for bounded, markup in zip(native, documents))
    assert changed == 16_142  # measured: both outcomes well exercised


RELAY_PIECES = [
    "from", "by", "with", "[1.2.3.4]", "[10.0.0.1];", "mail.example.com", "a.b;", "1.2", "1..2.3.4",
    "[1.2.3]", "[1.2.3.4.5]", "[..1.2]", "[...]", " ", "\t", "\u2028", "\xa0", "\u0663", "x;",
    "[", "]",
    ";", ".", "..", "[\u0661.2.3.4]", "\u00b2.3", "\u00b2",
]


def test_relay_words_are_those_of_the_python_definition(scan):
    from stream_nb.mail import parse

    rng = random.Random(23)
    with_relays = 0
    for _ in range(50_000):
        spaced = "".join(
            rng.choice(RELAY_PIECES) + rng.choice(["", " "]) for _ in range(rng.randint(0, 10))
        )
        expected = parse._relay_words(spaced)
        assert html._native.relay_words(spaced) == expected, spaced
        with_relays += bool(expected)
    assert with_relays == 12_386  # measured


def test_received_relays_of_the_corpus_are_those_of_the_python_definition(scan):
    from email import message_from_bytes
    from email.policy import compat32

    from stream_nb.mail import parse

    values = [
        str(value).lower().replace("(", " ").replace(")", " ")
        for _, data in load_spamassassin_2003()
        for value in message_from_bytes(data, policy=compat32).get_all("received", [])
    ]
    relays = [parse._relay_words(value) for value in values]
    assert [html._native.relay_words(value) for value in values] == relays
    assert (len(values), sum(len(found) // 2 for found in relays)) == (15_406, 34_602)  # measured


HEADER_PIECES = [
    "Subject: hi\n", "From: a@b.c\r\n", "X-A:b\n", " cont\n", "\tcont\r\n", ":x\n", "X Y: z\n",
    "\n", "\r\n", "\r", "\x0c", "caf\xe9: x\n", "Name:", "a", "  \n", "To:\t  \t\n", "Z: v\r\r\n",
    "\udce9", "~:~\n", "\x7f: x\n",
]


def test_header_fields_and_table_are_those_of_the_python_definitions(scan):
    from stream_nb.mail import parse

    rng = random.Random(23)
    plain = with_fields = 0
    for _ in range(50_000):
        block = "".join(rng.choice(HEADER_PIECES) for _ in range(rng.randint(0, 8)))
        position = rng.choice([0, 0, 0, 1, len(block)])
        expected = parse._header_fields(block, position)
        assert html._native.header_fields(block, position) == expected, (block, position)
        table = parse._header_table(block, position)
        assert html._native.header_table(block, position) == table, (block, position)
        plain += expected is not None
        with_fields += bool(expected)
    assert (plain, with_fields) == (17_953, 3_331)  # measured


# Pieces of a Content-Type line in any case, cut short, without its line break, and bytes
# that lower-case (or not) near its letters: 'K' (0xe2 0x84 0xaa is U+212A, a Kelvin sign,
# which str.lower() would make a 'k'), '\xc3', '\x00'.
CONTENT_TYPE_PIECES = [
    b"\n", b"\r\n", b"\ncontent-type:", b"\nContent-Type: text/plain", b"\nCONTENT-TYPE:",
    b"\ncOnTeNt-TyPe:", b"content-type:", b"\ncontent-type", b"\ncontent-typ", b"\ncontent_type:",
    b"\n content-type:", b"\ncontent-type :", b"\nContent-\xe2\x84\xaaype:", b"\xc3", b"\x00", b"x",
    b"Content-Type:", b"\n\ncontent-type:", b"\ncontent-type:\ncontent-type:",
]


def test_content_type_cut_is_that_of_the_python_definition(scan):
    from stream_nb.mail import parse

    rng = random.Random(23)
    cut = 0
    for _ in range(50_000):
        data = b"".join(rng.choice(CONTENT_TYPE_PIECES) for _ in range(rng.randint(0, 12)))
        limit = rng.choice([-1, 0, 1, 2, 3, 64])
        expected = parse._cut_before_nth_content_type(data, limit)
        assert html._native.content_type_cut(data, limit) == expected, (data, limit)
        cut += expected is not None
    assert cut == 24_956  # measured


def test_parse_mail_reads_the_corpus_and_hostile_mail_alike_with_the_extension_off(
    scan, monkeypatch
):
    from stream_nb.mail import parse_mail
    from tests.test_mail_parse import HOSTILE_FAMILIES, hostile_messages, reading

    corpus = load_spamassassin_2003()
    hostile = hostile_messages(corpus)
    mutated, families = hostile[:-len(HOSTILE_FAMILIES)], hostile[-len(HOSTILE_FAMILIES):]
    # under make sanitize the mutated messages are sampled as the corpus is (the whole took 168 s
    # there, beside the suite); every hostile family is read either way
    messages = corpus_sample([data for _, data in corpus]) + corpus_sample(mutated) + families
    monkeypatch.delenv("STREAM_NB_NATIVE", raising=False)
    native = [reading(parse_mail(data)) for data in messages]
    monkeypatch.setenv("STREAM_NB_NATIVE", "0")
    assert [reading(parse_mail(data)) for data in messages] == native


def test_an_allocation_failing_anywhere_in_parse_mail_raises_memory_error_never_a_shorter_reading(monkeypatch):
    """parse_mail turns what cannot be read into defects, but a MemoryError is the machine's, not
    the mail's: made into a defect, it cut a reading short ('unreadable:MemoryError'), which the
    worker would learn as the message's or dead-letter as unreadable. Each allocation of a
    reading made to fail in turn, one at a time (CPython's _testcapi.set_nomemory), until the
    reading no longer needs as many: parse_mail either raises MemoryError or gives the reading
    itself. Three corpus messages: plain text, HTML (the C reader), and multipart with an
    attachment. (The environment switch is fixed on: CPython's os.environ.get raises
    SystemError, not MemoryError, when its own allocation fails.)"""
    import stream_nb.mail.parse as parse_module

    _testcapi = pytest.importorskip("_testcapi")
    monkeypatch.setattr(parse_module, "native_allowed", lambda: True)
    monkeypatch.setattr(html, "native_allowed", lambda: True)
    messages = sorted((data for _, data in load_spamassassin_2003()), key=len)
    kinds = {"plain": lambda m: b"text/html" not in m.lower() and b"multipart" not in m.lower(),
             "html": lambda m: b"content-type: text/html" in m.lower() and b"multipart" not in m.lower(),
             "attachment": lambda m: b"multipart/mixed" in m.lower() and b"content-disposition: attachment" in m.lower()}
    chosen = {kind: next(m for m in messages[len(messages) // 4:] if fits(m)) for kind, fits in kinds.items()}
    for kind, message in chosen.items():
        expected = reading(parse_mail(message))
        outcomes, start, in_a_row = Counter(), 0, 0
        while in_a_row < 20 and start < 50_000:
            start += 1
            try:
                _testcapi.set_nomemory(start, start + 1)
                try:
                    got = reading(parse_mail(message))
                finally:
                    _testcapi.remove_mem_hooks()
            except MemoryError:
                outcomes["MemoryError"] += 1
                in_a_row = 0
                continue
            assert got == expected, (kind, start, [d for d in got[3] if d not in expected[3]])
            outcomes["reading"] += 1
            in_a_row += 1
        assert in_a_row == 20 and outcomes["MemoryError"] > 100, (kind, start, outcomes)


# ---- readings: a reader process's answer (replay/mail_reader.py's decode_readings) -------------


def require_native():
    from stream_nb.mail import parse

    require_extension(parse._native, "stream_nb.mail._native")
    return parse._native


def random_readings(rng: random.Random, count: int) -> list[ParsedMail]:
    """Readings of strs drawn from every kind of code point: ASCII, Latin-1, the BMP, beyond it,
    lone surrogates of both halves, NUL; empty strs and empty lists among them."""
    alphabet = "ab \n\0é€\ud800\udfff\U0001f600\x85" + "".join(map(chr, range(0x370, 0x380)))

    def text() -> str:
        return "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 3, 40])))

    return [ParsedMail(text(), text(), [text() for _ in range(rng.randint(0, 5))], [text() for _ in range(rng.randint(0, 2))])
            for _ in range(count)]


def test_readings_read_in_c_are_the_definition_s():
    """The C extension's `readings` against mail_reader.decode_readings on 2,000 generated
    chunks: the same readings, and the canonical str of each (a name of Latin-1 alone is stored
    one byte a character, as the featuriser's fast path asks)."""
    _native = require_native()
    rng = random.Random(21)
    for _ in range(2_000):
        readings = random_readings(rng, rng.randint(0, 6))
        answer = mail_reader.encode_readings(readings)
        made = _native.readings(answer, len(readings), ParsedMail)
        assert made == mail_reader.decode_readings(answer, len(readings)) == readings
        assert [sys.getsizeof(name) for reading in made for name in reading.features] == [
            sys.getsizeof(name) for reading in readings for name in reading.features]


def broken_answers() -> list[tuple[bytes, int]]:
    """(answer, count) pairs of every shape a reader should not send: the count, cut anywhere,
    a negative or an inflated count or length, invalid UTF-8, bytes added."""
    readings = [ParsedMail("s", "body é", ["#f", "#g"], ["d"]), ParsedMail("", "x", [], [])]
    good = mail_reader.encode_readings(readings)
    head = mail_reader.READINGS_HEAD
    broken = [(good, 1), (good, 3), (b"", 2), (good + b"x", 2), (good[:-1] + b"\xff", 2)]
    broken += [(good[:cut], 2) for cut in range(0, len(good) - 1, 3)]
    for place in range(2 + 4 + 8):  # every int64 of the counts and lengths (and the head)
        for value in (-1, 1 << 40, 99):
            changed = bytearray(good)
            struct.pack_into("=q", changed, 8 * place if place < 2 else head.size + 8 * (place - 2), value)
            broken.append((bytes(changed), 2))
    return broken


def test_an_answer_of_the_wrong_shape_is_refused():
    """Both readers refuse every broken answer with a ValueError (never a crash, never readings)."""
    _native = require_native()
    refused = 0
    for answer, count in broken_answers():
        outcomes = []
        for read in (_native.readings, lambda data, n, make: mail_reader.decode_readings(data, n)):
            try:
                outcomes.append(read(answer, count, ParsedMail))
            except ValueError:
                outcomes.append(ValueError)
        assert outcomes[0] == outcomes[1], (answer, count)
        refused += outcomes[0] is ValueError
    assert refused == len(broken_answers())


ID_FIELD_NAMES = [b"Message-ID", b"message-id", b"MESSAGE-ID", b"Message-Id", b"Message-IDx", b"X-Message-ID",
                  b" Message-ID", b"Message-I", b"Message_ID", b"Me\xc3\x9fsage-ID"]
ID_VALUE_PIECES = [b"<", b">", b"@", b"a", b"B.COM", b"Local.Part", b" ", b"\t", b"\x1c", b"\x0b", b"\x0c", b"\r",
                   b"\x85", b"\xc2\xa0", b"\xc3\xa9", b"\xff", b"\x00", b"<a@b>", b"<>", b"x" * 250, b"@EXAMPLE.org"]


def generated_id_messages(seed: int, count: int) -> list[bytes]:
    """Messages whose header blocks hold Message-ID fields and look-alikes in every case, with
    blanks before the colon or none, folded values (CRLF or LF), brackets in any order, ASCII and
    Unicode white space, bytes beyond ASCII, ids about MAX_ID_CHARS long, and blank lines of
    every kind, some before the field (which is then in the body)."""
    rng = random.Random(seed)
    messages = []
    for _ in range(count):
        eol = rng.choice([b"\n", b"\r\n"])
        lines = []
        for _ in range(rng.randint(0, 5)):
            if rng.random() < 0.6:
                value = b"".join(rng.choice(ID_VALUE_PIECES) for _ in range(rng.randint(0, 6)))
                line = (rng.choice(ID_FIELD_NAMES) + rng.choice([b"", b" ", b"\t", b" \t "]) +
                        rng.choice([b":", b":", b"", b" :"]) + value)
                while rng.random() < 0.3:  # a folded line, or one that looks like it
                    line += rng.choice([eol, b"\n", b"\r\n"]) + rng.choice([b" ", b"\t", b"", b"X: "]) + \
                        b"".join(rng.choice(ID_VALUE_PIECES) for _ in range(rng.randint(0, 3)))
            else:
                line = rng.choice([b"Subject: hi", b"From: a@b.c", b"Received: from x", b"message-id"])
            lines.append(line)
        blank = rng.choice([eol, b"\n", b"\r\n", b"\r\r\n"])
        if lines and rng.random() < 0.3:
            lines.insert(rng.randrange(len(lines)), blank.rstrip(b"\n"))  # a blank line among the fields
        body = rng.choice([b"", b"body", b"Message-ID: <in@body>" + eol])
        messages.append(eol.join(lines) + eol + blank + body)
    return messages


def test_message_ids_read_in_c_are_the_definition_s():
    """`_native.message_id` against identity.py's definition on generated messages and the
    SpamAssassin 2003 corpus: the same id or None wherever it answers, False (the definition
    then reads it) only for a value beyond ASCII or an id longer than MAX_ID_CHARS; and
    message_id_of, which asks it first, gives the definition's id for every message."""
    from stream_nb.mail import _native, identity

    require_extension(_native, "stream_nb.mail._native")
    messages = generated_id_messages(seed=61, count=6_000) + corpus_sample(
        [data for _, data in load_spamassassin_2003()])
    outcomes = Counter()
    for data in messages:
        expected = identity._message_id_of(data)
        answer = _native.message_id(data)
        if answer is False:
            value = identity._first_field(data, identity._FIELD, b"message-id")
            assert value is not None and (not value.isascii() or expected.startswith("msgid-sha256:")), data
            outcomes["asked the definition"] += 1
        else:
            assert answer == expected, data
            outcomes["none" if answer is None else "id"] += 1
        assert identity.message_id_of(data) == expected
    assert min(outcomes.values()) > 200 and len(outcomes) == 3, outcomes

"""Mail where it lives -> mail events: an mbox file, a Maildir, a directory of message files, or
a .tar / .tar.gz of such folders, as ``sa-learn`` and ``bogofilter -B`` take them. File I/O only.

Each message becomes a mail event ``{"id", "text": None, "features": None, "label", "mail": bytes,
"path"}``.

- **Labels** come from folder names: a message is labeled by the nearest folder on its path
  (the source itself included: ``corpus/spam`` or ``spam.mbox``) that names a label, by
  default ``spam`` -> "spam" and ``ham`` -> "ham"; `parse_label_folders` reads
  ``LABEL=FOLDER`` pairs (e.g. ``spam=spam-2``, ``ham=easy-ham-2``), which then replace the
  defaults. A message under no label folder is unlabeled.
- **Ids** are the message's own, as on every other route (`stream_nb.mail.identity.mail_id`):
  its normalised Message-ID, else ``sha256:`` and 16 hex digits of its bytes; so a message
  published from a folder is corrected by the same message piped to ``publish -``. ``"path"``
  says where it was: its path relative to the source (POSIX separators; a tarball's member
  name), with ``#N`` (1-based) after the path of an mbox.
- **Order** is deterministic: a directory depth first, the entries of each folder sorted by
  name (so a Maildir's ``cur/`` before its ``new/``); a tarball in archive order; an mbox in
  file order.
- **What is a message**: a file whose first bytes are an RFC 5322 header field (``Name:``) or
  an mbox ``From `` line; a Maildir's ``tmp/`` (deliveries under way; in a tarball, read in
  one pass, any folder named ``tmp``) and dot files are not read. An mbox is a file named
  ``*.mbox`` or ``mbox`` (or, given as the source itself, a file without a suffix that starts
  ``From ``); it is split at each ``From `` line that opens the
  file or follows a blank line. Any other file in a folder is one message (a ``From `` line
  that opens it is read as the envelope line it is).
- **Nothing is fatal**: a file that cannot be read (``unreadable_file``) and a file that is
  not a message (``not_a_message``, e.g. a checksum list or a README) are counted in
  `skipped` by reason and passed over.
"""

from __future__ import annotations

import os
import re
import tarfile
import zlib
from collections import Counter
from collections.abc import Iterable, Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from stream_nb.mail.identity import mail_id

__all__ = [
    "DEFAULT_LABEL_FOLDERS",
    "NOT_A_MESSAGE",
    "UNREADABLE_FILE",
    "is_mail_source",
    "parse_label_folders",
    "read_mail",
]

DEFAULT_LABEL_FOLDERS: dict[str, str] = {"spam": "spam", "ham": "ham"}  # folder name -> label
UNREADABLE_FILE = "unreadable_file"
NOT_A_MESSAGE = "not_a_message"

# What a truncated or corrupt archive raises as it is read: gzip's EOFError (cut inside the first
# member too, where tarfile.open reads) and zlib.error (a damaged deflate stream) besides tarfile's.
_BROKEN_ARCHIVE = (OSError, tarfile.TarError, EOFError, zlib.error)
_TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tar.xz")
# An mbox "From " line, or a header field name (printable ASCII but ':') and its colon.
_MESSAGE_START = re.compile(rb"From |[!-9;-~]+[ \t]*:")


def parse_label_folders(pairs: Iterable[str] | None) -> dict[str, str]:
    """``["LABEL=FOLDER", ...]`` -> {folder name: label}; none given: the defaults. ValueError
    names a pair that is not LABEL=FOLDER or a folder given two labels."""
    pairs = list(pairs or ())
    if not pairs:
        return dict(DEFAULT_LABEL_FOLDERS)
    folders: dict[str, str] = {}
    for pair in pairs:
        label, separator, folder = pair.partition("=")
        label, folder = label.strip(), folder.strip()
        if not separator or not label or not folder or "/" in folder:
            raise ValueError(f"--label-folder {pair!r}: expected LABEL=FOLDER (a folder name, e.g. spam=spam-2)")
        if folders.get(folder, label) != label:
            raise ValueError(f"--label-folder: folder {folder!r} is given two labels ({folders[folder]!r}, {label!r})")
        folders[folder] = label
    return folders


def _is_tarball(path: Path) -> bool:
    return path.name.lower().endswith(_TAR_SUFFIXES)


def _is_mbox_name(name: str) -> bool:
    return name.lower().endswith(".mbox") or name == "mbox"


def _starts_like_mbox(path: Path) -> bool:
    try:
        with path.open("rb") as handle:
            return handle.read(5) == b"From "
    except OSError:
        return False


def is_mail_source(path: str | Path) -> bool:
    """Whether `path` is read as mail: a directory, a tarball, or an mbox (by name, or a file
    without a suffix that starts with an mbox ``From `` line)."""
    path = Path(path)
    if path.is_dir():
        return True
    if not path.is_file():
        return False
    if _is_tarball(path) or _is_mbox_name(path.name):
        return True
    return path.suffix == "" and _starts_like_mbox(path)


def _label_of(parts: Iterable[str], folders: dict[str, str]) -> str | None:
    """The label of the nearest (last) folder in `parts` that names one."""
    label = None
    for part in parts:
        label = folders.get(part, label)
    return label


def _mbox_messages(lines: Iterable[bytes]) -> Iterator[bytes]:
    """The messages of an mbox, each without its ``From `` line and the blank line before the next."""
    message: list[bytes] = []
    started = False
    previous_blank = True
    for line in lines:
        if line.startswith(b"From ") and previous_blank:
            if started:
                yield _without_separator(message)
            message, started = [], True
        elif started:
            message.append(line)
        previous_blank = line in (b"\n", b"\r\n")
    if started:
        yield _without_separator(message)


def _without_separator(lines: list[bytes]) -> bytes:
    if lines and lines[-1] in (b"\n", b"\r\n"):
        lines = lines[:-1]
    return b"".join(lines)


def _skip(skipped: Counter, reason: str, where: str) -> None:
    """One file passed over: counted by reason (with where, when `skipped` keeps that: replay's
    Rejections)."""
    add = getattr(skipped, "add", None)
    if add is not None:
        add(reason, where)
    else:
        skipped[reason] += 1


def _event(path: str, mail: bytes, label: str | None) -> dict:
    return {"id": mail_id(mail), "text": None, "features": None, "label": label, "mail": mail, "path": path}


def _messages_of_file(handle: BinaryIO, name: str, event_id: str, label: str | None,
                      skipped: Counter) -> Iterator[dict]:
    """The events of one file: an mbox's messages, or the file as one message."""
    if _is_mbox_name(name):
        for number, mail in enumerate(_mbox_messages(handle), start=1):
            yield _event(f"{event_id}#{number}", mail, label)
        return
    yield from _messages_of_data(handle.read(), event_id, label, skipped)


def _messages_of_data(data: bytes, event_id: str, label: str | None, skipped: Counter) -> Iterator[dict]:
    """The event of a file that is not an mbox, given its bytes."""
    if _MESSAGE_START.match(data):
        yield _event(event_id, data, label)
    else:
        _skip(skipped, NOT_A_MESSAGE, f"{event_id}: starts neither with a header field nor with 'From '")


def _read_directory(root: Path, folders: dict[str, str], skipped: Counter) -> Iterator[dict]:
    def walk(directory: Path, parts: tuple[str, ...]) -> Iterator[dict]:
        try:
            entries = sorted(os.scandir(directory), key=lambda entry: entry.name)
        except OSError as error:
            _skip(skipped, UNREADABLE_FILE, f"{directory}: {error.strerror or error}")
            return
        names = {entry.name for entry in entries}
        maildir = "cur" in names and "new" in names
        label_here = _label_of((root_name, *parts, ""), folders)  # (a file's own name adds none unless an mbox)
        prefix = "".join(part + "/" for part in parts)
        for entry in entries:
            name = entry.name
            if name.startswith(".") and not entry.is_dir(follow_symlinks=False):
                continue  # .DS_Store, Dovecot's and Courier's own files
            if entry.is_dir():
                if not (maildir and name == "tmp"):
                    yield from walk(Path(entry.path), (*parts, name))
                continue
            relative = prefix + name
            try:
                if _is_mbox_name(name):
                    label = _label_of((root_name, *parts, Path(name).stem), folders)
                    with open(entry.path, "rb") as handle:
                        yield from _messages_of_file(handle, name, relative, label, skipped)
                    continue
                with open(entry.path, "rb", buffering=0) as handle:  # (read whole: no buffer to fill first)
                    data = handle.read()
            except OSError as error:
                _skip(skipped, UNREADABLE_FILE, f"{relative}: {error.strerror or error}")
                continue
            yield from _messages_of_data(data, relative, label_here, skipped)

    root_name = root.resolve().name
    yield from walk(root, ())


# A number field as tarfile's `nti` reads it without judgement: octal digits between blanks, then
# a NUL and anything (nts cuts there); any other field (base-256, a sign, '_') is tarfile's.
_PLAIN_NUMBER = re.compile(rb" *[0-7]* *(?:\0[\x00-\xff]*)?")
_NUMBER_FIELDS = ((100, 108), (108, 116), (116, 124), (124, 136), (136, 148), (148, 156), (329, 337),
                  (337, 345))
# The fields 100-156 (mode, uid, gid, size, mtime, checksum) and 329-345 (device numbers) as
# tar writers most often fill them: plain numbers all, checked in one step each.
_USUAL_NUMBERS = re.compile(rb"(?:[0-7]{7}\0){3}(?:[0-7]{11}[\0 ]){2}[0-7]{6}\0 ")
_USUAL_DEVICES = re.compile(rb"(?:[0-7]{7}\0|\0{8}){2}")
_REGULAR_FLAGS = (tarfile.REGTYPE, tarfile.AREGTYPE)
# Members tarfile reads from their header alone, with no data blocks to skip (a directory's
# size is not skipped either).
_DATALESS_FLAGS = (tarfile.LNKTYPE, tarfile.SYMTYPE, tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.DIRTYPE,
                   tarfile.FIFOTYPE)


class _Pushback:
    """`fileobj` with the header block just read from it given back first, so that tarfile
    reads that header from where this module's reader stood (tell, read, seek as its own)."""

    def __init__(self, fileobj: BinaryIO, pending: bytes) -> None:
        self.fileobj, self.pending = fileobj, pending

    def tell(self) -> int:
        return self.fileobj.tell() - len(self.pending)

    def read(self, size: int = -1) -> bytes:
        if not self.pending:
            return self.fileobj.read(size)
        if 0 <= size <= len(self.pending):
            data, self.pending = self.pending[:size], self.pending[size:]
            return data
        data, self.pending = self.pending, b""
        return data + self.fileobj.read(-1 if size < 0 else size - len(data))

    def seek(self, position: int, whence: int = 0) -> int:
        if whence == 0 and self.tell() <= position <= self.fileobj.tell():
            self.pending = self.pending[len(self.pending) - (self.fileobj.tell() - position):]
            return position
        self.pending = b""
        return self.fileobj.seek(position, whence)


def _plain_header(archive: tarfile.TarFile, block: bytes) -> tuple[str, int | None] | None:
    """(name, size; None for a member without data) of a header block that tarfile's `frombuf`
    and `_proc_member` would read as a plain regular file (not an mbox: that one's lines are
    read from tarfile's file object) or a member without data, with every field valid; None
    for any other block (an end-of-archive block, a bad checksum, a long name, a pax header,
    a ustar prefix, base-256 numbers ...): tarfile reads that one."""
    if len(block) != tarfile.BLOCKSIZE or block[345] or archive.pax_headers:
        return None
    flag = block[156:157]
    if flag not in _REGULAR_FLAGS and flag not in _DATALESS_FLAGS:
        return None
    if _USUAL_NUMBERS.fullmatch(block, 100, 156) is None or _USUAL_DEVICES.fullmatch(block, 329, 345) is None:
        match = _PLAIN_NUMBER.fullmatch
        for start, end in _NUMBER_FIELDS:
            if match(block, start, end) is None:
                return None
    # tarfile also takes the signed sum; a header that needs it is tarfile's
    if tarfile.nti(block[148:156]) != 256 + sum(block) - sum(block[148:156]):
        return None
    name = tarfile.nts(block[:100], archive.encoding, archive.errors)
    if flag in _DATALESS_FLAGS or (flag == tarfile.AREGTYPE and name.endswith("/")):  # (a directory)
        return name, None
    if "mbox" in name.lower():  # (an mbox's name has it)
        return None
    return name, tarfile.nti(block[124:136])


def _next_member(archive: tarfile.TarFile) -> tarfile.TarInfo | tuple[str, int | None] | None:
    """`archive.next()`, with the same effect on the archive's offset and file object and the
    same errors, except that a plain member (`_plain_header`) is (name, size): its data, if it
    has any, is next in the file object. tarfile's per-member objects cost most of the reading
    of a tarball of small messages."""
    fileobj = archive.fileobj
    if archive.firstmember is not None or archive.offset == 0:
        return archive.next()
    gap = archive.offset - fileobj.tell()
    if 0 < gap <= tarfile.BLOCKSIZE:  # a member's padding: read, as seeking forward reads
        if len(fileobj.read(gap)) != gap:
            return archive.next()  # which says so
    elif gap:  # as TarFile.next advances to the next header
        fileobj.seek(archive.offset - 1)
        if not fileobj.read(1):
            return archive.next()
    try:
        block = fileobj.read(tarfile.BLOCKSIZE)
    except zlib.error as error:  # as TarFile.next names it
        raise tarfile.ReadError(f"zlib error: {error}") from None
    plain = _plain_header(archive, block)
    if plain is None:
        archive.fileobj = _Pushback(fileobj, block)
        try:
            return archive.next()
        finally:
            archive.fileobj = fileobj  # (extractfile takes the archive's file object)
    archive.offset += tarfile.BLOCKSIZE
    if plain[1] is not None:
        archive.offset += -(-plain[1] // tarfile.BLOCKSIZE) * tarfile.BLOCKSIZE
    return plain


def _read_tarball(path: Path, folders: dict[str, str], skipped: Counter) -> Iterator[dict]:
    try:
        archive = tarfile.open(path)
    except _BROKEN_ARCHIVE as error:
        _skip(skipped, UNREADABLE_FILE, f"{path}: {error}")
        return
    with archive:
        while True:
            try:
                member = _next_member(archive)
            except _BROKEN_ARCHIVE as error:  # a truncated or corrupt archive ends here
                _skip(skipped, UNREADABLE_FILE, f"{path}: {error}")
                return
            if member is None:
                return
            if isinstance(member, tuple):
                member_name, size = member
                if size is None:
                    continue
            elif member.isfile():
                member_name, size = member.name, -1
            else:
                continue
            parts = member_name.split("/")
            if "" in parts or "." in parts:  # the rare name PurePosixPath would normalise
                parts = list(PurePosixPath(member_name).parts) or [""]
            # (an archive is read in one pass, so a Maildir's tmp/ is any folder of that name)
            if parts[-1].startswith(".") or parts[-2:-1] == ["tmp"]:
                continue
            stem = PurePosixPath(parts[-1]).stem if _is_mbox_name(parts[-1]) else ""
            label = _label_of((*parts[:-1], stem), folders)
            try:
                if size < 0:
                    handle = archive.extractfile(member)
                    yield from _messages_of_file(handle, parts[-1], member_name, label, skipped)
                else:
                    data = archive.fileobj.read(size)
                    if len(data) != size:  # as tarfile's reading of a member's data says it
                        raise tarfile.ReadError("unexpected end of data")
                    yield from _messages_of_data(data, member_name, label, skipped)
            except _BROKEN_ARCHIVE as error:
                _skip(skipped, UNREADABLE_FILE, f"{member_name}: {error}")


def read_mail(path: str | Path, *, label_folders: dict[str, str] | None = None,
              skipped: Counter | None = None) -> Iterator[dict]:
    """The mail events of `path` (see the module doc for labels, ids, order and what is read).
    `label_folders`: {folder name: label} (`parse_label_folders`); `skipped` counts the files
    passed over, by reason (a Counter, or anything with ``add(reason, where)`` as well)."""
    path = Path(path)
    folders = DEFAULT_LABEL_FOLDERS if label_folders is None else label_folders
    skipped = skipped if skipped is not None else Counter()
    if path.is_dir():
        yield from _read_directory(path, folders, skipped)
    elif _is_tarball(path):
        yield from _read_tarball(path, folders, skipped)
    else:
        label = _label_of((path.parent.name, path.stem), folders)
        try:
            with path.open("rb") as handle:
                if _is_mbox_name(path.name) or _starts_like_mbox(path):
                    for number, mail in enumerate(_mbox_messages(handle), start=1):
                        yield _event(f"{path.name}#{number}", mail, label)
                else:
                    yield from _messages_of_file(handle, path.name, path.name, label, skipped)
        except OSError as error:
            _skip(skipped, UNREADABLE_FILE, f"{path}: {error.strerror or error}")

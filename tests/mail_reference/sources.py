"""The tarball reader as it was before its fast path (commit e842200), frozen as the reference:
every member read through tarfile's own objects (and, as read_mail since, a broken gzip
stream's EOFError or zlib.error counted as a skip, not raised). tests/test_mail_sources.py holds
`stream_nb.mail.sources.read_mail` to it on generated, truncated and corrupted archives."""

from __future__ import annotations

import tarfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

from stream_nb.mail.sources import (
    _BROKEN_ARCHIVE,
    UNREADABLE_FILE,
    _is_mbox_name,
    _label_of,
    _messages_of_file,
    _skip,
)


def read_tarball_reference(path: Path, folders: dict[str, str], skipped: Counter) -> Iterator[dict]:
    try:
        archive = tarfile.open(path)
    except _BROKEN_ARCHIVE as error:
        _skip(skipped, UNREADABLE_FILE, f"{path}: {error}")
        return
    with archive:
        members = iter(archive)
        while True:
            try:
                member = next(members)
            except StopIteration:
                return
            except _BROKEN_ARCHIVE as error:  # a truncated or corrupt archive ends here
                _skip(skipped, UNREADABLE_FILE, f"{path}: {error}")
                return
            name = PurePosixPath(member.name)
            # (an archive is read in one pass, so a Maildir's tmp/ is any folder of that name)
            if not member.isfile() or name.name.startswith(".") or name.parts[-2:-1] == ("tmp",):
                continue
            label = _label_of((*name.parts[:-1], name.stem if _is_mbox_name(name.name) else ""), folders)
            try:
                handle = archive.extractfile(member)
                yield from _messages_of_file(handle, name.name, member.name, label, skipped)
            except _BROKEN_ARCHIVE as error:
                _skip(skipped, UNREADABLE_FILE, f"{member.name}: {error}")

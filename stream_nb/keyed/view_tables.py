"""One partition's per-key state over several feature views ([personal] with [views]): a store
per view (stream_nb.keyed.store.StoredKeyTable), one changelog partition.

Each view's keys are a table of their own (stream_nb.model.personal_experts): the first view's
store is the partition's directory as with one view; view v's is `views/<name>/` inside it. In
the changelog the first view's records are written as with one view; view v's carry the prefix

    VIEW_MARK + name (UTF-8) + b"\\0"

before their record key, and its metadata record is the prefix alone. 0xFF begins no UTF-8
text, so no record of the first view starts so, and a view name holds no NUL. A record stays
within its bounded size plus the prefix. The first view's metadata (META_KEY) closes a flush as
it does with one view, so the position a flush reflects is still its last record.

The views see the same labeled events, so their clocks and positions move together; a restore
whose views disagree on the position (a changelog written under other [views]) is refused.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Callable, Iterable

from stream_nb.keyed.store import StoredKeyTable
from stream_nb.model.personal import InvalidKeyState

VIEW_MARK = b"\xff"


def view_prefix(name: str) -> bytes:
    return VIEW_MARK + name.encode("utf-8") + b"\0"


class ViewTables:
    """The stores of one partition's keys, one a view (`views[v]` for view `names[v]`)."""

    def __init__(self, path: Path | str, names: list[str], n_classes: Callable[[], int], *,
                 idle_after: int | None = None) -> None:
        if len(names) < 2:
            raise ValueError("ViewTables holds two views or more (one view: a StoredKeyTable)")
        self.path = Path(path)
        self.names = list(names)
        self._prefixes = {view_prefix(name): v for v, name in enumerate(self.names) if v}
        self.views = [StoredKeyTable(self.path, n_classes, idle_after=idle_after)]
        self.views += [StoredKeyTable(self.path / "views" / name, n_classes, idle_after=idle_after)
                       for name in self.names[1:]]

    # ---- what the worker reads of a partition's store ------------------------------------

    @property
    def position(self) -> int | None:
        return self.views[0].position

    @property
    def clean_offset(self) -> int | None:
        """The changelog offset every view's store was closed cleanly at (None unless all were,
        at the same offset)."""
        offsets = {table.clean_offset for table in self.views}
        return offsets.pop() if len(offsets) == 1 else None

    @property
    def clean_at_ms(self) -> int | None:
        times = [table.clean_at_ms for table in self.views]
        return None if None in times else min(times)

    @property
    def unflushed(self) -> bool:
        return any(table.unflushed for table in self.views)

    def __len__(self) -> int:
        """Keys on disk in the first view (every view's keys are the same users)."""
        return len(self.views[0])

    def observe(self, key, idle_after: int | None) -> None:
        """A labeled event went by, in every view."""
        for table in self.views:
            table.observe(key, idle_after)

    def flush(self, position: int | None = None) -> list[tuple[bytes, bytes | None]]:
        """Every view's changelog records, the other views' under their prefix, the first view's
        metadata last."""
        records = []
        for v, table in enumerate(self.views[1:], 1):
            prefix = view_prefix(self.names[v])
            records.extend((prefix + key, value) for key, value in table.flush(position=position))
        first = self.views[0].flush(position=position)
        return records + first

    def restore(self, records: Iterable[tuple[bytes, bytes | None]]) -> int:
        """Apply changelog records, each to its view's store as it is read (module docstring).
        Returns the records applied."""
        restoring = [table.restoring() for table in self.views]
        for key, value in records:
            if key[:1] != VIEW_MARK:
                restoring[0].put(key, value)
                continue
            cut = key.find(b"\0") + 1
            v = self._prefixes.get(key[:cut]) if cut else None
            if v is None:
                raise InvalidKeyState(f"the changelog holds records of a view this configuration does not "
                                      f"have ({key[:cut or 40]!r}): it was written under other [views]")
            restoring[v].put(key[cut:], value)
        applied = sum(view.finish() for view in restoring)
        positions = {table.position for table in self.views}
        if len(positions) != 1 or len({table.clock for table in self.views}) != 1:
            raise InvalidKeyState(f"the changelog's views are at different labeled positions "
                                  f"({', '.join(f'{n} {t.position}' for n, t in zip(self.names, self.views))}): "
                                  f"written under other [views]")
        return applied

    def close(self, changelog_offset: int | None = None) -> None:
        for table in self.views:
            table.close(changelog_offset=changelog_offset)

    def discard(self) -> None:
        """Close every store without a clean mark, and remove the partition's directory."""
        for table in self.views:
            table.discard()

    def digest(self) -> str:
        """SHA-256 of the views' digests in order (StoredKeyTable.digest of each)."""
        return hashlib.sha256("".join(table.digest() for table in self.views).encode()).hexdigest()


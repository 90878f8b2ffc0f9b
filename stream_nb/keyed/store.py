"""One partition's per-key state on disk: the keys' counts in an embedded RocksDB (rocksdict), a
bounded cache of decoded counts in memory, and the partition's labeled clock.

It keeps the contract of stream_nb.model.personal.KeyTable (get, create, changed, observe, put,
forget), so PersonalMultinomialNB reads and learns through either; tests hold it to KeyTable on
generated event sequences (the same counts, clock and evictions at every flush).

The database, in raw mode (rocksdict's default mode pickles values: loading would run code):

    b"k" + record key                      -> one record of a key's counts (stream_nb.keyed.codec:
                                              its head, or one of its row records)
    b"t" + last labeled (u64, big-endian)  -> b""  (the idleness index: keys, least recently
          + key (UTF-8)                            labeled first, in the order RocksDB sorts)
    b"m"                                   -> JSON {"clock", "evicted", "position", "classes"}

A key is held as its changelog holds it: a head and row records of bounded size, so that a key of
millions of features is never one value larger than a topic takes. A flush writes a key whole
when it is small (its head alone) or when the rows written since its last whole write outgrow
that write; otherwise only the rows that changed, as new row records.

Writes are buffered: `flush` writes what changed since the last flush in one batch (the WAL is
off: the changelog is the source of truth, so a store that was not closed cleanly is restored
anew) and returns it as changelog records, (record key, bytes) or (record key, None) for one
that went; the changelog's empty key holds the partition's metadata (a record key never is).

Idle eviction is exact and lazy: a key whose latest labeled event is `idle_after` or more labeled
events behind the clock is absent to `get` at once, as KeyTable evicts it at once, and leaves the
disk at the next flush, by a walk of the idleness index from its start.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import struct
import time
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Iterable

from stream_nb.keyed.codec import (
    _HEAD,
    HEAD_MAGIC,
    HEAD_PART,
    IDS_MAGIC,
    MAX_CLASSES,
    ROWS_BYTES,
    ROWS_MAGIC,
    decode_head,
    encode_head,
    encode_ids,
    encode_key_counts,
    encode_rows,
    key_counts_of_records,
    record_key,
    row_bytes,
    split_record_key,
)
from stream_nb.model.personal import InvalidKeyState, KeyCounts

_LAST = struct.Struct(">Q")
META = b"m"
META_KEY = b""  # the changelog's key for the partition's metadata
CLEAN = "clean.json"  # written by close(): the store on disk is whole, at this changelog offset
DEFAULT_CACHE_KEYS = 20_000
# Decoded rows the cache holds at most (about 100 bytes a row in memory): a cache of many small
# keys is bounded by DEFAULT_CACHE_KEYS, one of a few users of 100,000s of features by this
DEFAULT_CACHE_ROWS = 5_000_000


INLINE_ROWS = 4096  # a key of at most this many features is tried as one record (its head)
RESTORE_BATCH = 10_000  # records a restore writes to RocksDB at once


def _data_key(key: str, part: int = HEAD_PART) -> bytes:
    return b"k" + record_key(key.encode("utf-8"), part)


class _Layout:
    """What the disk holds of a key: its clock there, its row and ids records first .. next-1,
    the bytes of its last whole write (`base`) and of the records written since (`grown`), and
    the rows its head holds (`head_rows`: a small key's, written whole in its head)."""

    __slots__ = ("last", "first", "next", "base", "grown", "head_rows")

    def __init__(self, last: int, first: int, next_: int, base: int, grown: int, head_rows: int) -> None:
        self.last, self.first, self.next, self.base, self.grown = last, first, next_, base, grown
        self.head_rows = head_rows


def _index_key(last: int, key: str) -> bytes:
    return b"t" + _LAST.pack(last) + key.encode("utf-8")


class StoredKeyTable:
    """The keys of one partition (see the module docstring). `n_classes()` gives the global
    model's class count now (a stored key may have fewer classes; new classes come last)."""

    def __init__(self, path: Path | str, n_classes: Callable[[], int], *, idle_after: int | None = None,
                 cache_keys: int = DEFAULT_CACHE_KEYS, cache_rows: int = DEFAULT_CACHE_ROWS) -> None:
        import rocksdict

        self._rocksdict = rocksdict
        self.path = Path(path)
        self.n_classes = n_classes
        self.idle_after = idle_after
        self.cache_keys = max(1, cache_keys)
        self.cache_rows = max(1, cache_rows)
        self._cached_rows = 0  # the rows of the cache's keys when they were put there
        # A store closed cleanly says up to which changelog offset it holds; any other is rebuilt.
        self.clean_offset, self.clean_at_ms = self._take_clean_marker()
        if self.clean_offset is None and self.path.exists():
            shutil.rmtree(self.path / "db", ignore_errors=True)
        self.path.mkdir(parents=True, exist_ok=True)
        options = rocksdict.Options(raw_mode=True)
        options.create_if_missing(True)
        options.set_compression_type(rocksdict.DBCompressionType.lz4())
        table = rocksdict.BlockBasedOptions()
        table.set_bloom_filter(10, False)  # most gets are of keys present; misses stay cheap
        options.set_block_based_table_factory(table)
        self._write_options = rocksdict.WriteOptions()
        self._write_options.disable_wal = True
        self.db = rocksdict.Rdict(str(self.path / "db"), options)
        meta = self.db.get(META)
        state = _checked_meta(json.loads(meta)) if meta is not None else {"clock": 0, "evicted": 0, "position": None}
        self.clock, self.evicted, self.position = state["clock"], state["evicted"], state["position"]
        self.classes: list = state.get("classes", [])  # the class order of the keys' columns
        # key -> [counts, its layout on disk (None: not on disk), its rows when cached], least recently used first
        self._cache: OrderedDict[str, list] = OrderedDict()
        self._dirty: dict[str, KeyCounts | None] = {}  # changed since the last flush; None: gone

    # ---- the KeyTable contract -----------------------------------------------------------

    def get(self, key: str | None) -> KeyCounts | None:
        if key is None:  # a keyless event: the global model's
            return None
        own = self._dirty[key] if key in self._dirty else self._cached(key)
        if own is not None and self._idle(own):
            self._dirty[key] = None
            self.evicted += 1
            return None
        return own

    def create(self, key: str, n_classes: int) -> KeyCounts:
        own = KeyCounts(n_classes, self.clock)
        self._dirty[key] = own
        self._remember(key, own)
        return own

    @property
    def unflushed(self) -> bool:
        """Changes since the last flush (which close() would write past the changelog)."""
        return bool(self._dirty)

    def changed(self, key: str, own: KeyCounts) -> None:
        self._dirty[key] = own

    def align(self, classes: list) -> None:
        """Every key's columns in the class order `classes` (KeyTable.align): each key is moved
        and written whole at the next flush. The global model's classes change once or twice in a
        spam filter's life (its first ham after its first spam), when it has few keys."""
        classes = list(classes)
        if self.classes == classes:
            return
        if self.classes:
            for key in sorted(set(self._keys_on_disk()) | set(self._dirty)):
                own = self._dirty[key] if key in self._dirty else self._cached(key)
                if own is not None:
                    own.realign(self.classes, classes)
                    self._dirty[key] = own
        self.classes = classes

    def observe(self, key, idle_after: int | None) -> None:
        if idle_after != self.idle_after:
            raise ValueError(f"this store evicts after {self.idle_after} labeled events, not {idle_after}")
        own = self.get(key)  # before the tick: the key's own event keeps it (as KeyTable touches it first)
        self.clock += 1
        if own is not None:
            own.last_labeled = self.clock
            self._dirty[key] = own

    def put(self, key: str, own: KeyCounts) -> None:
        if own.last_labeled > self.clock:
            raise InvalidKeyState(f"last_labeled {own.last_labeled} is ahead of the labeled clock {self.clock}")
        self._dirty[key] = own
        self._remember(key, own)

    def forget(self, key: str) -> None:
        if self.get(key) is not None:
            self._dirty[key] = None

    # ---- disk ----------------------------------------------------------------------------

    def flush(self, position: int | None = None) -> list[tuple[bytes, bytes | None]]:
        """Write what changed since the last flush, sweep idle keys, record the clock and
        `position` (what the caller says this state reflects). Returns the changelog records:
        each changed key's records (bytes, or None for one that went), then the metadata under
        the empty key."""
        records: list[tuple[bytes, bytes | None]] = []
        batch = self._rocksdict.WriteBatch(raw_mode=True)
        for key, own in sorted(self._dirty.items()):
            entry = self._cache.get(key)
            layout = entry[1] if entry is not None else self._stored_layout(key)
            if layout is not None:
                batch.delete(_index_key(layout.last, key))
            if own is None:
                if layout is not None:
                    for part in [*range(layout.first, layout.next), HEAD_PART]:
                        batch.delete(_data_key(key, part))
                        records.append((record_key(key.encode("utf-8"), part), None))
                self._uncache(key)
                continue
            written, layout = self._written(key, own, layout)
            for part, value in written:
                batch.delete(_data_key(key, part)) if value is None else batch.put(_data_key(key, part), value)
                records.append((record_key(key.encode("utf-8"), part), value))
            batch.put(_index_key(own.last_labeled, key), b"")
            own.touched, own.learned_touched = set(), set()
            self._cache_put(key, own, layout)
        self.db.write(batch, self._write_options)
        self._dirty.clear()
        records.extend(self._sweep())
        if position is not None:
            self.position = position
        meta = self._meta()
        self.db.put(META, meta, self._write_options)
        records.append((META_KEY, meta))
        self._trim_cache()
        return records

    @staticmethod
    def _written(key: str, own: KeyCounts, layout: _Layout | None) -> tuple[list[tuple[int, bytes | None]], _Layout]:
        """The records that bring the disk's `layout` of a key to `own`, (part, bytes or None),
        the head last, and the layout after them. A small key's rows go whole in its head;
        a larger key's in row records. Since the last whole write, only what changed is added
        (rows and ids touched, as new records after the others); the key is written whole again
        (new records, the old ones' tombstones) when it has nothing on disk yet, lost rows or
        ids (a budget cut, a memory cut), went from its head to row records, or when what was
        added since outgrows that write."""
        n_classes = len(own.class_counts)
        start = layout.next if layout is not None else 0
        old_parts = range(layout.first, layout.next) if layout is not None else range(0)
        inline = None  # the names a small key's head holds
        if len(own.index) <= INLINE_ROWS:
            names = list(own.index)
            if sum(row_bytes(name, n_classes) for name in names) <= ROWS_BYTES:
                inline = names
        if layout is not None and own.touched is not None and own.learned_touched is not None and (
                (inline is not None and layout.head_rows > 0)
                or (inline is None and layout.head_rows == 0 and layout.first < layout.next)):
            rows = [] if inline is not None else encode_rows(own, sorted(n for n in own.touched if n in own.index))
            added = rows + encode_ids(own, [i for i in own.learned if i in own.learned_touched])
            grown = layout.grown + sum(map(len, added))
            if grown <= max(layout.base, ROWS_BYTES):
                parts = range(layout.next, layout.next + len(added))
                head = encode_head(own, layout.first, parts.stop, layout.base, inline or [])
                return [*zip(parts, added), (HEAD_PART, head)], \
                    _Layout(own.last_labeled, layout.first, parts.stop, layout.base, grown, len(inline or ()))
        whole = ([] if inline is not None else encode_rows(own, sorted(own.index))) + encode_ids(own, list(own.learned))
        parts = range(start, start + len(whole))
        base = sum(map(len, whole)) + (sum(row_bytes(name, n_classes) for name in inline) if inline else 0)
        head = encode_head(own, parts.start, parts.stop, base, inline or [])
        return [*((part, None) for part in old_parts), *zip(parts, whole), (HEAD_PART, head)], \
            _Layout(own.last_labeled, parts.start, parts.stop, base, 0, len(inline or ()))

    def _sweep(self) -> list[tuple[bytes, None]]:
        """Delete every key idle for idle_after labeled events (the index, from its start)."""
        if self.idle_after is None:
            return []
        horizon = self.clock - self.idle_after
        batch = self._rocksdict.WriteBatch(raw_mode=True)
        gone = []
        keys = 0
        for index_key, _ in self.db.items(from_key=b"t"):
            if not index_key.startswith(b"t") or _LAST.unpack_from(index_key, 1)[0] > horizon:
                break
            key = index_key[1 + _LAST.size:]
            batch.delete(index_key)
            layout = self._stored_layout(key.decode("utf-8"))
            first, next_ = (layout.first, layout.next) if layout is not None else (0, 0)
            for part in [*range(first, next_), HEAD_PART]:
                batch.delete(b"k" + record_key(key, part))
                gone.append((record_key(key, part), None))
            self._uncache(key.decode("utf-8"))
            keys += 1
        if keys:
            self.db.write(batch, self._write_options)
            self.evicted += keys
        return gone

    def close(self, changelog_offset: int | None = None) -> None:
        """Flush, close, and say the store is whole at `changelog_offset` (the next offset of
        its changelog partition), so that the next owner on this disk restores only the tail."""
        if self._dirty:
            self.flush()
        self.db.flush(True)
        self.db.close()
        if changelog_offset is not None:  # with the time: tombstones are kept delete.retention.ms
            marker = self.path / CLEAN
            marker.write_text(json.dumps({"changelog_offset": changelog_offset, "closed_at_ms": int(time.time() * 1000)}))

    def discard(self) -> None:
        """Close without a clean mark and remove the store's directory (a copy not to restore on)."""
        self.db.close()
        shutil.rmtree(self.path, ignore_errors=True)

    def restore(self, records: Iterable[tuple[bytes, bytes | None]]) -> int:
        """Apply changelog records in their order (the tail after the clean offset, or all of
        them); then check every key whole (its head, its row records, its invariants:
        InvalidKeyState, one line) and rebuild the idleness index. Returns the records applied."""
        restoring = self.restoring()
        for key, value in records:
            restoring.put(key, value)
        return restoring.finish()

    def restoring(self) -> _Restoring:
        """A restore taken record by record (`put`, then `finish`): several stores can be fed
        from one changelog as it is read, none of it held in memory (ViewTables)."""
        return _Restoring(self)

    def _apply_meta(self, value: bytes | None) -> None:
        if value is None:
            raise InvalidKeyState("the changelog's metadata record is a tombstone")
        state = _checked_meta(json.loads(value))
        self.clock, self.evicted, self.position = state["clock"], state["evicted"], state["position"]
        self.classes = state.get("classes", [])

    def _finish_restore(self) -> None:
        self._cache.clear()
        self._cached_rows = 0
        self._dirty.clear()
        self._check_and_index()
        self.db.put(META, self._meta(), self._write_options)

    def digest(self) -> str:
        """SHA-256 of the clock and every key's counts in the canonical layout (names sorted),
        in key order: equal for equal states, however their records were written."""
        if self._dirty:
            raise RuntimeError("flush before taking the digest")
        digest = hashlib.sha256(json.dumps([self.clock, self.evicted]).encode())
        for key in sorted(self._keys_on_disk()):
            own = self._loaded(key)[0]
            names = sorted(own.index)
            own.set_rows(names, own.matrix[own.rows_of(names)])
            value = encode_key_counts(own) + b"".join(encode_ids(own, list(own.learned)))
            encoded = key.encode("utf-8")
            digest.update(_LAST.pack(len(encoded)) + encoded + _LAST.pack(len(value)) + value)
        return digest.hexdigest()

    def __len__(self) -> int:
        """Keys on disk (after a flush)."""
        return sum(1 for _ in self._keys_on_disk())

    # ---- inside ------------------------------------------------------------------------

    def _meta(self) -> bytes:
        return json.dumps({"clock": self.clock, "evicted": self.evicted, "position": self.position,
                           "classes": self.classes}, sort_keys=True).encode()

    def _width(self) -> int:
        """The columns a key loaded from disk gets: its table's classes (the global model's
        count when the store says none: one written before it kept them)."""
        return len(self.classes) if self.classes else self.n_classes()

    def _idle(self, own: KeyCounts) -> bool:
        return self.idle_after is not None and own.last_labeled <= self.clock - self.idle_after

    def _keys_on_disk(self):
        """Every key with a head on disk (UTF-8 strings, in no particular order)."""
        for raw, _ in self.db.items(from_key=b"k"):
            if not raw.startswith(b"k"):
                break
            key, part = split_record_key(raw[1:])
            if part == HEAD_PART:
                yield key.decode("utf-8")

    def _loaded(self, key: str) -> tuple[KeyCounts, _Layout] | None:
        """A key's counts from disk, checked whole, and its layout there; None: not there."""
        head_bytes = self.db.get(_data_key(key))
        if head_bytes is None:
            return None
        head = decode_head(head_bytes, self._width())
        rows = self.db[[_data_key(key, part) for part in range(head.first, head.next)]] if head.next > head.first \
            else []
        own = key_counts_of_records(head, rows, self._width())
        return own, _Layout(head.last, head.first, head.next, head.base, sum(len(row) for row in rows),
                            len(head.names))

    def _cached(self, key: str) -> KeyCounts | None:
        entry = self._cache.get(key)
        if entry is not None:
            self._cache.move_to_end(key)
            return entry[0]
        loaded = self._loaded(key)
        if loaded is None:
            return None
        self._cache_put(key, *loaded)
        self._trim_cache()
        return loaded[0]

    def _remember(self, key: str, own: KeyCounts) -> None:
        entry = self._cache.get(key)
        layout = entry[1] if entry is not None else self._stored_layout(key)
        self._cache_put(key, own, layout)

    def _cache_put(self, key: str, own: KeyCounts, layout: _Layout | None) -> None:
        """`key` into the cache as its most recently used entry."""
        self._uncache(key)
        rows = len(own.index) + len(own.learned)
        self._cache[key] = [own, layout, rows]
        self._cached_rows += rows

    def _uncache(self, key: str) -> None:
        entry = self._cache.pop(key, None)
        if entry is not None:
            self._cached_rows -= entry[2]

    def _stored_layout(self, key: str) -> _Layout | None:
        """A key's layout on disk from its head's fixed fields and its row records' sizes (a
        flush or a create needs no more: nothing is decoded)."""
        head = self.db.get(_data_key(key))
        if head is None:
            return None
        _, _, last, first, next_, base, head_rows = _HEAD.unpack_from(head, 0)
        grown = sum(len(row) for row in self.db[[_data_key(key, part) for part in range(first, next_)]]) \
            if next_ > first else 0
        return _Layout(last, first, next_, base, grown, head_rows)

    def _trim_cache(self) -> None:
        """Down to cache_keys decoded keys and cache_rows rows, least recently used first;
        changed keys stay (they move to the most recent end). Each call costs the keys it removes or moves, not the
        cache's size (a list of the whole cache per miss made loading 1M keys quadratic)."""
        kept = []
        while self._cache and (len(self._cache) + len(kept) > self.cache_keys or self._cached_rows > self.cache_rows):
            key, entry = self._cache.popitem(last=False)
            if key in self._dirty:
                kept.append((key, entry))
            else:
                self._cached_rows -= entry[2]
        for key, entry in kept:
            self._cache[key] = entry

    def _check_and_index(self) -> None:
        """After a restore: every key whole and valid (InvalidKeyState, one line), no row record
        that no head names, and the idleness index rebuilt from the heads."""
        batch = self._rocksdict.WriteBatch(raw_mode=True)
        for index_key, _ in self.db.items(from_key=b"t"):
            if not index_key.startswith(b"t"):
                break
            batch.delete(index_key)
        records = on_disk = 0
        for raw, _ in self.db.items(from_key=b"k"):  # one pass: every record counted, each head's key loaded
            if not raw.startswith(b"k"):
                break
            on_disk += 1
            key, part = split_record_key(raw[1:])
            if part != HEAD_PART:
                continue
            key = key.decode("utf-8")
            loaded = self._loaded(key)
            layout = loaded[1]
            records += 1 + layout.next - layout.first
            batch.put(_index_key(layout.last, key), b"")
            if len(self._cache) < self.cache_keys and self._cached_rows + len(loaded[0].index) <= self.cache_rows:
                self._cache_put(key, *loaded)  # decoded once: the first keys stay decoded
        if on_disk != records:
            raise InvalidKeyState(f"the keyed state holds {on_disk - records} row records that no key's head names")
        self.db.write(batch, self._write_options)

    def _take_clean_marker(self) -> tuple[int | None, int | None]:
        """(changelog offset, closed at in ms since the epoch) of a clean close, or (None, None)."""
        marker = self.path / CLEAN
        if not marker.exists():
            return None, None
        try:
            said = json.loads(marker.read_text())
            offset, closed_at = said.get("changelog_offset"), said.get("closed_at_ms")
        except (ValueError, AttributeError):
            offset = closed_at = None
        marker.unlink()  # from now on the disk changes: a crash must not find a marker
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in (offset, closed_at)):
            return None, None
        return offset, closed_at


def _checked_meta(state) -> dict:
    if not isinstance(state, dict) or not {"clock", "evicted", "position"} <= set(state) <= {
            "clock", "evicted", "position", "classes"}:
        raise InvalidKeyState("a partition's metadata is a dict of clock, evicted, position and classes")
    classes = state.get("classes", [])
    if not isinstance(classes, list) or len(classes) > MAX_CLASSES or any(
            type(label) not in (str, int) for label in classes) or len(set(map(repr, classes))) != len(classes):
        raise InvalidKeyState("a partition's classes are a list of distinct str or int labels")
    for name in ("clock", "evicted"):
        value = state[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidKeyState(f"a partition's {name} is a whole number >= 0, got {value!r}")
    position = state["position"]
    if position is not None and (isinstance(position, bool) or not isinstance(position, int) or position < 0):
        raise InvalidKeyState(f"a partition's position is a whole number >= 0 or null, got {position!r}")
    return state


class _Restoring:
    """One store's restore under way: each record checked for its kind and written in batches of
    RESTORE_BATCH; `finish` checks every key whole (StoredKeyTable.restore)."""

    def __init__(self, table: StoredKeyTable) -> None:
        self.table, self.applied = table, 0
        self._batch = table._rocksdict.WriteBatch(raw_mode=True)

    def put(self, key: bytes, value: bytes | None) -> None:
        table = self.table
        if key == META_KEY:
            table._apply_meta(value)
        else:
            if value is not None and value[:4] == b"SNK1":
                raise InvalidKeyState("the changelog holds a key as one record, as stream_nb wrote it before keys "
                                      "were split into records of bounded size: delete the changelog topic (the "
                                      "keys are relearned from the labeled log)")
            _, part = split_record_key(key)
            if value is None:
                self._batch.delete(b"k" + key)
            else:
                magics = (HEAD_MAGIC,) if part == HEAD_PART else (ROWS_MAGIC, IDS_MAGIC)
                if not isinstance(value, bytes) or value[:4] not in magics:
                    raise InvalidKeyState(f"a keyed-state record of part {part} does not start with "
                                          f"{' or '.join(map(repr, magics))}")
                self._batch.put(b"k" + key, value)
        self.applied += 1
        if self.applied % RESTORE_BATCH == 0:
            table.db.write(self._batch, table._write_options)
            self._batch = table._rocksdict.WriteBatch(raw_mode=True)

    def finish(self) -> int:
        """Write what is left, check every key whole; the records applied."""
        self.table.db.write(self._batch, self.table._write_options)
        self.table._finish_restore()
        return self.applied

"""One partition's per-key state on disk: the keys' counts in an embedded RocksDB (rocksdict), a
bounded cache of decoded counts in memory, and the partition's labeled clock.

It keeps the contract of stream_nb.model.personal.KeyTable (get, create, changed, observe, put,
forget), so PersonalMultinomialNB reads and learns through either; tests hold it to KeyTable on
generated event sequences (the same counts, clock and evictions at every flush).

The database, in raw mode (rocksdict's default mode pickles values: loading would run code):

    b"k" + key (UTF-8)                     -> the key's counts (stream_nb.keyed.codec)
    b"t" + last labeled (u64, big-endian)  -> b""  (the idleness index: keys, least recently
          + key (UTF-8)                            labeled first, in the order RocksDB sorts)
    b"m"                                   -> JSON {"clock", "evicted", "position"}

Writes are buffered: `flush` writes what changed since the last flush in one batch (the WAL is
off: the changelog is the source of truth, so a store that was not closed cleanly is restored
anew) and returns it as changelog records, (key, bytes) or (key, None) when the key went, for the
caller to produce in its transaction; the changelog's empty key holds the partition's metadata
(an event's key is never empty).

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

from stream_nb.keyed.codec import decode_key_counts, encode_key_counts, last_labeled_of
from stream_nb.model.personal import InvalidKeyState, KeyCounts

_LAST = struct.Struct(">Q")
META = b"m"
META_KEY = b""  # the changelog's key for the partition's metadata
CLEAN = "clean.json"  # written by close(): the store on disk is whole, at this changelog offset
DEFAULT_CACHE_KEYS = 20_000


def _data_key(key: str) -> bytes:
    return b"k" + key.encode("utf-8")


def _index_key(last: int, key: str) -> bytes:
    return b"t" + _LAST.pack(last) + key.encode("utf-8")


class StoredKeyTable:
    """The keys of one partition (see the module docstring). `n_classes()` gives the global
    model's class count now (a stored key may have fewer classes; new classes come last)."""

    def __init__(self, path: Path | str, n_classes: Callable[[], int], *, idle_after: int | None = None,
                 cache_keys: int = DEFAULT_CACHE_KEYS) -> None:
        import rocksdict

        self._rocksdict = rocksdict
        self.path = Path(path)
        self.n_classes = n_classes
        self.idle_after = idle_after
        self.cache_keys = max(1, cache_keys)
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
        # key -> [counts, last labeled as on disk (None: not on disk)], least recently used first
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
        each changed key's bytes or None, then the metadata under the empty key."""
        records: list[tuple[bytes, bytes | None]] = []
        batch = self._rocksdict.WriteBatch(raw_mode=True)
        for key, own in sorted(self._dirty.items()):
            entry = self._cache.get(key)
            stored_last = entry[1] if entry is not None else self._stored_last(key)
            if stored_last is not None:
                batch.delete(_index_key(stored_last, key))
            if own is None:
                batch.delete(_data_key(key))
                self._cache.pop(key, None)
                records.append((key.encode("utf-8"), None))
                continue
            value = encode_key_counts(own)
            batch.put(_data_key(key), value)
            batch.put(_index_key(own.last_labeled, key), b"")
            self._cache[key] = [own, own.last_labeled]
            records.append((key.encode("utf-8"), value))
        self.db.write(batch, self._write_options)
        self._dirty.clear()
        records.extend(self._sweep())
        if position is not None:
            self.position = position
        meta = json.dumps({"clock": self.clock, "evicted": self.evicted, "position": self.position},
                          sort_keys=True).encode()
        self.db.put(META, meta, self._write_options)
        records.append((META_KEY, meta))
        self._trim_cache()
        return records

    def _sweep(self) -> list[tuple[bytes, None]]:
        """Delete every key idle for idle_after labeled events (the index, from its start)."""
        if self.idle_after is None:
            return []
        horizon = self.clock - self.idle_after
        batch = self._rocksdict.WriteBatch(raw_mode=True)
        gone = []
        for index_key, _ in self.db.items(from_key=b"t"):
            if not index_key.startswith(b"t") or _LAST.unpack_from(index_key, 1)[0] > horizon:
                break
            key = index_key[1 + _LAST.size:]
            batch.delete(index_key)
            batch.delete(b"k" + key)
            self._cache.pop(key.decode("utf-8"), None)
            gone.append((key, None))
        if gone:
            self.db.write(batch, self._write_options)
            self.evicted += len(gone)
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

    def restore(self, records: Iterable[tuple[bytes, bytes | None]]) -> int:
        """Apply changelog records in their order (the tail after the clean offset, or all of
        them), each value checked (InvalidKeyState, one line); then rebuild the idleness index.
        Returns the records applied."""
        applied = 0
        batch = self._rocksdict.WriteBatch(raw_mode=True)
        for key, value in records:
            if key == META_KEY:
                if value is None:
                    raise InvalidKeyState("the changelog's metadata record is a tombstone")
                state = _checked_meta(json.loads(value))
                self.clock, self.evicted, self.position = state["clock"], state["evicted"], state["position"]
            elif value is None:
                batch.delete(b"k" + key)
            else:
                decode_key_counts(value, None)  # checked before it is kept (classes: see get)
                batch.put(b"k" + key, value)
            applied += 1
            if applied % 10_000 == 0:
                self.db.write(batch, self._write_options)
                batch = self._rocksdict.WriteBatch(raw_mode=True)
        self.db.write(batch, self._write_options)
        self._rebuild_index()
        self.db.put(META, json.dumps({"clock": self.clock, "evicted": self.evicted, "position": self.position},
                                     sort_keys=True).encode(), self._write_options)
        self._cache.clear()
        self._dirty.clear()
        return applied

    def digest(self) -> str:
        """SHA-256 of the keys' bytes in key order and the clock: equal for equal states."""
        if self._dirty:
            raise RuntimeError("flush before taking the digest")
        digest = hashlib.sha256(json.dumps([self.clock, self.evicted]).encode())
        for key, value in self.db.items(from_key=b"k"):
            if not key.startswith(b"k"):
                break
            digest.update(_LAST.pack(len(key)) + key + _LAST.pack(len(value)) + value)
        return digest.hexdigest()

    def __len__(self) -> int:
        """Keys on disk (after a flush)."""
        return sum(1 for key, _ in self.db.items(from_key=b"k") if key.startswith(b"k"))

    # ---- inside ------------------------------------------------------------------------

    def _idle(self, own: KeyCounts) -> bool:
        return self.idle_after is not None and own.last_labeled <= self.clock - self.idle_after

    def _cached(self, key: str) -> KeyCounts | None:
        entry = self._cache.get(key)
        if entry is not None:
            self._cache.move_to_end(key)
            return entry[0]
        value = self.db.get(_data_key(key))
        if value is None:
            return None
        own = decode_key_counts(value, self.n_classes())
        self._cache[key] = [own, own.last_labeled]
        self._trim_cache()
        return own

    def _remember(self, key: str, own: KeyCounts) -> None:
        entry = self._cache.get(key)
        stored_last = entry[1] if entry is not None else self._stored_last(key)
        self._cache[key] = [own, stored_last]
        self._cache.move_to_end(key)

    def _stored_last(self, key: str) -> int | None:
        value = self.db.get(_data_key(key))
        return None if value is None else last_labeled_of(value)

    def _trim_cache(self) -> None:
        """Down to cache_keys decoded keys, least recently used first; changed keys stay (they
        move to the most recent end). Each call costs the keys it removes or moves, not the
        cache's size (a list of the whole cache per miss made loading 1M keys quadratic)."""
        excess = len(self._cache) - self.cache_keys
        kept = []
        while excess > 0 and self._cache:
            key, entry = self._cache.popitem(last=False)
            if key in self._dirty:
                kept.append((key, entry))
            else:
                excess -= 1
        for key, entry in kept:
            self._cache[key] = entry

    def _rebuild_index(self) -> None:
        batch = self._rocksdict.WriteBatch(raw_mode=True)
        for index_key, _ in self.db.items(from_key=b"t"):
            if not index_key.startswith(b"t"):
                break
            batch.delete(index_key)
        for key, value in self.db.items(from_key=b"k"):
            if not key.startswith(b"k"):
                break
            batch.put(b"t" + _LAST.pack(last_labeled_of(value)) + key[1:], b"")
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
    if not isinstance(state, dict) or set(state) != {"clock", "evicted", "position"}:
        raise InvalidKeyState("a partition's metadata is a dict of clock, evicted and position")
    for name in ("clock", "evicted"):
        value = state[name]
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidKeyState(f"a partition's {name} is a whole number >= 0, got {value!r}")
    position = state["position"]
    if position is not None and (isinstance(position, bool) or not isinstance(position, int) or position < 0):
        raise InvalidKeyState(f"a partition's position is a whole number >= 0 or null, got {position!r}")
    return state

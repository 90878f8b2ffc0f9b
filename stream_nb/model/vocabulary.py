"""Feature name -> column index: an exact vocabulary, or feature hashing for bounded memory."""

from __future__ import annotations

import zlib
from itertools import islice, repeat

import numpy as np

# Every bucket has its row from the start: 2^26 buckets are 512 MiB of counts a class. A state
# asking for more is refused before anything is allocated (state_check), as is a configuration
# (config.BOUNDS, with the same figure).
MAX_HASH_BUCKETS = 2**26


class Vocabulary:
    """Exact vocabulary: each distinct feature name gets the next column, forever.

    Column order is the order in which features were first learned; nothing downstream depends
    on it (digests and comparisons sort by name). Columns are given once: the dict and the list
    of names by column only grow, and a renumbering (the budget's eviction) makes a new object.

    The list is the vocabulary; the dict {name: column} may lag it. The names the C featuriser
    adds (`add_new_at`) go to the list alone, but for a name stored wider than one byte a
    character, since the featuriser finds the others in its own index of the list; the dict
    takes them when something reads it (`mapping`), which a replay or a worker's batches need
    not do. A batch of mail adds hundreds of thousands of names a replay, and a dict's insert
    cost more than the rest of adding them (in a replay of raw mail, 0.05 s of the learner's).
    """

    hashed = False

    def __init__(self) -> None:
        self._column_of: dict = {}
        self._by_column: list = []  # _by_column[column] is its name
        # _column_of holds _by_column[:_mapped], and every name stored wider than a byte a character
        self._mapped = 0

    def __len__(self) -> int:
        return len(self._by_column)

    def add(self, names) -> None:
        """Give each name not known yet the next column, in order of first appearance."""
        column_of = self.mapping()
        fresh = dict.fromkeys(names)
        if not column_of.keys().isdisjoint(fresh):
            fresh = [name for name in fresh if name not in column_of]
        self.add_new(list(fresh))

    def number_unknown(self, names) -> dict:
        """{name: the column it would get} for names none of which is in the vocabulary yet
        (repeats allowed), in order of first appearance, without adding them."""
        start = len(self._by_column)
        fresh = dict.fromkeys(names)
        return dict(zip(fresh, range(start, start + len(fresh))))

    def add_unknown(self, names) -> dict:
        """`add` for names none of which is in the vocabulary yet; returns `number_unknown`'s
        {name: column}, a small dict that answers their look-ups faster than the vocabulary."""
        added = self.number_unknown(names)
        self.add_new(list(added))
        return added

    def add_new(self, names: list) -> None:
        """`add` for distinct names none of which is in the vocabulary yet (a batch's new names,
        each once), without the dicts `add_unknown` makes to number and return them."""
        start = len(self._by_column)
        self.mapping().update(zip(names, range(start, start + len(names))))
        self._by_column.extend(names)
        self._mapped = len(self._by_column)

    def add_new_at(self, names, positions: np.ndarray) -> None:
        """`add_new([names[p] for p in positions])`: of a batch's new names (a sequence), those
        at `positions`, in that order (distinct names none of which is in the vocabulary yet).
        The C featuriser's NewNames adds them in one call (`add_to`), making each str as it
        goes, to the list alone but for a name stored wider than one byte a character (see the
        class doc), and refuses (ValueError, nothing added) such a name the vocabulary has."""
        add_to = getattr(names, "add_to", None)
        if add_to is not None:
            add_to(self._column_of, self._by_column, np.ascontiguousarray(positions, dtype=np.int64).tobytes(), False)
        else:
            self.add_new(list(map(names.__getitem__, positions.tolist())))

    def lookup(self, names: list) -> np.ndarray:
        """Column of each name, -1 where the name was never added."""
        return np.fromiter(
            map(self.mapping().get, names, repeat(-1)), dtype=np.int64, count=len(names)
        )

    def columns(self, names: list) -> list[int]:
        """lookup, as a list (for one event)."""
        return list(map(self.mapping().get, names, repeat(-1)))

    def names(self) -> list:
        return list(self._by_column)

    def mapping(self) -> dict:
        """The {name: column} dict itself, holding every name (taken in from the list first);
        read it, never change it."""
        if self._mapped < len(self._by_column):
            start = self._mapped
            self._column_of.update(zip(islice(self._by_column, start, None), range(start, len(self._by_column))))
            self._mapped = len(self._by_column)
        return self._column_of

    def native_mapping(self) -> tuple[dict, object]:
        """(the dict as it is, `mapping`): for the C featuriser, which looks names stored one
        byte a character up in its index of the list, and the others in the dict, which holds
        them all; it calls `mapping` before it reads the dict for any other."""
        return self._column_of, self.mapping

    def by_column(self) -> list:
        """The list of names by column itself (the C featuriser's index mirrors it as it grows);
        read it, never change it."""
        return self._by_column

    def to_state(self) -> dict:
        return {"kind": "exact", "names": self.names()}

    @classmethod
    def from_names(cls, names: list) -> Vocabulary:
        vocabulary = cls()
        vocabulary._column_of = {name: column for column, name in enumerate(names)}
        if len(vocabulary._column_of) != len(names):
            raise ValueError("a vocabulary's names must be distinct")
        vocabulary._by_column = list(names)
        vocabulary._mapped = len(names)
        return vocabulary


class HashedVocabulary:
    """Feature hashing: column = crc32(utf-8 name) mod n_buckets.

    Memory is fixed at n_buckets columns whatever the stream brings; distinct features that
    share a bucket share their counts. crc32 is stable across processes (Python's hash() is not),
    so a checkpoint restores to the same columns.
    """

    hashed = True

    def __init__(self, n_buckets: int) -> None:
        if not isinstance(n_buckets, int) or n_buckets < 1:
            raise ValueError(f"n_hash_buckets must be a positive integer, got {n_buckets!r}")
        self.n_buckets = n_buckets
        self._cache: dict = {}  # name -> bucket; bounded so it cannot grow with the stream

    def __len__(self) -> int:
        return self.n_buckets

    def add(self, names) -> None:
        pass  # every bucket exists from the start

    def _bucket(self, name) -> int:
        bucket = self._cache.get(name)
        if bucket is None:
            text = name if isinstance(name, str) else str(name)
            bucket = zlib.crc32(text.encode("utf-8", "surrogatepass")) % self.n_buckets
            if len(self._cache) >= 1 << 16:
                self._cache.clear()
            self._cache[name] = bucket
        return bucket

    def lookup(self, names: list) -> np.ndarray:
        return np.fromiter(map(self._bucket, names), dtype=np.int64, count=len(names))

    def columns(self, names: list) -> list[int]:
        return list(map(self._bucket, names))

    def names(self) -> list:
        return [f"#bucket{b}" for b in range(self.n_buckets)]

    def to_state(self) -> dict:
        return {"kind": "hashed", "n_buckets": self.n_buckets}


def vocabulary_from_state(state: dict) -> Vocabulary | HashedVocabulary:
    if state["kind"] == "hashed":
        return HashedVocabulary(state["n_buckets"])
    return Vocabulary.from_names(state["names"])

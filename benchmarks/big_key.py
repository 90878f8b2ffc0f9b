#!/usr/bin/env python
"""One user's model at real size (issue 33): a key of millions of features in the per-key store.

A key's state goes to its store and changelog as a head and row records of at most 256 KiB
(stream_nb.keyed.codec), a flush writing the rows that changed and the key whole again only when
those outgrow its last whole write. This measures, for one key of --features features (names
like a mail featuriser's, 2 classes):

- the whole write: records, the largest, bytes, seconds;
- --mails mails of 300 features (30 of them new) each followed by a flush, as a worker flushes
  at every commit: bytes written per flush (median, and the total with the whole writes the
  growth triggers), against the layout before (one record a key: the key whole at every flush,
  its size measured on the same key);
- a restore of the key from its compacted changelog records into a fresh store (every record
  decoded and checked, the key assembled and checked whole): seconds and features/s, median of
  --repeats; and the same counts decoded from the one-record layout, for comparison.

    .venv/bin/python benchmarks/big_key.py                     # 3,000,000 features
    .venv/bin/python benchmarks/big_key.py --features 300000 --mails 200
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from stream_nb.keyed.codec import decode_key_counts, encode_key_counts  # noqa: E402
from stream_nb.keyed.store import META_KEY, StoredKeyTable  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--features", type=int, default=3_000_000)
    parser.add_argument("--mails", type=int, default=1000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="big-key-"))
    try:
        store = StoredKeyTable(work / "p", lambda: 2)
        own = store.create("user@example.com", 2)
        step = 100_000
        for start in range(0, args.features, step):
            own.add({f"w{i:x} #s:{i % 977}": 1.0 for i in range(start, min(start + step, args.features))},
                    start // step % 2, 1.0)
        store.changed("user@example.com", own)
        store.observe("user@example.com", None)
        started = time.perf_counter()
        first = store.flush(position=1)
        whole_s = time.perf_counter() - started
        sizes = [len(value) for key, value in first if value is not None and key != META_KEY]
        print(f"a key of {args.features:,} features: whole write {len(sizes)} records, largest {max(sizes):,} bytes, "
              f"{sum(sizes) / 1e6:.1f} MB in {whole_s:.2f} s")
        started = time.perf_counter()
        one_record = encode_key_counts(store.get("user@example.com"))
        print(f"  the layout before: one record of {len(one_record) / 1e6:.1f} MB "
              f"(encoded in {time.perf_counter() - started:.2f} s), over a default topic's 1 MB limit"
              if len(one_record) > 1_048_588 else f"  the layout before: one record of {len(one_record):,} bytes")

        changelog = dict(first)
        rng = random.Random(33)
        per_flush, flush_s, whole_writes = [], [], 0
        for mail in range(args.mails):
            x = {f"w{i:x} #s:{i % 977}": 1.0 for i in (rng.randrange(args.features) for _ in range(270))}
            x.update({f"new-{mail}-{j}": 1.0 for j in range(30)})
            key_counts = store.get("user@example.com")
            key_counts.add(x, mail % 2, 1.0)
            store.changed("user@example.com", key_counts)
            store.observe("user@example.com", None)
            started = time.perf_counter()
            records = store.flush(position=mail + 2)
            flush_s.append(time.perf_counter() - started)
            per_flush.append(sum(len(value) for key, value in records if value is not None and key != META_KEY))
            whole_writes += any(value is None for _, value in records)
            for key, value in records:
                changelog.pop(key, None)
                changelog[key] = value
        print(f"{args.mails:,} mails, a flush after each: median {statistics.median(per_flush):,.0f} bytes and "
              f"{statistics.median(flush_s) * 1000:.2f} ms a flush, {whole_writes} whole writes, "
              f"{sum(per_flush) / 1e6:.1f} MB in all; the layout before: {len(one_record) / 1e6:.1f} MB a flush, "
              f"{args.mails * len(one_record) / 1e6:,.0f} MB in all "
              f"({args.mails * len(one_record) / max(sum(per_flush), 1):.0f}x)")
        kept = [(key, value) for key, value in changelog.items() if value is not None]
        live = sum(len(value) for key, value in kept if key != META_KEY)
        print(f"the compacted changelog holds {len(kept)} records, {live / 1e6:.1f} MB "
              f"({live / len(one_record):.2f}x the key in one record)")

        times, old_times = [], []
        expected = store.digest()
        for repeat in range(args.repeats):
            restored = StoredKeyTable(work / f"r{repeat}", lambda: 2)
            started = time.perf_counter()
            restored.restore(kept)
            restored.get("user@example.com")
            times.append(time.perf_counter() - started)
            assert restored.digest() == expected, "the restored key differs"
            restored.close()
            started = time.perf_counter()
            decode_key_counts(one_record, 2)
            old_times.append(time.perf_counter() - started)
        n = len(store.get("user@example.com").index)
        print(f"restore of the key ({n:,} features) from its changelog records, checked whole: median "
              f"{statistics.median(times):.2f} s ({n / statistics.median(times):,.0f} features/s), digest equal; "
              f"decoding the one record of before: {statistics.median(old_times):.2f} s")
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python
"""Per-key state at scale (issue 26, part 3): 1,000,000 keys of about 50 features on one worker.

A worker's per-key models live in one StoredKeyTable per partition (stream_nb.keyed.store:
RocksDB on disk, a bounded cache of decoded keys in memory), and every flush goes to the
compacted changelog (stream_nb.keyed.changelog) inside a Kafka transaction. This benchmark
measures, in one run against a real broker:

1. Load: one worker owns all --partitions partitions (a key's partition is Kafka's, murmur2 of
   its bytes) and learns every key's labeled events (configs/personal.toml's model; the
   global model taught first): learn_key + observe_labeled into the key's table, every
   --flush-every events a flush of every table sent to the changelog in one transaction.
   Printed: events/s and where the time went, RSS as the keys grow (VmRSS) and at its peak
   (VmHWM), the stores' bytes per key on disk (after the last flush with the memtables written
   out, and again after a full compaction), the changelog's bytes per key (record payload; the
   broker's log files too when this script started the broker), and the same keys' RSS in the
   in-memory KeyTable (personal.table, --memory-keys keys in a child process, extrapolated).
2. Restore: a fresh worker (a child process) restores one partition from its changelog,
   --repeats times (median); a read-only pass of the changelog says how much of it is Kafka.
   The restored digest() must equal the lost table's ("digest equal: yes/no").
3. Two workers split the keys: two child processes at once, each restoring half of the
   partitions; each one's time, keys, peak RSS and digests.

With --max-key-features and --idle-after, keys keep at most that many features and leave after
that many labeled events (of all keys, as the worker and replay count them) without one of theirs; the figures then show
the evictions and the features per key, and the digests still must match. Exit status 1 when a
digest differs.

Events: every key gets a first event of --features distinct feature names (drawn from a
vocabulary of --vocabulary names, so keys differ); a --revisits share of keys gets one more
event later (half of its features and 5 new ones), read back from the store when its key has
left the cache. Events are deterministic (--seed): the same run twice gives the same digests.

    nice -n 19 .venv/bin/python benchmarks/key_scale.py                    # 1,000,000 keys
    nice -n 19 .venv/bin/python benchmarks/key_scale.py --keys 200000 --max-key-features 20 --idle-after 20000
    nice -n 19 .venv/bin/python benchmarks/key_scale.py --keys 20000 --memory-keys 5000   # a quick look

Without --bootstrap it starts its own broker (stream_nb.kafka.broker, in a temporary folder
under $TMPDIR) and stops it at the end; with --bootstrap it deletes the changelog topic it made.
The stores live under $TMPDIR too and are deleted. Disk: about 2 GB of changelog and 1 GB of
stores at 1,000,000 keys.

Measured on a shared 2-core machine (first run): the default run took 60 minutes, 53 of them
in the load, where StoredKeyTable._trim_cache copied the whole cache into a list on every key
read back from disk (90% of the load's samples); with that copy gone, 10.6 minutes quiet (13-15 beside the test suite), and then
half of the load's time was the cyclic garbage collector's full collections walking the cache's
decoded keys (about 50 tracked lists a key).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import random
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kafka.partitioner.default import murmur2  # noqa: E402

from stream_nb.config import load_config  # noqa: E402
from stream_nb.keyed.changelog import ensure_changelog, read_changelog, send_flush  # noqa: E402
from stream_nb.keyed.store import StoredKeyTable  # noqa: E402

CONFIG = REPO / "configs" / "personal.toml"
LABELS = ("ham", "spam")
NEW_ON_REVISIT = 5  # feature names a revisit adds to half of the key's own
GLOBAL_EVENTS = 4_000  # the global model's teaching, before any key
RESULT = "RESULT "  # a child's last line: RESULT <json>
_FEATURE_COUNT = struct.Struct("<I")  # a stored key's feature count, at offset 8 (stream_nb.keyed.codec)


# ---- figures of this process -----------------------------------------------------------------

def status_mib(field: str) -> float:
    """VmRSS (resident now) or VmHWM (the peak so far) of this process, in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def files_bytes(path: Path, suffix: str = "") -> int:
    """The bytes of the files under `path` (their sizes, not their blocks)."""
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and p.name.endswith(suffix))


# ---- the events --------------------------------------------------------------------------------

def partition_of(key: str, partitions: int) -> int:
    """The partition Kafka's default partitioner gives a keyed record (the positive mask of murmur2)."""
    return (murmur2(key.encode("utf-8")) & 0x7FFFFFFF) % partitions


def key_name(index: int) -> str:
    return f"user-{index:07d}"


def make_vocabulary(size: int, seed: int) -> list[str]:
    """Distinct word-like names, 4-14 letters, a fifth of them word bigrams as spam.toml makes."""
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    names: dict[str, None] = {}
    while len(names) < size:
        word = "".join(rng.choices(letters, k=rng.randint(4, 14)))
        if rng.random() < 0.2:
            word += " " + "".join(rng.choices(letters, k=rng.randint(3, 9)))
        names[word] = None
    return list(names)


class KeyEvents:
    """The load's labeled events, deterministic from `seed`: (key, features, label) in order.

    Every key appears once with `features` names of its own; `revisits` * keys further
    appearances of random keys are shuffled in with them, so a key's second event comes at a
    random later point. A key's own names come from a generator seeded by the key's index, so
    key i has the same names whatever the key count."""

    def __init__(self, keys: int, features: int, vocabulary: list[str], revisits: float, seed: int) -> None:
        self.keys, self.features, self.vocabulary, self.seed = keys, features, vocabulary, seed
        rng = random.Random(seed)
        order = list(range(keys)) + [rng.randrange(keys) for _ in range(int(keys * revisits))]
        rng.shuffle(order)
        self.order = order
        self.rng = rng

    def __len__(self) -> int:
        return len(self.order)

    def own_names(self, index: int) -> list[str]:
        return random.Random((self.seed << 32) | index).sample(self.vocabulary, self.features)

    def __iter__(self):
        seen = bytearray(self.keys)
        rng = self.rng
        for index in self.order:
            names = self.own_names(index)
            if seen[index]:  # a revisit: half of its names and a few new ones
                names = names[: self.features // 2] + rng.sample(self.vocabulary, NEW_ON_REVISIT)
            seen[index] = 1
            label = LABELS[rng.random() < 0.4]
            yield key_name(index), dict.fromkeys(names, 1.0), label


# ---- the model and the broker ------------------------------------------------------------------

def config_of(args, bootstrap: str | None):
    overrides = [f"personal.max_key_features={args.max_key_features or 0}",
                 f"personal.idle_after={args.idle_after or 0}", f"kafka.transport={args.transport}"]
    if bootstrap is not None:
        overrides += [f"kafka.bootstrap_servers={bootstrap}", f"kafka.group_id={args.group_id}"]
    return load_config(CONFIG, overrides)


def taught_personal(config, vocabulary: list[str], seed: int):
    """configs/personal.toml's per-key models over a global model taught GLOBAL_EVENTS events of
    both classes (a key's counts need the classes the global model knows)."""
    model = config.build_model()
    personal = config.build_personal(model)
    rng = random.Random(seed + 1)
    for _ in range(GLOBAL_EVENTS):
        label = rng.choice(LABELS)
        model.learn_one(dict.fromkeys(rng.sample(vocabulary, 50), 1.0), label)
    return personal


def start_broker(directory: Path):
    from stream_nb.kafka.broker import LocalKafkaBroker

    broker = LocalKafkaBroker(directory)
    broker.start()
    return broker


def delete_topic(bootstrap: str, topic: str) -> None:
    """The changelog this run made on someone else's broker: 2 GB at the default size."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import KafkaError

    try:
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            admin.delete_topics([topic])
        finally:
            admin.close()
    except KafkaError as error:  # not made (a failed start), or the broker went: say so, keep the first error
        print(f"could not delete the changelog topic {topic}: {error}", file=sys.stderr)


def transactional_outputs(kafka: dict, client: dict, name: str):
    from stream_nb.kafka.clients import make_producer
    from stream_nb.worker.outputs import Outputs

    producer = make_producer(kafka, client, name)
    return Outputs(producer, None, exactly_once=True, commit_interval_s=1.0, transactional_id=name)


# ---- phase 1: the load -------------------------------------------------------------------------

def load(args, config, personal, events: KeyEvents, topic: str, stores: Path) -> tuple[dict, list]:
    """Every event into its partition's table, a transactional flush of every table every
    args.flush_every events; the figures, and the tables (flushed, open)."""
    kafka, client = config.require_kafka(), config.kafka_client
    n_classes = lambda: len(personal.classes_)  # noqa: E731
    tables = [StoredKeyTable(stores / f"p{p}", n_classes, idle_after=args.idle_after, cache_keys=args.cache_keys)
              for p in range(args.partitions)]
    positions = [0] * args.partitions  # labeled events of each partition: what its flush reflects
    outputs = transactional_outputs(kafka, client, f"key-scale-{uuid.uuid4().hex[:8]}")
    spent = dict.fromkeys(("events", "learn", "flush", "produce", "commit"), 0.0)
    payload = records = 0
    rss_curve = []
    baseline = status_mib("VmRSS")
    checkpoints = {len(events) * q // 4 for q in (1, 2, 3, 4)}
    clock = time.perf_counter

    def flush_all() -> None:
        nonlocal payload, records
        started = clock()
        flushes = [table.flush(position=positions[p]) for p, table in enumerate(tables)]
        sent = clock()
        outputs.begin(None)
        for p, flushed in enumerate(flushes):
            send_flush(outputs, topic, p, flushed)
            records += len(flushed)
            payload += sum(len(key) + len(value or b"") for key, value in flushed)
        committing = clock()
        outputs.commit({})
        done = clock()
        spent["flush"] += sent - started
        spent["produce"] += committing - sent
        spent["commit"] += done - committing

    started = clock()
    try:
        stream = iter(events)
        for done in range(1, len(events) + 1):
            at = clock()
            key, x, label = next(stream)
            p = partition_of(key, args.partitions)
            learning = clock()
            personal.learn_key(x, label, key, table=tables[p])
            personal.observe_labeled(key, tables[p])
            for other in tables:  # every partition's idle clock counts every labeled event (the worker's)
                if other is not tables[p]:
                    other.observe(None, args.idle_after)
            positions[p] += 1
            spent["events"] += learning - at
            spent["learn"] += clock() - learning
            if done % args.flush_every == 0 or done == len(events):
                flush_all()
            if done in checkpoints:
                rss_curve.append((done, status_mib("VmRSS")))
                print(f"  load: {done:,} events, {time.perf_counter() - started:,.0f} s, "
                      f"RSS {rss_curve[-1][1]:,.0f} MiB", flush=True)
    finally:
        outputs.producer.close()
    wall = clock() - started
    figures = {"events": len(events), "wall_s": wall, "spent": spent, "rss_baseline": baseline,
               "rss_curve": rss_curve, "rss_peak": status_mib("VmHWM"), "records": records, "payload": payload}
    return figures, tables


def table_shape(table: StoredKeyTable) -> tuple[int, int, int]:
    """(keys, features of all keys, most features of a key) from the stored bytes' headers."""
    keys = total = most = 0
    for key, value in table.db.items(from_key=b"k"):
        if not key.startswith(b"k"):
            break
        features = _FEATURE_COUNT.unpack_from(value, 8)[0]
        keys, total, most = keys + 1, total + features, max(most, features)
    return keys, total, most


def disk_figures(tables: list, stores: Path) -> dict:
    """The stores' bytes after the last flush with the memtables written to files, and after
    a full compaction (what RocksDB settles to)."""
    for table in tables:
        table.db.flush(True)
    flushed = files_bytes(stores)
    for table in tables:
        table.db.compact_range(None, None)
    return {"flushed": flushed, "compacted": files_bytes(stores)}


# ---- children: a restoring worker, the in-memory table -----------------------------------------

def restore_partitions(args) -> dict:
    """Restore --restore-partitions from the changelog into fresh stores, --repeats times each;
    a read-only pass first when --read-only-pass. Prints nothing but progress; returns figures."""
    config = config_of(args, args.bootstrap)
    kafka, client = config.require_kafka(), config.kafka_client
    n_classes = lambda: len(config.classes)  # noqa: E731  (restore and digest never widen a key)
    topic = args.topic
    base = Path(tempfile.mkdtemp(prefix="restore-", dir=args.work))
    out = {"partitions": {}, "rss_start": status_mib("VmRSS")}
    started = time.perf_counter()
    try:
        for p in args.restore_partitions:
            figures = {"times": []}
            if args.read_only_pass:
                at = time.perf_counter()
                read = read_changelog(kafka, client, topic, p)
                for _ in read:
                    pass
                figures["read_only_s"] = time.perf_counter() - at
            for repeat in range(args.repeats):
                path = base / f"p{p}-{repeat}"
                at = time.perf_counter()
                table = StoredKeyTable(path, n_classes, idle_after=args.idle_after, cache_keys=args.cache_keys)
                read = read_changelog(kafka, client, topic, p)
                applied = table.restore(read)
                figures["times"].append(time.perf_counter() - at)
                figures.update(records=applied, end=read.end, digest=table.digest(), keys=len(table),
                               clock=table.clock, evicted=table.evicted)
                table.close()
                shutil.rmtree(path, ignore_errors=True)
            out["partitions"][p] = figures
    finally:
        shutil.rmtree(base, ignore_errors=True)
    out["wall_s"] = time.perf_counter() - started
    out["rss_peak"] = status_mib("VmHWM")
    return out


def in_memory(args) -> dict:
    """The first --memory-keys keys' events in the in-memory KeyTable (personal.table): RSS before
    and after, per key held. No idle eviction here (the feature budget stays): one table has one
    clock for all keys, not one a partition, and the bytes a key are measured on all of them."""
    args.idle_after = None
    config = config_of(args, None)
    vocabulary = make_vocabulary(args.vocabulary, args.seed)
    personal = taught_personal(config, vocabulary, args.seed)
    events = KeyEvents(args.memory_keys, args.features, vocabulary, args.revisits, args.seed)
    before = status_mib("VmRSS")
    started = time.perf_counter()
    for key, x, label in events:
        personal.learn_key(x, label, key)
        personal.observe_labeled(key)
    seconds = time.perf_counter() - started
    return {"keys": len(personal.table.keys), "events": len(events), "rss_before": before,
            "rss_after": status_mib("VmRSS"), "seconds": seconds, "evicted": personal.table.evicted}


def child(args, role: str, **options) -> subprocess.Popen:
    """This script as another process in `role` (a worker of its own: its own RSS)."""
    command = [sys.executable, __file__, "--role", role]
    for name, value in {**vars(args), **options}.items():
        if name in ("role", "restore_partitions", "started") or value is None or value is False:
            continue
        command.append("--" + name.replace("_", "-"))
        if value is not True:
            command.append(str(value))
    if "restore_partitions" in options:
        command += ["--restore-partitions", *map(str, options["restore_partitions"])]
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True)


def result_of(process: subprocess.Popen) -> dict:
    output, _ = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"a child process failed (exit {process.returncode}):\n{output}")
    lines = [line for line in output.splitlines() if line.startswith(RESULT)]
    return json.loads(lines[-1][len(RESULT):])


# ---- the run -----------------------------------------------------------------------------------

def yes_no(flag: bool) -> str:
    return "yes" if flag else "no"


def report(args, load_figures: dict, shapes: list, disk: dict, changelog_files: int | None, memory: dict,
           digests: list, restore: dict, workers: list) -> bool:
    """Print the figures; True when every digest matched."""
    keys = sum(shape[0] for shape in shapes)
    spent, events = load_figures["spent"], load_figures["events"]
    learned_s = spent["learn"] + spent["flush"] + spent["produce"] + spent["commit"]
    budget = f"max {args.max_key_features} features a key" if args.max_key_features else "no feature budget"
    idle = f"evicted after {args.idle_after:,} idle labeled events" if args.idle_after else "no idle eviction"
    print()
    print("command: " + " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]))
    print(f"== {args.keys:,} keys, {args.features} features a first event, {args.partitions} partitions, cache "
          f"{args.cache_keys:,} keys a partition, {budget}, {idle}")
    print(f"load: {events:,} labeled events ({args.revisits:.0%} revisits), flush + transaction every "
          f"{args.flush_every:,} events")
    print(f"  learn+flush+produce        {events / learned_s:>12,.0f} events/s   ({learned_s:,.1f} s; wall with "
          f"event generation {load_figures['wall_s']:,.1f} s)")
    for name in ("learn", "flush", "produce", "commit"):
        print(f"    {name:<24} {spent[name] * 1e6 / events:>12,.1f} us/event ({spent[name] / learned_s:.0%})")
    print(f"  keys stored                {keys:>12,}   evicted {sum(s[3] for s in shapes):,}")
    print(f"  features a key             {sum(s[1] for s in shapes) / max(keys, 1):>12,.1f}   most "
          f"{max(s[2] for s in shapes):,}")
    print("  RSS as keys grow (MiB)     " + ", ".join(f"{rss:,.0f} at {done:,}" for done, rss in
                                                      load_figures["rss_curve"]))
    base = load_figures["rss_baseline"]
    print(f"  RSS before keys            {base:>12,.0f} MiB (model, vocabulary, clients)")
    print(f"  peak RSS (VmHWM)           {load_figures['rss_peak']:>12,.0f} MiB   "
          f"({(load_figures['rss_peak'] - base) * 2**20 / max(keys, 1):,.0f} bytes a key above the baseline)")
    print(f"  disk, after last flush     {disk['flushed'] / 2**20:>12,.1f} MiB   "
          f"{disk['flushed'] / max(keys, 1):,.0f} bytes a key (memtables written out, not compacted)")
    print(f"  disk, compacted            {disk['compacted'] / 2**20:>12,.1f} MiB   "
          f"{disk['compacted'] / max(keys, 1):,.0f} bytes a key (compact_range over everything)")
    print(f"  changelog payload          {load_figures['payload'] / 2**20:>12,.1f} MiB   "
          f"{load_figures['payload'] / args.keys:,.0f} bytes a key learned ({load_figures['records']:,} records: "
          f"keys + values, uncompacted)")
    if changelog_files is not None:
        print(f"  changelog on the broker    {changelog_files / 2**20:>12,.1f} MiB   "
              f"{changelog_files / args.keys:,.0f} bytes a key learned (.log files, before compaction)")
    held = memory["keys"]
    per_key = (memory["rss_after"] - memory["rss_before"]) * 2**20 / max(held, 1)
    projected = memory["rss_before"] + per_key * keys / 2**20
    print(f"in-memory KeyTable: {held:,} keys held ({memory['events']:,} events) in {memory['seconds']:.1f} s, "
          f"RSS {memory['rss_before']:,.0f} -> {memory['rss_after']:,.0f} MiB")
    print(f"  bytes a key in memory      {per_key:>12,.0f}")
    print(f"  {keys:,} keys in memory  {projected:>12,.0f} MiB projected, against a peak of "
          f"{load_figures['rss_peak']:,.0f} MiB stored: {projected / load_figures['rss_peak']:.1f}x")

    ok = True
    p = args.restore_partition
    figures = restore["partitions"][str(p)]
    median = statistics.median(figures["times"])
    equal = figures["digest"] == digests[p]
    ok &= equal
    print(f"restore of partition {p} by a new worker, median of {len(figures['times'])} "
          f"({', '.join(f'{t:.1f}' for t in figures['times'])} s):")
    print(f"  keys {figures['keys']:,}, records {figures['records']:,} (offsets to {figures['end']:,})")
    print(f"  {median:>8.1f} s  {figures['records'] / median:>10,.0f} records/s  {figures['keys'] / median:>10,.0f} "
          f"keys/s;  reading the changelog alone {figures['read_only_s']:.1f} s "
          f"({figures['read_only_s'] / median:.0%})")
    print(f"  peak RSS {restore['rss_peak']:,.0f} MiB;  digest equal: {yes_no(equal)}")
    print(f"two workers restoring at once (2 cores, shared with the broker), wall "
          f"{max(w['wall_s'] for w in workers):.1f} s:")
    for number, worker in enumerate(workers):
        parts = worker["partitions"]
        matches = [parts[str(q)]["digest"] == digests[q] for q in map(int, parts)]
        ok &= all(matches)
        print(f"  worker {number + 1}: partitions {', '.join(parts)}: {worker['wall_s']:.1f} s, "
              f"{sum(f['keys'] for f in parts.values()):,} keys, {sum(f['records'] for f in parts.values()):,} "
              f"records, peak RSS {worker['rss_peak']:,.0f} MiB, digests equal: {yes_no(all(matches))}")
    print(f"digest equal: {yes_no(ok)}   (the partitions' digests together: "
          f"{hashlib.sha256(''.join(digests).encode()).hexdigest()[:16]}, the same in every run of these options)")
    print(f"whole run {time.perf_counter() - args.started:,.0f} s")
    return ok


def main(args) -> int:
    args.started = time.perf_counter()
    work = Path(tempfile.mkdtemp(prefix="key_scale-"))
    args.work = str(work)
    broker = None
    try:
        if args.bootstrap is None:
            print(f"starting a Kafka broker in {work / 'kafka'} ...", flush=True)
            broker = start_broker(work / "kafka")
            args.bootstrap = broker.bootstrap
        args.group_id = f"key-scale-{uuid.uuid4().hex[:8]}"
        config = config_of(args, args.bootstrap)
        kafka, client = config.require_kafka(), config.kafka_client
        args.topic = f"{args.group_id}-keys-changelog"
        ensure_changelog(kafka, client, args.topic, args.partitions)

        vocabulary = make_vocabulary(args.vocabulary, args.seed)
        personal = taught_personal(config, vocabulary, args.seed)
        events = KeyEvents(args.keys, args.features, vocabulary, args.revisits, args.seed)
        print(f"load: {args.keys:,} keys, {len(events):,} events into {args.partitions} partitions ...", flush=True)
        load_figures, tables = load(args, config, personal, events, args.topic, work / "stores")
        del events, vocabulary
        shapes = [table_shape(table) + (table.evicted,) for table in tables]
        digests = [table.digest() for table in tables]
        disk = disk_figures(tables, work / "stores")
        for table in tables:
            table.close()
        changelog_files = None
        if broker is not None:
            changelog_files = sum(files_bytes(path, ".log") for path in broker.data_dir.glob(f"{args.topic}-*"))

        print("in-memory KeyTable ...", flush=True)
        memory = result_of(child(args, "memory"))
        print(f"restoring partition {args.restore_partition} ...", flush=True)
        restore = result_of(child(args, "restore", restore_partitions=[args.restore_partition], read_only_pass=True))
        print("two workers restoring half of the partitions each ...", flush=True)
        everything = list(range(args.partitions))
        halves = [everything[:args.partitions // 2], everything[args.partitions // 2:]]
        processes = [child(args, "restore", restore_partitions=half, repeats=1) for half in halves]
        workers = [result_of(process) for process in processes]
        return 0 if report(args, load_figures, shapes, disk, changelog_files, memory, digests, restore, workers) else 1
    finally:
        if broker is not None:
            broker.stop()
        elif getattr(args, "topic", None) is not None:
            delete_topic(args.bootstrap, args.topic)
        shutil.rmtree(work, ignore_errors=True)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--features", type=int, default=50, help="distinct features of a key's first event")
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--cache-keys", type=int, default=20_000, help="decoded keys cached per partition")
    parser.add_argument("--max-key-features", type=int, default=None, help="a key's feature budget")
    parser.add_argument("--idle-after", type=int, default=None,
                        help="labeled events of its partition without one of a key's that evict it")
    parser.add_argument("--repeats", type=int, default=3, help="restores of one partition (median)")
    parser.add_argument("--bootstrap", default=None, help="an existing broker (else one is started)")
    parser.add_argument("--transport", default="kafka-python", choices=("kafka-python", "confluent-kafka"))
    parser.add_argument("--revisits", type=float, default=0.25, help="share of keys with a second event")
    parser.add_argument("--flush-every", type=int, default=10_000, help="events between flushes (transactions)")
    parser.add_argument("--vocabulary", type=int, default=200_000, help="feature names keys draw from")
    parser.add_argument("--memory-keys", type=int, default=100_000, help="keys of the in-memory comparison")
    parser.add_argument("--restore-partition", type=int, default=0)
    parser.add_argument("--seed", type=int, default=26)
    # the children's (see `child`)
    parser.add_argument("--role", choices=("main", "restore", "memory"), default="main", help=argparse.SUPPRESS)
    parser.add_argument("--restore-partitions", type=int, nargs="*", help=argparse.SUPPRESS)
    parser.add_argument("--read-only-pass", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--group-id", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.partitions < 2 or not 0 <= args.restore_partition < args.partitions:
        parser.error("two partitions at least (two workers split them), and --restore-partition one of them")
    return args


if __name__ == "__main__":
    arguments = parse_args()
    if arguments.role == "restore":
        print(RESULT + json.dumps(restore_partitions(arguments)))
    elif arguments.role == "memory":
        print(RESULT + json.dumps(in_memory(arguments)))
    else:
        sys.exit(main(arguments))

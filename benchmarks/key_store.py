#!/usr/bin/env python3
"""Per-key model state: embedded stores x value encodings, measured.

Each key (user / mailbox) holds one naive Bayes state: ~50 feature names, each with one
float64 count per class, plus class_counts and class_totals.  The value of a key is that
whole state encoded as bytes (the same bytes go to the compacted Kafka changelog).

Stores:    rocksdict (Rdict, defaults / tuned), py-lmdb, stdlib sqlite3 (WAL, synchronous=NORMAL).
Encodings: json  -- compact JSON {"features": {name: [c0, c1]}, "class_counts": [..], "class_totals": [..]}
           bin   -- header + "\\0"-joined UTF-8 names + little-endian float64 arrays
                    (numpy.frombuffer reads them without copying).  Never pickle.

Phases per (store, encoding), each in a fresh child process (so RSS is per store):
  1. bulk load (restore from changelog): all keys in write batches / transactions of 10,000
  2. steady state: events in transactions of 500, key drawn Zipf-like; read, decode, add
     counts, encode, write back, commit -- without and with an LRU of decoded states
  3. random point reads of cold keys (store reopened after its files were dropped from the
     OS page cache with posix_fadvise(DONTNEED)), then the same keys again (warm)
  4. disk use after load and after compaction
  5. RSS: ru_maxrss and /proc/self/status VmRSS / RssAnon / RssFile after the load

The parent generates the synthetic changelog once per (keys, features, vocab, seed) into
--data, runs the encoding micro-benchmark, then runs every child --repeats times
(interleaved) and prints medians.

  nice -n 10 venv/bin/python key_store.py --keys 100000          # quick
  nice -n 10 venv/bin/python key_store.py                        # 1,000,000 keys
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import resource
import shutil
import statistics
import struct
import subprocess
import sys
import time
from collections import OrderedDict
from itertools import islice

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
N_CLASSES = 2
STORES = ["rocksdict", "rocksdict-tuned", "lmdb", "sqlite", "sqlite-16k"]
ENCODINGS = ["json", "bin"]


# ----------------------------------------------------------------------------- synthetic data

def make_vocab(size: int, seed: int) -> list[str]:
    """Deterministic pseudo-words, 8..20 chars: 70% plain words, 30% "#s:w1 w2" bigrams."""
    rng = np.random.default_rng(seed)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
    out: list[str] = []
    seen: set[str] = set()
    while len(out) < size:
        m = size - len(out) + 1000
        kind = rng.random(m) < 0.3
        l1 = rng.integers(8, 17, m)
        la = rng.integers(4, 8, m)
        lb = rng.integers(4, 9, m)
        pool = letters[rng.integers(0, 26, (m, 16))].tobytes()
        for i in range(m):
            row = pool[i * 16:(i + 1) * 16].decode()
            if kind[i]:
                w = "#s:" + row[:la[i]] + " " + row[8:8 + lb[i]]
            else:
                w = row[:l1[i]]
            if w not in seen:
                seen.add(w)
                out.append(w)
                if len(out) == size:
                    break
    return out


def zipf_cdf(n: int, s: float) -> np.ndarray:
    w = 1.0 / np.arange(1, n + 1, dtype=np.float64) ** s
    c = np.cumsum(w)
    return c / c[-1]


def key_bytes(i: int) -> bytes:
    return b"mbox:%08d" % i


def gen_states(n_keys: int, n_feat: int, vocab: list[str], seed: int, batch: int):
    """Yields lists of (key_id, names, counts[n,2], class_counts[2], class_totals[2]).

    Keys come in a random permutation (a changelog is not sorted by key)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(n_keys).astype(np.int64)
    cdf = zipf_cdf(len(vocab), 1.0)
    for b0 in range(0, n_keys, batch):
        ids = order[b0:b0 + batch]
        B = len(ids)
        draws = np.searchsorted(cdf, rng.random((B, 3 * n_feat))).tolist()
        counts = (rng.geometric(0.35, (B, n_feat, N_CLASSES)) - 1).astype(np.float64)
        docs = rng.integers(5, 400, (B, N_CLASSES)).astype(np.float64)
        out = []
        for r in range(B):
            uniq = list(dict.fromkeys(draws[r]))
            while len(uniq) < n_feat:  # rare: top-heavy draws; top up deterministically
                extra = np.searchsorted(cdf, rng.random(n_feat)).tolist()
                uniq = list(dict.fromkeys(uniq + extra))
            names = [vocab[j] for j in uniq[:n_feat]]
            c = counts[r]
            out.append((int(ids[r]), names, c, docs[r].copy(), c.sum(axis=0) + docs[r]))
        yield out


# ----------------------------------------------------------------------------- encodings

class JsonCodec:
    """Compact JSON. Decoded state is the dict itself (lists are mutable)."""
    name = "json"

    @staticmethod
    def from_parts(names, counts, cc, ct):
        return {"features": dict(zip(names, counts.tolist())),
                "class_counts": cc.tolist(), "class_totals": ct.tolist()}

    @staticmethod
    def encode(st) -> bytes:
        return json.dumps(st, separators=(",", ":"), allow_nan=False).encode()

    @staticmethod
    def decode(b):
        return json.loads(b)

    @staticmethod
    def update(st, c, pos, new):
        f = st["features"]
        names = list(islice(f, 50))
        n = len(names)
        for p in pos:
            f[names[p % n]][c] += 1.0
        touched = len(pos)
        if new is not None:
            v = f.get(new)
            if v is None:
                f[new] = v = [0.0] * len(st["class_counts"])
            v[c] += 1.0
            touched += 1
        st["class_counts"][c] += 1.0
        st["class_totals"][c] += touched


class BinState:
    __slots__ = ("names", "counts", "cc", "ct", "idx")

    def __init__(self, names, counts, cc, ct):
        self.names, self.counts, self.cc, self.ct, self.idx = names, counts, cc, ct, None


# magic, version, n_classes, n_features, byte length of the \0-joined names
HDR = struct.Struct("<2sBBII")
MAGIC = b"NB"
VERSION = 1


def bin_encode_parts(names, counts, cc, ct) -> bytes:
    k = len(cc)
    n = len(names)
    nb = "\0".join(names).encode("utf-8")
    # "\0" is the separator: no name may contain it (n-1 separators exactly)
    if nb.count(b"\0") != max(n - 1, 0) or (n == 1 and not nb):
        raise ValueError("feature name contains NUL or is empty")
    pad = -(HDR.size + len(nb)) % 8  # float64 arrays 8-aligned inside the value
    return b"".join((HDR.pack(MAGIC, VERSION, k, n, len(nb)), nb, b"\0" * pad,
                     counts.astype("<f8", copy=False).tobytes(),
                     cc.astype("<f8", copy=False).tobytes(),
                     ct.astype("<f8", copy=False).tobytes()))


def bin_decode_view(b):
    """Zero-copy: names list + read-only float64 views into b."""
    magic, ver, k, n, L = HDR.unpack_from(b, 0)
    if magic != MAGIC or ver != VERSION:
        raise ValueError("bad header")
    off = HDR.size + L
    off += -off % 8
    if len(b) != off + 8 * (n * k + 2 * k):
        raise ValueError("bad length")
    names = bytes(b[HDR.size:HDR.size + L]).decode("utf-8").split("\0") if n else []
    if len(names) != n:
        raise ValueError("bad names")
    counts = np.frombuffer(b, "<f8", n * k, off).reshape(n, k)
    cc = np.frombuffer(b, "<f8", k, off + 8 * n * k)
    ct = np.frombuffer(b, "<f8", k, off + 8 * (n * k + k))
    return names, counts, cc, ct


class BinCodec:
    """Binary layout; decoded (mutable) state = names + writable copies of the arrays."""
    name = "bin"

    @staticmethod
    def from_parts(names, counts, cc, ct):
        return BinState(list(names), counts.copy(), cc.copy(), ct.copy())

    @staticmethod
    def encode(st) -> bytes:
        return bin_encode_parts(st.names, st.counts, st.cc, st.ct)

    @staticmethod
    def decode(b):
        names, counts, cc, ct = bin_decode_view(b)
        return BinState(names, counts.copy(), cc.copy(), ct.copy())

    @staticmethod
    def update(st, c, pos, new):
        idx = st.idx
        if idx is None:
            idx = st.idx = dict(zip(st.names, range(len(st.names))))
        names = st.names
        n = len(names)
        counts = st.counts
        for p in pos:
            counts[idx[names[p % n]], c] += 1.0
        touched = len(pos)
        if new is not None:
            i = idx.get(new)
            if i is None:
                i = idx[new] = len(names)
                names.append(new)
                st.counts = counts = np.vstack((counts, np.zeros((1, counts.shape[1]))))
            counts[i, c] += 1.0
            touched += 1
        st.cc[c] += 1.0
        st.ct[c] += touched


CODECS = {"json": JsonCodec, "bin": BinCodec}


# ----------------------------------------------------------------------------- stores

class RocksStore:
    def __init__(self, path, tuned):
        import rocksdict as rd
        self.rd, self.path, self.tuned = rd, path, tuned
        self.open()

    def open(self):
        rd = self.rd
        opt = rd.Options(raw_mode=True)  # raw bytes in/out; the non-raw mode pickles values
        self.wopt = None
        if self.tuned:
            opt.set_write_buffer_size(64 << 20)
            opt.set_max_write_buffer_number(3)
            opt.increase_parallelism(2)
            opt.set_compression_type(rd.DBCompressionType.lz4())
            bbo = rd.BlockBasedOptions()
            bbo.set_block_cache(rd.Cache(64 << 20))
            bbo.set_bloom_filter(10, False)
            opt.set_block_based_table_factory(bbo)
            self.wopt = rd.WriteOptions()
            self.wopt.disable_wal = True  # the changelog is the source of truth
        self.db = rd.Rdict(self.path, opt)

    def put_batch(self, items):
        wb = self.rd.WriteBatch(raw_mode=True)
        for k, v in items:
            wb.put(k, v)
        if self.wopt is None:
            self.db.write(wb)
        else:
            self.db.write(wb, self.wopt)

    def get(self, k):
        return self.db.get(k)

    def end_load(self):
        self.db.flush(True)  # memtables to SST (needed for kill -9 safety when WAL is off)

    def compact(self):
        self.db.flush(True)
        self.db.compact_range(None, None)
        return None

    def close(self):
        self.db.flush(True)
        self.db.close()


class LmdbStore:
    def __init__(self, path):
        import lmdb
        self.lmdb, self.path = lmdb, path
        self.open()

    def open(self):
        # defaults: sync=True, metasync=True (fsync per commit), writemap=False.
        # readahead=False: random access over a file that may exceed RAM.
        self.env = self.lmdb.open(self.path, map_size=64 << 30, readahead=False,
                                  max_dbs=0, sync=True, metasync=True, writemap=False)

    def put_batch(self, items):
        with self.env.begin(write=True) as txn:
            txn.cursor().putmulti(items)

    def get(self, k):
        with self.env.begin(buffers=False) as txn:
            return txn.get(k)

    def end_load(self):
        pass

    def compact(self):
        dst = self.path + ".compact"
        shutil.rmtree(dst, ignore_errors=True)
        os.makedirs(dst)
        self.env.copy(dst, compact=True)
        size = du(dst)
        shutil.rmtree(dst)
        return size

    def close(self):
        self.env.close()


class SqliteStore:
    def __init__(self, path, page_size=None):
        import sqlite3
        self.sqlite3, self.path, self.page_size = sqlite3, path, page_size
        os.makedirs(path, exist_ok=True)
        self.open()
        self.con.execute("CREATE TABLE IF NOT EXISTS kv (k BLOB PRIMARY KEY, v BLOB NOT NULL)")

    def open(self):
        con = self.sqlite3.connect(os.path.join(self.path, "kv.sqlite"), isolation_level=None)
        if self.page_size:  # must precede WAL / the first table; 4096 fits 2 values of ~1.5 KB
            con.execute(f"PRAGMA page_size={int(self.page_size)}")
        con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=NORMAL")
        con.execute("PRAGMA cache_size=-65536")  # 64 MiB page cache
        self.con = con

    def put_batch(self, items):
        con = self.con
        con.execute("BEGIN")
        con.executemany("INSERT INTO kv(k, v) VALUES (?, ?) "
                        "ON CONFLICT(k) DO UPDATE SET v = excluded.v", items)
        con.execute("COMMIT")

    def get(self, k):
        r = self.con.execute("SELECT v FROM kv WHERE k = ?", (k,)).fetchone()
        return None if r is None else r[0]

    def end_load(self):
        pass

    def compact(self):
        self.con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        self.con.execute("VACUUM")
        self.con.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return None

    def close(self):
        self.con.close()


def open_store(name, path):
    if name == "rocksdict":
        return RocksStore(path, tuned=False)
    if name == "rocksdict-tuned":
        return RocksStore(path, tuned=True)
    if name == "lmdb":
        return LmdbStore(path)
    if name == "sqlite":
        return SqliteStore(path)
    if name == "sqlite-16k":
        return SqliteStore(path, page_size=16384)
    raise SystemExit(f"unknown store {name}")


# ----------------------------------------------------------------------------- helpers

def du(path) -> int:
    """Bytes allocated on disk (like du), following no symlinks."""
    tot = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                tot += os.lstat(os.path.join(root, f)).st_blocks * 512
            except FileNotFoundError:
                pass
    return tot


def drop_page_cache(path):
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                fd = os.open(os.path.join(root, f), os.O_RDONLY)
            except OSError:
                continue
            try:
                os.fsync(fd)
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            except OSError:
                pass
            finally:
                os.close(fd)


def proc_status() -> dict:
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            k, _, v = line.partition(":")
            if k in ("VmRSS", "RssAnon", "RssFile", "VmHWM"):
                out[k] = int(v.split()[0]) * 1024
    return out


def data_paths(a):
    tag = f"k{a.keys}_f{a.features}_v{a.vocab}_s{a.seed}"
    return {e: (os.path.join(a.data, f"changelog_{tag}_{e}.bin"),
                os.path.join(a.data, f"changelog_{tag}_{e}.idx.npz")) for e in ENCODINGS}


# ----------------------------------------------------------------------------- parent: data

def generate(a, vocab):
    paths = data_paths(a)
    sample = []  # raw parts of the first states, for the encoding micro-benchmark
    if all(os.path.exists(p[1]) for p in paths.values()):
        for batch in gen_states(min(a.keys, a.micro), a.features, vocab, a.seed, a.micro):
            sample = batch
            break
        return paths, sample
    os.makedirs(a.data, exist_ok=True)
    t0 = time.perf_counter()
    files = {e: open(paths[e][0] + ".tmp", "wb") for e in ENCODINGS}
    offs = {e: [0] for e in ENCODINGS}
    order = []
    for batch in gen_states(a.keys, a.features, vocab, a.seed, 10_000):
        if len(sample) < a.micro:
            sample.extend(batch[:a.micro - len(sample)])
        for e in ENCODINGS:
            cod = CODECS[e]
            f, o = files[e], offs[e]
            pos = o[-1]
            for (_kid, names, c, cc, ct) in batch:
                v = cod.encode(cod.from_parts(names, c, cc, ct))
                f.write(v)
                pos += len(v)
                o.append(pos)
        order.extend(r[0] for r in batch)
    for e in ENCODINGS:
        files[e].close()
        np.savez(paths[e][1] + ".tmp.npz", order=np.array(order, np.int64),
                 offsets=np.array(offs[e], np.int64))
        os.replace(paths[e][0] + ".tmp", paths[e][0])
        os.replace(paths[e][1] + ".tmp.npz", paths[e][1])
    print(f"# generated changelogs for {a.keys:,} keys in {time.perf_counter() - t0:.0f} s",
          flush=True)
    return paths, sample


def micro_bench(sample, repeats):
    """Encode / decode time per key and size per key, both encodings, same states."""
    rows = {}
    variants = [("json", JsonCodec, False), ("bin", BinCodec, False),
                ("json, fractional counts", JsonCodec, True),
                ("bin, fractional counts", BinCodec, True)]
    rng = np.random.default_rng(7)
    for label, cod, frac in variants:
        states = []
        for (_k, names, c, cc, ct) in sample:
            if frac:  # e.g. tf-idf / decayed weights instead of integer counts
                c = c * rng.random(c.shape)
            states.append(cod.from_parts(names, c, cc, ct))
        enc_t, dec_t, view_t = [], [], []
        for _ in range(repeats):
            gc.collect()
            t = time.perf_counter()
            blobs = [cod.encode(s) for s in states]
            enc_t.append((time.perf_counter() - t) / len(states))
            t = time.perf_counter()
            for b in blobs:
                cod.decode(b)
            dec_t.append((time.perf_counter() - t) / len(states))
            if cod is BinCodec:
                t = time.perf_counter()
                for b in blobs:
                    bin_decode_view(b)
                view_t.append((time.perf_counter() - t) / len(states))
        # round trip check
        for s, b in zip(states[:200], blobs[:200]):
            assert cod.encode(cod.decode(b)) == b
        rows[label] = {"enc_us": statistics.median(enc_t) * 1e6,
                       "dec_us": statistics.median(dec_t) * 1e6,
                       "view_us": statistics.median(view_t) * 1e6 if view_t else None,
                       "bytes": statistics.mean(len(b) for b in blobs),
                       "all_enc": [x * 1e6 for x in enc_t], "all_dec": [x * 1e6 for x in dec_t]}
    return rows


# ----------------------------------------------------------------------------- child

def gen_events(n_keys, n_events, vocab_size, seed):
    """Events as numpy arrays (converted to lists per transaction, to keep RSS small).

    key: Zipf-like (s=1.0) over all keys, rank -> key id by a fixed permutation;
    pos: 4 positions among the key's first 50 features (counts added to those names);
    new: with probability 0.05 one feature name drawn Zipf-like from the vocabulary
         (added if the key does not have it yet: hot keys grow), else -1."""
    rng = np.random.default_rng(seed)
    perm = np.random.default_rng(12345).permutation(n_keys)
    ranks = np.searchsorted(zipf_cdf(n_keys, 1.0), rng.random(n_events))
    ev_key = perm[ranks].astype(np.int64)
    ev_cls = rng.integers(0, N_CLASSES, n_events).astype(np.int8)
    ev_pos = rng.integers(0, 50, (n_events, 4)).astype(np.int8)
    new = np.searchsorted(zipf_cdf(vocab_size, 1.0), rng.random(n_events))
    ev_new = np.where(rng.random(n_events) < 0.05, new, -1).astype(np.int64)
    return ev_key, ev_cls, ev_pos, ev_new


def concat_events(a, b):
    return tuple(np.concatenate((x, y)) for x, y in zip(a, b))


def run_events(store, cod, vocab, events, txn, cap, n_warm=0):
    """The worker loop: per transaction of `txn` events, read+decode each key (unless it is
    dirty in this transaction or in the LRU of `cap` decoded states), update, then encode every
    dirty state and write them in one batch/commit.  The first n_warm events are untimed."""
    ev_key, ev_cls, ev_pos, ev_new = events
    E = len(ev_key)
    lru: OrderedDict = OrderedDict()
    hits = reuse = 0
    get, decode, encode, update = store.get, cod.decode, cod.encode, cod.update
    t0 = None
    rss_lru = None
    for b0 in range(0, E, txn):
        if b0 >= n_warm and t0 is None:
            hits = reuse = 0
            t0 = time.perf_counter()
        b1 = min(b0 + txn, E)
        keys = ev_key[b0:b1].tolist()
        cls = ev_cls[b0:b1].tolist()
        pos = ev_pos[b0:b1].tolist()
        new = ev_new[b0:b1].tolist()
        dirty = {}
        for j in range(b1 - b0):
            key = key_bytes(keys[j])
            st = dirty.get(key)
            if st is not None:
                reuse += 1
                if cap and key in lru:
                    lru.move_to_end(key)
            else:
                st = lru.get(key) if cap else None
                if st is not None:
                    hits += 1
                    lru.move_to_end(key)
                else:
                    st = decode(get(key))
                    if cap:
                        lru[key] = st
                        if len(lru) > cap:
                            lru.popitem(last=False)  # a dirty one is still written below
                dirty[key] = st
            nw = new[j]
            update(st, cls[j], pos[j], vocab[nw] if nw >= 0 else None)
        store.put_batch([(k, encode(s)) for k, s in dirty.items()])  # one commit per batch
    dt = time.perf_counter() - t0
    if cap:
        rss_lru = proc_status()["VmRSS"]
    n = E - n_warm
    return {"ev_s": n / dt, "sec": dt,
            "hit_rate": (hits + reuse) / n if cap else None,  # LRU or dirty-in-this-txn
            "txn_reuse": reuse / n, "rss_with_lru": rss_lru}


def child(a):
    cod = CODECS[a.encoding]
    vocab = make_vocab(a.vocab, a.seed + 1)
    blob_path, idx_path = data_paths(a)[a.encoding]
    z = np.load(idx_path)
    order, offsets = z["order"], z["offsets"]
    n = len(order)
    ev1 = gen_events(n, a.events, a.vocab, a.seed + 101)
    ev2 = gen_events(n, a.events, a.vocab, a.seed + 202)
    warm = gen_events(n, a.cache, a.vocab, a.seed + 303)
    res = {"store": a.store, "encoding": a.encoding, "keys": n}
    spath = os.path.join(a.data, f"store_{a.store}_{a.encoding}")
    shutil.rmtree(spath, ignore_errors=True)
    os.makedirs(spath)
    gc.collect()
    res["rss_base"] = proc_status()["VmRSS"]

    # 1. bulk load from the changelog file (reading the file is outside the timed region)
    store = open_store(a.store, spath)
    t_put = 0.0
    with open(blob_path, "rb") as f:
        for b0 in range(0, n, a.load_batch):
            b1 = min(b0 + a.load_batch, n)
            buf = f.read(int(offsets[b1] - offsets[b0]))
            base = int(offsets[b0])
            offs = (offsets[b0:b1 + 1] - base).tolist()
            ids = order[b0:b1].tolist()
            items = [(key_bytes(ids[i]), buf[offs[i]:offs[i + 1]]) for i in range(b1 - b0)]
            t = time.perf_counter()
            store.put_batch(items)
            t_put += time.perf_counter() - t
    t = time.perf_counter()
    store.end_load()
    t_put += time.perf_counter() - t
    res["load_s"] = t_put
    res["load_keys_s"] = n / t_put
    st = proc_status()
    res["rss_after_load"] = st["VmRSS"]
    res["rss_anon_after_load"] = st.get("RssAnon")
    res["rss_file_after_load"] = st.get("RssFile")
    res["disk_after_load"] = du(spath)
    res["value_bytes"] = int(offsets[-1]) / n

    # 2. steady state: no cache, then a 50k-entry LRU (warmed first, untimed)
    res["steady_nocache"] = run_events(store, cod, vocab, ev1, a.txn, 0)
    # LRU run: warmed with other events first (untimed), then ev2 timed
    res["steady_cache"] = run_events(store, cod, vocab, concat_events(warm, ev2), a.txn,
                                     a.cache, n_warm=len(warm[0]))

    hot = key_bytes(int(np.random.default_rng(12345).permutation(n)[0]))
    res["hottest_key_bytes"] = len(store.get(hot))

    # 3. cold point reads: store closed, its files dropped from page cache, reopened
    store.close()
    drop_page_cache(spath)
    store.open()
    rng = np.random.default_rng(a.seed + 404)
    ids = rng.integers(0, n, a.reads).tolist()
    keys = [key_bytes(order[i]) for i in ids]
    lat = []
    get = store.get
    for k in keys:
        t = time.perf_counter_ns()
        v = get(k)
        lat.append(time.perf_counter_ns() - t)
        if v is None:
            raise SystemExit(f"missing key {k!r}")
    lat.sort()
    res["cold_p50_us"] = lat[len(lat) // 2] / 1000
    res["cold_p99_us"] = lat[int(len(lat) * 0.99)] / 1000
    lat = []
    for k in keys:
        t = time.perf_counter_ns()
        get(k)
        lat.append(time.perf_counter_ns() - t)
    lat.sort()
    res["warm_p50_us"] = lat[len(lat) // 2] / 1000
    res["warm_p99_us"] = lat[int(len(lat) * 0.99)] / 1000

    # 4. disk after the steady phases and after compaction
    res["disk_after_updates"] = du(spath)
    if a.compact:
        t = time.perf_counter()
        size = store.compact()
        res["compact_s"] = time.perf_counter() - t
        res["disk_after_compact"] = size if size is not None else du(spath)
    st = proc_status()
    res["rss_end"] = st["VmRSS"]
    store.close()
    res["ru_maxrss"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    shutil.rmtree(spath, ignore_errors=True)
    print("RESULT " + json.dumps(res), flush=True)


# ----------------------------------------------------------------------------- parent: report

def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(x, spec):
    return "-" if x is None else format(x, spec)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", type=int, default=1_000_000)
    p.add_argument("--features", type=int, default=50)
    p.add_argument("--vocab", type=int, default=200_000)
    p.add_argument("--seed", type=int, default=20240601)
    p.add_argument("--stores", default=",".join(STORES))
    p.add_argument("--encodings", default=",".join(ENCODINGS))
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--load-batch", type=int, default=10_000)
    p.add_argument("--events", type=int, default=200_000)
    p.add_argument("--txn", type=int, default=500)
    p.add_argument("--cache", type=int, default=50_000)
    p.add_argument("--reads", type=int, default=20_000)
    p.add_argument("--micro", type=int, default=20_000, help="states in the encoding micro-benchmark")
    p.add_argument("--no-compact", dest="compact", action="store_false")
    p.add_argument("--compact-reps", type=int, default=1,
                   help="run the compaction phase only in the first N repeats (it is slow)")
    p.add_argument("--data", default=os.path.join(HERE, "data"))
    p.add_argument("--json-out", default=None, help="also write all raw results here")
    # internal
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--store", help=argparse.SUPPRESS)
    p.add_argument("--encoding", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        return child(a)

    import platform
    import sqlite3
    vers = {"python": platform.python_version(), "numpy": np.__version__,
            "sqlite": sqlite3.sqlite_version}
    for mod in ("rocksdict", "lmdb"):
        try:
            from importlib.metadata import version
            vers[mod] = version(mod)
        except Exception:
            vers[mod] = "not installed"
    print("# versions:", vers)
    print(f"# keys={a.keys:,} features/key={a.features} vocab={a.vocab:,} seed={a.seed} "
          f"repeats={a.repeats} events={a.events:,} txn={a.txn} cache={a.cache:,}", flush=True)

    vocab = make_vocab(a.vocab, a.seed + 1)
    _paths, sample = generate(a, vocab)
    del vocab

    mb = micro_bench(sample, a.repeats)
    print(f"\n## Encoding of one key's value ({len(sample):,} states, median of {a.repeats})")
    print(f"{'encoding':28s} {'bytes/key':>10s} {'encode µs':>10s} {'decode µs':>10s} "
          f"{'enc+dec µs':>11s} {'view µs':>8s}")
    for k, r in mb.items():
        print(f"{k:28s} {r['bytes']:10.0f} {r['enc_us']:10.1f} {r['dec_us']:10.1f} "
              f"{r['enc_us'] + r['dec_us']:11.1f} {fmt(r['view_us'], '8.1f')}")
    print("(decode = to a mutable state; view = bin zero-copy numpy.frombuffer views only)",
          flush=True)
    del sample

    stores = [s for s in a.stores.split(",") if s]
    encs = [e for e in a.encodings.split(",") if e]
    results: dict = {}
    passthru = ["--keys", str(a.keys), "--features", str(a.features), "--vocab", str(a.vocab),
                "--seed", str(a.seed), "--load-batch", str(a.load_batch), "--events",
                str(a.events), "--txn", str(a.txn), "--cache", str(a.cache), "--reads",
                str(a.reads), "--data", a.data] + ([] if a.compact else ["--no-compact"])
    for rep in range(a.repeats):
        for s in stores:
            for e in encs:
                t0 = time.perf_counter()
                cmd = [sys.executable, os.path.abspath(__file__), "--child", "--store", s,
                       "--encoding", e] + passthru
                if rep >= a.compact_reps and "--no-compact" not in cmd:
                    cmd.append("--no-compact")
                pr = subprocess.run(cmd, capture_output=True, text=True)
                line = [l for l in pr.stdout.splitlines() if l.startswith("RESULT ")]
                if pr.returncode != 0 or not line:
                    print(f"# {s}/{e} rep {rep + 1}: FAILED rc={pr.returncode}\n{pr.stderr[-2000:]}",
                          flush=True)
                    continue
                r = json.loads(line[0][7:])
                results.setdefault((s, e), []).append(r)
                print(f"# rep {rep + 1} {s:16s} {e:4s} {time.perf_counter() - t0:6.0f} s  "
                      f"load {r['load_keys_s']:8.0f} keys/s  "
                      f"steady {r['steady_nocache']['ev_s']:6.0f} / LRU {r['steady_cache']['ev_s']:6.0f} ev/s",
                      flush=True)

    MB = 1 << 20

    def m(rs, f):
        return med([f(r) for r in rs])

    print(f"\n## Stores x encodings, {a.keys:,} keys (median of {a.repeats} runs, each a fresh process)")
    hdr = (f"{'store':16s} {'enc':4s} {'load s':>7s} {'keys/s':>8s} {'upd ev/s':>8s} "
           f"{'LRU ev/s':>8s} {'hit%':>5s} {'cold p50':>8s} {'p99 µs':>8s} {'warm p50':>8s} "
           f"{'disk MB':>8s} {'B/key':>6s} {'upd MB':>7s} {'cmp MB':>7s} {'cmp s':>6s} "
           f"{'RSS MB':>7s} {'anon':>6s} {'w/LRU':>6s} {'maxrss':>7s} {'hot KB':>6s}")
    print(hdr)
    for (s, e), rs in results.items():
        n = rs[0]["keys"]
        cmp_ = m(rs, lambda r: r.get("disk_after_compact"))
        print(f"{s:16s} {e:4s} {m(rs, lambda r: r['load_s']):7.1f} "
              f"{m(rs, lambda r: r['load_keys_s']):8.0f} "
              f"{m(rs, lambda r: r['steady_nocache']['ev_s']):8.0f} "
              f"{m(rs, lambda r: r['steady_cache']['ev_s']):8.0f} "
              f"{100 * m(rs, lambda r: r['steady_cache']['hit_rate']):5.1f} "
              f"{m(rs, lambda r: r['cold_p50_us']):8.1f} {m(rs, lambda r: r['cold_p99_us']):8.1f} "
              f"{m(rs, lambda r: r['warm_p50_us']):8.1f} "
              f"{m(rs, lambda r: r['disk_after_load']) / MB:8.0f} "
              f"{m(rs, lambda r: r['disk_after_load']) / n:6.0f} "
              f"{m(rs, lambda r: r['disk_after_updates']) / MB:7.0f} "
              f"{fmt(cmp_ / MB if cmp_ is not None else None, '7.0f')} "
              f"{fmt(m(rs, lambda r: r.get('compact_s')), '6.1f')} "
              f"{m(rs, lambda r: r['rss_after_load']) / MB:7.0f} "
              f"{m(rs, lambda r: r['rss_anon_after_load']) / MB:6.0f} "
              f"{m(rs, lambda r: r['steady_cache']['rss_with_lru']) / MB:6.0f} "
              f"{m(rs, lambda r: r['ru_maxrss']) / MB:7.0f} "
              f"{m(rs, lambda r: r['hottest_key_bytes']) / 1024:6.1f}")
    print("load = puts in batches of %d incl. a final flush (rocksdict); upd = no cache, txn of %d;"
          " LRU = %d decoded states, dirty written at commit; cold = after fadvise(DONTNEED) + reopen;"
          " disk = allocated bytes (du) after load / after updates / after compaction"
          " (lmdb: size of a compacting copy; compaction only in the first %d run(s));"
          " RSS = VmRSS after load (anon = RssAnon), w/LRU = VmRSS holding the full LRU,"
          " maxrss = ru_maxrss at end; hot KB = value of the hottest key after all updates;"
          " baseline VmRSS before opening the store ~%.0f MB."
          % (a.load_batch, a.txn, a.cache, a.compact_reps,
             med([r["rss_base"] for rs in results.values() for r in rs] or [0]) / MB))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"versions": vers, "args": vars(a), "micro": mb,
                       "runs": {f"{s}/{e}": rs for (s, e), rs in results.items()}}, f, indent=1)


if __name__ == "__main__":
    main()

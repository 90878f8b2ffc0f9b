#!/usr/bin/env python
"""What JSON costs on the worker's hot path, and what orjson would save: measured before adopting.

On the SMS Spam Collection as the worker receives it (each message as {"id","text"} bytes, every
fifth as {"id","text","label"}), in this process, medians of --repeats timed passes over all
events, per event in microseconds:

  decode   stream_nb's decode_records (the event contract: duplicate keys and NaN refused, types
           and lengths checked) against its json part alone (the same JSONDecoder), plain
           json.loads, and orjson.loads (which cannot report a duplicate key: the contract would
           need a second check).
  encode   encode_prediction for each event (a 2-class prediction with labeled offsets and 3
           clues, as configs/spam.toml publishes), PredictionEncoder as the worker uses it (one per
           batch of 1,000), against json.dumps of the same object and orjson.dumps.

The saving is then set against the worker's cost per event from the same machine
(--worker-rate, events/s, e.g. kafka_throughput's figure): saving per event / cost per event.
orjson is not a dependency; without it those columns say so.

    .venv/bin/python benchmarks/json_codec.py --worker-rate 20000
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
DEFAULT_CORPUS = REPO.parent / "shared" / "data" / "sms_spam_collection" / "SMSSpamCollection"


def per_event_us(function, n_events: int, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        function()
        times.append(time.perf_counter() - started)
    return statistics.median(times) / n_events * 1e6


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--worker-rate", type=float, default=None, help="the worker's events/s, to set the saving against")
    args = parser.parse_args(argv)
    if not args.corpus.is_file():
        print(f"json_codec: corpus not found at {args.corpus}", file=sys.stderr)
        return 2
    from stream_nb.events.codec import (
        _DECODER,
        PredictionEncoder,
        SourcePosition,
        decode_records,
        encode_prediction,
    )
    from stream_nb.replay.corpora import sms_spam

    try:
        import orjson
    except ImportError:
        orjson = None
    rows = [(event["label"], event["text"]) for event in sms_spam(args.corpus)]
    values = []
    for i, (label, text) in enumerate(rows):
        event = {"id": f"sms:{i}", "text": text, **({"label": label} if i % 5 == 0 else {})}
        values.append(json.dumps(event).encode())
    unlabeled = [(v, None, (), SourcePosition("u", 0, i)) for i, v in enumerate(values) if b'"label"' not in v]
    n = len(unlabeled)
    raw = [value for value, *_ in unlabeled]

    decode = {
        "decode_records (the contract)": lambda: decode_records(unlabeled, labeled=False),
        "its JSONDecoder alone": lambda: [_DECODER.decode(v.decode("utf-8")) for v in raw],
        "json.loads": lambda: [json.loads(v) for v in raw],
    }
    if orjson is not None:
        decode["orjson.loads"] = lambda: [orjson.loads(v) for v in raw]
    events, _ = decode_records(unlabeled, labeled=False)
    offsets = [["messages-labeled", 0, 1115]]
    clues = [["free", 3.1416], ["txt", 2.7183], ["claim", 1.4142]]
    proba = {"ham": 0.0123, "spam": 0.9877}
    messages = [{"id": e.id, "label": "spam", "proba": proba,
                 "model": {"events_learned": 1000, "checkpoint": None, "labeled_offsets": offsets},
                 "verdict": "spam", "clues": clues} for e in events]
    def encode_in_batches(events, size=1000):
        """As the worker encodes: one encoder per batch (the model part encoded once)."""
        encoded = []
        for start in range(0, len(events), size):
            encoder = PredictionEncoder(events_learned=1000, checkpoint=None, labeled_offsets=offsets)
            encoded += [encoder.encode(e, proba, verdict="spam", clues=clues) for e in events[start : start + size]]
        return encoded

    encode = {
        "encode_prediction": lambda: [encode_prediction(e, proba, events_learned=1000, checkpoint=None,
                                                        labeled_offsets=offsets, verdict="spam", clues=clues)
                                      for e in events],
        "PredictionEncoder, one per 1,000": lambda: encode_in_batches(events),
        "json.dumps (its settings)": lambda: [json.dumps(m, ensure_ascii=False, separators=(",", ":"),
                                                         allow_nan=False).encode() for m in messages],
    }
    if orjson is not None:
        encode["orjson.dumps"] = lambda: [orjson.dumps(m) for m in messages]

    print(f"json_codec: {n:,} unlabeled SMS events, medians of {args.repeats} passes, µs per event"
          f"{'' if orjson else ' (orjson not installed)'}")
    figures = {}
    for name, function in {**decode, **encode}.items():
        function()  # warm-up
        figures[name] = per_event_us(function, n, args.repeats)
        print(f"  {name:<34} {figures[name]:7.2f} µs")
    if orjson is not None:
        saving = (figures["its JSONDecoder alone"] - figures["orjson.loads"]
                  + figures["json.dumps (its settings)"] - figures["orjson.dumps"])
        print(f"  orjson would save at most {saving:.2f} µs per event (decode + encode, the contract's "
              f"duplicate-key check not counted)")
        if args.worker_rate:
            cost = 1e6 / args.worker_rate
            print(f"  the worker spends {cost:.1f} µs per event at {args.worker_rate:,.0f} events/s: "
                  f"{saving / cost:.1%} of it")
    return 0


if __name__ == "__main__":
    sys.exit(main())

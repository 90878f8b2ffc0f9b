#!/usr/bin/env python
"""Latency of a verdict through a milter in a real Postfix: stream-nb beside rspamd and
SpamAssassin, and Postfix alone, on this machine and the same messages.

Sides, each behind its own private Postfix (tests/integration/postfix_support.py: smtpd on a
loopback port, Maildir delivery, examples/postfix/main.cf's milter lines):
  postfix       no milter: the floor (Postfix's own work, the client's)
  stream-nb     `stream-nb milter --config configs/mail.toml` (action tag), its replica having
                learned --taught SpamAssassin 2003 messages from a local broker
  rspamd        rspamd's proxy in milter mode (benchmarks/anchor_milters.py says with what)
  spamassassin  spamass-milter in front of spamd (the same)
Messages: SpamAssassin 2003's, others than those taught, sent at steady rates: a new SMTP
session every 1/rate seconds whatever the answers (open loop, so a slow filter's queueing is
counted), each on a thread of a pool. Latency: from a message's scheduled start to the answer
to its end of data. Printed per side and rate: p50 and p99 (medians over --repeats), the rate
achieved, and the highest rate whose p99 stays under 50 ms; then each side's p50 against
stream-nb's at the rates all sides kept up with.

    .venv/bin/python benchmarks/milter_latency.py
    .venv/bin/python benchmarks/milter_latency.py --rates 10 50 --repeats 1 --sides postfix stream-nb

Needs root, postfix and swaks (Debian), and for the peers rspamd, redis-server, spamd and
spamass-milter; a side that cannot run here is reported and left out.
"""

from __future__ import annotations

import argparse
import json
import random
import smtplib
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(REPO), str(REPO / "benchmarks"), str(REPO / "tests"), str(REPO / "tests" / "integration")]

import kafka_throughput as kt  # noqa: E402
from postfix_support import Postfix, free_port, require_postfix  # noqa: E402

from corpora import load_spamassassin_2003  # noqa: E402

SIDES = ("postfix", "stream-nb", "rspamd", "spamassassin")
P99_LIMIT_S = 0.050


def load_messages(limit: int) -> list[tuple[bytes, str]]:
    messages = [(data, "spam" if folder.startswith("spam") else "ham") for folder, data in load_spamassassin_2003()]
    random.Random(3).shuffle(messages)
    return messages[:limit]


def send_at_rate(port: int, messages: list[bytes], rate: float, pool: ThreadPoolExecutor) -> tuple[list[float], float]:
    """(latency of each message in seconds, the rate achieved): message i starts at t0 + i/rate."""
    latencies: list[float] = []
    lock = threading.Lock()
    failures: list[str] = []

    def one(message: bytes, due: float) -> None:
        try:
            with smtplib.SMTP("127.0.0.1", port, timeout=60) as session:
                try:
                    session.sendmail("sender@example.org", ["ann@example.test"], message)
                except smtplib.SMTPDataError as refused:  # a verdict too: a 5xx at end of data (rspamd rejects)
                    if refused.smtp_code < 500:  # 4xx: the milter failed (tempfail), not a verdict
                        raise
        except (smtplib.SMTPException, OSError) as error:
            with lock:
                failures.append(f"{type(error).__name__}: {error}")
            return
        with lock:
            latencies.append(time.perf_counter() - due)

    started = time.perf_counter()
    futures = []
    for i, message in enumerate(messages):
        due = started + i / rate
        wait = due - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        futures.append(pool.submit(one, message, due))
    for future in futures:
        future.result()
    if failures:
        raise RuntimeError(f"{len(failures)} messages failed, e.g. {failures[0]}")
    return latencies, len(messages) / (time.perf_counter() - started)


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


class StreamNbMilter:
    """A broker with --taught messages on a labeled topic, and `stream-nb milter` replicating it."""

    def __init__(self, workdir: Path, bootstrap: str, taught: list[tuple[bytes, str]], transport: str) -> None:
        from kafka import KafkaProducer

        from stream_nb.mail.identity import mail_id

        labeled = f"milter-bench-{time.time_ns()}"
        kt.create_topics(bootstrap, [labeled, f"{labeled}-unlabeled"])
        producer = KafkaProducer(bootstrap_servers=bootstrap, max_request_size=2_000_000, linger_ms=20)
        for raw, label in taught:
            producer.send(labeled, value=raw, key=mail_id(raw).encode(), headers=[("label", label.encode())])
        producer.flush()
        producer.close()
        metrics = free_port()
        for directory in (workdir, workdir.parent):  # Postfix's smtpd (the postfix user) reaches a socket in it
            directory.chmod(0o755)
        self.address = f"unix:{workdir / 'milter.sock'}" if transport == "unix" else f"inet:127.0.0.1:{free_port()}"
        overrides = {"kafka.bootstrap_servers": bootstrap, "kafka.value_format": "mail",
                     "kafka.labeled_topics": [labeled], "kafka.unlabeled_topics": [f"{labeled}-unlabeled"],
                     "kafka.predictions_topic": f"{labeled}-predictions", "kafka.dead_letter_topic": f"{labeled}-dlq",
                     "checkpoint.dir": str(workdir / "none"), "milter.listen": self.address,
                     "milter.metrics_port": metrics}
        command = [sys.executable, "-m", "stream_nb.cli", "milter", "--config", str(REPO / "configs" / "mail.toml")]
        for key, value in overrides.items():
            command += ["--set", f"{key}={json.dumps(value)}"]
        self.log_path = workdir / "stream-nb-milter.log"
        self.process = subprocess.Popen(command, cwd=REPO, stdout=open(self.log_path, "wb"), stderr=subprocess.STDOUT,
                                        start_new_session=True)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"stream-nb milter exited: {self.log_path.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/readyz", timeout=5) as answer:
                    if answer.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.3)
        raise RuntimeError("stream-nb milter not ready in 120 s")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_side(side: str, workdir: Path, bootstrap: str | None, taught, transport: str):
    if side == "postfix":
        return None, ""
    if side == "stream-nb":
        milter = StreamNbMilter(workdir, bootstrap, taught, transport)
        return milter, milter.address
    import anchor_milters

    start = anchor_milters.start_rspamd if side == "rspamd" else anchor_milters.start_spamassassin
    milter = start(workdir, transport=transport)
    return milter, milter.address


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sides", nargs="+", default=list(SIDES), choices=SIDES)
    parser.add_argument("--rates", nargs="+", type=float, default=[10, 25, 50, 100, 150, 200, 300])
    parser.add_argument("--seconds", type=float, default=4.0, help="per rate (at least 60 messages)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--taught", type=int, default=1000)
    parser.add_argument("--transport", choices=["unix", "inet"], default="unix",
                        help="how Postfix reaches every milter: a unix socket (default), or loopback TCP")
    args = parser.parse_args(argv)
    try:
        require_postfix()
    except BaseException as error:  # pytest's skip outside pytest: say it and stop
        print(f"milter_latency: {error}", file=sys.stderr)
        return 1
    sides = list(args.sides)
    if {"rspamd", "spamassassin"} & set(sides):
        import anchor_milters

        for name, missing in anchor_milters.available().items():
            if missing and name in sides:
                print(f"  {name}: left out ({missing})")
                sides.remove(name)
    messages = load_messages(args.taught + 2000)
    taught, asked = messages[:args.taught], [raw for raw, _ in messages[args.taught:]]
    results: dict[str, dict[float, list[tuple[float, float, float]]]] = {side: {} for side in sides}
    pool = ThreadPoolExecutor(max_workers=64)
    with kt.benchmark_broker("stream-nb-milter-latency-") as (broker, workdir):
        version = subprocess.run(["postconf", "-d", "-h", "mail_version"], capture_output=True, text=True).stdout.strip()
        print(f"milter latency: Postfix {version}, milters on {args.transport} sockets, {len(taught):,} messages "
              f"taught, load average {kt.load_average()}")
        for repeat in range(args.repeats):
            for side in sides:
                milter, address = start_side(side, Path(tempfile.mkdtemp(dir=workdir)), broker.bootstrap, taught,
                                             args.transport)
                postfix = Postfix(address or "", default_action="tempfail").start()
                try:
                    warm = asked[:20]
                    send_at_rate(postfix.port, warm, 20, pool)
                    cursor = 20
                    for rate in args.rates:
                        count = max(60, int(rate * args.seconds))
                        batch = [asked[(cursor + i) % len(asked)] for i in range(count)]
                        cursor += count
                        latencies, achieved = send_at_rate(postfix.port, batch, rate, pool)
                        results[side].setdefault(rate, []).append(
                            (percentile(latencies, 0.5), percentile(latencies, 0.99), achieved))
                        print(f"  run {repeat + 1} {side:12s} {rate:5.0f}/s: p50 {percentile(latencies, 0.5) * 1000:7.1f} ms "
                              f"p99 {percentile(latencies, 0.99) * 1000:7.1f} ms ({achieved:.0f}/s)", flush=True)
                        if percentile(latencies, 0.99) > 4 * P99_LIMIT_S and achieved < 0.8 * rate:
                            break  # far past what it keeps up with
                finally:
                    postfix.stop()
                    if milter is not None:
                        milter.stop()
    pool.shutdown()
    print("medians over repeats (p50 / p99 ms, achieved rate):")
    best = {}
    for side in sides:
        row = []
        for rate in args.rates:
            runs = results[side].get(rate, [])
            if len(runs) < args.repeats:
                row.append(f"{rate:.0f}/s: -")
                continue
            p50, p99, achieved = (statistics.median(run[k] for run in runs) for k in range(3))
            row.append(f"{rate:.0f}/s: {p50 * 1000:.1f} / {p99 * 1000:.1f}")
            if p99 < P99_LIMIT_S and achieved >= 0.95 * rate:
                best[side] = rate
        print(f"  {side:12s} " + "  ".join(row))
    for side in sides:
        print(f"  {side:12s} highest rate with p99 under {P99_LIMIT_S * 1000:.0f} ms: "
              f"{best.get(side, 0):.0f} messages/s")
    if "stream-nb" in sides:
        for rate in args.rates:
            if all(len(results[side].get(rate, [])) == args.repeats for side in sides):
                ours = statistics.median(run[0] for run in results["stream-nb"][rate])
                others = ", ".join(f"{side} {statistics.median(run[0] for run in results[side][rate]) / ours:.2f}x"
                                   for side in sides if side != "stream-nb")
                print(f"  p50 at {rate:.0f}/s against stream-nb's: {others}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

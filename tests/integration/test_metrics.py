"""The worker's /metrics, /healthz and /readyz during a run on a real broker, with the shipped
configs/spam.toml ([training] included): the counters against the events sent."""

from __future__ import annotations

import socket
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from worker_support import (
    Message,
    Topics,
    WorkerProcess,
    create_topics,
    labeled_event,
    produce,
    read_topic,
    reference_digest_events,
    reference_model,
    set_client_quota,
    unlabeled_event,
    wait_until,
    write_config,
)

pytestmark = pytest.mark.kafka


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def get(port: int, path: str) -> tuple[int, str]:
    """(status, body) of GET path; (0, "") while nothing listens yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return 0, ""


def samples(port: int) -> dict:
    """{(sample name, labels as a sorted tuple): value} of one scrape."""
    status, text = get(port, "/metrics")
    assert status == 200, text
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def test_metrics_count_what_was_sent_and_readiness_waits_for_the_labeled_backlog(kafka_broker, tmp_path, sms,
                                                                                    transport):
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("metrics")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    labeled = [{"text": text, "label": label} for label, text in sms[:3_000]]
    messages = [Message(topics.labeled, labeled_event(f"l{i}", e["text"], e["label"]), f"l{i}".encode())
                for i, e in enumerate(labeled)]
    messages += [Message(topics.labeled, b'{"id":"nolabel%d","text":"x"}' % i, None) for i in range(3)]
    messages += [Message(topics.unlabeled, unlabeled_event(f"u{i}", sms[3_000 + i][1]), f"u{i}".encode())
                 for i in range(500)]
    messages += [Message(topics.unlabeled, b"{broken %d" % i, None) for i in range(7)]
    produce(bootstrap, messages)
    # reads held to 60 kB/s by a broker quota: the labeled backlog (~400 kB) takes seconds on any machine
    client_id = f"metrics-{topics.labeled}"
    set_client_quota(bootstrap, client_id, "consumer_byte_rate", 60_000)
    port = free_port()
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               client={"client_id": client_id}, worker={"metrics_port": port}, transport=transport)
    worker = WorkerProcess(config_path, tmp_path / "worker.log", stop_when_idle=None)
    try:
        answers = []

        def ready() -> bool:
            answers.append(get(port, "/readyz")[0])
            return answers[-1] == 200

        wait_until(ready, 120, "/readyz", worker)
        at_ready = samples(port)
        first = next(status for status in answers if status)
        assert first == 503, answers[:5]  # not ready while the labeled backlog was read
        # ready means every labeled record was read (the counter moves before the records are learned)
        assert at_ready[("stream_nb_events_consumed_total", (("topic", topics.labeled),))] == 3_003

        wait_until(lambda: len(read_topic(bootstrap, topics.predictions)) == 500
                   and len(read_topic(bootstrap, topics.dead_letters)) == 10, 120, "every output", worker)
        wait_until(lambda: samples(port).get(("stream_nb_consumer_lag",
                                              (("partition", "0"), ("topic", topics.unlabeled)))) == 0,
                   30, "the lag gauge at 0", worker)
        scraped = samples(port)
        assert get(port, "/healthz")[0] == 200
        assert get(port, "/nothing")[0] == 404
    finally:
        worker.process.terminate()
        assert worker.wait(60) == 0, worker.log_tail()
        worker.kill()
    _, learned = reference_digest_events(labeled)
    assert scraped[("stream_nb_events_learned_total", ())] == learned < 3_000  # thick-threshold
    assert scraped[("stream_nb_predictions_total", ())] == 500
    assert scraped[("stream_nb_dead_letters_total", (("reason", "invalid_json"),))] == 7
    assert scraped[("stream_nb_dead_letters_total", (("reason", "missing_label"),))] == 3
    assert scraped[("stream_nb_events_consumed_total", (("topic", topics.unlabeled),))] == 507
    assert scraped[("stream_nb_prediction_latency_seconds_count", ())] == 500
    assert scraped[("stream_nb_classes", ())] == 2 and scraped[("stream_nb_vocabulary_size", ())] > 10_000
    assert scraped[("stream_nb_rewinds_total", ())] == 0
    assert 0.9 < scraped[("stream_nb_prequential_accuracy", ())] < 1.0


def written_after_learning(scraped, evicted):
    return (scraped.get(("stream_nb_features_evicted_total", ())) == evicted
            and scraped.get(("stream_nb_checkpoint_duration_seconds_count", ()), 0) >= 1)


def test_metrics_of_the_budget_and_of_background_checkpoints(kafka_broker, tmp_path, sms, transport):
    """spam.toml with a feature budget and a checkpoint every 500 learned events (written in the
    background): the evictions counted equal the definition's, every written checkpoint was a
    short pause of the loop, and the vocabulary gauge is the definition's."""
    bootstrap = kafka_broker.bootstrap
    topics = Topics.new("metrics-budget")
    create_topics(bootstrap, [topics.labeled, topics.unlabeled])
    labeled = [{"text": text, "label": label} for label, text in sms[:3_000]]
    produce(bootstrap, [Message(topics.labeled, labeled_event(f"l{i}", e["text"], e["label"]), f"l{i}".encode())
                        for i, e in enumerate(labeled)])
    budget = {"max_features": 4_000, "evict_every": 100}
    port = free_port()
    config_path = write_config(tmp_path / "worker.toml", bootstrap, topics, tmp_path / "checkpoints",
                               model=budget, checkpoint={"every_events": 500}, worker={"metrics_port": port},
                               transport=transport)
    reference = reference_model(labeled, model=budget)
    worker = WorkerProcess(config_path, tmp_path / "worker.log", stop_when_idle=None)
    try:
        wait_until(lambda: get(port, "/readyz")[0] == 200, 120, "/readyz", worker)
        # a background write is counted when it has finished, which may be after the last event learned
        wait_until(lambda: written_after_learning(samples(port), reference.features_evicted), 30,
                   "the evictions counted and a checkpoint written", worker)
        scraped = samples(port)
    finally:
        worker.process.terminate()
        assert worker.wait(60) == 0, worker.log_tail()
        worker.kill()
    assert reference.features_evicted > 10_000  # the budget was at work
    assert scraped[("stream_nb_vocabulary_size", ())] == reference.n_features
    assert scraped[("stream_nb_events_learned_total", ())] == reference.events_learned
    written = scraped[("stream_nb_checkpoint_duration_seconds_count", ())]
    # while a write is under way the next waits (they coalesce in a fast catch-up): at least one
    assert written >= 1
    assert scraped[("stream_nb_checkpoint_pause_seconds_count", ())] >= written
    assert scraped[("stream_nb_checkpoint_failures_total", ())] == 0

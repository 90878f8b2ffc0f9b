"""The reference for per-key state on Kafka ([personal]): each partition's state computed without
Kafka from the labeled order as the workers wrote it, and each changelog partition restored as a
new owner restores it. Shared by the keyed worker tests and the mail deployment on the cluster."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from stream_nb.config import load_config
from stream_nb.kafka.labeled_order import labeled_order_topic
from stream_nb.keyed.changelog import changelog_topic, read_changelog
from stream_nb.keyed.store import StoredKeyTable
from stream_nb.keyed.view_tables import ViewTables
from stream_nb.lessons import LearnedIds, id_of_keyed, learning_epochs, plan, settle
from stream_nb.worker.keyed import key_partition

from worker_support import end_offset, read_topic


def text_features(config_path: Path) -> Callable[[dict], dict | list[dict]]:
    """The features of a text event (its "text") as the configuration's featuriser makes them;
    with [views], a feature dict per view."""
    config = load_config(config_path, [])
    featurizers = [config.build_featurizer(), *(config.build_featurizer(name) for name in config.views)]
    if len(featurizers) == 1:
        return lambda event: featurizers[0].transform_one(event["text"])
    return lambda event: [featurizer.transform_one(event["text"]) for featurizer in featurizers]


def new_table(config, directory: Path, n_classes: Callable[[], int]):
    """A partition's store as the worker makes it: one view's, or one per view."""
    idle_after = (config.personal or {}).get("idle_after") or None
    if len(config.view_names) > 1:
        return ViewTables(directory, config.view_names, n_classes, idle_after=idle_after)
    return StoredKeyTable(directory, n_classes, idle_after=idle_after)


def key_counts_of(table, key):
    """The key's counts in a partition's store (its first view's, with several)."""
    return getattr(table, "views", [table])[0].get(key)


def labeled_order(bootstrap: str, config_path: Path) -> tuple[list[tuple[int, dict]], int]:
    """((offset, event), ...) of the labeled order as the workers wrote it, and its end offset."""
    kafka = load_config(config_path, []).require_kafka()
    topic = labeled_order_topic(kafka)
    records = read_topic(bootstrap, topic, timeout=120)
    return [(record.offset, json.loads(record.value)) for record in records], end_offset(bootstrap, topic)


def reference_tables(config_path: Path, order: list[tuple[int, dict]], log_end: int, directory: Path,
                     predictions: dict[str, dict], unlabeled: dict[str, dict], positions: dict[int, int],
                     partitions: int, features: Callable[[dict], dict] | None = None,
                     ) -> tuple[dict[int, StoredKeyTable], dict[int, str], int]:
    """Each partition's state computed without Kafka: the labeled events in the labeled order,
    each through the rules of duplicates and corrections (stream_nb.lessons: the global model's
    memory of ids scoped by key; each key's own memory in its counts), then decided by its key's
    model with the global model as it stands, and learned. On the way, each prediction is
    held to the key's model at the labeled offset it names, bit for bit. Returns the tables at
    the log's end, each partition's digest at its labeled offset in `positions`, and how many
    predictions differ from the global model's. `features(event)`: an event's features
    (default: its "text" through the configuration's featuriser)."""
    config = load_config(config_path, [])
    model = config.build_model()
    personal = config.build_personal(model)
    features = features or text_features(config_path)
    memory = LearnedIds(config.remember_ids)
    tables = {p: new_table(config, directory / f"reference-{p}", lambda: len(personal.classes_))
              for p in range(partitions)}
    named = sorted({prediction["model"]["labeled_offsets"][0][2] for prediction in predictions.values()})
    by_offset: dict[int, list[dict]] = {}
    for prediction in predictions.values():
        ((_, _, next_offset),) = prediction["model"]["labeled_offsets"]
        by_offset.setdefault(next_offset, []).append(prediction)
    personal_differs = 0
    informed = 0  # predictions whose key had counts of its own when they were made

    def check_upto(offset: int) -> int:
        """The predictions made with every labeled record below `offset` learned, none above."""
        nonlocal informed
        differs = 0
        while named and named[0] <= offset:
            for prediction in by_offset.pop(named.pop(0)):
                event = unlabeled[prediction["id"]]
                x = features(event)
                table = tables[key_partition(event["key"], partitions)]
                expected = personal.predict_proba_one(x, event["key"], table)
                assert prediction["proba"] == {str(c): p for c, p in expected.items()}, prediction["id"]
                differs += expected != model.predict_proba_one(x)
                informed += key_counts_of(table, event["key"]) is not None
        return differs

    digests: dict[int, str] = {}

    def digest_upto(offset: int) -> None:
        """The digests of the partitions whose position is at or below `offset` (the events
        before it learned, none after), taken once."""
        for p, position in positions.items():
            if p not in digests and position <= offset:
                tables[p].flush(position=position)
                digests[p] = tables[p].digest()

    for offset, event in order:
        personal_differs += check_upto(offset)
        digest_upto(offset)
        x = features(event)
        table = tables[key_partition(event["key"], partitions)]
        label, unlearn, key = event.get("label"), event.get("unlearn"), event["key"]
        if unlearn is not None and unlearn == label:  # dead-lettered by the worker's decoder
            continue
        scoped = id_of_keyed(key, event["id"])
        planned = plan(scoped, label, unlearn, memory.get(scoped))
        if planned.take_back is not None:
            back = planned.take_back
            model.unlearn_one(x, back.label, back.weight, learned_at=back.learned_at,
                              **({} if back.by is None else {"learned_by": back.by}))
        if planned.learn is None:  # the global model learns nothing: the key's rules alone
            settle(memory, scoped, planned, learned=False, epoch=0)
            personal.key_lesson(x, label, unlearn, event["id"], key, table)
            continue
        epoch = learning_epochs(model, 1)[0]
        # the key's prediction and rules, the global model's step, the key's learning, the clock
        _, learned = personal.predict_learn_one(x, label, key, config.training, table, event_id=event["id"],
                                                unlearn=unlearn)
        settle(memory, scoped, planned, learned=bool(learned), epoch=epoch,
               by=learned if type(learned) is int else None)
        for other in tables.values():  # every partition's idle clock counts every labeled event
            if other is not table:
                other.observe(None, personal.idle_after)
    personal_differs += check_upto(log_end)
    assert not by_offset, f"predictions at labeled offsets beyond the log: {sorted(by_offset)}"
    assert max(positions.values()) <= log_end, (positions, log_end)
    digest_upto(log_end)
    for table in tables.values():
        table.flush(position=log_end)
    return tables, digests, (personal_differs, informed)


def changelog_tables(config_path: Path, directory: Path, partitions: int) -> dict[int, StoredKeyTable]:
    """Each changelog partition restored into a store of its own, as a new owner restores it."""
    config = load_config(config_path, [])
    kafka = config.require_kafka()
    n_classes = lambda: 2  # noqa: E731  (ham, spam)
    tables = {}
    for p in range(partitions):
        table = new_table(config, directory / f"changelog-{p}", n_classes)
        table.restore(read_changelog(kafka, config.kafka_client, changelog_topic(kafka), p))
        tables[p] = table
    return tables



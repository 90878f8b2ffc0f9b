"""The commit of outputs, in one place: the labeled dead letters published by the owner of their
partition (the group assigns it; the consumer pauses it), then the open outputs committed with
the group's offsets (stream_nb.worker.outputs' transaction), or aborted and redone from the
committed offsets when the group moved on meanwhile."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kafka import TopicPartition
from kafka.errors import CommitFailedError, KafkaError

from stream_nb.worker.records import first_offsets

if TYPE_CHECKING:
    from stream_nb.worker.loop import Worker

log = logging.getLogger("stream_nb.worker")


class Commits:
    """Commits worker.outputs with the group's offsets and the labeled dead-letter cursors."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker
        self.cursors: dict[TopicPartition, int] = {}  # owned labeled partition -> published up to
        # Unlabeled records polled and held back (labels first), predicted at the next step: kept
        # here rather than fetched again; a commit meanwhile commits their partitions before them.
        self.held: list = []
        self._held_under = None  # the group metadata of the poll that gave them

    def labeled_dead_letters_due(self) -> bool:
        return any(self.cursors.get(TopicPartition(r.source.topic, r.source.partition), 1 << 62) <= r.source.offset
                   for r in self.worker.labeled_rejections)

    def commit_or_rewind(self) -> None:
        try:
            self.commit()
        except CommitFailedError as error:  # the group moved on (a rebalance): redo, don't reconnect
            self.rewind(f"commit refused ({error})")

    def commit(self, final: bool = False) -> bool:
        """The commit protocol: publish the labeled dead letters this worker owns, then commit the
        open outputs with the group's offsets (unlabeled positions, labeled dead-letter cursors).
        False when the outputs were aborted instead, to be redone (a rebalance meanwhile)."""
        w = self.worker
        if w._assignment_changed:  # a rebalance since the last poll: what we own is not known
            self.rewind("the group rebalanced")
            return False
        cursors = {}
        for tp, cursor in self.cursors.items():
            position = w.labeled.positions.get((tp.topic, tp.partition), 0)
            due = [r for r in w.labeled_rejections
                   if (r.source.topic, r.source.partition) == (tp.topic, tp.partition) and cursor <= r.source.offset < position]
            if due or (final and position > cursor):
                w.outputs.begin(w.group.group_metadata())
            for rejected in due:
                w.predictor.dead_letter(rejected)
            cursors[tp] = max(cursor, position)
        if w.keyed is not None and (w.keyed.pending() or w.keyed.behind(w.labeled.next_offset())):
            w.outputs.begin(w.group.group_metadata())
        if not w.outputs.open:
            return True
        offsets = {tp: w.group.position(tp) for tp in w.group.assignment() if tp.topic not in w.labeled_topics}
        offsets.update(first_offsets(self.held))
        if w.forwarding is not None:  # the labeled records forwarded in this transaction
            offsets.update(w.forwarding.positions())
        if w.keyed is not None:  # the per-key state's changes, with the labeled offset it reflects
            w.keyed.send_flushes(w.outputs, w.labeled.next_offset())
        w.outputs.commit({**offsets, **cursors})
        if w.keyed is not None:
            w.keyed.confirmed()
        if w.forwarding is not None:
            w.forwarding.committed()
        self.cursors.update(cursors)
        self.prune_rejections(self.cursors)
        return True

    def final_commit(self) -> bool:
        """The last commit of a clean stop (retried once after a Kafka error). False when the
        outputs were aborted to be redone (a rebalance, a refused commit), or when a stop came
        while the worker waited for the broker (its clients closed, nothing open to commit)."""
        if self.worker.outputs is None:
            log.info("stopping while Kafka is unreachable: the outputs since the last commit are left to be redone")
            return False
        for attempt in range(2):
            try:
                return self.commit(final=True)
            except CommitFailedError as error:
                self.rewind(f"final commit refused ({error})")
                return False
            except KafkaError as error:
                if attempt:
                    log.warning("final commit failed (%s): the outputs since the last commit will be redone", error)
                    return False
                self.worker.membership.recover(error)
        return False

    def prune_rejections(self, cursors: dict[TopicPartition, int]) -> None:
        w = self.worker
        w.labeled_rejections = [
            r for r in w.labeled_rejections
            if r.source.offset >= cursors.get(TopicPartition(r.source.topic, r.source.partition), -1)]

    def hold(self, records: list, group_metadata=None) -> None:
        """Polled records not processed yet: the next step predicts them before what it polls.
        `group_metadata`: the group's when they were polled (see held_stale)."""
        self.held = records
        self._held_under = group_metadata

    def held_stale(self, group_metadata) -> bool:
        """Whether records are held from a poll of another generation of the group. A rebalance
        between two steps may have moved their partitions: predicted now, they would be
        committed without their partition's offset (no longer this worker's), and the new owner
        would predict them again; they are to be polled again from the committed offsets."""
        held_under = self._held_under
        return bool(self.held) and held_under is not None and group_metadata is not None and (
            (held_under.generation_id, held_under.member_id) != (group_metadata.generation_id, group_metadata.member_id))

    def take_held(self) -> list:
        held, self.held, self._held_under = self.held, [], None
        return held

    def rewind(self, why: str | None) -> None:
        """Abort the open outputs and go back to the group's committed offsets."""
        w = self.worker
        if why is not None:  # None: the first assignment, nothing to redo
            w.telemetry.rewinds.inc()
            log.info("%s: the open outputs are aborted and redone from the committed offsets", why)
        w.outputs.abort()
        self.held, self._held_under = [], None  # polled again from the committed offsets
        if w.forwarding is not None:  # forwarded again from the committed offsets
            w.forwarding.rewind()
        for tp in w.group.assignment():
            if tp.topic in w.labeled_topics:
                continue
            committed = w.group.committed(tp)
            if committed is None:
                w.group.seek_to_beginning(tp)
            else:
                w.group.seek(tp, committed)

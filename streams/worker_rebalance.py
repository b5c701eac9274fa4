"""How the Kafka worker gains and gives up inbox partitions: the consumer group's
rebalances, and partitions a newer worker fenced."""

from __future__ import annotations

import asyncio
import logging
import os
import time
from typing import TYPE_CHECKING, Any

from aiokafka import ConsumerRebalanceListener, TopicPartition

from streams.worker_errors import WorkerError
from streams.worker_helpers import _quiet_stop

if TYPE_CHECKING:
    from streams.worker_loop import Worker

log = logging.getLogger("allot.worker")


# session timeouts a fenced partition may stay assigned before the fence is taken as a
# worker outside the group's (a rebalance within the group revokes it well before);
# $ALLOT_FENCED_GRACE_FACTOR sets another number, for tests that would otherwise wait out
# three of the broker's minimum session timeout (6 s)
FENCED_GRACE_FACTOR = float(os.environ.get("ALLOT_FENCED_GRACE_FACTOR", "3"))


class _Rebalance(ConsumerRebalanceListener):
    """Consumer-group callbacks: they only mark what changed; recovery (which may take
    longer than a session timeout, and heartbeats pause during the callbacks) runs in
    the worker's own loop."""

    def __init__(self, worker: Worker) -> None:
        self.worker = worker

    async def on_partitions_revoked(self, revoked: Any) -> None:
        await self.worker._revoked({tp.partition for tp in revoked})

    def on_partitions_assigned(self, assigned: Any) -> None:
        self.worker._assigned({tp.partition for tp in assigned})


class Rebalancing:
    """Partition hand-overs of `streams.worker_loop.Worker`."""

    # ---------------------------------------------------------------- rebalances
    async def _revoked(self, parts: set[int]) -> None:
        """Before a rebalance: finish the batch in flight, hand over a fresh snapshot of
        what may move (so the next owner's recovery is short), and stop using it until
        the assignment says whether it stays."""
        async with self._lock:
            for p in parts:
                part = self.owned.get(p)
                if part is not None:
                    part.active = False
                    if part.written != part.generation:
                        part.dirty = True  # a background round is in flight: hand over anew
            try:
                await asyncio.wait_for(self._snapshot_dirty(parts, locked=True), 10.0)
            except Exception as why:  # the next owner folds a longer journal tail
                log.warning("no snapshot on hand-over of partitions %s: %s", sorted(parts), why)
            for p in parts:
                self._pending.pop(p, None)

    def _on_fenced(self, partition: int) -> None:
        """A newer producer of `partition` fenced a write (a batch's or a snapshot's):
        drop the partition; without a group that is a second worker (`_check_fenced`
        stops this one), in a group a hand-over or a worker outside the group."""
        self.stats.fenced += 1
        self._drop(partition)
        if self.group is None:  # no group to hand over to: a second worker runs
            self._fatal = WorkerError(
                f"another worker with this worker's topics and clusters took over inbox "
                f"partition {partition}; stopping (run one worker per cluster set, or "
                "several with --group)"
            )
            return
        log.warning("inbox partition %d was taken over by another worker", partition)
        if self._consumer is not None:
            tp = TopicPartition(self.topics.inbox, partition)
            if tp in self._consumer.assignment():
                self._consumer.pause(tp)  # nothing to write it with until revoked
                self._fenced.setdefault(partition, time.monotonic())

    def _check_fenced(self) -> None:
        """A partition fenced but still assigned after a rebalance had time to move it:
        another worker on these topics is outside this group (another --group, or none).
        Two groups fence each other's writes forever, so stop and say so; idle, this
        worker held its clusters' partitions and nobody scheduled them."""
        if self._fatal is not None:
            raise self._fatal
        if not self._fenced:
            return
        since = min(self._fenced.values())
        if time.monotonic() - since < FENCED_GRACE_FACTOR * self.session_timeout_ms / 1000:
            return
        parts = sorted(self._fenced)
        raise WorkerError(
            f"inbox partitions {parts} were taken over by a worker outside group "
            f"{self.group!r} (started with another --group, or without one, on the same "
            "topics); stopping. Run one group of workers per set of topics"
        )

    def _assigned(self, parts: set[int]) -> None:
        consumer = self._consumer
        assert consumer is not None
        self._joined = True
        # a rebalance came: what it took away was a hand-over; what it gives back is
        # taken over anew (fencing whoever wrote it meanwhile)
        self._fenced.clear()
        for p in [p for p in self.owned if p not in parts]:
            log.info("inbox partition %d moved to another worker", p)
            self._drop(p)
        for p in sorted(parts):
            tp = TopicPartition(self.topics.inbox, p)
            part = self.owned.get(p)
            if part is not None:  # kept: nobody else held it in between
                part.active = True
                self._seek(tp)
            else:
                consumer.pause(tp)
                self._pending.setdefault(p, time.monotonic())

    def _drop(self, p: int) -> None:
        part = self.owned.pop(p, None)
        for cluster in [c for c in self.cores if self.home(c) == p]:
            del self.cores[cluster]
        if part is not None:
            self._closing.append(asyncio.create_task(_quiet_stop(part.producer)))

    def _seek(self, tp: TopicPartition) -> None:
        """Resume one past the last offset the journal or the DLQ records for `tp`."""
        assert self._consumer is not None
        self._consumer.seek(tp, self._resume_offset(tp))

    def _resume_offset(self, tp: TopicPartition) -> int:
        """One past the last offset the journal or the DLQ records for `tp` (0: none;
        the consumer then starts at the earliest retained one)."""
        part = self.owned[tp.partition]
        folded = max(
            [
                core.positions.get(tp.partition, -1)
                for cluster, core in self.cores.items()
                if self.home(cluster) == tp.partition
            ]
            + [part.dead, part.scanned]
        )
        return folded + 1

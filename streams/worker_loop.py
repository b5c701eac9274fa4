"""The Kafka worker (`Worker`): one scheduler process, its loop, start, ticker and
close; see `streams.worker` for what it does, and `serve` / `run_worker` there to run it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
import uuid
from collections.abc import Callable
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.errors import KafkaConnectionError, KafkaError
from aiokafka.partitioner import DefaultPartitioner

from domain.config import SchedulerConfig
from streams.broker_watch import BrokerWatch
from streams.core import SchedulerCore
from streams.kafka_auth import client_options
from streams.kafka_clients import aiokafka_quiet, quiet_stop, unreachable
from streams.topic_admin import Topics, create_topics
from streams.worker_batches import Batches
from streams.worker_errors import REFUSALS, BrokerUnavailable, WorkerError, refused
from streams.worker_helpers import Stats, _abandon, _Partition, identity, plural
from streams.worker_presence import Presence
from streams.worker_rebalance import Rebalancing, _Rebalance
from streams.worker_recovery import Recovery
from streams.worker_snapshots import Snapshots

log = logging.getLogger("allot.worker")

TICKER = "allot-ticker"
DEAD_LETTER_LOG_S = 30.0  # at most one log line about dead letters this often
MAX_CLUSTERS = 10_000  # per worker: a lab has tens; junk keys must not grow memory
# a stop waits this long for the batch (or last snapshot) being written: aiokafka retries
# a write to a broker that is gone until it is back, and a stop that waited on it hung
# until a supervisor's SIGKILL (a batch not committed is redone at the next start)
STOP_GRACE_S = 10.0
# how long each Kafka client may take to stop when the broker watch says Kafka is gone
GONE_STOP_S = 2.0
# ... and the presence group's member at most (a leave needs one round trip; a join held
# up by a dead member is given up: the broker drops a member that never joined)
PRESENCE_STOP_S = 2.0
# seconds between lines saying the consumer group has given no partitions yet
GROUP_WAIT_LOG_S = 15.0
# JOIN_ONCE: aiokafka (0.14) sends one JoinGroup per assignor listed, the n-th naming the
# first n, and keeps the last answer: each join changed the member's metadata while its
# group was completing the rebalance, which started another. Two workers started
# together (fresh topics, `allot topics create` then two workers) bounced the group
# between them for minutes, neither holding its partitions (aio-libs/aiokafka#1168).


# ------------------------------------------------------------------ the worker


class Worker(Presence, Rebalancing, Recovery, Batches, Snapshots):
    """One scheduler process; see the module docstring. Use `serve` / `run_worker`."""

    def __init__(
        self,
        bootstrap: str,
        *,
        config: SchedulerConfig | None,
        clusters: list[str] | None = None,
        group: str | None = None,
        tick_every: float = 10.0,
        snapshot_every: float = 60.0,
        fork_snapshots: bool = True,
        topics: Topics | None = None,
        max_batch: int = 5000,
        poll_ms: int = 100,
        create: bool = False,
        partitions: int = 1,
        on_journal: Callable[..., None] | None = None,
        kafka_options: dict[str, Any] | None = None,
        session_timeout_ms: int = 10_000,
        max_clusters: int = MAX_CLUSTERS,
        stop_grace: float = STOP_GRACE_S,
    ) -> None:
        self.bootstrap = bootstrap.removeprefix("kafka://")
        self.max_clusters = max_clusters
        self.stop_grace = stop_grace
        # called with (cluster, journal lines) after each transaction commits and, when
        # a partition is taken over, with every committed journal record of its clusters
        # (from the beginning, whatever the snapshot covers) and `recovered=True`: e.g.
        # a metrics fold
        self.on_journal = on_journal
        self.config = config
        self.clusters = None if clusters is None else set(clusters)
        self.group = group
        self.tick_every = tick_every
        # seconds between periodic snapshots (<= 0: none; hand-overs and a clean stop
        # still snapshot)
        self.snapshot_every = snapshot_every if snapshot_every > 0 else math.inf
        self.fork_snapshots = fork_snapshots  # False: pickle in the loop (stalls it)
        self.topics = topics or Topics()
        self.max_batch = max_batch
        self.poll_ms = poll_ms
        # create missing topics (else only the dead-letter and snapshot topics, and a
        # missing inbox or journal is MissingTopics: `allot topics create` makes them)
        self.create = create
        self.partitions = partitions
        self.session_timeout_ms = session_timeout_ms
        self.kafka_options = kafka_options if kafka_options is not None else client_options()
        self.identity = identity(self.topics, clusters)
        self.cores: dict[str, SchedulerCore] = {}
        self.owned: dict[int, _Partition] = {}  # inbox partition -> what this worker holds
        self.stats = Stats()
        # dead letters not yet told in the log: (count, first error), told at most every
        # DEAD_LETTER_LOG_S so a flood of garbage is a line, not a log per batch
        self._dead_untold: tuple[int, str] = (0, "")
        self._dead_told_at = -math.inf
        self.ready = asyncio.Event()
        self._meta: AIOKafkaProducer | None = None  # metadata and the ticker
        self._consumer: AIOKafkaConsumer | None = None
        self._inbox_parts: list[int] = []
        self._journal_parts: list[int] = []
        self._home_of: dict[str, int] = {}
        self._journal_part_of: dict[str, int] = {}
        self._partitioner = DefaultPartitioner()
        self._lock = asyncio.Lock()  # one batch, snapshot or hand-over at a time
        self._pending: dict[int, float] = {}  # assigned, not yet recovered -> since
        # group mode: partitions a newer producer fenced while the group still gives them
        # to this worker -> since. A hand-over within the group revokes them soon; one
        # that stays assigned was taken by a worker outside the group (FENCED_GRACE)
        self._fenced: dict[int, float] = {}
        self._fatal: WorkerError | None = None  # raised by the loop (set where it can't be)
        self._retry_at = 0.0
        self._started_at = self._group_told_at = 0.0
        self._joined = False
        self._closing: list[asyncio.Task] = []
        self._snapshotting: asyncio.Task | None = None
        # this worker's membership of its identity's presence group, so a second worker
        # with the same identity can tell it takes over from a live one, and a request
        # tool that this worker will answer
        self._presence: AIOKafkaConsumer | None = None
        self._presence_task: asyncio.Task | None = None
        # says in this log when the broker goes away and comes back (aiokafka retries)
        self._watch = BrokerWatch(self.bootstrap, self.kafka_options, log)
        self._config_written: set[str] = set()  # clusters whose start config is journaled

    # ---------------------------------------------------------------- run
    async def run(self, stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        ticker: asyncio.Task | None = None
        logging.getLogger("aiokafka").addHandler(self._watch)
        # its own task: a batch write stuck on the lost broker must not keep it quiet;
        # it watches until the end (a last snapshot to a broker gone is not waited for)
        watching = asyncio.create_task(self._watch.run(asyncio.Event()), name="allot-broker-watch")
        try:
            if not await self._start_unless(stop):
                return
            if self.tick_every and self.tick_every > 0:
                ticker = asyncio.create_task(self._ticker(stop), name="allot-ticker")
            if await self._loop_until(stop):
                log.warning(
                    "stopping without the batch being written: Kafka at %s has not taken "
                    "it for %gs since the stop; it is not committed, and the next start "
                    "decides it again (nothing is lost or decided twice)",
                    self.bootstrap,
                    self.stop_grace,
                )
            else:
                await self._last_snapshot()
            self._tell_dead(0, "", force=True)
            s = self.stats
            log.info(
                "stopped: %d inputs folded this run, %d journal records, %d to the "
                "dead-letter topic %s",
                s.inputs,
                s.journal,
                s.dead,
                self.topics.dlq,
            )
        except REFUSALS as why:  # e.g. the group join, which aiokafka raises from getmany
            raise refused(self.bootstrap, self.kafka_options, why) from None
        finally:
            for task in (ticker, watching):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            await self._close()
            logging.getLogger("aiokafka").removeHandler(self._watch)

    async def _start_unless(self, stop: asyncio.Event) -> bool:
        """Start, unless `stop` comes first: False then. A start may wait on the broker
        (a take-over retried, a coordinator loading), and SIGTERM only sets `stop`: a
        worker told to stop then ran on until a SIGKILL."""
        starting = asyncio.create_task(self._start(), name="allot-start")
        stopped = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({starting, stopped}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stopped.cancel()
            if not starting.done():
                starting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await starting
        if starting.cancelled():
            log.info("stopped before the start was done: nothing decided, no snapshot written")
            return False
        starting.result()
        return True

    async def _loop_until(self, stop: asyncio.Event) -> bool:
        """Run the loop until `stop`, then give the batch being written `stop_grace`
        seconds to commit. True if it had not and was cut (the broker is gone)."""
        looping = asyncio.create_task(self._loop(stop), name="allot-loop")
        stopped = asyncio.create_task(stop.wait())
        try:
            await asyncio.wait({looping, stopped}, return_when=asyncio.FIRST_COMPLETED)
            if not looping.done():
                await asyncio.wait({looping}, timeout=self.stop_grace)
            if looping.done():
                looping.result()  # the loop's own error (e.g. fenced) stops the worker
                return False
            return True
        finally:
            stopped.cancel()
            if not looping.done():
                looping.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await looping

    async def _last_snapshot(self) -> None:
        """Snapshot at a clean stop, however long a big state takes, but not while the
        broker is gone (the next start then re-derives from the snapshot before)."""

        async def write() -> None:
            if self._snapshotting is not None:
                with contextlib.suppress(Exception):
                    await self._snapshotting
            await self._snapshot_dirty()

        writing = asyncio.create_task(write(), name="allot-last-snapshot")
        try:
            while not writing.done() and not self._watch.down:
                await asyncio.wait({writing}, timeout=0.5)
            if writing.done():
                writing.result()
                return
        finally:
            if not writing.done():
                writing.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await writing
        log.warning(
            "no last snapshot: Kafka at %s does not answer; the next start re-derives "
            "the journal after the last snapshot written",
            self.bootstrap,
        )

    def _tell_dead(self, count: int, error: str, *, force: bool = False) -> None:
        """Say in the log that inbox records went to the dead-letter topic (they are not
        journaled: without a line nobody would know), at most every DEAD_LETTER_LOG_S."""
        untold, first = self._dead_untold
        untold, first = untold + count, first or error
        now = time.monotonic()
        if untold and (force or now - self._dead_told_at >= DEAD_LETTER_LOG_S):
            log.warning(
                "%d inbox record%s went to the dead-letter topic %s (the first: %s)",
                untold,
                "" if untold == 1 else "s",
                self.topics.dlq,
                first,
            )
            untold, first, self._dead_told_at = 0, "", now
        self._dead_untold = (untold, first)

    async def _loop(self, stop: asyncio.Event) -> None:
        consumer = self._consumer
        assert consumer is not None
        while not stop.is_set():
            self._check_fenced()
            if self._pending and time.monotonic() >= self._retry_at:
                await self._take_pending()
            if not self.ready.is_set() and self._joined and not self._pending:
                self._announce_ready()
            if not self._joined:
                self._tell_group_wait()
            batches = await consumer.getmany(timeout_ms=self.poll_ms, max_records=self.max_batch)
            if batches:
                await self._process(batches)
            if (self._snapshotting is None or self._snapshotting.done()) and any(
                p.dirty and time.monotonic() - p.last_snapshot >= self.snapshot_every
                for p in self.owned.values()
            ):
                self._snapshotting = asyncio.create_task(
                    self._snapshot_in_background(), name="allot-snapshot"
                )

    def _tell_group_wait(self) -> None:
        """Say, now and then, that the group has not given this worker its partitions:
        aiokafka retries the group's coordinator and rebalances without a line."""
        now = time.monotonic()
        if now < self._group_told_at + GROUP_WAIT_LOG_S:
            return
        self._group_told_at = now
        log.warning(
            "waiting for consumer group %s to give this worker inbox partitions "
            "(%.0fs so far): its coordinator may still be loading (a new broker creates "
            "__consumer_offsets at the first group), or a rebalance waits for a member to "
            "rejoin (at most %gs)",
            self.topics.group(self.group or ""),
            now - self._started_at,
            max(30_000, self.session_timeout_ms) / 1000,
        )

    def _announce_ready(self) -> None:
        self.ready.set()
        log.info(
            "scheduler ready: %s on inbox partitions %s, recovered from %s in %.2fs",
            plural(len(self.cores), "cluster"),
            sorted(self.owned),
            plural(self.stats.recovered_records, "journal record"),
            self.stats.recovery_s,
        )

    # ---------------------------------------------------------------- start
    async def _start(self) -> None:
        # the first contact is a probe: an unreachable broker is BrokerUnavailable's one
        # line, not that plus aiokafka's own ERROR about the same connection
        with aiokafka_quiet():
            report = await create_topics(
                self.bootstrap,
                topics=self.topics,
                partitions=self.partitions,
                kafka_options=self.kafka_options,
                required=() if self.create else (self.topics.inbox, self.topics.journal),
            )
        for name in report.created:
            log.warning("created topic %s (it did not exist)", name)
        for line in report.drift_lines():
            log.warning("%s", line)
        self._meta = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            enable_idempotence=True,
            acks="all",
            **self.kafka_options,
        )
        try:
            await self._meta.start()
        except KafkaConnectionError as why:
            raise BrokerUnavailable(unreachable(self.bootstrap, why)) from None
        self._inbox_parts = await self._partitions(self.topics.inbox)
        self._journal_parts = await self._partitions(self.topics.journal)
        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None if self.group is None else self.topics.group(self.group),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            max_partition_fetch_bytes=4 * 1024 * 1024,
            fetch_max_bytes=32 * 1024 * 1024,
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=max(500, self.session_timeout_ms // 4),
            # members finish their batch and hand over a snapshot before rejoining
            rebalance_timeout_ms=max(30_000, self.session_timeout_ms),
            # a member joining or leaving moves only the partitions it must: the others
            # stay where they are (kept, not reloaded). One assignor only: see JOIN_ONCE
            partition_assignment_strategy=(StickyPartitionAssignor,),
            **self.kafka_options,
        )
        await self._consumer.start()
        self._started_at = time.monotonic()
        self._group_told_at = self._started_at  # the first line after GROUP_WAIT_LOG_S
        if self.group is None:  # this worker owns every partition
            live = await self._live_workers()  # asked before fencing them
            # listed from now on, while it recovers too: a request sent meanwhile waits
            await self._join_presence()
            tps = [TopicPartition(self.topics.inbox, p) for p in self._inbox_parts]
            self._consumer.assign(tps)
            for tp in tps:
                self._consumer.pause(tp)
            self._pending = dict.fromkeys(self._inbox_parts, time.monotonic())
            # a take-over that fails (e.g. a partition's leader or the transaction
            # coordinator not ready yet, after `allot topics create`) is retried by the
            # loop with a line saying why; an ACL refusal stops the worker
            await self._take_pending()
            self._joined = True
            if live:
                log.warning(
                    "took inbox partitions %s over from a live worker with the same topics "
                    "and clusters (%s; or one that died less than %gs ago): it is fenced "
                    "and stops at its next write ('another worker ... took over'). Without "
                    "--group the newest worker of a cluster set takes over; run one, or "
                    "several with --group",
                    self._inbox_parts,
                    ", ".join(live),
                    self.session_timeout_ms / 1000,
                )
            if not self._pending:  # else the loop does once the retry took them
                self._announce_ready()
        else:  # partitions come and go with the group's rebalances
            self._consumer.subscribe([self.topics.inbox], listener=_Rebalance(self))
            await self._join_presence()  # request tools see the group's workers live

    async def _partitions(self, topic: str) -> list[int]:
        """The topic's partitions (the producer's metadata wait; raises if it is missing)."""
        assert self._meta is not None
        try:
            parts = await self._meta.partitions_for(topic)
        except KafkaError as why:
            raise KafkaError(f"topic {topic!r} is not available: {why}") from None
        return sorted(parts)

    def home(self, cluster: str) -> int:
        """The inbox partition a cluster's records belong on (the producers' default
        partitioner over the cluster key): the worker owning it owns the cluster."""
        part = self._home_of.get(cluster)
        if part is None:
            parts = self._inbox_parts
            part = self._partitioner(cluster.encode(), parts, parts)
            if cluster in self.cores:  # remember known clusters only: keys are untrusted
                self._home_of[cluster] = part
        return part

    def _mine(self, cluster: str | None) -> bool:
        return cluster is not None and (self.clusters is None or cluster in self.clusters)

    def _core(self, cluster: str) -> SchedulerCore:
        core = self.cores.get(cluster)
        if core is None:
            core = self.cores[cluster] = SchedulerCore(cluster, self._wanted(cluster))
        return core

    def _wanted(self, cluster: str) -> SchedulerConfig | None:
        """The start's config for a core being built (or restored): until this process
        has journaled it for the cluster, not again after (a core rebuilt after a failed
        write or a rebalance would else undo an admin's later config.set)."""
        return None if cluster in self._config_written else self.config

    # ---------------------------------------------------------------- ticker
    def _tick_clusters(self) -> list[str]:
        """The clusters whose time should move: those named with --cluster, else those
        with a host or an allocation. A key that only ever brought rejected requests (a
        typo, or junk from any inbox writer) is not ticked: each would journal a tick
        every 10 s forever."""
        owned = {p for p, part in self.owned.items() if part.active}
        if self.clusters is not None:
            return sorted(c for c in self.clusters if self.home(c) in owned)
        return sorted(
            c
            for c, core in self.cores.items()
            if self.home(c) in owned and (core.state.hosts or core.state.tree.nodes)
        )

    async def _ticker(self, stop: asyncio.Event) -> None:
        producer = self._meta
        assert producer is not None
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), self.tick_every)
            if stop.is_set():
                break
            futures = []
            now = time.time()
            try:
                for cluster in self._tick_clusters():
                    record = {
                        "type": "clock.tick",
                        "v": 1,
                        "id": f"tick/{cluster}/{uuid.uuid4().hex}",
                        "time": now,
                        "cluster": cluster,
                        "actor": TICKER,
                        "every": self.tick_every,  # the forecast's cadence
                    }
                    futures.append(
                        await producer.send(
                            self.topics.inbox, orjson.dumps(record), key=cluster.encode()
                        )
                    )
                await asyncio.gather(*futures)
            except KafkaError as why:
                _abandon(futures)
                log.warning("ticker could not write clock.tick: %s", why)

    # ---------------------------------------------------------------- close
    async def _close(self) -> None:
        if self._snapshotting is not None and not self._snapshotting.done():
            self._snapshotting.cancel()
            with contextlib.suppress(BaseException):
                await self._snapshotting
        if self._presence_task is not None:
            self._presence_task.cancel()
            with contextlib.suppress(BaseException):
                await self._presence_task
        clients: list[Any] = [self._consumer, self._meta]
        clients += [part.producer for part in self.owned.values()]
        # at once: with the broker gone each stop waits out its timeout, and one after
        # the other they kept a stopping worker alive past a supervisor's grace period;
        # and briefly then (a transactional producer retries FindCoordinator until its
        # stop times out: nothing it could still say would reach the broker)
        timeout = GONE_STOP_S if self._watch.down else 10.0
        stops = [quiet_stop(client, timeout) for client in clients if client is not None]
        if self._presence is not None:
            # it holds nothing to commit, but a stop waits for its join to the group, which
            # a member killed a moment ago holds up until its session ends: Ctrl-C after
            # a restart that followed a crash took up to that long
            stops.append(quiet_stop(self._presence, min(timeout, PRESENCE_STOP_S)))
        await asyncio.gather(*stops)
        for task in self._closing:
            with contextlib.suppress(Exception):
                await task
        self._consumer = self._meta = self._presence = None
        self._presence_task = None
        self.owned = {}

"""The live scheduler on Kafka: inbox -> `SchedulerCore` per cluster -> journal.

    run_worker("127.0.0.1:9092", config=SchedulerConfig(admins=("root",)))
    python -m streams.worker --kafka 127.0.0.1:9092 --admin root

Ownership. Inbox records are keyed by cluster, so each cluster lives on one inbox
partition (its *home*, the producers' default partitioner over the key); a record that
arrives anywhere else is dead-lettered. The unit a worker owns is an inbox partition
with every cluster homed on it: one `streams.core.SchedulerCore` per cluster, and one
transactional producer per partition. Without a consumer group a worker owns every
partition; with `group=...` (`--group`) the workers of the group share them through
Kafka's own rebalancing and a survivor takes a dead member's partitions over
(scale-out and failover, DESIGN §7). `clusters=[...]` narrows a worker to some
clusters on top of that.

The loop, per batch:

1. `getmany` a batch of inbox records; per owned partition, route each record to its
   cluster's core by the record key (keyless records: by the JSON `cluster` field,
   else `default`);
2. `SchedulerCore.process` folds them (decode, stamp with the broker timestamp,
   admit -> evolve -> decide) and returns the journal records and dead letters;
3. one Kafka transaction per partition writes them: journal records go out as whole
   record batches (`send_batch`, nothing awaited per record), dead letters go to the
   DLQ with the error and the inbox position in headers; the partitions' transactions
   run side by side. A failed write leaves the cores ahead of the journal: the
   partition is dropped and taken over again (below), which redoes the batch.

Exactly once (DESIGN §7). The journal is the state. Each journal record carries
`inbox: [partition, offset]` of the input that caused it, and each dead letter
carries the same in its headers. A batch is one transaction, so after a crash the
log holds whole batches only (readers use `isolation_level="read_committed"`). Taking
a partition over (at start, after a rebalance, or after a failed write), the worker

1. starts the partition's transactional producer first: its `transactional_id`
   (`<identity>/p<partition>`) is stable, so initializing it fences the previous
   owner (a worker that was killed, or is merely slow and will find its next commit
   refused) and aborts the transaction that owner left open;
2. loads the partition's latest snapshot round from the compacted `allot.snapshots`
   topic (one record per cluster, key = cluster: the pickled `SchedulerCore` — domain
   state plus inbox positions; a manifest per partition names the round and the
   journal offsets it corresponds to), or starts empty when there is none;
3. re-decides each of its clusters' committed journal after the snapshot's offsets
   (all of it without one), exactly as the live core did, checking every decision
   against the journal (`SchedulerCore.fold_journal`: folding facts alone would leave
   `decide`'s own caches cold and later decisions would differ from a worker that
   never stopped);
4. seeks the inbox partition to one past the last offset the journal or the DLQ
   records — consumer-group offsets play no part (nothing is committed to the group).

So an input is either in a committed batch (and is skipped on restart) or not (and is
folded again, producing the same decisions: decision ids are `cluster/seq`, and `decide`
is deterministic). Snapshots are written every `snapshot_every` seconds, when a
rebalance may move a partition away, and on a clean stop, never per batch. The
periodic one is pickled in a forked child (`streams.offloop`): the loop stops only for
the fork (tens of ms), not for the pickling (seconds with a week of dedup ids). Usage stays
in `domain` (event time): no faust windowed table. Group callbacks only mark what
changed: recovery runs in the worker's loop, where heartbeats keep going.

A ticker task writes a `clock.tick` per cluster to the inbox every `tick_every`
seconds (actor `allot-ticker`), so time moves in the log when nothing else arrives.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import logging
import math
import os
import pickle
import signal
import socket
import sys
import time
import uuid
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.coordinator.assignors.range import RangePartitionAssignor
from aiokafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor
from aiokafka.errors import KafkaConnectionError, KafkaError, ProducerFenced
from aiokafka.partitioner import DefaultPartitioner

from domain.config import SchedulerConfig
from domain.text import printable
from streams import topics as names
from streams.broker_watch import BrokerWatch
from streams.core import SNAPSHOT_FORMAT, InboxRecord, SchedulerCore, old_bucket_note
from streams.kafka_auth import KafkaAuthError, client_options
from streams.kafka_clients import aiokafka_quiet, quiet_stop, unreachable
from streams.log_repeats import quiet_repeats
from streams.offloop import start_blobs

log = logging.getLogger("allot.worker")

TICKER = "allot-ticker"
MANIFEST_PREFIX = "__manifest__/"
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
DEAD_LETTER_LOG_S = 30.0  # at most one log line about dead letters this often
MAX_RECORD_BYTES = 8 * 1024 * 1024  # journal and DLQ records (an inbox record is <= 1 MiB)
MAX_CLUSTER_NAME = 200
MAX_CLUSTERS = 10_000  # per worker: a lab has tens; junk keys must not grow memory
JOURNAL_BATCH_BYTES = 256 * 1024  # one produce batch; ~600 journal records
READ_TIMEOUT_S = 120.0  # reading a topic to its end during recovery
TRANSACTION_TIMEOUT_MS = 15_000  # one batch or snapshot round takes well under this
# a stop waits this long for the batch (or last snapshot) being written: aiokafka retries
# a write to a broker that is gone until it is back, and a stop that waited on it hung
# until a supervisor's SIGKILL (a batch not committed is redone at the next start)
STOP_GRACE_S = 10.0


class BrokerUnavailable(RuntimeError):
    """The Kafka broker did not answer: one line for the user."""


class WorkerError(RuntimeError):
    """The worker cannot go on (e.g. fenced by a newer worker with its identity)."""


class MissingTopics(WorkerError):
    """The inbox or journal topic does not exist and the worker was not asked to
    create topics: a mistyped or forgotten topic suffix, or a deployment whose topics
    nobody created (`allot topics create`)."""

    def __init__(self, message: str, names: list[str]) -> None:
        super().__init__(message)
        self.names = names


# ------------------------------------------------------------------ topics


@dataclass(frozen=True)
class Topics:
    inbox: str = names.INBOX
    journal: str = names.JOURNAL
    dlq: str = names.DLQ
    snapshots: str = names.SNAPSHOTS

    @classmethod
    def suffixed(cls, suffix: str) -> Topics:
        """The base names plus `suffix` (instead of `$ALLOT_TOPIC_SUFFIX`): tests and
        benchmarks use their own topics."""
        bases = (names.BASE_INBOX, names.BASE_JOURNAL, names.BASE_DLQ, names.BASE_SNAPSHOTS)
        return cls(*(f"{name}{suffix}" for name in bases))

    def all(self) -> list[str]:
        return [self.inbox, self.journal, self.dlq, self.snapshots]

    def group(self, name: str) -> str:
        """The consumer group `name` of this deployment: with the topics' suffix, so a
        second deployment on the same broker (`ALLOT_TOPIC_SUFFIX`) and the same
        `--group` does not join the first one's group (its workers rebalanced)."""
        return name + self.inbox.removeprefix(names.BASE_INBOX)


def topic_configs(topics: Topics) -> dict[str, dict[str, str]]:
    """Per-topic settings `create_topics` applies to topics it creates."""
    return {
        # the broker stamps each request on arrival: that is the event time
        topics.inbox: {"message.timestamp.type": "LogAppendTime"},
        # the source of truth: kept forever, never compacted
        # (records larger than an inbox record may be: the accepted input plus its source)
        topics.journal: {
            "retention.ms": "-1",
            "retention.bytes": "-1",
            "cleanup.policy": "delete",
            "max.message.bytes": str(MAX_RECORD_BYTES),
        },
        topics.dlq: {
            "retention.ms": str(30 * 86400 * 1000),
            "cleanup.policy": "delete",
            "max.message.bytes": str(MAX_RECORD_BYTES),
        },
        # changelog-style: only the latest snapshot per cluster matters
        topics.snapshots: {
            "cleanup.policy": "compact",
            "max.message.bytes": str(MAX_SNAPSHOT_BYTES),
        },
    }


@dataclass
class TopicsReport:
    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    # (topic, setting, what it is, what allot needs) for existing topics made otherwise
    # (by hand, or by a broker creating topics on first use)
    drift: list[tuple[str, str, str, str]] = field(default_factory=list)
    partitions: dict[str, int] = field(default_factory=dict)  # of the existing topics

    def drift_lines(self) -> list[str]:
        """A warning per setting, with the command that fixes it."""
        return [
            f"{topic} has {key}={actual}, allot needs {wanted}"
            + (" (the journal is the source of truth: kept forever)" if "retention" in key else "")
            + f"; fix: kafka-configs.sh --alter --entity-type topics --entity-name {topic} "
            f"--add-config {key}={wanted}"
            for topic, key, actual, wanted in self.drift
        ]


# settings of an existing topic that matter: checked, never changed behind the operator
_CHECKED = {"retention.ms", "retention.bytes", "cleanup.policy", "message.timestamp.type"}


async def _drift(
    admin: AIOKafkaAdminClient, names: list[str], configs: dict[str, dict[str, str]]
) -> list[tuple[str, str, str, str]]:
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    wanted = {
        name: {k: v for k, v in configs[name].items() if k in _CHECKED}
        for name in names
        if any(k in _CHECKED for k in configs[name])
    }
    if not wanted:
        return []
    resources = [
        ConfigResource(ConfigResourceType.TOPIC, name, dict.fromkeys(keys))
        for name, keys in wanted.items()
    ]
    out = []
    for response in await admin.describe_configs(resources):
        for resource in response.resources:
            name, entries = resource[3], resource[4]
            for entry in entries:
                key, actual = entry[0], entry[1]
                need = wanted.get(name, {}).get(key)
                if need is not None and actual != need:
                    out.append((name, key, str(actual), need))
    return sorted(out)


def _reason(why: BaseException) -> str:
    text = str(why).strip()
    if isinstance(why, TimeoutError) or not text:
        return "no answer" if isinstance(why, TimeoutError) else type(why).__name__
    return text.split("\n")[0][:200]


def _died_here(client_id: str) -> bool:
    """A presence member that was a worker on this machine whose process is gone: the
    broker keeps it until its session times out, so a worker restarted at once after a
    crash would otherwise warn that it took over from a live one."""
    prefix = f"allot-worker/{socket.gethostname()}/pid-"
    if not client_id.startswith(prefix) or not client_id[len(prefix) :].isdigit():
        return False
    try:
        os.kill(int(client_id[len(prefix) :]), 0)
    except ProcessLookupError:
        return True
    except OSError:  # alive, as another user
        return False
    return False


async def _admin(
    bootstrap: str, timeout_s: float, kafka_options: dict[str, Any] | None = None
) -> AIOKafkaAdminClient:
    options = client_options() if kafka_options is None else kafka_options
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000), **options
    )
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
    except (TimeoutError, KafkaConnectionError, KafkaError, OSError) as why:
        with contextlib.suppress(Exception):
            await admin.close()
        raise BrokerUnavailable(unreachable(bootstrap, why)) from None
    return admin


async def create_topics(
    bootstrap: str,
    *,
    partitions: int = 1,
    topics: Topics | None = None,
    replication_factor: int = 1,
    timeout_s: float = 15.0,
    kafka_options: dict[str, Any] | None = None,
    required: tuple[str, ...] = (),
) -> TopicsReport:
    """Create the inbox, journal, DLQ and snapshot topics; existing ones are left as
    they are and reported. Raises BrokerUnavailable when the broker does not answer,
    and MissingTopics (creating nothing) when a topic of `required` does not exist."""
    topics = topics or Topics()
    configs = topic_configs(topics)
    report = TopicsReport()
    admin = await _admin(bootstrap, timeout_s, kafka_options)
    try:
        present = set(await admin.list_topics())
        absent = [name for name in required if name not in present]
        if absent:
            raise MissingTopics(_missing_message(absent, bootstrap, topics), absent)
        missing = [name for name in topics.all() if name not in present]
        report.existing = [name for name in topics.all() if name in present]
        if missing:
            response = await admin.create_topics(
                [
                    NewTopic(
                        name=name,
                        num_partitions=partitions,
                        replication_factor=replication_factor,
                        topic_configs=configs[name],
                    )
                    for name in missing
                ],
                timeout_ms=int(timeout_s * 1000),
            )
            for item in response.topic_errors:
                name, code = item[0], item[1]
                message = item[2] if len(item) > 2 else ""
                if code == 0:
                    report.created.append(name)
                elif code == 36:  # TOPIC_ALREADY_EXISTS: someone else was quicker
                    report.existing.append(name)
                else:
                    raise KafkaError(f"creating topic {name!r} failed (error {code}): {message}")
        try:
            report.drift = await _drift(admin, report.existing, configs)
            if report.existing:
                for t in await admin.describe_topics(report.existing):
                    report.partitions[t["topic"]] = len(t.get("partitions") or [])
        except KafkaError:  # a broker that refuses DescribeConfigs: nothing to say
            report.drift = []
        # wait until the metadata lists them, so producers don't race the creation
        deadline = time.monotonic() + timeout_s
        while report.created and time.monotonic() < deadline:
            described = await admin.describe_topics(report.created)
            if all(t.get("error_code", 0) == 0 and t.get("partitions") for t in described):
                break
            await asyncio.sleep(0.1)
    finally:
        await admin.close()
    order = {name: i for i, name in enumerate(topics.all())}
    report.created.sort(key=order.__getitem__)
    report.existing.sort(key=order.__getitem__)
    return report


def _missing_message(absent: list[str], bootstrap: str, topics: Topics) -> str:
    """The worker's one line about its inbox or journal missing."""
    suffix = (
        topics.inbox.removeprefix(names.BASE_INBOX)
        if topics.inbox.startswith(names.BASE_INBOX)
        else None
    )
    said = names.missing(absent, bootstrap, suffix, who="this deployment")
    user = os.environ.get("ALLOT_KAFKA_USER", "").strip()
    if user:  # the broker lists only the topics the principal may describe
        said += f" (or principal {user!r} may not describe it)"
    return (
        f"{said}; the scheduler creates no topics: if this is a new deployment, run "
        f"`allot topics create --kafka {bootstrap}` first, with the same {names.SUFFIX_ENV}"
    )


# ------------------------------------------------------------------ helpers


def _abandon(futures: Iterable[Any]) -> None:
    """Futures of sends a failed write will not await: their failures are retrieved
    when they come (a fenced producer fails every send; unawaited, asyncio reports each
    as a "Future exception was never retrieved" traceback after the worker's message)."""
    for future in futures:
        future.add_done_callback(_retrieve)


def _retrieve(future: Any) -> None:
    if not future.cancelled():
        future.exception()


def identity(topics: Topics, clusters: Iterable[str] | None) -> str:
    """Stable for the same topics and cluster set: it names the transactional id (so a
    restart fences the dead incarnation) and the snapshot manifest."""
    scope = "*" if clusters is None else ",".join(sorted(set(clusters)))
    digest = hashlib.sha1(f"{topics.inbox}|{topics.journal}|{scope}".encode()).hexdigest()[:12]
    return f"allot-scheduler/{topics.journal}/{digest}"


def _header(headers: Iterable[tuple[str, bytes]] | None, name: str) -> bytes | None:
    for key, value in headers or ():
        if key == name:
            return value
    return None


def _source(raw: dict[str, Any]) -> tuple[int, int] | None:
    source = raw.get("inbox")
    if isinstance(source, list) and len(source) == 2:
        return int(source[0]), int(source[1])
    return None


def _note(positions: dict[int, int], source: tuple[int, int] | None) -> None:
    if source is not None and source[1] > positions.get(source[0], -1):
        positions[source[0]] = source[1]


@dataclass
class Stats:
    batches: int = 0
    inputs: int = 0
    journal: int = 0
    dead: int = 0
    snapshots: int = 0
    recovered_records: int = 0
    recovery_s: float = 0.0
    # (inbox partitions, seconds from assignment to resuming them) per takeover
    takeovers: list[tuple[tuple[int, ...], float]] = field(default_factory=list)
    fenced: int = 0  # partitions given up because another worker took them over
    write_failures: int = 0  # batches whose transaction failed (re-derived, then redone)


class _Partition:
    """An inbox partition this worker owns: its transactional producer and positions."""

    def __init__(self, number: int, producer: AIOKafkaProducer) -> None:
        self.number = number
        self.producer = producer
        # journal partition -> offset after the last journal record of this partition's
        # clusters folded or written (where a recovery from a snapshot reads on)
        self.journal_next: dict[int, int] = {}
        self.dead = -1  # last inbox offset dead-lettered (dead letters are not journaled)
        self.scanned = -1  # last inbox offset looked at (including other workers' clusters)
        self.active = True  # False between a revocation and the next assignment
        self.dirty = False
        self.last_snapshot = time.monotonic()
        self.generation = 0  # snapshot rounds begun: a later one overtakes an earlier
        self.written = 0  # the generation of the last round written


@dataclass(frozen=True)
class _Round:
    """A snapshot round captured for one partition: its clusters' blobs are
    `blobs[first : first + len(clusters)]` once the (shared) future resolves."""

    part: _Partition
    generation: int
    round_id: str
    clusters: list[str]
    manifest: bytes
    first: int
    blobs: asyncio.Future[list[bytes]]


# session timeouts a fenced partition may stay assigned before the fence is taken as a
# worker outside the group's (a rebalance within the group revokes it well before)
FENCED_GRACE_FACTOR = 3


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


# ------------------------------------------------------------------ the worker


class Worker:
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
        self._joined = False
        self._closing: list[asyncio.Task] = []
        self._snapshotting: asyncio.Task | None = None
        # without a group: this worker's membership of its identity's presence group, so
        # a second worker with the same identity can tell it takes over from a live one
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
            await self._start()
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
        finally:
            for task in (ticker, watching):
                if task is not None:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError, Exception):
                        await task
            await self._close()
            logging.getLogger("aiokafka").removeHandler(self._watch)

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

    def _announce_ready(self) -> None:
        self.ready.set()
        log.info(
            "scheduler ready: %d clusters on inbox partitions %s, recovered from %d journal "
            "records in %.2fs",
            len(self.cores),
            sorted(self.owned),
            self.stats.recovered_records,
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
            # stay where they are (kept, not reloaded); range for groups with older members
            partition_assignment_strategy=(StickyPartitionAssignor, RangePartitionAssignor),
            **self.kafka_options,
        )
        await self._consumer.start()
        if self.group is None:  # this worker owns every partition
            live = await self._live_workers()  # asked before fencing them
            tps = [TopicPartition(self.topics.inbox, p) for p in self._inbox_parts]
            self._consumer.assign(tps)
            for tp in tps:
                self._consumer.pause(tp)
            self._pending = dict.fromkeys(self._inbox_parts, time.monotonic())
            await self._take_pending(retry=False)
            self._joined = True
            if live:
                log.warning(
                    "took inbox partitions %s over from a live worker with the same topics "
                    "and clusters (%s; or one that died less than %gs ago): it is fenced "
                    "and stops at its next write ('another worker ... took over'). Without "
                    "--group the newest worker of a cluster set takes over; run one, or "
                    "several with --group",
                    sorted(self.owned),
                    ", ".join(live),
                    self.session_timeout_ms / 1000,
                )
            await self._join_presence()
            self._announce_ready()
        else:  # partitions come and go with the group's rebalances
            self._consumer.subscribe([self.topics.inbox], listener=_Rebalance(self))

    # ---------------------------------------------------------------- presence
    def _presence_group(self) -> str:
        """A consumer group per identity (topics and cluster set) whose members are the
        running workers of that identity without --group. It reads nothing: it only
        makes them visible to the broker's DescribeGroups, which is how a newcomer
        knows it takes over from a live worker (transactions do not tell)."""
        return f"{self.identity}/live"

    async def _live_workers(self) -> list[str]:
        """`CLIENT-ID at HOST` of each member of the presence group: the workers of this
        identity running now. Best effort: [] when the broker will not say."""
        try:
            with aiokafka_quiet():
                admin = await _admin(self.bootstrap, 10.0, self.kafka_options)
                try:
                    responses = await asyncio.wait_for(
                        admin.describe_consumer_groups([self._presence_group()]), 10.0
                    )
                finally:
                    await admin.close()
        except Exception as why:  # e.g. no Describe on the group under ACLs
            log.debug("could not describe group %s: %s", self._presence_group(), why)
            return []
        return [
            f"{member[1]} at {str(member[2]).lstrip('/')}"
            for response in responses
            for group in response.groups
            if group[0] == 0
            for member in group[5]
            if not _died_here(member[1])
        ]

    async def _join_presence(self) -> None:
        """Join the presence group (subscribed to the dead-letter topic from its end,
        whatever it reads is dropped); a broker that refuses costs only the warning."""
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=self._presence_group(),
            client_id=f"allot-worker/{socket.gethostname()}/pid-{os.getpid()}",
            enable_auto_commit=False,
            auto_offset_reset="latest",
            session_timeout_ms=self.session_timeout_ms,
            heartbeat_interval_ms=max(500, self.session_timeout_ms // 4),
            **self.kafka_options,
        )
        try:
            await consumer.start()
            consumer.subscribe([self.topics.dlq])
        except Exception as why:
            await _quiet_stop(consumer)
            log.debug("not in group %s: %s", self._presence_group(), why)
            return
        self._presence = consumer
        self._presence_task = asyncio.create_task(
            self._stay_present(consumer), name="allot-presence"
        )

    @staticmethod
    async def _stay_present(consumer: AIOKafkaConsumer) -> None:
        """Poll now and then: a member that does not poll leaves after max.poll.interval."""
        while True:
            try:
                await consumer.getmany(timeout_ms=1000, max_records=1)
            except asyncio.CancelledError:
                raise
            except Exception as why:
                log.debug("presence group: %s", why)
                await asyncio.sleep(1.0)

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
        part = self.owned[tp.partition]
        folded = max(
            [
                core.positions.get(tp.partition, -1)
                for cluster, core in self.cores.items()
                if self.home(cluster) == tp.partition
            ]
            + [part.dead, part.scanned]
        )
        if folded >= 0:
            self._consumer.seek(tp, folded + 1)
        else:  # offset 0, or the earliest retained one (auto_offset_reset)
            self._consumer.seek(tp, 0)

    # ---------------------------------------------------------------- recovery
    async def _take_pending(self, *, retry: bool = True) -> None:
        """Recover every partition assigned but not yet ours, then resume reading it."""
        async with self._lock:
            parts = sorted(self._pending)
            if not parts:
                return
            started = time.monotonic()
            try:
                await self._take(parts)
            except (KafkaError, OSError, TimeoutError) as why:
                for p in parts:
                    self._drop(p)
                if not retry:
                    raise
                log.warning("could not take over partitions %s (%s); retrying", parts, why)
                self._retry_at = time.monotonic() + 1.0
                return
            assert self._consumer is not None
            assigned = self._consumer.assignment()
            for p in parts:
                tp = TopicPartition(self.topics.inbox, p)
                if tp in assigned:
                    self._seek(tp)
                    self._consumer.resume(tp)
            since = min(self._pending[p] for p in parts)
            for p in parts:
                self._pending.pop(p, None)
            took = time.monotonic() - since
            self.stats.recovery_s = time.monotonic() - started
            self.stats.takeovers.append((tuple(parts), took))
            log.info(
                "took over inbox partitions %s in %.2fs (%d clusters, %d journal records)",
                parts,
                took,
                sum(1 for c in self.cores if self.home(c) in parts),
                self.stats.recovered_records,
            )

    async def _take(self, parts: list[int]) -> None:
        for p in parts:
            self.owned[p] = _Partition(p, await self._fenced_producer(p))
        start = await self._load_snapshots(parts)
        await self._fold_journal(parts, start)
        await self._read_dead_letters(parts)

    async def _fenced_producer(self, p: int) -> AIOKafkaProducer:
        """The transactional producer of inbox partition `p`. Its id is stable for the
        same topics, cluster set and partition, so initializing it fences whichever
        worker held `p` before and aborts the transaction it left open: the committed
        journal read next is final."""
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            transactional_id=f"{self.identity}/p{p}",
            enable_idempotence=True,
            acks="all",
            linger_ms=0,
            max_batch_size=JOURNAL_BATCH_BYTES,
            max_request_size=MAX_SNAPSHOT_BYTES + 1024 * 1024,
            request_timeout_ms=30_000,
            # a worker that dies mid-batch holds back read_committed readers of the
            # partitions it wrote until its successor fences it or this runs out
            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
            **self.kafka_options,
        )
        try:
            await producer.start()
            await producer.begin_transaction()
            await producer.commit_transaction()
        except BaseException:
            await _quiet_stop(producer)
            raise
        return producer

    def _manifest_key(self, p: int) -> bytes:
        return f"{MANIFEST_PREFIX}{self.identity}/p{p}".encode()

    async def _load_snapshots(self, parts: list[int]) -> dict[int, dict[int, int]]:
        """Cores of `parts` from their latest complete snapshot rounds; returns, per
        inbox partition, the journal offsets to fold from (none: the whole journal)."""
        latest: dict[bytes, bytes | None] = {}
        async for _, records in self._read_to_end(self.topics.snapshots, big=True):
            for r in records:
                if r.key is not None:
                    latest[r.key] = r.value
        offsets: dict[int, dict[int, int]] = {}
        for p in parts:
            manifest_raw = latest.get(self._manifest_key(p))
            if not manifest_raw:
                continue
            try:
                manifest = orjson.loads(manifest_raw)
                cores: dict[str, SchedulerCore] = {}
                for cluster in manifest["clusters"]:
                    blob = latest.get(cluster.encode())
                    if blob is None:
                        raise ValueError(f"no snapshot for cluster {cluster!r}")
                    snap = pickle.loads(zlib.decompress(blob))
                    if (
                        snap.get("format") != SNAPSHOT_FORMAT
                        or snap.get("round") != manifest["round"]
                    ):
                        raise ValueError(
                            f"snapshot of {cluster!r} is not from round {manifest['round']}"
                        )
                    core = snap["core"]
                    core.wanted = self._wanted(cluster)
                    cores[cluster] = core
                journal = {int(jp): int(o) for jp, o in manifest["journal"].items()}
                dead, scanned = int(manifest["dead"]), int(manifest["scanned"])
            except Exception as why:  # an old format or a code change: rebuild
                log.warning(
                    "ignoring snapshot round of partition %d (%s); folding its whole journal",
                    p,
                    why,
                )
                continue
            self.cores.update(cores)
            part = self.owned[p]
            part.dead, part.scanned = dead, scanned
            part.journal_next = dict(journal)
            offsets[p] = journal
            log.info(
                "loaded snapshot round %s of partition %d: %d clusters",
                manifest["round"],
                p,
                len(cores),
            )
        return offsets

    def _journal_parts_of(self, parts: list[int]) -> list[int]:
        """Journal partitions that can hold records of clusters homed on `parts`: the
        same numbers when both topics have as many partitions (same key, same hash)."""
        if len(self._journal_parts) == len(self._inbox_parts):
            return [p for p in parts if p in self._journal_parts]
        return list(self._journal_parts)

    async def _fold_journal(self, parts: list[int], start: dict[int, dict[int, int]]) -> None:
        """Re-decide the journal tail of each cluster homed on `parts` after its
        partition's snapshot, exactly as the live core did (`SchedulerCore.fold_journal`)."""
        wanted = set(parts)
        observe = self.on_journal
        journal_parts = self._journal_parts_of(parts)
        # an observer sees the whole journal, the cores only what the snapshots lack
        read_from = {
            jp: 0 if observe is not None else min(start.get(p, {}).get(jp, 0) for p in parts)
            for jp in journal_parts
        }
        tails: dict[str, list[bytes]] = {}
        async for jp, records in self._read_to_end(
            self.topics.journal, read_from, only=journal_parts
        ):
            seen: dict[str, list[bytes]] = {}
            for r in records:
                cluster = r.key.decode("utf-8", "replace") if r.key is not None else None
                if not self._mine(cluster) or self.home(cluster) not in wanted:  # type: ignore[arg-type]
                    continue
                if observe is not None:
                    seen.setdefault(cluster, []).append(r.value)  # type: ignore[arg-type]
                if r.offset >= start.get(self.home(cluster), {}).get(jp, 0):  # type: ignore[arg-type]
                    tails.setdefault(cluster, []).append(r.value)  # type: ignore[arg-type]
            for cluster, lines in seen.items():
                observe(cluster, lines, recovered=True)  # type: ignore[misc]
            end = records[-1].offset + 1
            for p in parts:
                part = self.owned[p]
                part.journal_next[jp] = max(part.journal_next.get(jp, 0), end)
        count = 0
        for cluster, lines in tails.items():
            core = self._core(cluster)
            count += core.fold_journal(lines)
            if core.diverged:
                log.error(
                    "cluster %s: the journal does not re-derive under this code (written "
                    "by another allot version, or edited); folded it as facts (decide's "
                    "caches restart cold)",
                    cluster,
                )
        self.stats.recovered_records = count
        for cluster, core in self.cores.items():  # from a snapshot round, a tail, or both
            if self.home(cluster) in wanted:
                note = old_bucket_note(core.state.config, core.wanted)
                if note is not None:
                    log.warning("cluster %s: %s", cluster, note)

    async def _read_dead_letters(self, parts: list[int]) -> None:
        async for _, records in self._read_to_end(self.topics.dlq):
            for r in records:
                if _header(r.headers, "inbox.topic") != self.topics.inbox.encode():
                    continue
                cluster = (_header(r.headers, "cluster") or b"").decode("utf-8", "replace") or None
                if cluster is None and self.clusters is not None:
                    continue  # keyless garbage is dead-lettered by the all-cluster worker
                if cluster is not None and not self._mine(cluster):
                    continue
                try:
                    partition = int(_header(r.headers, "inbox.partition") or b"")
                    offset = int(_header(r.headers, "inbox.offset") or b"")
                except ValueError:
                    continue
                part = self.owned.get(partition)
                if part is not None and partition in parts:
                    part.dead = max(part.dead, offset)

    async def _read_to_end(
        self,
        topic: str,
        start: dict[int, int] | None = None,
        *,
        big: bool = False,
        only: list[int] | None = None,
    ) -> Any:
        """Yield (partition, records) of committed records of `topic` (its partitions
        `only`, default all) from `start` (default: the beginning) up to its end as of
        now.

        "End" is the high watermark, not the last stable offset: another worker's open
        transaction on the same partition (other clusters) would otherwise hide our own
        later, committed records. A read_committed reader gets past such a transaction
        only once it ends, so this waits for it (our own was aborted by the fencing)."""
        fetch = (MAX_SNAPSHOT_BYTES + 1024 * 1024) if big else 8 * 1024 * 1024
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            max_partition_fetch_bytes=fetch,
            fetch_max_bytes=max(fetch, 32 * 1024 * 1024),
            **self.kafka_options,
        )
        try:  # a start that fails (the broker went away) is closed too, not left to GC
            await consumer.start()
            parts = only if only is not None else await self._partitions(topic)
            tps = [TopicPartition(topic, p) for p in parts]
            if not tps:
                return
            consumer.assign(tps)
            ends = await self._high_watermarks(tps)
            todo = set()
            for tp in tps:
                first = (start or {}).get(tp.partition, 0)
                if first >= ends[tp]:
                    continue
                consumer.seek(tp, first)
                todo.add(tp)
            deadline = time.monotonic() + READ_TIMEOUT_S
            while todo:
                batches = await consumer.getmany(*todo, timeout_ms=200, max_records=20000)
                for tp, records in batches.items():
                    records = [r for r in records if r.offset < ends[tp]]
                    if records:
                        yield tp.partition, records
                for tp in list(todo):
                    if await consumer.position(tp) >= ends[tp]:
                        todo.discard(tp)
                if todo and time.monotonic() > deadline:
                    raise KafkaError(f"reading {topic!r} to its end took over {READ_TIMEOUT_S}s")
        finally:
            await consumer.stop()

    async def _high_watermarks(self, tps: list[TopicPartition]) -> dict[TopicPartition, int]:
        probe = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            isolation_level="read_uncommitted",
            **self.kafka_options,
        )
        try:
            await probe.start()
            return await probe.end_offsets(tps)
        finally:
            await probe.stop()

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

    # ---------------------------------------------------------------- batches
    def _route(
        self, partition: int, key: bytes | None, value: bytes | None
    ) -> tuple[str | None, str | None]:
        """(cluster, None) for a record a core should see; (cluster or None, error) for a
        record to dead-letter without a core."""
        if key is not None:
            try:
                cluster = key.decode()
            except UnicodeDecodeError:
                return None, "record key is not UTF-8 text (the key names the cluster)"
            if not cluster or len(cluster) > MAX_CLUSTER_NAME or not printable(cluster):
                return None, f"record key {cluster[:60]!r} is not a cluster name"
        else:
            try:
                raw = orjson.loads(value or b"")
            except orjson.JSONDecodeError as why:
                return None, f"not JSON: {why}"
            if not isinstance(raw, dict):
                return None, f"not a JSON object but {type(raw).__name__}"
            cluster = raw.get("cluster", "default")
            if not isinstance(cluster, str) or not cluster or len(cluster) > MAX_CLUSTER_NAME:
                return None, "record has no key and no usable 'cluster' field"
        home = self.home(cluster)
        if home != partition:
            # one owner per cluster: its records must all arrive on one partition
            return cluster, (
                f"record for cluster {cluster!r} arrived on inbox partition {partition}, but "
                f"that cluster's records belong on partition {home} (key records by cluster "
                "with the default partitioner)"
            )
        if (
            cluster not in self.cores
            and len(self.cores) >= self.max_clusters
            and self._mine(cluster)
        ):
            # every new key would otherwise cost a scheduler core for good
            return cluster, (
                f"this worker already schedules {len(self.cores)} clusters, its limit; "
                f"cluster {cluster!r} is refused (spread clusters with --cluster or --group)"
            )
        return cluster, None

    def _over_limit(self, cluster: str, batch: dict[str, Any]) -> bool:
        """A new cluster past `max_clusters` (counting those new in this batch): every
        new record key would otherwise cost a scheduler core for good."""
        if cluster in self.cores or cluster in batch:
            return False
        new = sum(c not in self.cores for c in batch)
        return len(self.cores) + new >= self.max_clusters

    async def _process(self, batches: dict[TopicPartition, list[Any]]) -> None:
        async with self._lock:
            work = []
            for tp in sorted(batches, key=lambda tp: tp.partition):
                part = self.owned.get(tp.partition)
                if part is not None and part.active and tp.partition not in self._pending:
                    work.append(self._process_partition(part, batches[tp]))
            await asyncio.gather(*work)

    async def _process_partition(self, part: _Partition, records: list[Any]) -> None:
        """Fold one partition's records and write the results in one transaction of its
        producer. If the write fails, the cores are ahead of the journal: drop them and
        take the partition over again (snapshot + journal), which redoes the batch."""
        partition = part.number
        if not records:
            return
        part.scanned = records[-1].offset
        per_cluster: dict[str, list[InboxRecord]] = {}
        raw_of: dict[int, Any] = {}
        dead: list[tuple[Any, str | None, str]] = []  # (consumer record, cluster, error)
        for r in records:
            cluster, error = self._route(partition, r.key, r.value)
            if error is not None:
                if self.clusters is None or self._mine(cluster):
                    dead.append((r, cluster, error))
                    part.dead = r.offset
                continue
            if not self._mine(cluster):
                continue
            if self._over_limit(cluster, per_cluster):  # type: ignore[arg-type]
                error = (
                    f"this worker already schedules {self.max_clusters} clusters, its limit; "
                    f"cluster {cluster!r} is refused (spread clusters with --cluster or --group)"
                )
                dead.append((r, cluster, error))
                part.dead = r.offset
                continue
            per_cluster.setdefault(cluster, []).append(  # type: ignore[arg-type]
                InboxRecord(partition, r.offset, r.timestamp / 1000.0, r.value or b"")
            )
            raw_of[r.offset] = r
        out: dict[str, list[bytes]] = {}
        inputs = 0
        for cluster, folded in per_cluster.items():
            result = self._core(cluster).process(folded)
            inputs += result.inputs
            if result.journal:
                out[cluster] = result.journal
            for letter in result.dead:
                dead.append((raw_of[letter.record.offset], cluster, letter.error))
                part.dead = max(part.dead, letter.record.offset)
        if not out and not dead:
            return
        dead.sort(key=lambda item: item[0].offset)  # inbox order
        try:
            await self._write(part, out, dead)
        except ProducerFenced:
            self._on_fenced(partition)
            self._check_fenced()
            return
        except (KafkaError, OSError, TimeoutError) as why:
            log.warning(
                "writing a batch of inbox partition %d failed (%s); re-deriving it",
                partition,
                _reason(why),
            )
            self.stats.write_failures += 1
            self._drop(partition)
            if self._consumer is not None:
                tp = TopicPartition(self.topics.inbox, partition)
                if tp in self._consumer.assignment():
                    self._consumer.pause(tp)
                    self._pending[partition] = time.monotonic()
                    self._retry_at = time.monotonic() + 1.0
            return
        self.stats.batches += 1
        self.stats.inputs += inputs
        self.stats.dead += len(dead)
        part.dirty = True
        if dead:
            self._tell_dead(len(dead), dead[0][2])

    def _journal_partition(self, cluster: str) -> int:
        part = self._journal_part_of.get(cluster)
        if part is None:
            parts = self._journal_parts
            part = self._partitioner(cluster.encode(), parts, parts)
            self._journal_part_of[cluster] = part
        return part

    async def _write(
        self, part: _Partition, out: dict[str, list[bytes]], dead: list[tuple[Any, str | None, str]]
    ) -> None:
        producer = part.producer
        topic = self.topics.journal
        by_part: dict[int, list[tuple[bytes, list[bytes]]]] = {}
        for cluster, lines in out.items():
            by_part.setdefault(self._journal_partition(cluster), []).append(
                (cluster.encode(), lines)
            )
        await producer.begin_transaction()
        try:
            pending: list[tuple[int, int, asyncio.Future]] = []  # (partition, records, future)
            written = 0
            for jp, groups in by_part.items():
                batch = producer.create_batch()
                count = 0
                for key, lines in groups:
                    for line in lines:
                        if batch.append(key=key, value=line, timestamp=None) is None:
                            pending.append(
                                (jp, count, await producer.send_batch(batch, topic, partition=jp))
                            )
                            batch = producer.create_batch()
                            count = 0
                            if batch.append(key=key, value=line, timestamp=None) is None:
                                raise KafkaError(
                                    f"journal record of {len(line)} bytes is too large"
                                )
                        count += 1
                if count:
                    pending.append(
                        (jp, count, await producer.send_batch(batch, topic, partition=jp))
                    )
                written += sum(len(lines) for _, lines in groups)
            for r, cluster, error in dead:
                headers = [
                    ("error", error.encode()[:1000]),
                    ("inbox.topic", self.topics.inbox.encode()),
                    ("inbox.partition", str(r.partition).encode()),
                    ("inbox.offset", str(r.offset).encode()),
                    ("inbox.timestamp", str(r.timestamp).encode()),
                ]
                if cluster is not None:
                    headers.append(("cluster", cluster.encode()))
                fut = await producer.send(
                    self.topics.dlq,
                    value=r.value if r.value is not None else b"",
                    key=r.key,
                    headers=headers,
                )
                pending.append((-1, 0, fut))
            results = await asyncio.gather(*(fut for _, _, fut in pending))
            await producer.commit_transaction()
            self._watch.answered()
            for cluster in out:  # the start's config is in the journal now (or was not due)
                core = self.cores.get(cluster)
                if core is not None and core.wanted is None:
                    self._config_written.add(cluster)
        except Exception:
            _abandon(fut for _, _, fut in pending)
            with contextlib.suppress(Exception):
                await producer.abort_transaction()
            raise
        if self.on_journal is not None:
            for cluster, lines in out.items():
                self.on_journal(cluster, lines)
        for (jp, count, _), meta in zip(pending, results, strict=True):
            if jp >= 0:
                end = meta.offset + count
                if end > part.journal_next.get(jp, 0):
                    part.journal_next[jp] = end
        self.stats.journal += written

    # ---------------------------------------------------------------- snapshots
    async def _snapshot_dirty(self, parts: set[int] | None = None, *, locked: bool = False) -> None:
        """Snapshot every dirty owned partition (of `parts`), each in one transaction of
        its own producer: the pickled cores of its clusters plus a manifest naming the
        round and the journal offsets the round corresponds to. Holds the lock
        throughout (a hand-over or a clean stop); the periodic snapshot is
        `_snapshot_in_background`."""
        if not locked:
            async with self._lock:
                await self._snapshot_dirty(parts, locked=True)
            return
        rounds = self._begin_snapshots(parts)
        await self._finish_snapshots(rounds)

    async def _snapshot_in_background(self) -> None:
        """The periodic snapshot without stalling the loop: under the lock the state is
        captured (a forked child's copy-on-write image, `streams.offloop`) and the
        manifest fixed; batches go on while the child pickles; the lock is taken again
        only for the write. A round overtaken meanwhile (a hand-over snapshot, or the
        partition dropped and taken over) is not written."""
        async with self._lock:
            rounds = self._begin_snapshots(None)
        if not rounds:
            return
        with contextlib.suppress(Exception):  # reported per round by _finish_snapshots
            await asyncio.shield(rounds[0].blobs)
        async with self._lock:
            await self._finish_snapshots(rounds)

    def _begin_snapshots(self, parts: set[int] | None) -> list[_Round]:
        """Capture a round of every dirty owned partition (of `parts`), all in one child;
        the caller holds the lock. Changes folded after this mark the partition dirty
        again."""
        chosen = [
            part
            for p, part in sorted(self.owned.items())
            if part.dirty and (parts is None or p in parts) and p not in self._pending
        ]
        if not chosen:
            return []
        taken = time.time()
        rounds, objects = [], []
        for part in chosen:
            round_id = uuid.uuid4().hex
            clusters = sorted(c for c in self.cores if self.home(c) == part.number)
            first = len(objects)
            objects.extend(
                {
                    "format": SNAPSHOT_FORMAT,
                    "round": round_id,
                    "cluster": cluster,
                    "core": self.cores[cluster],
                    "taken": taken,
                }
                for cluster in clusters
            )
            manifest = orjson.dumps(
                {
                    "round": round_id,
                    "taken": taken,
                    "partition": part.number,
                    "clusters": clusters,
                    "journal": {str(jp): o for jp, o in part.journal_next.items()},
                    "dead": part.dead,
                    "scanned": part.scanned,
                }
            )
            part.generation += 1
            part.dirty = False
            part.last_snapshot = time.monotonic()
            rounds.append((part, part.generation, round_id, clusters, manifest, first))
        blobs = start_blobs(objects, fork=self.fork_snapshots)
        return [_Round(*r, blobs=blobs) for r in rounds]

    async def _finish_snapshots(self, rounds: list[_Round]) -> None:
        """Write the captured rounds, each partition's in its own transaction; the
        caller holds the lock. A failed round leaves its partition dirty."""
        if not rounds:
            return
        try:
            blobs = await rounds[0].blobs
        except Exception as why:
            for r in rounds:
                r.part.dirty = True
            log.warning("snapshot failed: %s", why)
            return
        current = [
            r
            for r in rounds
            if self.owned.get(r.part.number) is r.part and r.part.generation == r.generation
        ]
        results = await asyncio.gather(
            *(self._write_snapshot(r, blobs) for r in current), return_exceptions=True
        )
        for r, result in zip(current, results, strict=True):
            if isinstance(result, ProducerFenced):
                # as for a batch: the producer is dead (its next transaction would fail
                # on aiokafka's state machine, a bare AssertionError), the partition gone
                self._on_fenced(r.part.number)
            elif isinstance(result, BaseException):
                r.part.dirty = True
                log.warning("snapshot of inbox partition %d failed: %s", r.part.number, result)

    async def _write_snapshot(self, r: _Round, blobs: list[bytes]) -> None:
        part = r.part
        mine = blobs[r.first : r.first + len(r.clusters)]
        for cluster, blob in zip(r.clusters, mine, strict=True):
            if len(blob) > MAX_SNAPSHOT_BYTES:
                log.warning(
                    "snapshot of %s is %d bytes, over the limit; skipping this round",
                    cluster,
                    len(blob),
                )
                return
        producer = part.producer
        await producer.begin_transaction()
        futures: list[Any] = []
        try:
            for cluster, blob in zip(r.clusters, mine, strict=True):
                futures.append(
                    await producer.send(self.topics.snapshots, value=blob, key=cluster.encode())
                )
            futures.append(
                await producer.send(
                    self.topics.snapshots, value=r.manifest, key=self._manifest_key(part.number)
                )
            )
            await asyncio.gather(*futures)
            await producer.commit_transaction()
        except Exception:
            _abandon(futures)
            with contextlib.suppress(Exception):
                await producer.abort_transaction()
            raise
        self.stats.snapshots += 1
        part.written = r.generation
        log.info(
            "snapshot round %s of partition %d: %d clusters, %d bytes",
            r.round_id,
            part.number,
            len(mine),
            sum(len(b) for b in mine),
        )

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
        clients: list[Any] = [self._consumer, self._meta, self._presence]
        clients += [part.producer for part in self.owned.values()]
        # at once: with the broker gone each stop waits out its timeout, and one after
        # the other they kept a stopping worker alive past a supervisor's grace period
        await asyncio.gather(*(_quiet_stop(client) for client in clients if client is not None))
        for task in self._closing:
            with contextlib.suppress(Exception):
                await task
        self._consumer = self._meta = self._presence = None
        self._presence_task = None
        self.owned = {}


async def _quiet_stop(client: Any) -> None:
    await quiet_stop(client, 10.0)


# ------------------------------------------------------------------ entry points


async def serve(
    bootstrap: str,
    *,
    config: SchedulerConfig | None,
    clusters: list[str] | None = None,
    tick_every: float = 10.0,
    snapshot_every: float = 60.0,
    stop: asyncio.Event | None = None,
    topics: Topics | None = None,
    inbox: str | None = None,
    journal: str | None = None,
    dlq: str | None = None,
    snapshots: str | None = None,
    max_batch: int = 5000,
    create_topics: bool = False,
    partitions: int = 1,
    on_ready: Any = None,
    on_journal: Callable[..., None] | None = None,
    group: str | None = None,
    kafka_options: dict[str, Any] | None = None,
    session_timeout_ms: int = 10_000,
    max_clusters: int = MAX_CLUSTERS,
    stop_grace: float = STOP_GRACE_S,
) -> Worker:
    """Run the scheduler until `stop` is set (then snapshot and return the worker).

    Topic names default to `streams.topics`; pass `topics=` or single names. A missing
    inbox or journal is MissingTopics (`allot topics create` makes them; a mistyped
    suffix would else start an empty deployment), unless `create_topics`: then missing
    topics are created with `partitions` partitions. With a
    consumer `group`, the workers of that group share the inbox partitions (see
    `Worker`); without one this worker takes them all."""
    chosen = topics or Topics()
    overrides = {
        k: v
        for k, v in {"inbox": inbox, "journal": journal, "dlq": dlq, "snapshots": snapshots}.items()
        if v is not None
    }
    chosen = replace(chosen, **overrides)
    worker = Worker(
        bootstrap,
        config=config,
        clusters=clusters,
        tick_every=tick_every,
        snapshot_every=snapshot_every,
        topics=chosen,
        max_batch=max_batch,
        create=create_topics,
        partitions=partitions,
        on_journal=on_journal,
        group=group,
        kafka_options=kafka_options,
        session_timeout_ms=session_timeout_ms,
        max_clusters=max_clusters,
        stop_grace=stop_grace,
    )
    if on_ready is not None:

        async def _notify() -> None:
            await worker.ready.wait()
            on_ready(worker)

        notifier = asyncio.create_task(_notify())
    try:
        await worker.run(stop)
    finally:
        if on_ready is not None:
            notifier.cancel()
    return worker


def run_worker(
    bootstrap: str,
    *,
    config: SchedulerConfig | None,
    clusters: list[str] | None = None,
    tick_every: float = 10.0,
    snapshot_every: float = 60.0,
    stop: asyncio.Event | None = None,
    **options: Any,
) -> None:
    """Blocking `serve`: SIGINT/SIGTERM stop it cleanly (a last snapshot is written)."""

    async def main() -> None:
        event = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, event.set)
        await serve(
            bootstrap,
            config=config,
            clusters=clusters,
            tick_every=tick_every,
            snapshot_every=snapshot_every,
            stop=event,
            **options,
        )

    asyncio.run(main())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m streams.worker", description="Run the allot scheduler on Kafka."
    )
    parser.add_argument(
        "--kafka",
        default=os.environ.get("ALLOT_KAFKA"),
        help="bootstrap HOST:PORT (default $ALLOT_KAFKA)",
    )
    parser.add_argument(
        "--cluster",
        action="append",
        dest="clusters",
        help="only this cluster (repeat; default: every cluster on the inbox partitions)",
    )
    parser.add_argument(
        "--admin",
        action="append",
        dest="admins",
        help="admin principal (repeat; default $ALLOT_ADMINS, comma-separated)",
    )
    parser.add_argument(
        "--tick-every",
        type=float,
        default=10.0,
        help="seconds between clock.tick records, so time moves (0 = never; default %(default)s)",
    )
    parser.add_argument(
        "--snapshot-every",
        type=float,
        default=60.0,
        help="seconds between periodic snapshots (0 = none; hand-overs and a clean stop "
        "still snapshot; default %(default)s)",
    )
    parser.add_argument(
        "--topic-suffix",
        default=names.SUFFIX,
        help="suffix for every topic name (default $ALLOT_TOPIC_SUFFIX)",
    )
    parser.add_argument(
        "--create-topics",
        action="store_true",
        help="create missing topics (default: a missing inbox or journal stops the worker; "
        "`allot topics create` makes them)",
    )
    parser.add_argument(
        "--partitions", type=int, default=1, help="for topics --create-topics creates"
    )
    parser.add_argument(
        "--max-batch",
        type=int,
        default=5000,
        help="inbox records read per poll (default %(default)s)",
    )
    parser.add_argument(
        "--group",
        help="consumer group: workers of one group share the inbox partitions and take "
        "over a dead member's (default: none, this worker takes every partition)",
    )
    parser.add_argument(
        "--session-timeout",
        type=float,
        default=10.0,
        help="seconds without a heartbeat before the group hands a worker's partitions on "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--set", action="append", default=[],
        help="change config key=value (the others keep the journal's values)",
    )  # fmt: skip
    parser.add_argument(
        "-l", "--log-level", default="info", help="debug, info, warning or error (default info)"
    )
    return parser


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    return _parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.log_level.lower() != "debug":
        logging.getLogger("aiokafka").setLevel(logging.WARNING)
        quiet_repeats()  # a broker outage: the same aiokafka error ~60 times a second
    if not args.kafka:
        print("error: say where Kafka is: --kafka HOST:PORT (or $ALLOT_KAFKA)", file=sys.stderr)
        return 2
    admins = args.admins or [a for a in os.environ.get("ALLOT_ADMINS", "").split(",") if a]
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"error: --set {item!r}: use KEY=VALUE", file=sys.stderr)
            return 2
        overrides[key] = value
    from domain.config import ConfigError, parse_config

    config = None  # nothing asked: keep the config each cluster's journal records
    if overrides or admins:
        try:
            # only the keys given: the others keep each cluster's recorded config
            config = parse_config({**overrides, **({"admins": tuple(admins)} if admins else {})})
        except ConfigError as why:
            print(f"error: {why}", file=sys.stderr)
            return 2
    try:
        run_worker(
            args.kafka,
            config=config,
            clusters=args.clusters,
            tick_every=args.tick_every,
            snapshot_every=args.snapshot_every,
            topics=Topics.suffixed(args.topic_suffix),
            max_batch=args.max_batch,
            create_topics=args.create_topics,
            partitions=args.partitions,
            group=args.group,
            session_timeout_ms=int(args.session_timeout * 1000),
        )
    except (BrokerUnavailable, WorkerError, KafkaAuthError) as why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The live scheduler on Kafka: inbox -> `SchedulerCore` per cluster -> journal.

    run_worker("127.0.0.1:9092", config=SchedulerConfig(admins=("root",)))
    python -m streams.worker --kafka 127.0.0.1:9092 --admin root

One worker reads every partition of the inbox (records are keyed by cluster; a
partition holds many clusters) and keeps one `streams.core.SchedulerCore` per cluster.
Several workers split the clusters between them with `clusters=[...]`.

The loop, per batch:

1. `getmany` a batch of inbox records; route each to its cluster's core by the
   record key (keyless records: by the JSON `cluster` field, else `default`);
2. `SchedulerCore.process` folds them (decode, stamp with the broker timestamp,
   admit -> evolve -> decide) and returns the journal records and dead letters;
3. one Kafka transaction writes them: journal records go out as whole record batches
   (`send_batch`, nothing awaited per record), dead letters go to the DLQ with the
   error and the inbox position in headers; the futures are awaited together, then
   the transaction commits.

Exactly once (DESIGN §7). The journal is the state. Each journal record carries
`inbox: [partition, offset]` of the input that caused it, and each dead letter
carries the same in its headers. A batch is one transaction, so after a crash the
log holds whole batches only (readers use `isolation_level="read_committed"`). On
(re)start the worker

1. starts its transactional producer first: its `transactional_id` is stable for the
   same topics and cluster set, so initializing it fences a previous incarnation and
   aborts the transaction that was open when it died;
2. loads its latest snapshot round from the compacted `allot.snapshots` topic (one
   record per cluster, key = cluster: the pickled `SchedulerCore` — domain state plus
   inbox positions — and the journal offsets it corresponds to; a manifest record per
   worker identity names the round), or starts empty when there is none;
3. re-decides each cluster's committed journal after the snapshot's offsets (all of it
   without one), exactly as the live core did, checking every decision against the
   journal (`SchedulerCore.fold_journal`: folding facts alone would leave `decide`'s own
   caches cold and later decisions would differ from a worker that never stopped);
4. seeks each inbox partition to one past the last offset the journal or the DLQ
   records — consumer-group offsets play no part (the worker uses no group at all).

So an input is either in a committed batch (and is skipped on restart) or not (and is
folded again, producing the same decisions: decision ids are `cluster/seq`, and `decide`
is deterministic). Snapshots are written every `snapshot_every` seconds and on a clean
stop, never per batch. Usage stays in `domain` (event time): no faust windowed table.

A ticker task writes a `clock.tick` per cluster to the inbox every `tick_every`
seconds (actor `allot-ticker`), so time moves in the log when nothing else arrives.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import logging
import os
import pickle
import signal
import sys
import time
import uuid
import zlib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, KafkaError
from aiokafka.partitioner import DefaultPartitioner

from domain.config import SchedulerConfig
from streams import topics as names
from streams.core import InboxRecord, SchedulerCore

log = logging.getLogger("allot.worker")

TICKER = "allot-ticker"
SNAPSHOT_FORMAT = 1
MANIFEST_PREFIX = "__manifest__/"
MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
MAX_RECORD_BYTES = 8 * 1024 * 1024  # journal and DLQ records (an inbox record is <= 1 MiB)
MAX_CLUSTER_NAME = 200
JOURNAL_BATCH_BYTES = 256 * 1024  # one produce batch; ~600 journal records
READ_TIMEOUT_S = 120.0  # reading a topic to its end during recovery
TRANSACTION_TIMEOUT_MS = 15_000  # one batch or snapshot round takes well under this


class BrokerUnavailable(RuntimeError):
    """The Kafka broker did not answer: one line for the user."""


# ------------------------------------------------------------------ topics


@dataclass(frozen=True)
class Topics:
    inbox: str = names.INBOX
    journal: str = names.JOURNAL
    dlq: str = names.DLQ
    snapshots: str = names.SNAPSHOTS

    @classmethod
    def suffixed(cls, suffix: str) -> Topics:
        """Default names plus a suffix (tests and benchmarks use their own topics)."""
        return cls(
            *(
                f"{name}{suffix}"
                for name in (names.INBOX, names.JOURNAL, names.DLQ, names.SNAPSHOTS)
            )
        )

    def all(self) -> list[str]:
        return [self.inbox, self.journal, self.dlq, self.snapshots]


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


def _reason(why: BaseException) -> str:
    text = str(why).strip()
    if isinstance(why, TimeoutError) or not text:
        return "no answer" if isinstance(why, TimeoutError) else type(why).__name__
    return text.split("\n")[0][:200]


async def _admin(bootstrap: str, timeout_s: float) -> AIOKafkaAdminClient:
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000)
    )
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
    except (TimeoutError, KafkaConnectionError, KafkaError, OSError) as why:
        with contextlib.suppress(Exception):
            await admin.close()
        raise BrokerUnavailable(
            f"cannot reach Kafka at {bootstrap} ({_reason(why)}); is the broker running?"
        ) from None
    return admin


async def create_topics(
    bootstrap: str,
    *,
    partitions: int = 1,
    topics: Topics | None = None,
    replication_factor: int = 1,
    timeout_s: float = 15.0,
) -> TopicsReport:
    """Create the inbox, journal, DLQ and snapshot topics; existing ones are left as
    they are and reported. Raises BrokerUnavailable when the broker does not answer."""
    topics = topics or Topics()
    configs = topic_configs(topics)
    report = TopicsReport()
    admin = await _admin(bootstrap, timeout_s)
    try:
        present = set(await admin.list_topics())
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


# ------------------------------------------------------------------ helpers


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


# ------------------------------------------------------------------ the worker


class Worker:
    """One scheduler process; see the module docstring. Use `serve` / `run_worker`."""

    def __init__(
        self,
        bootstrap: str,
        *,
        config: SchedulerConfig | None,
        clusters: list[str] | None = None,
        tick_every: float = 10.0,
        snapshot_every: float = 60.0,
        topics: Topics | None = None,
        max_batch: int = 5000,
        poll_ms: int = 100,
        create: bool = True,
        partitions: int = 1,
        on_journal: Callable[[str, list[bytes]], None] | None = None,
    ) -> None:
        self.bootstrap = bootstrap.removeprefix("kafka://")
        # called with (cluster, journal lines) after each transaction commits and, during
        # recovery, with every committed journal record of this worker's clusters (from
        # the beginning, whatever the snapshot covers): e.g. a metrics fold
        self.on_journal = on_journal
        self.config = config
        self.clusters = None if clusters is None else set(clusters)
        self.tick_every = tick_every
        self.snapshot_every = snapshot_every
        self.topics = topics or Topics()
        self.max_batch = max_batch
        self.poll_ms = poll_ms
        self.create = create
        self.partitions = partitions
        self.identity = identity(self.topics, clusters)
        self.cores: dict[str, SchedulerCore] = {}
        # journal partition -> offset after the last journal record of ours folded
        self.journal_next: dict[int, int] = {}
        # inbox partition -> last offset dead-lettered (dead letters are not journaled)
        self.dead_positions: dict[int, int] = {}
        # inbox partition -> last offset looked at (including other workers' clusters)
        self.scanned: dict[int, int] = {}
        self.stats = Stats()
        self.ready = asyncio.Event()
        self._producer: AIOKafkaProducer | None = None
        self._consumer: AIOKafkaConsumer | None = None
        self._journal_parts: list[int] = []
        self._journal_part_of: dict[str, int] = {}
        self._partitioner = DefaultPartitioner()
        self._dirty = False
        self._last_snapshot = time.monotonic()

    # ---------------------------------------------------------------- run
    async def run(self, stop: asyncio.Event | None = None) -> None:
        stop = stop or asyncio.Event()
        ticker: asyncio.Task | None = None
        try:
            await self._start()
            if self.tick_every and self.tick_every > 0:
                ticker = asyncio.create_task(self._ticker(stop), name="allot-ticker")
            self.ready.set()
            log.info(
                "scheduler ready: %d clusters recovered from %d journal records in %.2fs",
                len(self.cores),
                self.stats.recovered_records,
                self.stats.recovery_s,
            )
            await self._loop(stop)
            if self._dirty:
                await self._snapshot()
        finally:
            if ticker is not None:
                ticker.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await ticker
            await self._close()

    async def _loop(self, stop: asyncio.Event) -> None:
        consumer = self._consumer
        assert consumer is not None
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=self.poll_ms, max_records=self.max_batch)
            if batches:
                await self._process(batches)
            if self._dirty and time.monotonic() - self._last_snapshot >= self.snapshot_every:
                await self._snapshot()

    # ---------------------------------------------------------------- start / recovery
    async def _start(self) -> None:
        if self.create:
            await create_topics(self.bootstrap, topics=self.topics, partitions=self.partitions)
        started = time.monotonic()
        self._producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap,
            transactional_id=self.identity,
            enable_idempotence=True,
            acks="all",
            linger_ms=0,
            max_batch_size=JOURNAL_BATCH_BYTES,
            max_request_size=MAX_SNAPSHOT_BYTES + 1024 * 1024,
            request_timeout_ms=30_000,
            # a worker that dies mid-batch holds back read_committed readers of the
            # partitions it wrote until it restarts (fencing) or this runs out
            transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
        )
        try:
            await self._producer.start()
            # Initializing the transactional id fences a previous incarnation and aborts
            # its open transaction, so the committed journal below is final.
            await self._producer.begin_transaction()
            await self._producer.commit_transaction()
        except KafkaConnectionError as why:
            raise BrokerUnavailable(
                f"cannot reach Kafka at {self.bootstrap} ({_reason(why)}); is the broker running?"
            ) from None
        parts = await self._producer.partitions_for(self.topics.journal)
        self._journal_parts = sorted(parts)

        start_offsets = await self._load_snapshots()
        await self._fold_journal(start_offsets)
        await self._read_dead_letters()

        self._consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            max_partition_fetch_bytes=4 * 1024 * 1024,
            fetch_max_bytes=32 * 1024 * 1024,
        )
        await self._consumer.start()
        inbox_parts = await self._partitions(self.topics.inbox)
        tps = [TopicPartition(self.topics.inbox, p) for p in inbox_parts]
        self._consumer.assign(tps)
        for tp in tps:
            folded = max(
                [core.positions.get(tp.partition, -1) for core in self.cores.values()]
                + [self.dead_positions.get(tp.partition, -1), self.scanned.get(tp.partition, -1)]
            )
            if folded >= 0:
                self._consumer.seek(tp, folded + 1)
            else:
                await self._consumer.seek_to_beginning(tp)
        self.stats.recovery_s = time.monotonic() - started

    async def _partitions(self, topic: str) -> list[int]:
        """The topic's partitions (the producer's metadata wait; raises if it is missing)."""
        assert self._producer is not None
        try:
            parts = await self._producer.partitions_for(topic)
        except KafkaError as why:
            raise KafkaError(f"topic {topic!r} is not available: {why}") from None
        return sorted(parts)

    async def _read_to_end(
        self, topic: str, start: dict[int, int] | None = None, *, big: bool = False
    ) -> Any:
        """Yield lists of committed records of `topic` from `start` (default: the
        beginning) up to its end as of now.

        "End" is the high watermark, not the last stable offset: another worker's open
        transaction on the same partition (other clusters) would otherwise hide our own
        later, committed records. A read_committed reader gets past such a transaction
        only once it ends, so this waits for it (our own was aborted by the fencing)."""
        consumer = AIOKafkaConsumer(
            bootstrap_servers=self.bootstrap,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            max_partition_fetch_bytes=(MAX_SNAPSHOT_BYTES + 1024 * 1024)
            if big
            else 8 * 1024 * 1024,
            fetch_max_bytes=(MAX_SNAPSHOT_BYTES + 1024 * 1024) if big else 32 * 1024 * 1024,
        )
        await consumer.start()
        try:
            parts = await self._partitions(topic)
            tps = [TopicPartition(topic, p) for p in parts]
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
            bootstrap_servers=self.bootstrap, group_id=None, isolation_level="read_uncommitted"
        )
        await probe.start()
        try:
            return await probe.end_offsets(tps)
        finally:
            await probe.stop()

    def _mine(self, cluster: str | None) -> bool:
        return cluster is not None and (self.clusters is None or cluster in self.clusters)

    def _unpickle(self, blob: bytes) -> SchedulerCore:
        core = pickle.loads(zlib.decompress(blob))["core"]
        core.wanted = self.config
        return core

    def _core(self, cluster: str) -> SchedulerCore:
        core = self.cores.get(cluster)
        if core is None:
            core = self.cores[cluster] = SchedulerCore(cluster, self.config)
        return core

    async def _load_snapshots(self) -> dict[int, int]:
        """Cores from the latest complete snapshot round; returns the journal offsets to
        fold from (empty: the whole journal)."""
        latest: dict[bytes, bytes | None] = {}
        async for _, records in self._read_to_end(self.topics.snapshots, big=True):
            for r in records:
                if r.key is not None:
                    latest[r.key] = r.value
        manifest_raw = latest.get((MANIFEST_PREFIX + self.identity).encode())
        if not manifest_raw:
            return {}
        try:
            manifest = orjson.loads(manifest_raw)
            cores: dict[str, SchedulerCore] = {}
            for cluster in manifest["clusters"]:
                blob = latest.get(cluster.encode())
                if blob is None:
                    raise ValueError(f"no snapshot for cluster {cluster!r}")
                snap = pickle.loads(zlib.decompress(blob))
                if snap.get("format") != SNAPSHOT_FORMAT or snap.get("round") != manifest["round"]:
                    raise ValueError(
                        f"snapshot of {cluster!r} is not from round {manifest['round']}"
                    )
                core = snap["core"]
                core.wanted = self.config
                cores[cluster] = core
            offsets = {int(p): int(o) for p, o in manifest["journal"].items()}
            dead = {int(p): int(o) for p, o in manifest.get("dead", {}).items()}
            scanned = {int(p): int(o) for p, o in manifest.get("scanned", {}).items()}
        except Exception as why:  # an old format or a code change: rebuild from the journal
            log.warning("ignoring snapshot round (%s); folding the whole journal", why)
            return {}
        self.cores = cores
        self.dead_positions = dead
        self.scanned = scanned
        log.info("loaded snapshot round %s: %d clusters", manifest["round"], len(cores))
        return offsets

    async def _fold_journal(self, start: dict[int, int]) -> None:
        """Re-decide each cluster's journal tail after its snapshot (see `redecide`)."""
        self.journal_next = {p: start.get(p, 0) for p in self._journal_parts}
        tails: dict[str, list[bytes]] = {}
        observe = self.on_journal
        # an observer sees the whole journal, the cores only what the snapshot lacks
        read_from = None if observe is not None else start
        async for partition, records in self._read_to_end(self.topics.journal, read_from):
            first = start.get(partition, 0)
            seen: dict[str, list[bytes]] = {}
            for r in records:
                cluster = r.key.decode("utf-8", "replace") if r.key is not None else None
                if self._mine(cluster):
                    if observe is not None:
                        seen.setdefault(cluster, []).append(r.value)  # type: ignore[arg-type]
                    if r.offset >= first:
                        tails.setdefault(cluster, []).append(r.value)  # type: ignore[arg-type]
            for cluster, lines in seen.items():
                observe(cluster, lines)  # type: ignore[misc]
            self.journal_next[partition] = max(
                self.journal_next.get(partition, 0), records[-1].offset + 1
            )
        count = 0
        for cluster, lines in tails.items():
            core = self._core(cluster)
            count += core.fold_journal(lines)
            if core.diverged:
                log.error(
                    "cluster %s: the journal does not re-derive under this code; "
                    "folded it as facts (decide's caches restart cold)",
                    cluster,
                )
        self.stats.recovered_records = count

    async def _read_dead_letters(self) -> None:
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
                self.dead_positions[partition] = max(self.dead_positions.get(partition, -1), offset)

    # ---------------------------------------------------------------- batches
    def _route(self, key: bytes | None, value: bytes | None) -> tuple[str | None, str | None]:
        """(cluster, None) for a record a core should see; (cluster or None, error) for a
        record to dead-letter without a core."""
        if key is not None:
            try:
                cluster = key.decode()
            except UnicodeDecodeError:
                return None, "record key is not UTF-8 text (the key names the cluster)"
            if not cluster or len(cluster) > MAX_CLUSTER_NAME or not cluster.isprintable():
                return None, f"record key {cluster[:60]!r} is not a cluster name"
            return cluster, None
        try:
            raw = orjson.loads(value or b"")
        except orjson.JSONDecodeError as why:
            return None, f"not JSON: {why}"
        if not isinstance(raw, dict):
            return None, f"not a JSON object but {type(raw).__name__}"
        cluster = raw.get("cluster", "default")
        if not isinstance(cluster, str) or not cluster or len(cluster) > MAX_CLUSTER_NAME:
            return None, "record has no key and no usable 'cluster' field"
        return cluster, None

    async def _process(self, batches: dict[TopicPartition, list[Any]]) -> None:
        per_cluster: dict[str, list[InboxRecord]] = {}
        raw_of: dict[tuple[int, int], Any] = {}
        dead: list[tuple[Any, str | None, str]] = []  # (consumer record, cluster, error)
        for tp in sorted(batches, key=lambda tp: tp.partition):
            partition = tp.partition
            if batches[tp]:
                self.scanned[partition] = batches[tp][-1].offset
            for r in batches[tp]:
                cluster, error = self._route(r.key, r.value)
                if error is not None:
                    if self.clusters is None or self._mine(cluster):
                        dead.append((r, cluster, error))
                        self.dead_positions[partition] = r.offset
                    continue
                if not self._mine(cluster):
                    continue
                per_cluster.setdefault(cluster, []).append(  # type: ignore[arg-type]
                    InboxRecord(partition, r.offset, r.timestamp / 1000.0, r.value or b"")
                )
                raw_of[(partition, r.offset)] = r
        out: dict[str, list[bytes]] = {}
        inputs = 0
        for cluster, records in per_cluster.items():
            result = self._core(cluster).process(records)
            inputs += result.inputs
            if result.journal:
                out[cluster] = result.journal
            for letter in result.dead:
                rec = letter.record
                dead.append((raw_of[(rec.partition, rec.offset)], cluster, letter.error))
                self.dead_positions[rec.partition] = max(
                    self.dead_positions.get(rec.partition, -1), rec.offset
                )
        if not out and not dead:
            return
        dead.sort(key=lambda item: (item[0].partition, item[0].offset))  # inbox order
        await self._write(out, dead)
        self.stats.batches += 1
        self.stats.inputs += inputs
        self.stats.dead += len(dead)
        self._dirty = True

    def _journal_partition(self, cluster: str) -> int:
        part = self._journal_part_of.get(cluster)
        if part is None:
            parts = self._journal_parts
            part = self._partitioner(cluster.encode(), parts, parts)
            self._journal_part_of[cluster] = part
        return part

    async def _write(
        self, out: dict[str, list[bytes]], dead: list[tuple[Any, str | None, str]]
    ) -> None:
        producer = self._producer
        assert producer is not None
        topic = self.topics.journal
        by_part: dict[int, list[tuple[bytes, list[bytes]]]] = {}
        for cluster, lines in out.items():
            by_part.setdefault(self._journal_partition(cluster), []).append(
                (cluster.encode(), lines)
            )
        await producer.begin_transaction()
        pending: list[tuple[int, int, asyncio.Future]] = []  # (partition, records, future)
        written = 0
        for part, groups in by_part.items():
            batch = producer.create_batch()
            count = 0
            for key, lines in groups:
                for line in lines:
                    if batch.append(key=key, value=line, timestamp=None) is None:
                        pending.append(
                            (part, count, await producer.send_batch(batch, topic, partition=part))
                        )
                        batch = producer.create_batch()
                        count = 0
                        if batch.append(key=key, value=line, timestamp=None) is None:
                            raise KafkaError(f"journal record of {len(line)} bytes is too large")
                    count += 1
            if count:
                pending.append(
                    (part, count, await producer.send_batch(batch, topic, partition=part))
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
        if self.on_journal is not None:
            for cluster, lines in out.items():
                self.on_journal(cluster, lines)
        for (part, count, _), meta in zip(pending, results, strict=True):
            if part >= 0:
                end = meta.offset + count
                if end > self.journal_next.get(part, 0):
                    self.journal_next[part] = end
        self.stats.journal += written

    # ---------------------------------------------------------------- snapshots
    async def _snapshot(self) -> None:
        """One transaction: every cluster's pickled core plus a manifest naming the round
        and the journal offsets the round corresponds to."""
        producer = self._producer
        assert producer is not None
        round_id = uuid.uuid4().hex
        taken = time.time()
        blobs = []
        for cluster, core in self.cores.items():
            blob = zlib.compress(
                pickle.dumps(
                    {
                        "format": SNAPSHOT_FORMAT,
                        "round": round_id,
                        "cluster": cluster,
                        "core": core,
                        "taken": taken,
                    },
                    protocol=pickle.HIGHEST_PROTOCOL,
                ),
                1,
            )
            if len(blob) > MAX_SNAPSHOT_BYTES:
                log.warning(
                    "snapshot of %s is %d bytes, over the limit; skipping this round",
                    cluster,
                    len(blob),
                )
                self._last_snapshot = time.monotonic()
                return
            blobs.append((cluster.encode(), blob))
        manifest = orjson.dumps(
            {
                "round": round_id,
                "taken": taken,
                "clusters": sorted(self.cores),
                "journal": {str(p): o for p, o in self.journal_next.items()},
                "dead": {str(p): o for p, o in self.dead_positions.items()},
                "scanned": {str(p): o for p, o in self.scanned.items()},
            }
        )
        await producer.begin_transaction()
        futures = [
            await producer.send(self.topics.snapshots, value=blob, key=key) for key, blob in blobs
        ]
        futures.append(
            await producer.send(
                self.topics.snapshots,
                value=manifest,
                key=(MANIFEST_PREFIX + self.identity).encode(),
            )
        )
        await asyncio.gather(*futures)
        await producer.commit_transaction()
        self.stats.snapshots += 1
        self._dirty = False
        self._last_snapshot = time.monotonic()
        log.info(
            "snapshot round %s: %d clusters, %d bytes",
            round_id,
            len(blobs),
            sum(len(b) for _, b in blobs),
        )

    # ---------------------------------------------------------------- ticker
    def _tick_clusters(self) -> list[str]:
        return sorted(self.clusters if self.clusters is not None else self.cores)

    async def _ticker(self, stop: asyncio.Event) -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=self.bootstrap, enable_idempotence=True, acks="all"
        )
        await producer.start()
        try:
            while not stop.is_set():
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), self.tick_every)
                if stop.is_set():
                    break
                futures = []
                now = time.time()
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
                try:
                    await asyncio.gather(*futures)
                except KafkaError as why:
                    log.warning("ticker could not write clock.tick: %s", why)
        finally:
            await producer.stop()

    # ---------------------------------------------------------------- close
    async def _close(self) -> None:
        for client in (self._consumer, self._producer):
            if client is not None:
                with contextlib.suppress(Exception):
                    await client.stop()
        self._consumer = self._producer = None


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
    create_topics: bool = True,
    partitions: int = 1,
    on_ready: Any = None,
    on_journal: Callable[[str, list[bytes]], None] | None = None,
) -> Worker:
    """Run the scheduler until `stop` is set (then snapshot and return the worker).

    Topic names default to `streams.topics`; pass `topics=` or single names. With
    `create_topics`, missing topics are created with `partitions` partitions."""
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


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m streams.worker", description="Run the allot scheduler on Kafka."
    )
    parser.add_argument(
        "--kafka", default=os.environ.get("ALLOT_KAFKA"), help="bootstrap HOST:PORT"
    )
    parser.add_argument("--cluster", action="append", dest="clusters", help="only these clusters")
    parser.add_argument("--admin", action="append", dest="admins", help="admin principal (repeat)")
    parser.add_argument("--tick-every", type=float, default=10.0)
    parser.add_argument("--snapshot-every", type=float, default=60.0)
    parser.add_argument("--topic-suffix", default="", help="suffix for every topic name")
    parser.add_argument("--partitions", type=int, default=1, help="for topics it creates")
    parser.add_argument("--max-batch", type=int, default=5000)
    parser.add_argument("--set", action="append", default=[], help="config key=value")
    parser.add_argument("-l", "--log-level", default="info")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.log_level.lower() != "debug":
        logging.getLogger("aiokafka").setLevel(logging.WARNING)
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
            config = parse_config({**overrides, "admins": tuple(admins)})
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
            partitions=args.partitions,
        )
    except BrokerUnavailable as why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Restore an exported journal into a new Kafka topic set (`allot journal restore`).

A journal's records carry the inbox position (`inbox: [partition, offset]`) of the
request that caused them, and a worker resumes its inbox after the last one. Against a
new inbox those offsets name other requests (or none yet), so the copied records alone
would make a worker skip requests as read. After each cluster's copied records the
restore writes a `journal.restored` record: the scheduler reads the positions recorded
after it only, i.e. the new inbox from its start (`SchedulerCore.fold_journal`).

Everything is written in one Kafka transaction, so a restore that fails leaves the
journal empty and can simply be run again; one that finds the journal, snapshot or
dead-letter topic holding records writes nothing. Nor does one that finds the inbox
the journal last read still there (the journal topic recreated beside it): read from
its start again, every old request would be taken again, and those older than the
dedup window accepted anew (old budget and host changes re-applied, work run twice).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.partitioner import DefaultPartitioner

from domain import events as ev
from streams.codec import Undecodable, encode_body, load_object
from streams.kafka_clients import aiokafka_quiet, quiet_stop, unreachable
from streams.presence import presence_prefix
from streams.topic_admin import MAX_RECORD_BYTES, Topics, _admin
from streams.worker_errors import BrokerUnavailable

TRANSACTION_TIMEOUT_MS = 900_000  # the broker's default transaction.max.timeout.ms
CONNECT_TIMEOUT_S = 15.0


class RestoreError(RuntimeError):
    """The restore cannot be made (one line for the user); nothing was written."""


@dataclass
class ClusterCopy:
    """One cluster's records of the file, in order, and what its mark says."""

    cluster: str
    lines: list[bytes] = field(default_factory=list)
    last_time: float = float("-inf")
    # inbox partition -> last offset the records (after any earlier restore's mark) read
    old_inbox: dict[int, int] = field(default_factory=dict)
    # inbox partition -> the ids (and rejections' refs) of the records caused by the
    # request at its last offset: that request's id is one of them
    last_request_ids: dict[int, set[str]] = field(default_factory=dict)

    def add(self, line: bytes, record: Any, position: Any) -> None:
        self.lines.append(line)
        self.last_time = max(self.last_time, record.time)
        if record.type in ev.INBOX_RESETS:
            self.old_inbox.clear()
            self.last_request_ids.clear()
        elif isinstance(position, list) and len(position) == 2:
            partition, offset = int(position[0]), int(position[1])
            last = self.old_inbox.get(partition, -1)
            if offset > last:
                self.old_inbox[partition] = offset
                self.last_request_ids[partition] = set()
            if offset >= last:
                ids = self.last_request_ids[partition]
                ids.add(record.id)
                if ref := getattr(record, "ref", None):
                    ids.add(ref)

    def mark(self, *, restored_at: float, actor: str, source: str | None) -> bytes:
        """The `journal.restored` record that follows the copied ones."""
        marker = ev.JournalRestored(
            id=f"{self.cluster}/journal.restored@{restored_at:.6f}",
            time=self.last_time,
            cluster=self.cluster,
            actor=actor,
            records=len(self.lines),
            old_inbox=tuple(sorted(self.old_inbox.items())),
            restored_at=restored_at,
            source=source,
        )
        return encode_body(marker)


def group_by_cluster(records: Iterable[tuple[bytes, Any, Any]]) -> dict[str, ClusterCopy]:
    """(line, decoded record, its `inbox` value) of a journal file, per cluster in the
    order the file has them."""
    copies: dict[str, ClusterCopy] = {}
    for line, record, position in records:
        copy = copies.get(record.cluster)
        if copy is None:
            copy = copies[record.cluster] = ClusterCopy(record.cluster)
        copy.add(line, record, position)
    return copies


@dataclass
class Restored:
    records: int  # copied records, the marks not counted
    clusters: list[str]
    waiting: int  # requests already in the new inbox (decided after the copied journal)


async def restore_to_kafka(
    bootstrap: str,
    copies: dict[str, ClusterCopy],
    *,
    topics: Topics,
    restored_at: float,
    actor: str,
    source: str | None,
    kafka_options: dict[str, Any] | None = None,
) -> Restored:
    """Write every cluster's copied records, then its `journal.restored` mark, to the
    journal topic (partitioned by cluster as the worker does), in one transaction.
    RestoreError when the topics are missing or not new, or a scheduler runs on them."""
    options = kafka_options or {}
    with aiokafka_quiet():
        admin = await _admin(bootstrap, CONNECT_TIMEOUT_S, options)
    try:
        present = set(await admin.list_topics())
        missing = [name for name in topics.all() if name not in present]
        if missing:
            raise RestoreError(
                f"no topic {', '.join(missing)} at {bootstrap}: create the new topic set "
                "first (`allot topics create`, with its ALLOT_TOPIC_SUFFIX)"
            )
        await _refuse_live_workers(admin, topics)
    finally:
        await admin.close()
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, **options
    )
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        # under ACLs the scheduler's principal may use ids starting with allot-scheduler
        transactional_id=f"allot-scheduler/{topics.journal}/restore",
        enable_idempotence=True,
        acks="all",
        max_request_size=MAX_RECORD_BYTES + 1024 * 1024,
        transaction_timeout_ms=TRANSACTION_TIMEOUT_MS,
        **options,
    )
    try:
        try:
            await asyncio.wait_for(consumer.start(), CONNECT_TIMEOUT_S)
            # starting fences an earlier restore of the same topics and ends its
            # transaction: the emptiness checked next is final
            await asyncio.wait_for(producer.start(), CONNECT_TIMEOUT_S)
        except (KafkaError, OSError, TimeoutError) as why:
            raise BrokerUnavailable(unreachable(bootstrap, why)) from None
        await _refuse_records(consumer, producer, topics, bootstrap)
        inbox_parts = await producer.partitions_for(topics.inbox)
        await _refuse_old_inbox(consumer, copies, topics.inbox, inbox_parts, bootstrap)
        waiting = await _records(consumer, producer, topics.inbox)
        journal_parts = sorted(await producer.partitions_for(topics.journal))
        partitioner = DefaultPartitioner()
        async with producer.transaction():
            sends = []
            for cluster, copy in copies.items():
                key = cluster.encode()
                partition = partitioner(key, journal_parts, journal_parts)
                mark = copy.mark(restored_at=restored_at, actor=actor, source=source)
                for line in [*copy.lines, mark]:
                    sends.append(
                        await producer.send(
                            topics.journal, value=line, key=key, partition=partition
                        )
                    )
            await asyncio.gather(*sends)
    finally:
        await quiet_stop(producer)
        await quiet_stop(consumer)
    return Restored(
        records=sum(len(copy.lines) for copy in copies.values()),
        clusters=list(copies),
        waiting=waiting,
    )


async def _records(consumer: AIOKafkaConsumer, producer: AIOKafkaProducer, topic: str) -> int:
    """How many records `topic` holds now (committed or not: written is not new)."""
    parts = await producer.partitions_for(topic)
    tps = [TopicPartition(topic, p) for p in parts]
    if not tps:
        return 0
    starts = await consumer.beginning_offsets(tps)
    ends = await consumer.end_offsets(tps)
    return sum(ends[tp] - starts[tp] for tp in tps)


async def _refuse_records(
    consumer: AIOKafkaConsumer, producer: AIOKafkaProducer, topics: Topics, bootstrap: str
) -> None:
    """A restore goes into a journal that holds nothing yet: onto records of its own
    the copy would interleave two histories. Snapshots and dead letters of a scheduler
    that ran here would be taken for the copy's."""
    held = {
        topic: count
        for topic in (topics.journal, topics.snapshots, topics.dlq)
        if (count := await _records(consumer, producer, topic))
    }
    if held:
        said = ", ".join(f"{topic} is not empty" for topic in held)
        raise RestoreError(
            f"the topics at {bootstrap} are not new ({said}): a journal is restored only "
            "into a new topic set, never onto one a scheduler has written; create new "
            "topics (another ALLOT_TOPIC_SUFFIX, then `allot topics create`) or delete "
            "and create these again; nothing was written"
        )


async def _refuse_old_inbox(
    consumer: AIOKafkaConsumer,
    copies: dict[str, ClusterCopy],
    inbox: str,
    partitions: Iterable[int],
    bootstrap: str,
) -> None:
    """The inbox the journal last read, still there: the request at the last offset
    the copy records for a partition is the one the copy says it decided there. The
    restore's mark makes the scheduler read the inbox from its start, so it would take
    every old request again; refused instead, writing nothing."""
    present = set(partitions)
    expected = {
        (partition, offset): copy.last_request_ids[partition]
        for copy in copies.values()
        for partition, offset in copy.old_inbox.items()
        if partition in present
    }
    for (partition, offset), ids in sorted(expected.items()):
        request = await _request_at(consumer, TopicPartition(inbox, partition), offset)
        if request in ids:
            raise RestoreError(
                f"{inbox} at {bootstrap} is the inbox this journal was read from: partition "
                f"{partition} offset {offset} is request {request!r}, which the journal "
                "already decided (was the journal topic deleted and created again beside "
                "it?). A restored scheduler reads the inbox from its start and would take "
                "every old request again, re-applying old budget and host changes and "
                "running again work older than the dedup window. Delete and create "
                f"{inbox} too, or restore into a new topic set (another ALLOT_TOPIC_SUFFIX, "
                "then `allot topics create`); nothing was written"
            )


async def _request_at(consumer: AIOKafkaConsumer, tp: TopicPartition, offset: int) -> Any:
    """The `id` of the inbox record at `offset` (None: no such record, or not one with
    an id)."""
    starts = await consumer.beginning_offsets([tp])
    ends = await consumer.end_offsets([tp])
    if not starts[tp] <= offset < ends[tp]:
        return None
    consumer.assign([tp])
    consumer.seek(tp, offset)
    try:
        batch = await consumer.getmany(tp, timeout_ms=int(CONNECT_TIMEOUT_S * 1000))
    finally:
        consumer.assign([])
    for record in batch.get(tp, []):
        if record.offset == offset:
            try:
                body = load_object(record.value)
            except Undecodable:  # bytes that are not a request: not the one decided
                return None
            return body.get("id")
    return None


async def _refuse_live_workers(admin: Any, topics: Topics) -> None:
    """A scheduler already running on the new topics has read their (empty) journal and
    would never see the restored one: it must be stopped first. Seen from the presence
    group every worker keeps, with --group or not (`streams.worker_presence`)."""
    prefix = presence_prefix(topics.journal)
    running: list[str] = []
    with contextlib.suppress(Exception):  # best effort, as the worker's own check
        listed = await admin.list_consumer_groups()
        groups = [g[0] for g in listed if str(g[0]).startswith(prefix)]
        if groups:
            running = [
                f"{member[1]} at {str(member[2]).lstrip('/')}"
                for response in await admin.describe_consumer_groups(groups)
                for group in response.groups
                if group[0] == 0
                for member in group[5]
            ]
    if running:
        raise RestoreError(
            f"a scheduler runs on {topics.journal} ({', '.join(running[:3])}): stop it "
            "first (one started before the restore has read the topics as they were and "
            "would not see the restored journal), "
            "then restore and start it again; nothing was written"
        )

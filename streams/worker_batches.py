"""The Kafka worker's batches: route inbox records to their clusters' cores, and write
what the cores return (journal records, dead letters) in one transaction per partition."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

import orjson
from aiokafka import TopicPartition
from aiokafka.errors import KafkaError, ProducerFenced

from domain.text import printable
from streams.core import InboxRecord
from streams.worker_helpers import _abandon, _Partition

log = logging.getLogger("allot.worker")

MAX_CLUSTER_NAME = 200


def _reason(why: BaseException) -> str:
    text = str(why).strip()
    if isinstance(why, TimeoutError) or not text:
        return "no answer" if isinstance(why, TimeoutError) else type(why).__name__
    return text.split("\n")[0][:200]


class Batches:
    """Batch processing of `streams.worker_loop.Worker`."""

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

"""Taking inbox partitions over (DESIGN §7): fence the previous owner, load the
snapshots, re-decide the journal after them, and find where the inbox resumes."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError

from streams.core import old_bucket_note
from streams.topic_admin import MAX_SNAPSHOT_BYTES
from streams.worker_errors import REFUSALS, WorkerError, refused
from streams.worker_helpers import _header, _Partition, _quiet_stop, plural

log = logging.getLogger("allot.worker")

JOURNAL_BATCH_BYTES = 256 * 1024  # one produce batch; ~600 journal records
READ_TIMEOUT_S = 120.0  # reading a topic to its end during recovery
TRANSACTION_TIMEOUT_MS = 15_000  # one batch or snapshot round takes well under this
INIT_PRODUCER_S = 30.0  # a partition's transactional producer getting its producer id


class Recovery:
    """Partition takeovers of `streams.worker_loop.Worker`."""

    # ---------------------------------------------------------------- recovery
    async def _take_pending(self) -> None:
        """Recover every partition assigned but not yet ours, then resume reading it."""
        async with self._lock:
            parts = sorted(self._pending)
            if not parts:
                return
            started = time.monotonic()
            try:
                await self._take(parts)
            except REFUSALS as why:  # the ACLs: no retry will be let in
                for p in parts:
                    self._drop(p)
                raise refused(self.bootstrap, self.kafka_options, why) from None
            except (KafkaError, OSError, TimeoutError) as why:
                for p in parts:
                    self._drop(p)
                log.warning("could not take over partitions %s (%s); retrying", parts, why)
                self._retry_at = time.monotonic() + 1.0
                return
            assert self._consumer is not None
            assigned = self._consumer.assignment()
            resumed = [TopicPartition(self.topics.inbox, p) for p in parts]
            resumed = [tp for tp in resumed if tp in assigned]
            waiting = await self._inbox_backlog(resumed)
            for tp in resumed:
                self._seek(tp)
                self._consumer.resume(tp)
            since = min(self._pending[p] for p in parts)
            for p in parts:
                self._pending.pop(p, None)
            took = time.monotonic() - since
            self.stats.recovery_s = time.monotonic() - started
            self.stats.takeovers.append((tuple(parts), took))
            log.info(
                "took over inbox partitions %s in %.2fs (%s, %s%s)",
                parts,
                took,
                plural(sum(1 for c in self.cores if self.home(c) in parts), "cluster"),
                plural(self.stats.recovered_records, "journal record"),
                waiting,
            )

    async def _inbox_backlog(self, tps: list[TopicPartition]) -> str:
        """Where the inbox resumes and how many requests wait there (for the take-over's
        line: how far behind a restarted worker starts). An inbox that ends before the
        offset its journal has read (the topic deleted and created again, or a journal
        from elsewhere) stops the worker: it would skip that many new requests as read."""
        assert self._consumer is not None
        if not tps:
            return ""
        try:
            ends = await self._consumer.end_offsets(tps)
        except (KafkaError, OSError, TimeoutError):
            return ""  # only the log line goes without it
        resume = {tp.partition: self._resume_offset(tp) for tp in tps}
        for tp in tps:
            if ends[tp] < resume[tp.partition]:
                raise WorkerError(
                    f"{self.topics.inbox} partition {tp.partition} ends at offset {ends[tp]}, "
                    f"but {self.topics.journal} has read it up to offset "
                    f"{resume[tp.partition] - 1}: the inbox topic was deleted and created "
                    "again, or the journal comes from another deployment. Its next "
                    f"{resume[tp.partition] - ends[tp]} requests would be skipped as read; "
                    "stopping instead. To go on from this journal on a new inbox, copy it "
                    "(`allot journal export --out FILE`) into new topics (`allot journal "
                    "restore FILE`), which marks where the inbox changed (README, "
                    "'Backing up the journal')"
                )
        waiting = sum(max(0, ends[tp] - resume[tp.partition]) for tp in tps)
        where = ", ".join(f"{p}:{offset}" for p, offset in sorted(resume.items()))
        offsets = f"offset {resume[tps[0].partition]}" if len(tps) == 1 else f"offsets {where}"
        return f"; inbox resumes at {offsets}, {waiting:,} request{'s' if waiting != 1 else ''} waiting"

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
            await self._init_producer(producer, p)
            await producer.begin_transaction()
            await producer.commit_transaction()
        except BaseException:
            await _quiet_stop(producer)
            raise
        return producer

    async def _init_producer(self, producer: AIOKafkaProducer, p: int) -> None:
        """Start `producer`: aiokafka asks the transaction coordinator for a producer id
        until it gets one, however long that is, and says nothing meanwhile. Held to
        INIT_PRODUCER_S so the take-over is retried (and a rebalance is not held up by
        the lock) with a line that says what is awaited."""
        try:
            await asyncio.wait_for(producer.start(), INIT_PRODUCER_S)
        except TimeoutError:
            raise KafkaError(
                f"Kafka's transaction coordinator gave inbox partition {p}'s producer no "
                f"producer id in {INIT_PRODUCER_S:g}s (a new broker creates "
                "__transaction_state at the first transaction; one with fewer brokers "
                "than transaction.state.log.replication.factor never can)"
            ) from None

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

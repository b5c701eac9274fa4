"""The broker from ``kafka_bootstrap`` works with our stack: aiokafka and faust-streaming."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import defaultdict
from pathlib import Path

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

pytestmark = pytest.mark.kafka

WAIT_S = 60.0


def _name(prefix: str) -> str:
    return f"allot-test-{prefix}-{uuid.uuid4().hex[:12]}"


async def _create_topic(bootstrap: str, name: str, partitions: int) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=20_000)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(name=name, num_partitions=partitions, replication_factor=1)]
        )
    finally:
        await admin.close()


async def _consume(
    bootstrap: str, topic: str, want: int, *, isolation_level: str = "read_uncommitted"
) -> list:
    """Read ``want`` records from the start of ``topic`` (bounded by WAIT_S)."""
    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        isolation_level=isolation_level,
    )
    await consumer.start()
    records = []
    try:
        deadline = time.monotonic() + WAIT_S
        while len(records) < want and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=500)
            for tp in sorted(batches, key=lambda tp: tp.partition):
                records.extend(batches[tp])
    finally:
        await consumer.stop()
    return records


async def test_idempotent_producer_roundtrip_keeps_keys_and_order(kafka_bootstrap: str) -> None:
    topic = _name("idem")
    await _create_topic(kafka_bootstrap, topic, partitions=3)
    keys = [f"cluster-{i}".encode() for i in range(5)]
    per_key = 40

    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, enable_idempotence=True, acks="all"
    )
    await producer.start()
    try:
        sent = []
        for n in range(per_key):
            for key in keys:
                sent.append(producer.send(topic, key=key, value=f"{key.decode()}:{n}".encode()))
        metas = await asyncio.gather(*[await fut for fut in sent])
    finally:
        await producer.stop()
    assert len(metas) == per_key * len(keys)

    records = await _consume(kafka_bootstrap, topic, per_key * len(keys))
    assert len(records) == per_key * len(keys)

    seen: dict[bytes, list[int]] = defaultdict(list)
    partition_of: dict[bytes, set[int]] = defaultdict(set)
    for rec in sorted(records, key=lambda r: (r.partition, r.offset)):
        key_text, n = rec.value.decode().split(":")
        assert rec.key == key_text.encode()  # the key travelled with its value
        seen[rec.key].append(int(n))
        partition_of[rec.key].add(rec.partition)
    assert set(seen) == set(keys)
    for key in keys:
        assert seen[key] == list(range(per_key)), key  # per-key order preserved
        assert len(partition_of[key]) == 1  # a key always lands in one partition


async def test_transactions_read_committed_sees_only_committed(kafka_bootstrap: str) -> None:
    topic = _name("txn")
    await _create_topic(kafka_bootstrap, topic, partitions=1)

    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap,
        transactional_id=_name("txid"),
        enable_idempotence=True,
        acks="all",
    )
    await producer.start()
    try:
        async with producer.transaction():
            for i in range(5):
                await producer.send(topic, key=b"k", value=f"committed-{i}".encode())

        await producer.begin_transaction()
        for i in range(5):
            await producer.send(topic, key=b"k", value=f"aborted-{i}".encode())
        await producer.flush()
        await producer.abort_transaction()

        # A last committed batch moves the last stable offset past the aborted one.
        async with producer.transaction():
            await producer.send(topic, key=b"k", value=b"committed-end")
    finally:
        await producer.stop()

    committed = await _consume(kafka_bootstrap, topic, 6, isolation_level="read_committed")
    values = [r.value.decode() for r in committed]
    assert values == [f"committed-{i}" for i in range(5)] + ["committed-end"]

    # The aborted records did reach the log; read_uncommitted sees them.
    everything = await _consume(kafka_bootstrap, topic, 11)
    assert sum(r.value.startswith(b"aborted-") for r in everything) == 5


async def test_faust_app_receives_a_record(kafka_bootstrap: str, tmp_path: Path) -> None:
    import faust

    topic_name = _name("faust")
    # Topics exist before workers start (as `allot topics create` does): a consumer
    # subscribed to a missing topic only notices it on its next metadata refresh.
    await _create_topic(kafka_bootstrap, topic_name, partitions=1)
    app = faust.App(
        _name("app"),
        broker=f"kafka://{kafka_bootstrap}",
        datadir=str(tmp_path / "faust"),
        store="memory://",
        web_enabled=False,
        topic_partitions=1,
        consumer_auto_offset_reset="earliest",
    )
    topic = app.topic(topic_name, key_serializer="raw", value_serializer="raw", partitions=1)
    received: asyncio.Queue = asyncio.Queue()

    @app.agent(topic)
    async def sink(stream):
        async for event in stream.events():
            await received.put((event.key, event.value))

    await asyncio.wait_for(app.start(), WAIT_S)
    try:
        producer = AIOKafkaProducer(
            bootstrap_servers=kafka_bootstrap, enable_idempotence=True, acks="all"
        )
        await producer.start()
        try:
            await producer.send_and_wait(topic_name, key=b"default", value=b'{"type":"clock.tick"}')
        finally:
            await producer.stop()
        key, value = await asyncio.wait_for(received.get(), WAIT_S)
    finally:
        await asyncio.wait_for(app.stop(), WAIT_S)
    assert key == b"default"
    assert value == b'{"type":"clock.tick"}'

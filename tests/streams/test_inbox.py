"""The request writer `allot submit`, `allot cancel` and the executor use on Kafka."""

from __future__ import annotations

import asyncio
import uuid

import orjson
import pytest

from streams import topics
from streams.inbox import InboxError, KafkaInbox, make_request
from streams.topic_admin import create_topics
from tests.streams.rig import read_all

pytestmark = pytest.mark.kafka


async def test_one_producer_serves_every_send_until_close(kafka_bootstrap: str) -> None:
    """The executor reports finishes batch after batch through one writer: one login,
    not one per batch; every request arrives, in order, keyed by its cluster."""
    await create_topics(kafka_bootstrap)
    cluster = f"inbox-{uuid.uuid4().hex[:8]}"
    sent = [
        [make_request("clock.tick", cluster=cluster, actor="t") for _ in range(n)]
        for n in (1, 3, 2, 5)
    ]

    def send_all() -> list[int]:
        inbox = KafkaInbox(kafka_bootstrap)
        producers = []
        try:
            for batch in sent:
                inbox.send(batch)
                producers.append(id(inbox._producer))
        finally:
            inbox.close()
        assert inbox._producer is None and inbox._loop is None
        return producers

    producers = await asyncio.to_thread(send_all)
    assert len(set(producers)) == 1
    mine = [r for r in await read_all(kafka_bootstrap, topics.INBOX) if r.key == cluster.encode()]
    assert [orjson.loads(r.value)["id"] for r in mine] == [r["id"] for b in sent for r in b]


async def test_a_failed_send_is_one_error_and_the_writer_recovers(kafka_bootstrap: str) -> None:
    """Nothing answers: one InboxError naming the address; the same writer then works
    against a broker that does (a fresh producer, not a broken one kept)."""
    await create_topics(kafka_bootstrap)
    cluster = f"inbox-{uuid.uuid4().hex[:8]}"

    def attempt() -> None:
        inbox = KafkaInbox("127.0.0.1:1", connect_timeout=2)
        try:
            with pytest.raises(InboxError, match=r"cannot reach Kafka at 127\.0\.0\.1:1"):
                inbox.send([make_request("clock.tick", cluster=cluster, actor="t")])
            assert inbox._producer is None
            inbox.bootstrap = kafka_bootstrap  # e.g. the operator fixed the address
            inbox.send([make_request("clock.tick", cluster=cluster, actor="t")])
        finally:
            inbox.close()

    await asyncio.to_thread(attempt)
    mine = [r for r in await read_all(kafka_bootstrap, topics.INBOX) if r.key == cluster.encode()]
    assert len(mine) == 1

"""The worker's lines while it waits on Kafka: a take-over whose producer gets no
producer id, and a group member given no inbox partitions yet. Both waits come from the
broker (a coordinator that has not loaded, a rebalance waiting for a member), which a
healthy test broker does not do on demand; so the waits are played here, with a short
limit and a clock the test moves, against the worker's own code that tells them."""

from __future__ import annotations

import asyncio
import logging
import types

import pytest
from aiokafka.errors import KafkaError

from streams import worker_loop, worker_recovery
from streams.topic_admin import Topics
from streams.worker import Worker


def _worker(**options: object) -> Worker:
    return Worker("127.0.0.1:1", config=None, topics=Topics.suffixed(".waits"), **options)


class _NoProducerId:
    """A transactional producer whose coordinator never gives it a producer id: aiokafka's
    `start()` waits for one as long as it takes."""

    def __init__(self) -> None:
        self.started = asyncio.Event()

    async def start(self) -> None:
        self.started.set()
        await asyncio.Event().wait()


async def test_a_producer_id_that_never_comes_is_one_line_after_the_limit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the limit a take-over hung without a word for as long as the broker gave
    no producer id (a new broker, or fewer brokers than the transaction log's replicas)."""
    monkeypatch.setattr(worker_recovery, "INIT_PRODUCER_S", 0.05)
    producer = _NoProducerId()
    with pytest.raises(KafkaError) as raised:
        # (the outer limit only turns a hang, the bug, into a failure)
        await asyncio.wait_for(_worker()._init_producer(producer, 3), 60)  # type: ignore[arg-type]
    assert producer.started.is_set()
    message = str(raised.value)
    assert "gave inbox partition 3's producer no producer id in 0.05s" in message
    assert "__transaction_state" in message and "replication.factor" in message


def test_a_member_without_partitions_says_so_every_interval(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """aiokafka retries a group's coordinator and its rebalances without a line: a worker
    that got no inbox partitions looked idle. It says so once per GROUP_WAIT_LOG_S."""
    now = [500.0]
    monkeypatch.setattr(worker_loop, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    worker = _worker(group="team", session_timeout_ms=45_000)
    worker._started_at = worker._group_told_at = 500.0  # as the consumer starts
    told: list[str] = []
    caplog.set_level(logging.WARNING, logger=worker_loop.log.name)
    for seconds in (1, 14, 15, 16, 29, 31, 45, 46):
        now[0] = 500.0 + seconds
        caplog.clear()
        worker._tell_group_wait()
        told += [f"{seconds}: {r.getMessage()}" for r in caplog.records]
    assert [line.split(":")[0] for line in told] == ["15", "31", "46"]
    group = worker.topics.group("team")
    assert f"waiting for consumer group {group} to give this worker inbox partitions" in told[0]
    assert "(15s so far)" in told[0] and "(31s so far)" in told[1]
    assert "(at most 45s)" in told[0]  # the rebalance timeout follows the session timeout

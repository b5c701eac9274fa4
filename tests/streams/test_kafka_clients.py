"""Stopping aiokafka clients (streams.kafka_clients) against the real broker."""

from __future__ import annotations

import asyncio
import gc
import logging

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaConnectionError

from streams.kafka_clients import _force_close
from streams.topic_admin import Topics, create_topics

pytestmark = pytest.mark.kafka


class _Unretrieved(logging.Handler):
    """What asyncio logs of futures whose exception nobody read (when they are collected)."""

    def __init__(self) -> None:
        super().__init__()
        self.said: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if "never retrieved" in record.getMessage():
            self.said.append(record.getMessage())


async def _a_stop_cut_short_with_a_record_unsent(bootstrap: str, topic: str) -> None:
    """What `quiet_stop` does when the stop does not finish: the stop is cut short and
    the producer closed by force, with a record still in it (a long linger keeps it
    there). The record's sender hears why it was not sent. (A function of its own: the
    producer is collected when it returns, and its futures with it.)"""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=60_000)
    await producer.start()
    sent = await producer.send(topic, b"{}", key=b"c")
    stopping = asyncio.create_task(producer.stop())
    await asyncio.sleep(0)  # the stop marks the producer closed and waits for the flush
    stopping.cancel()
    await _force_close(producer, timeout=5)
    with pytest.raises(KafkaConnectionError, match="the producer stopped before sending"):
        await sent


async def test_a_forced_close_leaves_no_unretrieved_failure_of_unsent_records(
    kafka_bootstrap: str,
) -> None:
    """A stop cut short fails the records the producer still holds. Their batches' own
    futures, which nobody awaits, were each logged by asyncio as "Future exception was
    never retrieved" (KafkaConnectionError: the producer stopped before sending this)
    when collected: at the end of every CI run."""
    topics = Topics.suffixed(".leftovers2-force-close")
    await create_topics(kafka_bootstrap, topics=topics)
    heard = _Unretrieved()
    asyncio_log = logging.getLogger("asyncio")
    asyncio_log.addHandler(heard)
    try:
        await _a_stop_cut_short_with_a_record_unsent(kafka_bootstrap, topics.inbox)
        for _ in range(3):  # what is left of the producer is collected (and reported) here
            gc.collect()
            await asyncio.sleep(0)
    finally:
        asyncio_log.removeHandler(heard)
    assert heard.said == []

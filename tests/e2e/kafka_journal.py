"""Putting a journal on the test broker: what the Kafka read-side tests start from."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from streams import topics
from streams.worker import create_topics


def produce_journal(bootstrap: str, records: list[dict[str, Any]]) -> None:
    """Write `records` to the default journal topic, keyed by their `cluster` as the
    scheduler keys them (the topics are created when missing)."""

    async def run() -> None:
        await create_topics(bootstrap)  # the default names; existing ones are kept
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            futures = [
                await producer.send(topics.JOURNAL, orjson.dumps(r), key=r["cluster"].encode())
                for r in records
            ]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    asyncio.run(run())

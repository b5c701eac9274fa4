"""Putting a journal on the test broker: what the Kafka read-side tests start from."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
from aiokafka import AIOKafkaProducer

from streams import topics
from streams.topic_admin import create_topics


def produce_journal(
    bootstrap: str, records: list[dict[str, Any]], topic: str | None = None
) -> None:
    """Write `records` to the journal topic (default: this process's), keyed by their
    `cluster` as the scheduler keys them (the default topics are created when missing)."""

    async def run() -> None:
        await create_topics(bootstrap)  # the default names; existing ones are kept
        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=True)
        await producer.start()
        try:
            futures = [
                await producer.send(
                    topic or topics.JOURNAL,  # read now: a test may point it at its own
                    orjson.dumps(r),
                    key=r["cluster"].encode(),
                )
                for r in records
            ]
            await asyncio.gather(*futures)
        finally:
            await producer.stop()

    asyncio.run(run())

"""Small parts of the Kafka worker (`streams.worker_loop.Worker`): what it keeps per
inbox partition it owns, its counters and identity, and letting go of clients and sends."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from aiokafka import AIOKafkaProducer

from streams.kafka_clients import quiet_stop
from streams.topic_admin import Topics

# ------------------------------------------------------------------ helpers


def plural(n: int, noun: str) -> str:
    """`1 cluster`, `2 clusters`, `1,204 journal records`: for the worker's log lines."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _abandon(futures: Iterable[Any]) -> None:
    """Futures of sends a failed write will not await: their failures are retrieved
    when they come (a fenced producer fails every send; unawaited, asyncio reports each
    as a "Future exception was never retrieved" traceback after the worker's message)."""
    for future in futures:
        future.add_done_callback(_retrieve)


def _retrieve(future: Any) -> None:
    if not future.cancelled():
        future.exception()


def _header(headers: Iterable[tuple[str, bytes]] | None, name: str) -> bytes | None:
    for key, value in headers or ():
        if key == name:
            return value
    return None


def identity(topics: Topics, clusters: Iterable[str] | None) -> str:
    """Stable for the same topics and cluster set: it names the transactional id (so a
    restart fences the dead incarnation) and the snapshot manifest."""
    scope = "*" if clusters is None else ",".join(sorted(set(clusters)))
    digest = hashlib.sha1(f"{topics.inbox}|{topics.journal}|{scope}".encode()).hexdigest()[:12]
    return f"allot-scheduler/{topics.journal}/{digest}"


@dataclass
class Stats:
    batches: int = 0
    inputs: int = 0
    journal: int = 0
    dead: int = 0
    snapshots: int = 0
    recovered_records: int = 0
    recovery_s: float = 0.0
    # (inbox partitions, seconds from assignment to resuming them) per takeover
    takeovers: list[tuple[tuple[int, ...], float]] = field(default_factory=list)
    fenced: int = 0  # partitions given up because another worker took them over
    write_failures: int = 0  # batches whose transaction failed (re-derived, then redone)


class _Partition:
    """An inbox partition this worker owns: its transactional producer and positions."""

    def __init__(self, number: int, producer: AIOKafkaProducer) -> None:
        self.number = number
        self.producer = producer
        # journal partition -> offset after the last journal record of this partition's
        # clusters folded or written (where a recovery from a snapshot reads on)
        self.journal_next: dict[int, int] = {}
        self.dead = -1  # last inbox offset dead-lettered (dead letters are not journaled)
        self.scanned = -1  # last inbox offset looked at (including other workers' clusters)
        self.active = True  # False between a revocation and the next assignment
        self.dirty = False
        self.last_snapshot = time.monotonic()
        self.generation = 0  # snapshot rounds begun: a later one overtakes an earlier
        self.written = 0  # the generation of the last round written


async def _quiet_stop(client: Any) -> None:
    await quiet_stop(client, 10.0)

"""Hostile records through the live worker on a real broker (issue #6).

A few hundred hostile records — random bytes, empty and null values, bad UTF-8 and
non-printable keys, keyless records with unusable `cluster` fields, non-object JSON,
JSON nested around orjson's depth limit, events with wrong types, huge numbers, far
past/future time claims, values just under the broker's 1 MiB limit, replayed ids —
are written with a raw aiokafka producer, mixed with valid requests. Then:

- the worker is still running and still places a valid submission sent afterwards;
- every inbox offset is accounted for exactly once: either as the `inbox` source of
  journal records (with exactly one cause among them) or as the `inbox.offset` header
  of one DLQ record (dead-lettered by the core, or by the worker's own routing);
- the committed journal re-derives in a fresh core without divergence;
- a restarted worker adds no duplicate and loses nothing.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections import Counter, defaultdict
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from domain.config import SchedulerConfig
from domain.rederive import is_cause
from streams.codec import decode_event
from streams.core import SchedulerCore
from streams.topic_admin import Topics, create_topics
from streams.worker import serve
from tests.streams.hostile_json import Deep, to_bytes
from tests.streams.rig import ADMIN, Inbox, JournalReader, first, read_all

pytestmark = pytest.mark.kafka

WAIT_S = 90.0
BIG = 1_000_000 - 2_000  # under the broker's default max.message.bytes (1 MiB)


def _valid(rnd: random.Random, n: int) -> dict[str, Any]:
    kind = rnd.choice(["submit", "submit", "cancel", "finish", "tick", "health"])
    if kind == "submit":
        return Inbox.record(
            "c",
            "workload.submitted",
            "u",
            workload=f"w{n}",
            allocation="lab/a",
            gpus=1,
            min_runtime=rnd.choice([0, 60, 900]),
            resumable=rnd.random() < 0.5,
        )
    if kind == "cancel":
        return Inbox.record("c", "workload.cancelled", "u", workload=f"w{rnd.randrange(max(n, 1))}")
    if kind == "finish":
        return Inbox.record("c", "workload.finished", "u", workload=f"w{rnd.randrange(max(n, 1))}")
    if kind == "health":
        return Inbox.record("c", "host.health", host=f"h{rnd.randrange(5)}", healthy=True)
    return Inbox.record("c", "clock.tick")


WRONG = [
    None,
    True,
    -1,
    0,
    2**63,
    10**30,
    1e308,
    -1e308,
    5e-324,
    "NaN",
    "inf",
    "",
    "\x00\x1b[31m",
    "\u202e\ud800",
    "é" * 300,
    [1, [2]],
    {"a": {"b": []}},
    Deep(1000, "list"),
    Deep(1023, "obj"),
]


def hostile(rnd: random.Random, n: int) -> tuple[bytes | None, bytes | None]:
    """(key, value) of one hostile record."""
    kind = rnd.randrange(14)
    key: bytes | None = rnd.choice([b"c", b"c", None])
    if kind == 0:
        return key, rnd.randbytes(rnd.randrange(0, 200))
    if kind == 1:
        return b"c", rnd.choice([b"", None])  # empty value, tombstone
    if kind == 2:
        return key, to_bytes(rnd.choice([1, "x", None, [1, 2], 1.5, True, []]))
    if kind == 3:
        depth = rnd.choice([999, 1023, 1024, 1025, 10_000])
        return key, to_bytes(Deep(depth, rnd.choice(["list", "obj"])))
    if kind == 4:  # a key that names no cluster
        bad = rnd.choice([b"\xff\xfe", b"\xc3", b"", b"c" * 300, b"c\n", b"\x00", b"\xed\xa0\x80"])
        return bad, orjson.dumps(Inbox.record("c", "clock.tick"))
    if kind == 5:  # keyless, routed by an unusable `cluster` field
        cluster = rnd.choice([None, 7, "", "x" * 300, ["c"], {"c": 1}, "c"])
        body = Inbox.record("c", "clock.tick")
        body["cluster"] = cluster
        return None, to_bytes(body)
    if kind == 6:  # huge, just under the broker's limit
        choice = rnd.randrange(4)
        if choice == 0:
            return b"c", rnd.randbytes(BIG)
        if choice == 1:
            body = Inbox.record("c", "workload.submitted", "u", allocation="lab/a", gpus=1)
            body["workload"] = "W" * (BIG - 300)
            return b"c", orjson.dumps(body)
        if choice == 2:
            body = Inbox.record(
                "c", "budget.set", allocation="lab/" + "é" * (BIG // 2 - 300), weight=1
            )
            return b"c", orjson.dumps(body)
        return b"c", orjson.dumps(["x" * 100] * (BIG // 104))
    if kind == 7:  # another cluster's key and a mismatching cluster field
        return rnd.choice([b"other", "clüster".encode()]), orjson.dumps(
            Inbox.record("c", "clock.tick")
        )
    if kind == 8:  # time claims far in the past or the future
        body = _valid(rnd, n)
        body["time"] = rnd.choice([0, -1, 1e12, 1e300, time.time() - 30 * 86400, "yesterday"])
        return b"c", orjson.dumps(body)
    if kind == 9:  # a decision or rejection sent as a request
        kind_ = rnd.choice(["workload.placed", "host.drained", "workload.rejected", "x.y"])
        return b"c", orjson.dumps(Inbox.record("c", kind_, workload="w0", hosts={"h0": [0]}))
    # a valid-looking request with wrong types in its fields
    body = _valid(rnd, n)
    for field in rnd.sample([*body, "extra"], rnd.randrange(1, 3)):
        body[field] = rnd.choice(WRONG)
    return key, to_bytes(body, ensure_ascii=rnd.random() < 0.5)


async def _wait_placed(bootstrap: str, topics: Topics, workload: str) -> None:
    async with JournalReader(bootstrap, topics.journal) as journal:
        await journal.wait_for(first("workload.placed", workload=workload))


def _account(inbox: list[Any], journal: list[Any], dlq: list[Any], topics: Topics) -> None:
    """Every inbox offset exactly once: journal run (one cause) xor one DLQ record."""
    positions = {(r.partition, r.offset) for r in inbox}
    runs: dict[tuple[int, int], list[Any]] = defaultdict(list)
    for r in journal:
        body = orjson.loads(r.value)
        runs[tuple(body["inbox"])].append(decode_event(r.value))
    dead = Counter()
    for r in dlq:
        h = dict(r.headers or ())
        assert h["inbox.topic"] == topics.inbox.encode() and h["error"]
        dead[(int(h["inbox.partition"]), int(h["inbox.offset"]))] += 1
    assert all(n == 1 for n in dead.values()), [p for p, n in dead.items() if n > 1]
    assert not set(dead) & set(runs), sorted(set(dead) & set(runs))[:5]
    assert set(runs) | set(dead) == positions, (
        f"missing: {sorted(positions - set(runs) - set(dead))[:10]}; "
        f"unknown: {sorted((set(runs) | set(dead)) - positions)[:10]}"
    )
    for where, events in runs.items():
        causes = [
            e
            for e in events
            if is_cause(e)
            and not (e.type == "config.set" and e.id.endswith(f"/config@{where[0]}:{where[1]}"))
        ]
        assert len(causes) == 1, (where, [e.type for e in events])


async def test_hostile_inbox_never_stops_the_worker_and_loses_nothing(
    kafka_bootstrap: str,
) -> None:
    topics = Topics.suffixed(f"-fz{uuid.uuid4().hex[:10]}")
    await create_topics(kafka_bootstrap, topics=topics, partitions=2)
    config = SchedulerConfig(admins=(ADMIN,))
    rnd = random.Random(20261129)
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap,
        acks="all",
        linger_ms=5,
        max_request_size=2 * 1024 * 1024,
    )
    await producer.start()

    async def send(key: bytes | None, value: bytes | None, anywhere: bool = False) -> None:
        """Keyed records go to their key's partition (the producers' default
        partitioner, as the submit tools do); `anywhere`: a random partition, which
        for a keyed record is the wrong one half of the time (the worker dead-letters
        a record that arrives off its cluster's home partition)."""
        partition = rnd.randrange(2) if anywhere or key is None else None
        await producer.send(topics.inbox, value, key=key, partition=partition)

    stop = asyncio.Event()
    task = asyncio.create_task(
        serve(kafka_bootstrap, config=config, topics=topics, stop=stop, tick_every=0)
    )
    try:
        for i in range(5):
            await send(
                b"c", orjson.dumps(Inbox.record("c", "host.registered", host=f"h{i}", gpus=64))
            )
        await send(b"c", orjson.dumps(Inbox.record("c", "budget.set", allocation="lab", weight=1)))
        await send(
            b"c",
            orjson.dumps(
                Inbox.record("c", "budget.set", allocation="lab/a", weight=1, members=["u"])
            ),
        )
        sent: list[bytes] = []
        for n in range(320):
            if rnd.random() < 0.15:
                value = orjson.dumps(_valid(rnd, n))
                sent.append(value)
                await send(b"c", value)
            elif sent and rnd.random() < 0.05:  # a client resending the same request
                await send(b"c", rnd.choice(sent))
            else:
                await send(*hostile(rnd, n), anywhere=rnd.random() < 0.2)
        await producer.flush()
        assert not task.done(), task
        sentinel = Inbox.record(
            "c", "workload.submitted", "u", workload="sentinel", allocation="lab/a", gpus=1
        )
        await send(b"c", orjson.dumps(sentinel))
        await producer.flush()
        await _wait_placed(kafka_bootstrap, topics, "sentinel")
        assert not task.done()
        stop.set()
        worker = await asyncio.wait_for(task, WAIT_S)
        assert worker.stats.dead > 0 and worker.stats.inputs > 0

        # a restart re-reads nothing twice and still works
        stop = asyncio.Event()
        task = asyncio.create_task(
            serve(kafka_bootstrap, config=config, topics=topics, stop=stop, tick_every=0)
        )
        after = Inbox.record(
            "c", "workload.submitted", "u", workload="after", allocation="lab/a", gpus=1
        )
        await send(b"c", orjson.dumps(after))
        await producer.flush()
        await _wait_placed(kafka_bootstrap, topics, "after")
        stop.set()
        restarted = await asyncio.wait_for(task, WAIT_S)
        assert not any(core.diverged for core in restarted.cores.values())
    finally:
        stop.set()
        if not task.done():
            await asyncio.wait_for(task, WAIT_S)
        await producer.stop()

    inbox = await read_all(kafka_bootstrap, topics.inbox, "read_uncommitted")
    journal = await read_all(kafka_bootstrap, topics.journal)
    dlq = await read_all(kafka_bootstrap, topics.dlq)
    assert len(inbox) == 5 + 2 + 320 + 2
    _account(inbox, journal, dlq, topics)

    # the committed journal re-derives, cluster by cluster, exactly as it was decided
    by_cluster: dict[str, list[bytes]] = defaultdict(list)
    for r in journal:
        by_cluster[r.key.decode()].append(r.value)
    assert "c" in by_cluster
    for cluster, lines in by_cluster.items():
        fresh = SchedulerCore(cluster, config)
        assert fresh.fold_journal(lines) == len(lines)
        assert not fresh.diverged, cluster
    kinds = Counter(decode_event(r.value).type for r in journal)
    assert kinds["workload.rejected"] and kinds["input.rejected"], kinds
    assert len(dlq) > 20, "random bytes, bad keys and deep JSON are dead letters"

"""The worker's snapshot rounds without a broker: which rounds are written, which are
overtaken, and what a failure leaves behind. A fake transactional producer records what
would have been sent (the real-broker path is tests/streams/test_worker.py's kill -9
and restart tests and test_failover's hand-over)."""

from __future__ import annotations

import asyncio
import pickle
import zlib
from typing import Any

import orjson

from streams.core import SchedulerCore
from streams.worker_helpers import _Partition
from streams.worker_loop import Worker


class FakeProducer:
    """Records committed transactions as lists of (topic, key, value)."""

    def __init__(self) -> None:
        self.committed: list[list[tuple[str, bytes, bytes]]] = []
        self._open: list[tuple[str, bytes, bytes]] | None = None

    async def begin_transaction(self) -> None:
        assert self._open is None, "transactions do not nest"
        self._open = []

    async def send(self, topic: str, value: bytes, key: bytes) -> asyncio.Future[None]:
        assert self._open is not None
        self._open.append((topic, key, value))
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def commit_transaction(self) -> None:
        assert self._open is not None
        self.committed.append(self._open)
        self._open = None

    async def abort_transaction(self) -> None:
        self._open = None


def worker_with(cores: dict[str, Any]) -> tuple[Worker, _Partition, FakeProducer]:
    worker = Worker("127.0.0.1:1", config=None)  # never connects in these tests
    worker._inbox_parts = [0]
    producer = FakeProducer()
    part = _Partition(0, producer)  # type: ignore[arg-type]
    worker.owned = {0: part}
    worker.cores = cores
    part.journal_next = {0: 42}
    return worker, part, producer


def blobs(transaction: list[tuple[str, bytes, bytes]]) -> dict[bytes, Any]:
    """Cluster key -> unpickled snapshot; the manifest under its own key."""
    out: dict[bytes, Any] = {}
    for _, key, value in transaction:
        out[key] = orjson.loads(value) if key.startswith(b"__manifest__") else value
    return out


async def test_a_round_captures_the_state_at_its_start() -> None:
    worker, part, producer = worker_with({"c": SchedulerCore("c")})
    part.dirty = True
    rounds = worker._begin_snapshots(None)
    assert not part.dirty
    part.journal_next = {0: 99}  # folding goes on while the child pickles
    worker.cores["c"].state.now = 12345.0
    await worker._finish_snapshots(rounds)
    (transaction,) = producer.committed
    sent = blobs(transaction)
    manifest = sent[worker._manifest_key(0)]
    assert manifest["journal"] == {"0": 42} and manifest["clusters"] == ["c"]
    snapshot = pickle.loads(zlib.decompress(sent[b"c"]))
    assert snapshot["round"] == manifest["round"]
    assert snapshot["core"].state.now != 12345.0
    assert part.written == part.generation == 1


async def test_an_overtaken_round_is_not_written() -> None:
    worker, part, producer = worker_with({"c": SchedulerCore("c")})
    part.dirty = True
    first = worker._begin_snapshots(None)
    part.dirty = True  # more was folded; e.g. a hand-over takes a round of its own
    second = worker._begin_snapshots(None)
    await worker._finish_snapshots(second)
    await worker._finish_snapshots(first)  # its write comes late: dropped
    (transaction,) = producer.committed
    (manifest,) = [v for k, v in blobs(transaction).items() if k.startswith(b"__manifest__")]
    assert manifest["round"] == second[0].round_id != first[0].round_id
    assert part.written == 2


async def test_a_dropped_partition_gets_no_late_round() -> None:
    worker, part, producer = worker_with({"c": SchedulerCore("c")})
    part.dirty = True
    rounds = worker._begin_snapshots(None)
    worker.owned = {}  # moved to another worker meanwhile
    await worker._finish_snapshots(rounds)
    assert producer.committed == []


async def test_a_failed_round_leaves_the_partition_dirty() -> None:
    worker, part, producer = worker_with({"c": SchedulerCore("c")})
    worker.cores["c"].unpicklable = lambda: None  # type: ignore[attr-defined]
    part.dirty = True
    await worker._finish_snapshots(worker._begin_snapshots(None))
    assert producer.committed == [] and part.dirty  # retried at the next period


async def test_a_hand_over_does_not_wait_on_a_round_in_flight() -> None:
    """Revoked while a background round is still being pickled: the hand-over takes a
    fresh round (written at once) and the one in flight is dropped when it lands."""
    worker, part, producer = worker_with({"c": SchedulerCore("c")})
    part.dirty = True
    in_flight = worker._begin_snapshots(None)
    await worker._revoked({0})
    assert len(producer.committed) == 1 and part.written == 2
    await worker._finish_snapshots(in_flight)
    assert len(producer.committed) == 1


def test_a_period_of_zero_means_no_periodic_snapshots() -> None:
    """`--snapshot-every 0`: the loop's due check (`now - last >= every`) never holds."""
    assert Worker("127.0.0.1:1", config=None, snapshot_every=0).snapshot_every == float("inf")
    assert Worker("127.0.0.1:1", config=None, snapshot_every=30).snapshot_every == 30

"""What the broker tests share: a request writer, a journal reader, a worker rig,
whole-topic reads, and the pieces of the kill -9 and failover tests (a worker
subprocess, a stand-in executor, "everything folded" checks).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from domain import events as ev
from domain.config import SchedulerConfig
from streams.topic_admin import Topics, create_topics
from streams.worker import serve

ROOT = Path(__file__).resolve().parents[2]
WAIT_S = 60.0
ADMIN = "root"
FETCH_BYTES = 16 * 1024 * 1024  # room for the near-1 MiB records of the fuzz tests


def suffix() -> str:
    return f"-t{uuid.uuid4().hex[:10]}"


KAFKA = ROOT / "deploy" / "kafka"


class Broker:
    """A broker of a test's own (`deploy/kafka/start` on a free port, a throwaway data
    dir): for tests that stop it and start it again; the session broker stays untouched."""

    def __init__(self, data: Path) -> None:
        self.data = data
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.bootstrap = ""

    def start(self) -> str:
        out = subprocess.run(
            [str(KAFKA / "start"), "--data", str(self.data), "--port", str(self.port), "--quiet"],
            capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert out.returncode == 0, out.stderr[-2000:]
        self.bootstrap = out.stdout.strip().splitlines()[-1]
        return self.bootstrap

    def stop(self) -> None:
        subprocess.run(
            [str(KAFKA / "stop"), "--data", str(self.data), "--quiet"], timeout=120, check=False
        )

    @classmethod
    def running(cls, data: Path) -> Iterator[Broker]:
        """A started broker, stopped afterwards: the body of a test's `broker` fixture."""
        broker = cls(data)
        broker.start()
        try:
            yield broker
        finally:
            broker.stop()


# ------------------------------------------------------------------ helpers


class Inbox:
    """Writes requests the way the submit tools do (idempotent, acks=all, keyed by cluster)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.topic = topic
        self.producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", linger_ms=5
        )

    async def __aenter__(self) -> Inbox:
        await self.producer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.producer.stop()

    @staticmethod
    def record(cluster: str, kind: str, actor: str = ADMIN, **fields: Any) -> dict[str, Any]:
        return {
            "type": kind,
            "v": 1,
            "id": fields.pop("id", None) or f"{kind}-{uuid.uuid4().hex}",
            "time": time.time(),
            "cluster": cluster,
            "actor": actor,
            **fields,
        }

    async def send(self, cluster: str, kind: str, actor: str = ADMIN, **fields: Any) -> dict:
        body = self.record(cluster, kind, actor, **fields)
        await (await self.producer.send(self.topic, orjson.dumps(body), key=cluster.encode()))
        return body

    async def send_raw(self, value: bytes, key: bytes | None) -> None:
        await (await self.producer.send(self.topic, value, key=key))

    async def setup(self, cluster: str, hosts: int = 1, leaves: tuple[str, ...] = ("a",)) -> None:
        for i in range(hosts):
            await self.send(cluster, "host.registered", host=f"h{i}", gpus=8)
        await self.send(cluster, "budget.set", allocation="lab", weight=1, managers=["alice"])
        for leaf in leaves:
            await self.send(
                cluster, "budget.set", allocation=f"lab/{leaf}", weight=1, members=["u"]
            )


class JournalReader:
    """Accumulates committed journal records (decoded) from the beginning."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.records: list[dict[str, Any]] = []
        self.raw: list[Any] = []
        # what else a timed-out wait should show (the logs of the workers it waited on)
        self.on_timeout: Callable[[], str] | None = None
        self.consumer = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=None,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            enable_auto_commit=False,
            max_partition_fetch_bytes=FETCH_BYTES,
        )

    async def __aenter__(self) -> JournalReader:
        await self.consumer.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.consumer.stop()

    async def poll(self, timeout_ms: int = 100) -> None:
        batches = await self.consumer.getmany(timeout_ms=timeout_ms)
        for tp in sorted(batches, key=lambda tp: tp.partition):
            for r in batches[tp]:
                self.raw.append(r)
                self.records.append(orjson.loads(r.value))

    async def wait_for(
        self, predicate: Callable[[list[dict[str, Any]]], Any], timeout: float = WAIT_S
    ) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            found = predicate(self.records)
            if found:
                return found
            if time.monotonic() > deadline:
                kinds = Counter(r["type"] for r in self.records)
                more = f"\n{self.on_timeout()}" if self.on_timeout else ""
                raise AssertionError(f"timed out; journal so far: {dict(kinds)}{more}")
            await self.poll()


def first(kind: str, **match: Any) -> Callable[[list[dict]], dict | None]:
    def find(records: list[dict]) -> dict | None:
        for r in records:
            if r["type"] == kind and all(r.get(k) == v for k, v in match.items()):
                return r
        return None

    return find


@dataclass
class Rig:
    bootstrap: str
    topics: Topics
    inbox: Inbox
    journal: JournalReader
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task | None = None

    def start(self, config: SchedulerConfig | None = None, **options: Any) -> None:
        self.stop = asyncio.Event()
        self.task = asyncio.create_task(
            serve(
                self.bootstrap,
                config=config or SchedulerConfig(admins=(ADMIN,)),
                topics=self.topics,
                stop=self.stop,
                tick_every=options.pop("tick_every", 0),
                snapshot_every=options.pop("snapshot_every", 60.0),
                **options,
            )
        )

    async def halt(self) -> Any:
        assert self.task is not None
        self.stop.set()
        worker = await asyncio.wait_for(self.task, WAIT_S)
        self.task = None
        return worker


@contextlib.asynccontextmanager
async def rig(bootstrap: str, partitions: int = 1) -> AsyncIterator[Rig]:
    topics = Topics.suffixed(suffix())
    await create_topics(bootstrap, topics=topics, partitions=partitions)
    async with (
        Inbox(bootstrap, topics.inbox) as inbox,
        JournalReader(bootstrap, topics.journal) as journal,
    ):
        r = Rig(bootstrap, topics, inbox, journal)
        try:
            yield r
        finally:
            if r.task is not None:
                r.stop.set()
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(r.task, WAIT_S)


async def read_all(bootstrap: str, topic: str, isolation: str = "read_committed") -> list[Any]:
    """Every committed (or, with read_uncommitted, every written) record of `topic`."""
    parts = await partitions(bootstrap, topic)
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        isolation_level=isolation,
        enable_auto_commit=False,
        max_partition_fetch_bytes=FETCH_BYTES,
        fetch_max_bytes=4 * FETCH_BYTES,
    )
    await consumer.start()
    try:
        tps = [TopicPartition(topic, p) for p in sorted(parts)]
        consumer.assign(tps)
        ends = await consumer.end_offsets(tps)
        out: list[Any] = []
        deadline = time.monotonic() + WAIT_S
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            assert time.monotonic() < deadline, f"could not read {topic} to its end"
            batches = await consumer.getmany(timeout_ms=200)
            for tp in sorted(batches, key=lambda tp: tp.partition):
                out.extend(r for r in batches[tp] if r.offset < ends[tp])
        return out
    finally:
        await consumer.stop()


async def partitions(bootstrap: str, topic: str) -> set[int]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        return set(await producer.partitions_for(topic))
    finally:
        await producer.stop()


def headers(record: Any) -> dict[str, bytes]:
    return dict(record.headers or ())


def spawn_worker(bootstrap: str, suffix: str, log: Path, *extra: str) -> subprocess.Popen:
    """`python -m streams.worker` on the suffixed topics, its output appended to `log`."""
    cmd = [
        sys.executable, "-m", "streams.worker", "--kafka", bootstrap, f"--topic-suffix={suffix}",
        "--admin", ADMIN, "--tick-every", "0.3", "--snapshot-every", "0.5", "--max-batch", "150",
        "--log-level", "info", *extra,
    ]  # fmt: skip
    # unbuffered: a worker the test kills keeps its log (what it did before a timeout)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}
    with log.open("ab") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def spawn_faust(env: dict[str, str], datadir: Path, log: Path) -> subprocess.Popen:
    """`faust -A streams.app worker` (no web server, no ticks) with `env` plus the
    repository on PYTHONPATH and admin `ADMIN`; its output goes to `log`."""
    env = {
        **env,
        "PYTHONPATH": str(ROOT),
        "ALLOT_ADMINS": ADMIN,
        "ALLOT_TICK_EVERY": "0",
        "ALLOT_FAUST_DATADIR": str(datadir),
    }
    with log.open("wb") as out:
        return subprocess.Popen(
            ["faust", "-A", "streams.app", "worker", "-l", "info", "--without-web"],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def inputs_seen(records: list[dict]) -> int:
    return sum(1 for r in records if "inbox" in r and is_input(r))


def is_input(r: dict) -> bool:
    kind = r["type"]
    return (kind in ev.INPUT_TYPES and kind != "config.set") or kind.endswith(".rejected")


async def executor(bootstrap: str, topics: Topics, inbox: Inbox, stop: asyncio.Event) -> None:
    """Plays the launcher: reports each placed attempt as finished right away, so GPUs
    free up and the scheduler keeps deciding while it is being killed."""
    async with JournalReader(bootstrap, topics.journal) as journal:
        done = 0
        while not stop.is_set():
            await journal.poll(100)
            for r in journal.records[done:]:
                if r["type"] == "workload.placed":
                    body = inbox.record(
                        r["cluster"],
                        "workload.finished",
                        actor="executor",
                        workload=r["workload"],
                        attempt=r["attempt"],
                        outcome="completed",
                    )
                    await inbox.producer.send(
                        topics.inbox, orjson.dumps(body), key=r["cluster"].encode()
                    )
            done = len(journal.records)


async def inbox_ends(bootstrap: str, topic: str) -> dict[int, int]:
    parts = await partitions(bootstrap, topic)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        ends = await consumer.end_offsets([TopicPartition(topic, p) for p in parts])
        return {tp.partition: offset for tp, offset in ends.items()}
    finally:
        await consumer.stop()


def folded_up_to(ends: dict[int, int]) -> Callable[[list[dict]], bool]:
    def check(records: list[dict]) -> bool:
        last: dict[int, int] = defaultdict(lambda: -1)
        for r in records:
            if "inbox" in r:
                p, o = r["inbox"]
                last[p] = max(last[p], o)
        return all(last[p] >= end - 1 for p, end in ends.items() if end > 0)

    return check


async def steady_feed(
    inbox: Inbox,
    topic: str,
    clusters: list[str],
    total: int,
    *,
    cancel_every: int,
    pause_s: float,
) -> None:
    """Submissions round-robin over `clusters`, every `cancel_every`-th request a
    cancellation of an earlier one; a flush and `pause_s` after every 100."""
    back = 7 if len(clusters) < 4 else 2 * len(clusters)
    for n in range(total):
        cluster = clusters[n % len(clusters)]
        if n % cancel_every == cancel_every - 1:
            body = inbox.record(cluster, "workload.cancelled", actor="u", workload=f"w{n - back}")
        else:
            body = inbox.record(
                cluster,
                "workload.submitted",
                actor="u",
                workload=f"w{n}",
                allocation=f"lab/{'ab'[n % 3 % 2]}",
                gpus=1 + n % 8,
                min_runtime=(0, 60, 600)[n % 3],
                resumable=bool(n % 2),
            )
        await inbox.producer.send(topic, orjson.dumps(body), key=cluster.encode())
        if n % 100 == 99:
            await inbox.producer.flush()
            await asyncio.sleep(pause_s)
    await inbox.producer.flush()


class KilledUnderLoad:
    """Worker subprocesses on one topic set, killed -9 and restarted while a steady
    feed and a stand-in executor run: the rig of the kill -9 tests.

        with KilledUnderLoad(bootstrap, name, topics, log) as workers:
            async with Inbox(...) as inbox, JournalReader(...) as journal:
                workers.start()
                workers.load(inbox, clusters, total)
                ...  # wait for a point of the stream
                workers.kill_and_restart()
                await workers.finish(journal, folded_up_to)

    Leaving the block stops the executor and kills what still runs."""

    def __init__(self, bootstrap: str, name: str, topics: Topics, log: Path) -> None:
        self.bootstrap, self.name, self.topics, self.log = bootstrap, name, topics, log
        self.procs: list[subprocess.Popen] = []
        self._stop_executor = asyncio.Event()
        self._feeder: asyncio.Task | None = None
        self._reporter: asyncio.Task | None = None

    def __enter__(self) -> KilledUnderLoad:
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop_executor.set()
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    def start(self) -> None:
        self.procs.append(spawn_worker(self.bootstrap, self.name, self.log))

    def load(self, inbox: Inbox, clusters: list[str], total: int) -> None:
        """`total` requests fed over `clusters`, and every placement reported finished
        (so GPUs free up and the scheduler keeps deciding while it is killed)."""
        self._feeder = asyncio.create_task(
            steady_feed(inbox, self.topics.inbox, clusters, total, cancel_every=15, pause_s=0.2)
        )
        self._reporter = asyncio.create_task(
            executor(self.bootstrap, self.topics, inbox, self._stop_executor)
        )

    def kill_and_restart(self) -> None:
        assert self._feeder is not None
        assert not self._feeder.done(), "the stream ended before the kill; slow the feed"
        self.procs[-1].send_signal(signal.SIGKILL)
        assert self.procs[-1].wait(WAIT_S) == -signal.SIGKILL
        self.start()

    async def finish(
        self,
        journal: JournalReader,
        folded: Callable[[dict[int, int]], Callable[[list[dict]], bool]],
    ) -> None:
        """The feed ends, the executor reports the last placements, the last worker
        folds the inbox to its end (`folded(ends)` says when) and stops cleanly."""
        assert self._feeder is not None and self._reporter is not None
        await asyncio.wait_for(self._feeder, WAIT_S)
        await asyncio.sleep(1.0)  # the executor reports the last placements
        self._stop_executor.set()
        await asyncio.wait_for(self._reporter, WAIT_S)
        ends = await inbox_ends(self.bootstrap, self.topics.inbox)
        await journal.wait_for(folded(ends))
        self.procs[-1].send_signal(signal.SIGTERM)
        assert self.procs[-1].wait(WAIT_S) == 0, self.log.read_text()[-3000:]


def assert_folded_exactly_once(inbox_records: list[Any], journal: list[dict]) -> set[str]:
    """Every inbox record up to the last one folded appears exactly once in the journal,
    as an accepted input or its rejection (no gap, no repeat), and every request id sent
    (but late ticks) is there once. Returns the ids sent."""
    folded = Counter(tuple(r["inbox"]) for r in journal if is_input(r))
    assert max(folded.values()) == 1, [k for k, v in folded.items() if v > 1][:5]
    last: dict[int, int] = defaultdict(lambda: -1)
    for p, o in folded:
        last[p] = max(last[p], o)
    expected = {(r.partition, r.offset) for r in inbox_records if r.offset <= last[r.partition]}
    assert set(folded) == expected
    sent = {orjson.loads(r.value)["id"] for r in inbox_records}
    sent = {i for i in sent if not i.startswith("tick/")}
    inputs = Counter(
        r["id"] for r in journal if is_input(r) and not r["type"].endswith(".rejected")
    )
    refs = Counter(r["ref"] for r in journal if r["type"].endswith(".rejected"))
    assert max(inputs.values()) == 1
    assert sent <= set(inputs) | set(refs)
    return sent


def assert_cluster_replays(raw_journal: list[Any], cluster: str, folder: Path) -> list[dict]:
    """One cluster's decisions are numbered cluster/seq densely, each attempt is placed
    once, and re-deciding its journal's inputs reproduces it byte for byte. Returns the
    cluster's decoded records."""
    from projections.replay import verify

    lines = [r.value for r in raw_journal if r.key == cluster.encode()]
    mine = [orjson.loads(line) for line in lines]
    own = [
        r["id"]
        for r in mine
        if r["type"] not in ev.INPUT_TYPES and r["type"] not in ev.BOOKKEEPING_TYPES
    ]
    assert own == [f"{cluster}/{n}" for n in range(len(own))]
    placements = Counter(
        (r["workload"], r["attempt"]) for r in mine if r["type"] == "workload.placed"
    )
    assert placements and max(placements.values()) == 1
    dump = folder / f"{cluster}.jsonl"
    dump.write_bytes(b"".join(line + b"\n" for line in lines))
    result = verify(dump)
    assert result.difference is None, (cluster, result.difference)
    assert result.decisions == len(own) - sum(r["type"].endswith(".rejected") for r in mine)
    return mine

"""Scale-out and failover on a real broker: two workers in one consumer group share a
4-partition inbox carrying 8 clusters; one is SIGKILLed under steady load and the
other takes its partitions over from the snapshots and the journal.

Afterwards every inbox record is folded exactly once, no decision is missing or
repeated, and re-deciding each cluster's journal reproduces it byte for byte.
"""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import time
from collections import defaultdict
from pathlib import Path

import orjson
import pytest
from aiokafka.partitioner import DefaultPartitioner

from domain.config import SchedulerConfig
from streams.topic_admin import Topics, create_topics
from streams.worker import serve
from streams.worker_loop import Worker
from tests.streams.rig import (
    ADMIN,
    WAIT_S,
    Inbox,
    JournalReader,
    assert_cluster_replays,
    assert_folded_exactly_once,
    executor,
    folded_up_to,
    inbox_ends,
    inputs_seen,
    read_all,
    spawn_worker,
    steady_feed,
    suffix,
)

pytestmark = pytest.mark.kafka

PARTITIONS = 4
CLUSTERS_PER_PARTITION = 2
TOOK_OVER = re.compile(r"took over inbox partitions \[([\d, ]*)\]")
MOVED = re.compile(r"inbox partition (\d+) moved to another worker")


def clusters_spread_over(partitions: int, per_partition: int, prefix: str) -> list[str]:
    """Cluster names whose keys hash (as the producers do) to every partition equally."""
    home = DefaultPartitioner()
    parts = list(range(partitions))
    chosen: dict[int, list[str]] = defaultdict(list)
    n = 0
    while min((len(chosen[p]) for p in parts), default=0) < per_partition:
        name = f"{prefix}-{n}"
        p = home(name.encode(), parts, parts)
        if len(chosen[p]) < per_partition:
            chosen[p].append(name)
        n += 1
    return [name for p in parts for name in chosen[p]]


def owned_partitions(log: Path) -> set[int]:
    """The partitions a worker holds now, by its log: those it took over, less those
    that moved to another worker since."""
    held: set[int] = set()
    for line in log.read_text().splitlines():
        if match := TOOK_OVER.search(line):
            held |= {int(x) for x in match.group(1).split(",") if x.strip()}
        elif match := MOVED.search(line):
            held.discard(int(match.group(1)))
    return held


def generation(worker: Worker) -> int:
    """The group generation the worker's consumer last joined (aiokafka keeps it on the
    consumer's coordinator; the broker's DescribeGroups does not say it)."""
    assert worker._consumer is not None
    return worker._consumer._coordinator.generation


async def test_workers_of_a_group_join_it_with_one_rebalance_each(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Two workers of a group started together (as after `allot topics create`) could
    bounce the group between them for minutes, neither holding its partitions: aiokafka
    sent a JoinGroup per assignor listed, and the last one changed the member's metadata
    while the group completed the rebalance the first had started, which started
    another. A worker now joins an empty group in one generation, and a second one
    joining takes one more."""
    name = suffix()
    topics = Topics.suffixed(name)
    await create_topics(kafka_bootstrap, topics=topics, partitions=PARTITIONS)
    group = f"allot-scheduler{name}"
    log = tmp_path / "second.log"
    ready: list[Worker] = []
    stop = asyncio.Event()
    first = asyncio.create_task(
        serve(
            kafka_bootstrap, config=SchedulerConfig(admins=(ADMIN,)), topics=topics, stop=stop,
            tick_every=0, group=group, session_timeout_ms=6000, on_ready=ready.append,
        )
    )  # fmt: skip
    second: subprocess.Popen | None = None
    try:
        deadline = time.monotonic() + WAIT_S
        while not ready:
            assert not first.done() and time.monotonic() < deadline
            await asyncio.sleep(0.1)
        worker = ready[0]
        assert sorted(worker.owned) == list(range(PARTITIONS))
        assert generation(worker) == 1

        second = spawn_worker(
            kafka_bootstrap, name, log, "--group", group, "--session-timeout", "6"
        )
        while not (
            owned_partitions(log)
            and owned_partitions(log) | set(worker.owned) == set(range(PARTITIONS))
            and not owned_partitions(log) & set(worker.owned)
        ):
            assert time.monotonic() < deadline, log.read_text()[-3000:]
            await asyncio.sleep(0.2)
        assert generation(worker) == 2, log.read_text()[-3000:]
    finally:
        if second is not None:
            second.terminate()
            try:
                second.wait(WAIT_S)
            except subprocess.TimeoutExpired:
                second.kill()
                second.wait()
        stop.set()
        await asyncio.wait_for(first, WAIT_S)


async def test_a_group_member_killed_under_load_is_taken_over_exactly_once(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    name = suffix()
    topics = Topics.suffixed(name)
    await create_topics(kafka_bootstrap, topics=topics, partitions=PARTITIONS)
    clusters = clusters_spread_over(PARTITIONS, CLUSTERS_PER_PARTITION, f"f{name}")
    home = {c: DefaultPartitioner()(c.encode(), list(range(4)), list(range(4))) for c in clusters}
    group = ["--group", f"allot-scheduler{name}", "--session-timeout", "6"]
    logs = [tmp_path / "worker-a.log", tmp_path / "worker-b.log"]
    total = 2400
    procs: list[subprocess.Popen] = []

    stop_executor = asyncio.Event()
    try:
        async with (
            Inbox(kafka_bootstrap, topics.inbox) as inbox,
            JournalReader(kafka_bootstrap, topics.journal) as journal,
        ):
            journal.on_timeout = lambda: "\n".join(
                f"--- {log.name}, last lines:\n{log.read_text()[-3000:]}" for log in logs
            )
            for cluster in clusters:
                await inbox.setup(cluster, hosts=2, leaves=("a", "b"))
            procs = [spawn_worker(kafka_bootstrap, name, log, *group) for log in logs]
            setup_inputs = len(clusters) * 5  # 2 hosts, lab, lab/a, lab/b
            await journal.wait_for(lambda recs: inputs_seen(recs) >= setup_inputs)
            # both members hold partitions, all four between them, before the load starts
            deadline = time.monotonic() + WAIT_S
            while True:
                held = [owned_partitions(log) for log in logs]
                covered = sorted(held[0] | held[1]) == list(range(PARTITIONS))
                if all(held) and covered and not held[0] & held[1]:
                    break
                assert time.monotonic() < deadline, [log.read_text()[-2000:] for log in logs]
                await asyncio.sleep(0.2)
            feeder = asyncio.create_task(
                steady_feed(inbox, topics.inbox, clusters, total, cancel_every=20, pause_s=0.15)
            )
            reporter = asyncio.create_task(executor(kafka_bootstrap, topics, inbox, stop_executor))

            base = inputs_seen(journal.records)
            await journal.wait_for(lambda recs: inputs_seen(recs) >= base + 700)
            assert not feeder.done(), "the stream ended before the kill; slow the feed"
            victim, survivor = 0, 1
            lost = owned_partitions(logs[victim])
            assert lost and not lost & owned_partitions(logs[survivor])
            last_before = {
                p: max((r["inbox"][1] for r in journal.records if r.get("inbox", [-1])[0] == p),
                       default=-1)
                for p in lost
            }  # fmt: skip
            killed_at = time.monotonic()
            procs[victim].send_signal(signal.SIGKILL)
            assert procs[victim].wait(WAIT_S) == -signal.SIGKILL

            def resumed(recs: list[dict]) -> bool:
                return any(
                    "inbox" in r and r["inbox"][0] in lost and r["inbox"][1] > last_before[r["inbox"][0]]
                    for r in recs
                )  # fmt: skip

            await journal.wait_for(resumed)
            takeover_s = time.monotonic() - killed_at
            print(f"takeover: first decision on the dead worker's partitions {takeover_s:.1f}s "
                  f"after kill -9 (session timeout 6 s)")  # fmt: skip

            await asyncio.wait_for(feeder, WAIT_S)
            await asyncio.sleep(1.0)  # the executor reports the last placements
            stop_executor.set()
            await asyncio.wait_for(reporter, WAIT_S)
            ends = await inbox_ends(kafka_bootstrap, topics.inbox)
            await journal.wait_for(folded_up_to(ends))
            procs[survivor].send_signal(signal.SIGTERM)
            assert procs[survivor].wait(WAIT_S) == 0, logs[survivor].read_text()[-3000:]
    finally:
        stop_executor.set()
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()

    survivor_log = logs[survivor].read_text()
    assert lost <= owned_partitions(logs[survivor]), survivor_log[-3000:]
    # the rebalance after the kill moved only what it had to: the survivor took the dead
    # member's partitions over and kept its own (a reload would redo its snapshot+journal)
    takeovers = [
        {int(x) for x in m.group(1).split(",") if x.strip()}
        for line in survivor_log.splitlines()
        if (m := TOOK_OVER.search(line))
    ]
    assert takeovers[-1] == lost, survivor_log[-3000:]
    assert takeover_s < 6 + 20, f"takeover took {takeover_s:.1f}s"

    inbox_records = await read_all(kafka_bootstrap, topics.inbox)
    raw_journal = await read_all(kafka_bootstrap, topics.journal)
    journal_records = [orjson.loads(r.value) for r in raw_journal]
    assert_folded_exactly_once(inbox_records, journal_records)
    for cluster in clusters:
        mine = assert_cluster_replays(raw_journal, cluster, tmp_path)
        assert all(r["inbox"][0] == home[cluster] for r in mine if "inbox" in r)


async def test_a_worker_of_another_group_on_the_same_topics_is_not_waited_out_in_silence(
    kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two groups on one set of topics fence each other's writes (that keeps exactly
    once). A group member fenced by a worker outside its group held its partitions idle
    for ever, with one warning line; now it stops with an error that says why."""
    # its group has no other member to hand over to: one session timeout's grace, not
    # the default three, tells the same
    monkeypatch.setenv("ALLOT_FENCED_GRACE_FACTOR", "1")
    name = suffix()
    topics = Topics.suffixed(name)
    await create_topics(kafka_bootstrap, topics=topics, partitions=1)
    logs = [tmp_path / "group-g.log", tmp_path / "group-h.log"]
    first = spawn_worker(
        kafka_bootstrap, name, logs[0], "--group", f"g{name}", "--session-timeout", "6"
    )
    other: subprocess.Popen | None = None
    try:
        async with Inbox(kafka_bootstrap, topics.inbox) as inbox:
            await inbox.setup(f"c{name}", hosts=1, leaves=("a",))  # a cluster: ticks to write
        deadline = time.monotonic() + WAIT_S
        while owned_partitions(logs[0]) != {0} or not re.search(
            r"\b1 cluster\b", logs[0].read_text()
        ):
            assert time.monotonic() < deadline, logs[0].read_text()[-2000:]
            await asyncio.sleep(0.2)
        other = spawn_worker(
            kafka_bootstrap, name, logs[1], "--group", f"h{name}", "--session-timeout", "6"
        )
        code = await asyncio.to_thread(first.wait, WAIT_S)  # ticks meet the fence
        text = logs[0].read_text()
        assert code == 2, text[-2000:]
        assert "inbox partition 0 was taken over by another worker" in text
        assert (
            f"error: inbox partitions [0] were taken over by a worker outside group 'g{name}'"
            in text
        )
    finally:
        for proc in (first, other):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait(10)

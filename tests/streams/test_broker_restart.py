"""The broker goes away mid-stream and comes back: the worker reconnects on its own
and nothing is lost or folded twice.

This test runs its own broker (deploy/kafka/start on a free port with a throwaway data
dir), because it stops and restarts it; the session broker stays untouched.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from domain import events as ev
from domain.config import SchedulerConfig
from projections.replay import verify
from streams.topic_admin import Topics, create_topics
from streams.worker import serve
from tests.streams.rig import (
    ADMIN,
    WAIT_S,
    Broker,
    Inbox,
    JournalReader,
    assert_cluster_replays,
    assert_folded_exactly_once,
    folded_up_to,
    inbox_ends,
    inputs_seen,
    is_input,
    read_all,
)

pytestmark = pytest.mark.kafka


@pytest.fixture(scope="module")
def module_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Broker]:
    """One broker for the module: a start and a stop are seconds, and each test's
    topics have a suffix of their own."""
    yield from Broker.running(tmp_path_factory.mktemp("kafka"))


@pytest.fixture
def broker(module_broker: Broker) -> Broker:
    """The module's broker, running (a test that failed while it was stopped may have
    left it so; a start of a running broker only says its address)."""
    module_broker.start()
    return module_broker


def _said(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "allot.worker" and text in r.getMessage()
    ]


async def test_worker_survives_a_broker_restart_mid_stream(
    broker: Broker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="allot.worker")
    bootstrap = broker.bootstrap
    topics = Topics.suffixed("-restart")
    await create_topics(bootstrap, topics=topics, partitions=2)
    clusters = ["r-a", "r-b"]
    backlog = 6000

    def submission(inbox: Inbox, n: int) -> dict:
        return inbox.record(
            clusters[n % 2], "workload.submitted", actor="u", workload=f"w{n}",
            allocation=f"lab/{'ab'[n % 3 % 2]}", gpus=1 + n % 8, min_runtime=(0, 60, 600)[n % 3],
        )  # fmt: skip

    async def send(inbox: Inbox, bodies: list[dict]) -> None:
        for body in bodies:
            await inbox.producer.send(
                topics.inbox, orjson.dumps(body), key=body["cluster"].encode()
            )
        await inbox.producer.flush()

    stop = asyncio.Event()
    async with Inbox(bootstrap, topics.inbox) as inbox:
        for cluster in clusters:
            await inbox.setup(cluster, hosts=2, leaves=("a", "b"))
        await send(inbox, [submission(inbox, n) for n in range(backlog)])
    task = asyncio.create_task(
        serve(bootstrap, config=SchedulerConfig(admins=(ADMIN,)), topics=topics, stop=stop,
              tick_every=0, snapshot_every=1.0, max_batch=100)
    )  # fmt: skip
    try:
        async with JournalReader(bootstrap, topics.journal) as journal:
            # the worker is part-way through the backlog when the broker goes away
            await journal.wait_for(lambda recs: inputs_seen(recs) >= 1000)
        assert not task.done()
        broker.stop()
        # the worker keeps trying meanwhile, and says once in its log that it lost Kafka
        for _ in range(100):
            if _said(caplog, "lost the connection to Kafka"):
                break
            await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        assert not task.done(), "the worker gave up while the broker was away"
        assert len(_said(caplog, "lost the connection to Kafka")) == 1
        assert not _said(caplog, "answers again")
        broker.start()
        async with (
            Inbox(bootstrap, topics.inbox) as inbox,
            JournalReader(bootstrap, topics.journal) as journal,
        ):
            await send(inbox, [submission(inbox, n) for n in range(backlog, backlog + 500)])
            ends = await inbox_ends(bootstrap, topics.inbox)
            await journal.wait_for(folded_up_to(ends), timeout=3 * WAIT_S)
    finally:
        stop.set()
        worker = await asyncio.wait_for(task, WAIT_S)
    (back,) = _said(caplog, "answers again")
    assert bootstrap in back
    print(
        f"write failures re-derived: {worker.stats.write_failures}; "
        f"takeovers: {[(p, round(s, 2)) for p, s in worker.stats.takeovers]}"
    )

    inbox_records = await read_all(bootstrap, topics.inbox)
    raw_journal = await read_all(bootstrap, topics.journal)
    records = [orjson.loads(r.value) for r in raw_journal]
    folded = Counter(tuple(r["inbox"]) for r in records if is_input(r))
    assert max(folded.values()) == 1
    assert set(folded) == {(r.partition, r.offset) for r in inbox_records}  # every one, once
    for cluster in clusters:
        mine = [orjson.loads(r.value) for r in raw_journal if r.key == cluster.encode()]
        own = [r["id"] for r in mine if r["type"] not in ev.INPUT_TYPES]
        assert own == [f"{cluster}/{n}" for n in range(len(own))]
        dump = tmp_path / f"{cluster}.jsonl"
        dump.write_bytes(
            b"".join(r.value + b"\n" for r in raw_journal if r.key == cluster.encode())
        )
        assert verify(dump).difference is None


async def test_a_stop_while_the_broker_is_gone_does_not_wait_for_it(
    broker: Broker, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """SIGTERM (`stop`) while a batch is being written to a broker that went away: the
    worker used to retry that write until the broker came back, so `allot serve` ignored
    the stop (a supervisor's SIGKILL ended it). It now gives the write `stop_grace`
    seconds, says it stops without it, and the next start decides that batch once."""
    caplog.set_level(logging.WARNING, logger="allot.worker")
    bootstrap = broker.bootstrap
    topics = Topics.suffixed("-stop-gone")
    await create_topics(bootstrap, topics=topics)
    cluster = "s"
    async with Inbox(bootstrap, topics.inbox) as inbox:
        await inbox.setup(cluster, hosts=2)
        for n in range(3000):  # far more than one batch: the next is fetched already
            body = inbox.record(
                cluster, "workload.submitted", actor="u", workload=f"w{n}",
                allocation="lab/a", gpus=1, min_runtime=60,
            )  # fmt: skip
            await inbox.producer.send(topics.inbox, orjson.dumps(body), key=cluster.encode())
        await inbox.producer.flush()

    def stop_the_broker_after_the_first_batch(_cluster: str, lines: list, **kw: object) -> None:
        if lines and not kw.get("recovered") and broker.bootstrap:
            # the next batch is written to a broker that is gone
            broker.stop()
            broker.bootstrap = ""

    stop = asyncio.Event()
    config = SchedulerConfig(admins=(ADMIN,))
    task = asyncio.create_task(
        serve(bootstrap, config=config, topics=topics, stop=stop, tick_every=0,
              snapshot_every=0, max_batch=100, stop_grace=1.0,
              on_journal=stop_the_broker_after_the_first_batch)
    )  # fmt: skip
    try:
        while not _said(caplog, "lost the connection to Kafka"):
            assert not task.done()
            await asyncio.sleep(0.1)
        stop.set()
        # the broker stays away: the stop must not wait for it
        await asyncio.wait_for(task, WAIT_S)
    finally:
        if not task.done():
            task.cancel()
    (cut,) = _said(caplog, "stopping without the batch being written")
    assert bootstrap in cut and "nothing is lost or decided twice" in cut

    broker.start()
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve(bootstrap, config=config, topics=topics, stop=stop, tick_every=0)
    )
    try:
        ends = await inbox_ends(bootstrap, topics.inbox)
        async with JournalReader(bootstrap, topics.journal) as journal:
            await journal.wait_for(folded_up_to(ends))
    finally:
        stop.set()
        await asyncio.wait_for(task, WAIT_S)
    inbox_records = await read_all(bootstrap, topics.inbox)
    raw_journal = await read_all(bootstrap, topics.journal)
    assert_folded_exactly_once(inbox_records, [orjson.loads(r.value) for r in raw_journal])
    assert_cluster_replays(raw_journal, cluster, tmp_path)

"""The live scheduler on a real broker: inbox -> worker -> journal, DLQ, kill -9 recovery.

Every test uses its own topics (a unique suffix), so tests don't see each other.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pickle
import re
import signal
import subprocess
import time
import zlib
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from domain import events as ev
from domain.config import SchedulerConfig
from streams.core import SNAPSHOT_FORMAT
from streams.topic_admin import Topics, create_topics
from streams.worker import serve
from tests.streams.rig import (
    ADMIN,
    WAIT_S,
    Inbox,
    JournalReader,
    KilledUnderLoad,
    assert_cluster_replays,
    assert_folded_exactly_once,
    first,
    folded_up_to,
    headers,
    inputs_seen,
    read_all,
    rig,
    spawn_faust,
    spawn_worker,
    suffix,
)

pytestmark = pytest.mark.kafka

# ------------------------------------------------------------------ end to end


async def test_submit_is_placed_in_the_journal(kafka_bootstrap: str) -> None:
    async with rig(kafka_bootstrap) as r:
        r.start()
        await r.inbox.setup("c")
        sub = await r.inbox.send(
            "c",
            "workload.submitted",
            actor="u",
            workload="w1",
            allocation="lab/a",
            gpus=2,
            min_runtime=600,
            resumable=True,
        )
        placed = await r.journal.wait_for(first("workload.placed", workload="w1"))
        assert placed["cause"] == sub["id"]
        assert placed["charged"] is True
        assert sum(len(g) for g in placed["hosts"].values()) == 2
        assert placed["id"].startswith("c/")
        accepted = first("workload.submitted", workload="w1")(r.journal.records)
        assert accepted is not None and accepted["actor"] == "u"
        # the journal record says which inbox record caused it
        assert accepted["inbox"] == placed["inbox"]
        # the event time is the broker's stamp of the inbox record, not the client's claim
        assert abs(accepted["time"] - sub["time"]) < 30
        # one journal topic, keyed by cluster
        keys = {rec.key for rec in r.journal.raw}
        assert keys == {b"c"}


async def test_unallocated_work_is_preempted_by_allocated_work(kafka_bootstrap: str) -> None:
    async with rig(kafka_bootstrap) as r:
        r.start()
        await r.inbox.setup("c")
        await r.inbox.send(
            "c",
            "workload.submitted",
            actor="u",
            workload="free",
            allocation="lab/a",
            gpus=8,
            min_runtime=0,
            resumable=True,
        )
        free = await r.journal.wait_for(first("workload.placed", workload="free"))
        assert free["charged"] is False
        await r.inbox.send(
            "c",
            "workload.submitted",
            actor="u",
            workload="paid",
            allocation="lab/a",
            gpus=8,
            min_runtime=600,
        )
        preempted = await r.journal.wait_for(first("workload.preempted", workload="free"))
        assert preempted["reason"] == "unallocated"
        assert preempted["beneficiary"] == "paid"
        assert preempted["requeued"] is True
        placed = await r.journal.wait_for(first("workload.placed", workload="paid"))
        assert placed["charged"] is True
        assert placed["hosts"] == free["hosts"]


async def test_budget_change_reorders_the_queue(kafka_bootstrap: str) -> None:
    """Two clusters in one worker, same story; only cluster `y` raises lab/b's weight
    before the GPUs free up, and only there lab/b's workload goes first."""
    async with rig(kafka_bootstrap) as r:
        r.start()
        for cluster in ("x", "y"):
            await r.inbox.setup(cluster, leaves=("a", "b", "c"))
            await r.inbox.send(
                cluster,
                "workload.submitted",
                actor="u",
                workload=f"{cluster}-block",
                allocation="lab/c",
                gpus=8,
                min_runtime=3600,
            )
        for cluster in ("x", "y"):
            await r.journal.wait_for(first("workload.placed", workload=f"{cluster}-block"))
            for leaf in ("a", "b"):
                await r.inbox.send(
                    cluster,
                    "workload.submitted",
                    actor="u",
                    workload=f"{cluster}-{leaf}",
                    allocation=f"lab/{leaf}",
                    gpus=8,
                    min_runtime=600,
                )
        await r.inbox.send("y", "budget.set", allocation="lab/b", weight=5)
        await r.journal.wait_for(first("budget.set", cluster="y", allocation="lab/b", weight=5.0))
        for cluster in ("x", "y"):
            await r.inbox.send(
                cluster,
                "workload.finished",
                actor="executor",
                workload=f"{cluster}-block",
                outcome="completed",
                attempt=1,
            )
        x = await r.journal.wait_for(_after_block("x"))
        y = await r.journal.wait_for(_after_block("y"))
        assert x["workload"] == "x-a"  # equal shares: the tie goes to the path order
        assert y["workload"] == "y-b"  # lab/b's share is now larger: it ranks first
        assert y["explain"]["share"] > x["explain"]["share"]


def _after_block(cluster: str) -> Callable[[list[dict]], dict | None]:
    def find(records: list[dict]) -> dict | None:
        finished = False
        for rec in records:
            if rec["cluster"] != cluster:
                continue
            if rec["type"] == "workload.finished":
                finished = True
            elif finished and rec["type"] == "workload.placed":
                return rec
        return None

    return find


async def test_a_lost_report_requeues_resumable_work_and_it_runs_again(
    kafka_bootstrap: str,
) -> None:
    """A launcher's `lost` report (the node died) for resumable work is journaled with
    `requeued`, and the workload gets its next attempt; non-resumable work ends."""
    async with rig(kafka_bootstrap) as r:
        r.start()
        await r.inbox.setup("c")
        for wid, resumable in (("ckpt", True), ("plain", False)):
            await r.inbox.send(
                "c",
                "workload.submitted",
                actor="u",
                workload=wid,
                allocation="lab/a",
                gpus=4,
                min_runtime=600,
                resumable=resumable,
            )
            await r.journal.wait_for(first("workload.placed", workload=wid))
            await r.inbox.send(
                "c", "workload.finished", actor="launcher", workload=wid, outcome="lost", attempt=1
            )
        again = await r.journal.wait_for(first("workload.placed", workload="ckpt", attempt=2))
        await r.journal.wait_for(first("workload.finished", workload="plain"))
        reports = {
            rec["workload"]: rec for rec in r.journal.records if rec["type"] == "workload.finished"
        }
        assert reports["ckpt"]["requeued"] is True
        assert "requeued" not in reports["plain"]  # a report that ends work, as always
        assert again["cause"] == reports["ckpt"]["id"]
        assert first("workload.placed", workload="plain", attempt=2)(r.journal.records) is None


async def test_unauthorized_budget_change_is_rejected_with_its_actor(kafka_bootstrap: str) -> None:
    async with rig(kafka_bootstrap) as r:
        r.start()
        await r.inbox.setup("c")
        bad = await r.inbox.send("c", "budget.set", actor="mallory", allocation="lab/a", weight=9)
        top = await r.inbox.send("c", "budget.set", actor="mallory", allocation="evil", weight=9)
        ok = await r.inbox.send("c", "budget.set", actor="alice", allocation="lab/a", weight=3)
        rejected = await r.journal.wait_for(first("budget.rejected", ref=bad["id"]))
        assert rejected["actor"] == "mallory"
        assert "mallory" in rejected["error"] and "manager" in rejected["error"]
        assert rejected["allocation"] == "lab/a"
        rejected_top = await r.journal.wait_for(first("budget.rejected", ref=top["id"]))
        assert rejected_top["actor"] == "mallory"
        accepted = await r.journal.wait_for(first("budget.set", id=ok["id"]))
        assert accepted["actor"] == "alice" and accepted["weight"] == 3.0
        assert not first("budget.set", id=bad["id"])(r.journal.records)


async def test_malformed_records_go_to_the_dlq_and_processing_continues(
    kafka_bootstrap: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="allot.worker")
    async with rig(kafka_bootstrap) as r:
        r.start()
        await r.inbox.setup("c")
        await r.inbox.send_raw(b"{not json", key=b"c")
        await r.inbox.send_raw(b"\xff\xfe garbage without a key", key=None)
        await r.inbox.send_raw(b"[1, 2, 3]", key=b"c")
        # a JSON object that is not a valid request is a journaled rejection, not a dead letter
        await r.inbox.send("c", "workload.submitted", actor="u", workload="w", gpus=-1)
        await r.inbox.send("c", "no.such.type")
        after = await r.inbox.send("c", "clock.tick")
        await r.journal.wait_for(first("clock.tick", id=after["id"]))
        assert first("workload.rejected", workload="w")(r.journal.records)
        assert first("input.rejected", input_type="no.such.type")(r.journal.records)
        await r.halt()

        dead = await read_all(kafka_bootstrap, r.topics.dlq)
        assert [d.value for d in dead] == [
            b"{not json",
            b"\xff\xfe garbage without a key",
            b"[1, 2, 3]",
        ]
        h = [headers(d) for d in dead]
        assert b"not JSON" in h[0]["error"] and h[0]["cluster"] == b"c"
        assert b"not JSON" in h[1]["error"] and "cluster" not in h[1]
        assert b"not a JSON object" in h[2]["error"]
        assert all(x["inbox.topic"] == r.topics.inbox.encode() for x in h)
        assert len({x["inbox.offset"] for x in h}) == 3
        assert dead[0].key == b"c" and dead[1].key is None
        # dead letters are not journaled: the log says so (at most every 30 s, and when
        # the worker stops), and the stop line counts them
        told = [
            re.match(r"(\d+) inbox records? went to the dead-letter topic ", m.getMessage())
            for m in caplog.records
        ]
        assert sum(int(m[1]) for m in told if m) == 3
        assert any(
            m.getMessage().endswith(f"3 to the dead-letter topic {r.topics.dlq}")
            for m in caplog.records
            if m.getMessage().startswith("stopped: ")
        )

        # a restart neither dead-letters them again nor re-folds anything
        before = len(r.journal.records)
        r.start()
        tick = await r.inbox.send("c", "clock.tick")
        await r.journal.wait_for(first("clock.tick", id=tick["id"]))
        await r.halt()
        assert len(await read_all(kafka_bootstrap, r.topics.dlq)) == 3
        await r.journal.poll(500)
        assert len(r.journal.records) == before + 1


async def test_a_worker_refuses_clusters_beyond_its_limit(kafka_bootstrap: str) -> None:
    """Every new record key is a new cluster: past `max_clusters` they are dead-lettered
    instead of each costing a scheduler core for good."""
    async with rig(kafka_bootstrap) as r:
        r.start(max_clusters=2)
        for name in ("one", "two", "three"):
            await r.inbox.send(name, "budget.set", allocation="lab", weight=1)
        await r.inbox.send("one", "budget.set", allocation="lab/x", weight=1)
        await r.journal.wait_for(first("budget.set", allocation="lab/x"))
        worker = await r.halt()
    assert sorted(worker.cores) == ["one", "two"]
    dead = await read_all(kafka_bootstrap, r.topics.dlq)
    assert [headers(d)["cluster"] for d in dead] == [b"three"]
    assert b"its limit" in headers(dead[0])["error"]


async def test_the_ticker_leaves_keys_that_never_made_a_cluster(kafka_bootstrap: str) -> None:
    """A key whose every request was refused (a typo, or junk from any inbox writer)
    used to be ticked every tick_every forever; a cluster with a budget is ticked."""
    async with rig(kafka_bootstrap) as r:
        r.start(tick_every=0.2)
        await r.inbox.send("real", "budget.set", allocation="lab", weight=1)
        for junk in ("junk0", "junk1"):
            await r.inbox.send(junk, "workload.cancelled", workload="nope")
        # six ticks of the real cluster: the junk keys had five rounds to be ticked in
        # (a sleep here passed even when the worker was too slow to tick at all)
        await r.journal.wait_for(
            lambda records: (
                sum(x["type"] == "clock.tick" and x["cluster"] == "real" for x in records) >= 6
            )
        )
        await r.halt()
        await r.journal.poll(500)
        records = r.journal.records
    ticked = {x["cluster"] for x in records if x["type"] == "clock.tick"}
    assert ticked == {"real"}
    refused = {x["cluster"] for x in records if x["type"] == "workload.rejected"}
    assert refused == {"junk0", "junk1"}  # they were folded: the cores exist


async def test_a_stop_during_the_start_ends_it(kafka_bootstrap: str) -> None:
    """SIGTERM only sets the stop event, and the start did not look at it: a worker whose
    start waited on the broker (its transaction coordinator never answering) ran on
    until a SIGKILL. A stop now ends the start: nothing taken over, nothing decided."""
    async with rig(kafka_bootstrap) as r:
        stop = asyncio.Event()
        stop.set()
        worker = await asyncio.wait_for(
            serve(kafka_bootstrap, config=None, topics=r.topics, stop=stop, tick_every=0),
            WAIT_S,
        )
        assert not worker.ready.is_set()
        assert worker.stats.takeovers == [] and worker.owned == {}


async def test_workers_split_clusters_between_them(kafka_bootstrap: str) -> None:
    """`clusters=[...]`: two workers on the same topics, each deciding only its own."""
    async with rig(kafka_bootstrap) as r:
        config = SchedulerConfig(admins=(ADMIN,))
        stop = asyncio.Event()
        ready: list[Any] = []
        tasks = [
            asyncio.create_task(
                serve(
                    kafka_bootstrap, config=config, clusters=[name], topics=r.topics, stop=stop,
                    tick_every=0, on_ready=ready.append,
                )
            )
            for name in ("one", "two")
        ]  # fmt: skip
        try:
            for name in ("one", "two"):
                await r.inbox.setup(name)
                await r.inbox.send(
                    name,
                    "workload.submitted",
                    actor="u",
                    workload=f"{name}-w",
                    allocation="lab/a",
                    gpus=1,
                    min_runtime=60,
                )
            for name in ("one", "two"):
                await r.journal.wait_for(first("workload.placed", workload=f"{name}-w"))
        finally:
            stop.set()
            workers = await asyncio.gather(*tasks)
        assert {w.identity for w in workers} == {w.identity for w in ready}
        assert len({w.identity for w in workers}) == 2  # two transactional ids
        assert [sorted(w.cores) for w in workers] == [["one"], ["two"]]
        submitted = Counter(
            x["workload"] for x in r.journal.records if x["type"] == "workload.submitted"
        )
        assert submitted == {"one-w": 1, "two-w": 1}


# ------------------------------------------------------------------ transactions


async def test_a_batch_cut_short_before_its_commit_is_invisible_and_redone(
    kafka_bootstrap: str,
) -> None:
    """A worker dies after writing a batch but before committing it: read_committed
    readers never see that batch, and the next incarnation (same transactional id)
    aborts it and decides the same inputs again, exactly once."""
    async with rig(kafka_bootstrap) as r:
        ready: list[Any] = []
        r.start(on_ready=ready.append)
        await r.inbox.setup("c")
        await r.journal.wait_for(first("budget.set", allocation="lab/a"))
        worker = ready[0]
        producer = worker.owned[0].producer
        never = asyncio.Event()

        async def hang() -> None:
            await never.wait()

        async def no_close() -> None:  # a crash cleans nothing up
            return None

        producer.commit_transaction = hang
        worker._close = no_close
        sub = await r.inbox.send(
            "c",
            "workload.submitted",
            actor="u",
            workload="w",
            allocation="lab/a",
            gpus=1,
            min_runtime=60,
        )
        async with JournalReader(kafka_bootstrap, r.topics.journal) as dirty:
            dirty.consumer._fetcher._isolation_level = 0  # read_uncommitted
            await dirty.wait_for(first("workload.placed", workload="w"))
        r.task.cancel()  # the process is gone, its transaction is still open
        with contextlib.suppress(asyncio.CancelledError):
            await r.task
        r.task = None
        await r.journal.poll(1000)
        assert not first("workload.submitted", workload="w")(r.journal.records)

        r.start()
        placed = await r.journal.wait_for(first("workload.placed", workload="w"))
        assert placed["cause"] == sub["id"]
        await r.halt()
        committed = [
            orjson.loads(x.value) for x in await read_all(kafka_bootstrap, r.topics.journal)
        ]
        assert sum(x.get("workload") == "w" for x in committed) == 2  # submitted + placed
        never.set()
        # the crashed incarnation's clients are still open in this process (a real crash
        # takes them with it): close them, or they poll the broker for the whole session
        await type(worker)._close(worker)


def refuse_next_commit(producer: Any) -> list[int]:
    """Make `producer`'s next commit fail once (a broker that restarted mid-transaction);
    the list it returns gets an entry when it did."""
    from aiokafka.errors import KafkaError

    real_commit = producer.commit_transaction
    failures: list[int] = []

    async def refuse_once() -> None:
        if not failures:
            failures.append(1)
            raise KafkaError("commit refused (injected)")
        await real_commit()

    producer.commit_transaction = refuse_once
    return failures


async def test_an_admins_config_change_survives_a_failed_commit(kafka_bootstrap: str) -> None:
    """The worker's start flags are journaled once per start: a core rebuilt after a
    failed write (or a rebalance) used to journal them again, undoing an admin's change."""

    async with rig(kafka_bootstrap) as r:
        ready: list[Any] = []
        r.start(SchedulerConfig(admins=(ADMIN,), window=3 * 86400.0), on_ready=ready.append)
        await r.inbox.setup("c")
        await r.journal.wait_for(first("budget.set", allocation="lab/a"))
        change = await r.inbox.send("c", "config.set", config={"admins": [ADMIN], "window": "5d"})
        await r.journal.wait_for(lambda recs: any(x.get("id") == change["id"] for x in recs))
        producer = ready[0].owned[0].producer
        failures = refuse_next_commit(producer)
        await r.inbox.send(
            "c", "workload.submitted", actor="u", workload="w", allocation="lab/a", gpus=1,
            min_runtime=60,
        )  # fmt: skip
        await r.journal.wait_for(first("workload.placed", workload="w"))
        worker = await r.halt()
    assert failures == [1] and worker.stats.write_failures == 1
    committed = [orjson.loads(x.value) for x in await read_all(kafka_bootstrap, r.topics.journal)]
    configs = [(x["actor"], x["config"]["window"]) for x in committed if x["type"] == "config.set"]
    assert configs == [("allot", 3 * 86400.0), (ADMIN, "5d")]  # as the admin sent it


async def test_a_failed_commit_is_re_derived_and_redone_exactly_once(
    kafka_bootstrap: str,
) -> None:
    """The broker refuses one commit (e.g. it restarted mid-transaction): the worker's
    cores are then ahead of the journal, so it drops them, takes the partition over
    again from the journal, and folds the same inputs once more — exactly once."""

    async with rig(kafka_bootstrap) as r:
        ready: list[Any] = []
        r.start(on_ready=ready.append)
        await r.inbox.setup("c")
        await r.journal.wait_for(first("budget.set", allocation="lab/a"))
        producer = ready[0].owned[0].producer
        failures = refuse_next_commit(producer)
        sub = await r.inbox.send(
            "c", "workload.submitted", actor="u", workload="w", allocation="lab/a", gpus=1,
            min_runtime=60,
        )  # fmt: skip
        placed = await r.journal.wait_for(first("workload.placed", workload="w"))
        assert placed["cause"] == sub["id"]
        more = await r.inbox.send(
            "c", "workload.submitted", actor="u", workload="w2", allocation="lab/a", gpus=1,
            min_runtime=60,
        )  # fmt: skip
        await r.journal.wait_for(first("workload.placed", workload="w2"))
        worker = await r.halt()
    assert failures == [1]
    assert worker.stats.write_failures == 1 and len(worker.stats.takeovers) == 2
    committed = [orjson.loads(x.value) for x in await read_all(kafka_bootstrap, r.topics.journal)]
    assert Counter(x["type"] for x in committed if x.get("workload") == "w") == {
        "workload.submitted": 1,
        "workload.placed": 1,
    }
    assert sum(x.get("id") == more["id"] for x in committed) == 1
    own = [x["id"] for x in committed if x["type"] not in ev.INPUT_TYPES]
    assert own == [f"c/{n}" for n in range(len(own))]


def test_recovery_rederives_the_journal_and_falls_back_to_folding_facts() -> None:
    from streams.core import InboxRecord, SchedulerCore

    live = SchedulerCore("c", SchedulerConfig(admins=(ADMIN,)))
    inputs = [
        Inbox.record("c", "host.registered", host="h0", gpus=8),
        Inbox.record("c", "budget.set", allocation="lab", weight=1),
        Inbox.record("c", "budget.set", allocation="lab/a", weight=1, members=["u"]),
        Inbox.record("c", "workload.submitted", actor="u", workload="w1", allocation="lab/a",
                     gpus=8, min_runtime=0),
        Inbox.record("c", "workload.submitted", actor="u", workload="w2", allocation="lab/a",
                     gpus=4, min_runtime=60),
        Inbox.record("c", "workload.submitted", actor="u", workload="w3", allocation="lab/a",
                     gpus=-4),
    ]  # fmt: skip
    t0 = time.time()
    records = [InboxRecord(0, n, t0 + n, orjson.dumps(body)) for n, body in enumerate(inputs)]
    journal = live.process(records).journal
    assert any(b"workload.preempted" in line for line in journal)

    again = SchedulerCore("c", SchedulerConfig(admins=(ADMIN,)))
    assert again.fold_journal(journal) == len(journal)
    assert not again.diverged
    assert again.positions == live.positions == {0: 5}
    assert again.state.seq == live.state.seq
    numbered = again.state.seq
    # the rebuilt core goes on deciding exactly like the live one
    more = [InboxRecord(0, 6, t0 + 9, orjson.dumps(Inbox.record("c", "clock.tick")))]
    assert again.process(more).journal == live.process(more).journal

    tampered = [line.replace(b'"h0":[0,1,2,3]', b'"h0":[4,5,6,7]') for line in journal]
    assert tampered != journal
    facts = SchedulerCore("c")
    assert facts.fold_journal(tampered) == len(journal)
    assert facts.diverged  # re-deciding made h0 [0..3], the journal says [4..7]: the journal wins
    assert facts.state.seq == numbered  # the journal's numbering: nothing lost or repeated
    assert facts.state.workloads["w2"].hosts == {"h0": (4, 5, 6, 7)}


# ------------------------------------------------------------------ kill -9


async def test_kill_9_mid_stream_loses_and_duplicates_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Two clusters on a 2-partition inbox; a worker subprocess is SIGKILLed twice while
    requests, executor reports and ticks stream in, and restarted each time."""
    name = suffix()
    topics = Topics.suffixed(name)
    await create_topics(kafka_bootstrap, topics=topics, partitions=2)
    clusters = [f"k{name}-a", f"k{name}-b"]
    total = 3000
    log = tmp_path / "worker.log"
    with KilledUnderLoad(kafka_bootstrap, name, topics, log) as workers:
        async with (
            Inbox(kafka_bootstrap, topics.inbox) as inbox,
            JournalReader(kafka_bootstrap, topics.journal) as journal,
        ):
            for cluster in clusters:
                await inbox.setup(cluster, hosts=4, leaves=("a", "b"))
            workers.start()
            await journal.wait_for(lambda recs: inputs_seen(recs) >= 14)  # set up, running
            workers.load(inbox, clusters, total)
            # kill 1: mid-stream, 400 inputs in (no snapshot yet: recovery folds the
            # journal); kill 2: mid-stream again after the second incarnation has folded
            # 500 more and written a snapshot round (recovery = snapshot + journal tail)
            for more, settle in ((400, 0.0), (500, 0.7)):
                base = inputs_seen(journal.records)
                await journal.wait_for(lambda recs, n=base + more: inputs_seen(recs) >= n)
                await asyncio.sleep(settle)
                workers.kill_and_restart()
            await workers.finish(journal, folded_up_to)

    inbox_records = await read_all(kafka_bootstrap, topics.inbox)
    raw_journal = await read_all(kafka_bootstrap, topics.journal)
    journal_records = [orjson.loads(r.value) for r in raw_journal]
    written = await read_all(kafka_bootstrap, topics.journal, "read_uncommitted")
    # records of batches a kill cut short: in the log, never seen by read_committed readers
    print(f"journal: {len(raw_journal)} committed, {len(written) - len(raw_journal)} aborted")
    text = log.read_text()
    assert text.count("scheduler ready") == 3, text[-3000:]  # three incarnations
    assert "loaded snapshot round" in text  # a restart began from a snapshot

    sent = assert_folded_exactly_once(inbox_records, journal_records)
    assert len(sent) > total + 2 * 7  # submissions, cancellations, setup, executor reports
    assert any(r["type"] == "workload.finished" for r in journal_records)  # executor reports

    for cluster in clusters:
        mine = assert_cluster_replays(raw_journal, cluster, tmp_path)
        assert sum(r["type"] == "workload.placed" for r in mine) > 100
        assert any(r["type"] == "workload.preempted" for r in mine)


# ------------------------------------------------------------------ faust


async def test_faust_worker_runs_the_scheduler(kafka_bootstrap: str, tmp_path: Path) -> None:
    """`faust -A streams.app worker` starts, schedules a request, and stops cleanly."""
    name = suffix()
    topics = Topics.suffixed(name)
    await create_topics(kafka_bootstrap, topics=topics)
    log = tmp_path / "faust.log"
    env = {**os.environ, "ALLOT_KAFKA": kafka_bootstrap, "ALLOT_TOPIC_SUFFIX": name}
    proc = spawn_faust(env, tmp_path / "faust", log)
    try:
        async with (
            Inbox(kafka_bootstrap, topics.inbox) as inbox,
            JournalReader(kafka_bootstrap, topics.journal) as journal,
        ):
            await inbox.setup("f")
            await inbox.send(
                "f",
                "workload.submitted",
                actor="u",
                workload="fw",
                allocation="lab/a",
                gpus=1,
                min_runtime=60,
            )
            placed = await journal.wait_for(first("workload.placed", workload="fw"), 90)
        assert placed["cluster"] == "f"
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text(errors="replace")
    assert "allot scheduler consuming" in text, text[-3000:]
    assert "snapshot round" in text, text[-3000:]  # the clean stop wrote a snapshot


async def test_a_snapshot_of_an_older_format_is_ignored_and_the_journal_rebuilds(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """After an upgrade that changed the pickled state (SNAPSHOT_FORMAT), the snapshot
    round a worker of the old code left is not restored: the new worker folds the whole
    journal instead and goes on exactly once."""
    name = suffix()
    topics = Topics.suffixed(name)
    await create_topics(kafka_bootstrap, topics=topics)
    cluster = f"o{name}"
    log = tmp_path / "worker.log"
    procs: list[subprocess.Popen] = []

    async def submit_and_wait(inbox: Inbox, journal: JournalReader, wid: str) -> None:
        await inbox.send(
            cluster, "workload.submitted", actor="u", workload=wid, allocation="lab/a", gpus=1,
            min_runtime=60,
        )  # fmt: skip
        await journal.wait_for(first("workload.placed", workload=wid), WAIT_S)

    try:
        async with (
            Inbox(kafka_bootstrap, topics.inbox) as inbox,
            JournalReader(kafka_bootstrap, topics.journal) as journal,
        ):
            await inbox.setup(cluster)
            procs.append(spawn_worker(kafka_bootstrap, name, log))
            for i in range(3):
                await submit_and_wait(inbox, journal, f"w{i}")
            procs[-1].send_signal(signal.SIGTERM)  # a clean stop writes a snapshot round
            assert procs[-1].wait(WAIT_S) == 0, log.read_text()[-3000:]
            # the old code's round, as the new code finds it: its last blob, older format
            blobs = await read_all(kafka_bootstrap, topics.snapshots)
            last = [r for r in blobs if r.key == cluster.encode()][-1]
            snapshot = pickle.loads(zlib.decompress(last.value))
            assert snapshot["format"] == SNAPSHOT_FORMAT
            snapshot["format"] = SNAPSHOT_FORMAT - 1
            producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
            await producer.start()
            try:
                await producer.send_and_wait(
                    topics.snapshots, zlib.compress(pickle.dumps(snapshot)), key=last.key
                )
            finally:
                await producer.stop()
            procs.append(spawn_worker(kafka_bootstrap, name, log))
            await submit_and_wait(inbox, journal, "w3")
            procs[-1].send_signal(signal.SIGTERM)
            assert procs[-1].wait(WAIT_S) == 0, log.read_text()[-3000:]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    text = log.read_text()
    assert "ignoring snapshot round" in text, text[-3000:]
    inbox_records = await read_all(kafka_bootstrap, topics.inbox)
    raw_journal = await read_all(kafka_bootstrap, topics.journal)
    assert_folded_exactly_once(inbox_records, [orjson.loads(r.value) for r in raw_journal])
    mine = assert_cluster_replays(raw_journal, cluster, tmp_path)
    assert [r["workload"] for r in mine if r["type"] == "workload.placed"] == [
        "w0", "w1", "w2", "w3",
    ]  # fmt: skip


async def test_a_worker_on_a_journal_of_the_old_hourly_bucket_says_so(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A journal started before ratios were read per bucket keeps its recorded 1 h bucket:
    a restarted worker notes it, from its snapshot round as from the journal, unless a
    bucket is asked for."""
    name = suffix()
    topics = Topics.suffixed(name)
    await create_topics(kafka_bootstrap, topics=topics)
    cluster = f"b{name}"
    logs = [tmp_path / f"worker{i}.log" for i in range(3)]
    note = "the journal's usage bucket is 1h"

    async def run_once(log: Path, wid: str, *extra: str) -> None:
        proc = spawn_worker(kafka_bootstrap, name, log, *extra)
        try:
            await inbox.send(
                cluster, "workload.submitted", actor="u", workload=wid,
                allocation="lab/a", gpus=1, min_runtime=60,
            )  # fmt: skip
            await journal.wait_for(first("workload.placed", workload=wid), WAIT_S)
            proc.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(proc.wait, WAIT_S) == 0, log.read_text()[-3000:]
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    async with (
        Inbox(kafka_bootstrap, topics.inbox) as inbox,
        JournalReader(kafka_bootstrap, topics.journal) as journal,
    ):
        await inbox.setup(cluster)
        await run_once(logs[0], "w0", "--set", "bucket=1h")  # records 1 h
        await run_once(logs[1], "w1")
        await run_once(logs[2], "w2", "--set", "bucket=1h")
    texts = [log.read_text(errors="replace") for log in logs]
    assert note not in texts[0], texts[0][-3000:]
    assert f"cluster {cluster}: {note}" in texts[1], texts[1][-3000:]
    assert note not in texts[2], texts[2][-3000:]


def test_a_suffixed_deployment_has_a_consumer_group_of_its_own() -> None:
    """Two deployments on one broker (ALLOT_TOPIC_SUFFIX) with the same --group used to
    share the group, so each one's workers rebalanced the other's."""
    staging, prod = Topics.suffixed(".staging"), Topics.suffixed(".prod")
    assert staging.group("allot-scheduler") != prod.group("allot-scheduler")
    assert Topics.suffixed(".staging").group("allot-scheduler") == "allot-scheduler.staging"
    assert Topics.suffixed("").group("allot-scheduler") == "allot-scheduler"  # as before


async def test_sends_a_failed_write_abandons_leave_no_unretrieved_failure() -> None:
    """A fenced producer fails every send: the write stops at the first failure (a
    send, or the gather), and each send it never awaited was an asyncio "Future
    exception was never retrieved" traceback after the worker's own clear message."""
    import gc

    from streams.worker_helpers import _abandon

    loop = asyncio.get_running_loop()
    unretrieved: list[Any] = []
    loop.set_exception_handler(lambda _loop, context: unretrieved.append(context))
    try:
        for abandon in (False, True):
            sends = [loop.create_future() for _ in range(3)]
            if abandon:
                _abandon(sends)
            for i, send in enumerate(sends):  # they fail later, as the broker answers
                send.set_exception(RuntimeError(f"fenced {i}"))
            await asyncio.sleep(0)  # the done callbacks run
            del sends, send
            gc.collect()
            await asyncio.sleep(0)
            assert len(unretrieved) == (0 if abandon else 3)
            unretrieved.clear()
    finally:
        loop.set_exception_handler(None)


@pytest.mark.parametrize(
    ("raw", "seconds"),
    [
        pytest.param("20s", 20.0, id="unit"),
        pytest.param("90", 90.0, id="plain"),
        pytest.param("", 60.0, id="unset"),
    ],
)
def test_the_faust_apps_intervals_read_durations_as_the_cli_does(
    monkeypatch: pytest.MonkeyPatch, raw: str, seconds: float
) -> None:
    """`ALLOT_SNAPSHOT_EVERY=20s faust -A streams.app worker` stopped on 'could not convert
    string to float' while `allot serve --snapshot-every 20s` took it."""
    from streams.app import _float_env

    monkeypatch.setenv("ALLOT_SNAPSHOT_EVERY", raw)
    assert _float_env("ALLOT_SNAPSHOT_EVERY", 60.0) == seconds
    monkeypatch.setenv("ALLOT_SNAPSHOT_EVERY", "soon")
    with pytest.raises(ValueError, match=r"\$ALLOT_SNAPSHOT_EVERY: not a duration: 'soon'"):
        _float_env("ALLOT_SNAPSHOT_EVERY", 60.0)


async def test_a_read_whose_broker_is_gone_leaves_no_consumer_unclosed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The broker going away while a worker recovered ended `allot serve` with its error
    line and then `ERROR asyncio: Unclosed AIOKafkaConsumer` and the consumer's repr: a
    journal read's consumer whose start failed was left to the garbage collector."""
    import gc
    import socket
    import warnings

    from aiokafka.errors import KafkaConnectionError
    from aiokafka.structs import TopicPartition

    from streams.worker_loop import Worker

    with socket.socket() as s:  # a port nothing listens on: the broker is gone
        s.bind(("127.0.0.1", 0))
        gone = f"127.0.0.1:{s.getsockname()[1]}"
    worker = Worker(gone, config=None)
    caplog.set_level(logging.ERROR, logger="asyncio")
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always", ResourceWarning)
        with pytest.raises(KafkaConnectionError):
            async for _ in worker._read_to_end("allot.journal"):
                pass
        with pytest.raises(KafkaConnectionError):
            await worker._high_watermarks([TopicPartition("allot.journal", 0)])
        gc.collect()
    unclosed = [r.getMessage() for r in caplog.records if "Unclosed" in r.getMessage()]
    unclosed += [str(w.message) for w in warned if "Unclosed" in str(w.message)]
    assert not unclosed, unclosed

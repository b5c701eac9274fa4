"""`allot journal restore`: an exported journal written into a new Kafka topic set, and
the scheduler going on from it on the new inbox (exactly once, deciding as the old one).

The first tests need no broker: they fold a restored journal in a `SchedulerCore`. The
others run the real CLI and workers on the session broker, each on topics of its own.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from domain import events as ev
from domain.config import SchedulerConfig
from projections.replay import verify
from streams.core import InboxRecord, SchedulerCore
from streams.restore import group_by_cluster
from streams.topic_admin import Topics, create_topics
from streams.worker import serve
from tests.streams.rig import (
    ADMIN,
    ROOT,
    WAIT_S,
    Inbox,
    JournalReader,
    KilledUnderLoad,
    assert_cluster_replays,
    assert_folded_exactly_once,
    first,
    folded_up_to,
    inputs_seen,
    read_all,
    spawn_faust,
    suffix,
)

T0 = 1_790_000_000.0


def _inputs(cluster: str, names: list[str], gpus: int = 4) -> list[dict[str, Any]]:
    return [
        Inbox.record(cluster, "workload.submitted", actor="u", workload=name,
                     allocation=f"lab/{'ab'[n % 2]}", gpus=gpus, min_runtime=600)
        for n, name in enumerate(names)
    ]  # fmt: skip


def _setup(cluster: str) -> list[dict[str, Any]]:
    return [
        Inbox.record(cluster, "host.registered", host="h0", gpus=8),
        Inbox.record(cluster, "host.registered", host="h1", gpus=8),
        Inbox.record(cluster, "host.registered", host="h2", gpus=8),
        Inbox.record(cluster, "budget.set", allocation="lab", weight=1),
        Inbox.record(cluster, "budget.set", allocation="lab/a", weight=1, members=["u"]),
        Inbox.record(cluster, "budget.set", allocation="lab/b", weight=3, members=["u"]),
    ]


def _records(bodies: list[dict[str, Any]], first_offset: int, first_time: float) -> list:
    return [
        InboxRecord(0, first_offset + n, first_time + 60 * n, orjson.dumps(body))
        for n, body in enumerate(bodies)
    ]


def _restored(journal: list[bytes]) -> list[bytes]:
    """`journal` as `allot journal restore` writes it: the lines, then the mark."""
    copies = group_by_cluster(
        (line, ev.parse_event(orjson.loads(line)), orjson.loads(line).get("inbox"))
        for line in journal
    )
    (copy,) = copies.values()
    return [*copy.lines, copy.mark(restored_at=T0, actor="op", source="backup.jsonl")]


def _without_inbox(line: bytes) -> dict[str, Any]:
    raw = orjson.loads(line)
    raw.pop("inbox", None)
    return raw


def test_a_restored_journal_decides_the_new_inbox_as_the_old_scheduler_would() -> None:
    """The old scheduler folds 5 set-up requests and 6 submissions (offsets 0..10), is
    exported, and then decides 6 more (offsets 11..16). A scheduler on a new inbox,
    built from the restored journal, gets the same 6 at offsets 0..5 (same times): it
    takes every one (none skipped as read), and decides them byte for byte as the old
    one did, but for their inbox positions."""
    old = SchedulerCore("c", SchedulerConfig(admins=(ADMIN,)))
    before = _setup("c") + _inputs("c", [f"x{n}" for n in range(4)])
    exported = old.process(_records(before, 0, T0)).journal
    after = _inputs("c", [f"y{n}" for n in range(6)], gpus=2)
    end = T0 + 60 * len(before)
    old_tail = old.process(_records(after, len(before), end)).journal
    assert any(b"workload.placed" in line for line in old_tail)  # decisions to compare

    new = SchedulerCore("c")
    restored = _restored(exported)
    assert new.fold_journal(restored) == len(exported) + 1
    assert not new.diverged  # the mark is neither an input nor a decision
    assert new.positions == {}  # the new inbox is read from its start
    assert new.state.seq == old.state.seq - sum(  # the mark takes no decision number
        1 for line in old_tail if _without_inbox(line)["id"].startswith("c/")
    )
    new_tail = new.process(_records(after, 0, end)).journal
    assert [_without_inbox(line) for line in new_tail] == [
        _without_inbox(line) for line in old_tail
    ]
    assert [orjson.loads(line)["inbox"][1] for line in new_tail][-1] == len(after) - 1


def test_a_journal_without_a_mark_resumes_where_it_recorded() -> None:
    """Old journals (no `journal.restored`) keep their positions: the worker resumes
    after the last offset they record, as before."""
    core = SchedulerCore("c", SchedulerConfig(admins=(ADMIN,)))
    journal = core.process(_records(_setup("c"), 0, T0)).journal
    again = SchedulerCore("c")
    again.fold_journal(journal)
    assert again.positions == {0: 5} and not again.diverged


@pytest.mark.parametrize(
    ("environ", "clusters", "command"),
    [
        ({}, ["default"], "`allot serve --kafka k:9`"),
        ({}, ["lab"], "`allot serve --kafka k:9 --cluster lab`"),
        ({"ALLOT_CLUSTER": "lab"}, ["lab"], "`allot serve --kafka k:9`"),
        ({}, ["a", "b"], "`allot serve --kafka k:9 --group allot-scheduler`"),
    ],
)
def test_the_restore_names_a_serve_that_serves_the_restored_clusters(
    monkeypatch: pytest.MonkeyPatch, environ: dict[str, str], clusters: list[str], command: str
) -> None:
    """serve without --cluster serves $ALLOT_CLUSTER, else 'default': the restore's
    `allot serve --kafka HOST` left a restored cluster 'lab' unserved (it started with
    0 clusters, 0 journal records)."""
    from allot.commands.journal import serve_hint

    monkeypatch.delenv("ALLOT_CLUSTER", raising=False)
    for name, value in environ.items():
        monkeypatch.setenv(name, value)

    assert serve_hint("k:9", clusters).startswith(command)


def test_a_restored_journal_verifies_and_reads_like_the_old_one(tmp_path: Path) -> None:
    """`allot replay --verify` re-decides the restored journal byte for byte, the mark
    counted as neither input nor decision; an inbox record claiming to be one is an
    unknown input, rejected (only the restore writes it)."""
    core = SchedulerCore("c", SchedulerConfig(admins=(ADMIN,)))
    journal = core.process(_records(_setup("c") + _inputs("c", ["x0", "x1"]), 0, T0)).journal
    restored = _restored(journal)
    mark = orjson.loads(restored[-1])
    assert mark["type"] == "journal.restored" and mark["old_inbox"] == [[0, 7]]
    assert mark["time"] == orjson.loads(journal[-1])["time"]  # the clock does not move
    path = tmp_path / "restored.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in restored))
    result = verify(path)
    assert result.difference is None
    assert result.decisions == verify(_write(tmp_path / "old.jsonl", journal)).decisions > 0

    forged = InboxRecord(0, 8, T0 + 600, orjson.dumps({**mark, "id": "forged"}))
    (rejected,) = [orjson.loads(line) for line in core.process([forged]).journal]
    assert rejected["type"] == "input.rejected"
    assert "unknown input type 'journal.restored'" in rejected["error"]


def _write(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


# ---------------------------------------------------------------- broker


def _allot(suffix_: str, *args: str) -> subprocess.CompletedProcess[str]:
    """The `allot` command with ALLOT_TOPIC_SUFFIX=`suffix_` (as an operator runs it)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "ALLOT_TOPIC_SUFFIX": suffix_}
    env.pop("ALLOT_CLUSTER", None)
    return subprocess.run(
        [sys.executable, "-m", "allot.cli", *args],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def _since_restore(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each cluster's records after its `journal.restored` mark (the new inbox's)."""
    marked: set[str] = set()
    out = []
    for r in records:
        if r["type"] == "journal.restored":
            marked.add(r["cluster"])
        elif r["cluster"] in marked:
            out.append(r)
    return out


def _folded_since_restore(ends: dict[int, int]) -> Callable[[list[dict]], bool]:
    check = folded_up_to(ends)
    return lambda records: check(_since_restore(records))


async def _old_deployment(bootstrap: str, topics: Topics, clusters: list[str]) -> int:
    """Runs a scheduler on `topics` until it placed work of every cluster; returns how
    many inputs it folded."""
    stop = asyncio.Event()
    task = asyncio.create_task(
        serve(bootstrap, config=SchedulerConfig(admins=(ADMIN,)), topics=topics, stop=stop,
              tick_every=0, snapshot_every=60.0)
    )  # fmt: skip
    try:
        async with (
            Inbox(bootstrap, topics.inbox) as inbox,
            JournalReader(bootstrap, topics.journal) as journal,
        ):
            sent = 0
            for cluster in clusters:
                for body in _setup(cluster) + _inputs(cluster, [f"x{n}" for n in range(4)]):
                    await inbox.producer.send(
                        topics.inbox, orjson.dumps(body), key=cluster.encode()
                    )
                    sent += 1
            await inbox.producer.flush()
            await journal.wait_for(lambda recs: inputs_seen(recs) >= sent)
    finally:
        stop.set()
        await asyncio.wait_for(task, WAIT_S)
    return sent


@pytest.mark.kafka
async def test_export_restore_into_new_topics_and_the_faust_worker_goes_on(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The operator's path: `allot journal export` from the old topics, `allot journal
    restore` into new ones (a request already waits there), `faust -A streams.app
    worker` on them: the waiting request and a new one are placed, each once, and the
    whole journal re-decides byte for byte. A second restore onto it is refused."""
    old_name, new_name = suffix(), suffix()
    old, new = Topics.suffixed(old_name), Topics.suffixed(new_name)
    cluster = f"r{old_name}"
    await create_topics(kafka_bootstrap, topics=old)
    await _old_deployment(kafka_bootstrap, old, [cluster])
    backup = tmp_path / "backup.jsonl"
    out = _allot(old_name, "journal", "export", "--kafka", kafka_bootstrap, "--out", str(backup))
    assert out.returncode == 0, out.stderr
    exported = backup.read_bytes().splitlines()

    await create_topics(kafka_bootstrap, topics=new)
    async with Inbox(kafka_bootstrap, new.inbox) as inbox:
        early = await inbox.send(cluster, "workload.submitted", actor="u", workload="early",
                                 allocation="lab/b", gpus=2, min_runtime=60)  # fmt: skip
        out = _allot(new_name, "journal", "restore", str(backup), "--kafka", kafka_bootstrap)
        assert out.returncode == 0, out.stderr
        assert f"restored {len(exported)} records of 1 cluster ({cluster})" in out.stderr
        assert "1 request already in" in out.stderr
        assert f"(`allot serve --kafka {kafka_bootstrap} --cluster {cluster}`)" in out.stderr

        log = tmp_path / "faust.log"
        env = {**os.environ, "ALLOT_KAFKA": kafka_bootstrap, "ALLOT_TOPIC_SUFFIX": new_name}
        proc = spawn_faust(env, tmp_path / "faust", log)
        try:
            async with JournalReader(kafka_bootstrap, new.journal) as journal:
                journal.on_timeout = lambda: log.read_text(errors="replace")[-3000:]
                await journal.wait_for(first("workload.placed", workload="early"), 120)
                await inbox.send(cluster, "workload.submitted", actor="u", workload="later",
                                 allocation="lab/b", gpus=2, min_runtime=60)  # fmt: skip
                await journal.wait_for(first("workload.placed", workload="later"))
        finally:
            proc.send_signal(signal.SIGTERM)
            await asyncio.to_thread(proc.wait, 60)
    raw = await read_all(kafka_bootstrap, new.journal)
    records = [orjson.loads(r.value) for r in raw]
    assert [r.value for r in raw[: len(exported)]] == exported  # copied byte for byte
    assert records[len(exported)]["type"] == "journal.restored"
    assert_folded_exactly_once(await read_all(kafka_bootstrap, new.inbox), _since_restore(records))
    assert early["id"] in {r["id"] for r in records}
    assert_cluster_replays(raw, cluster, tmp_path)

    again = _allot(new_name, "journal", "restore", str(backup), "--kafka", kafka_bootstrap)
    assert again.returncode == 2
    assert f"{new.journal} is not empty" in again.stderr
    assert "nothing was written" in again.stderr
    assert len(await read_all(kafka_bootstrap, new.journal)) == len(raw)


@pytest.mark.kafka
async def test_kill_9_after_a_restore_loses_and_duplicates_nothing(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Two clusters restored into new 2-partition topics; a worker on them is SIGKILLed
    mid-stream and restarted: every request of the new inbox is folded exactly once,
    no attempt is placed twice, and each cluster's journal (old records, mark, new
    records) re-decides byte for byte."""
    old_name, new_name = suffix(), suffix()
    old, new = Topics.suffixed(old_name), Topics.suffixed(new_name)
    clusters = [f"k{old_name}-a", f"k{old_name}-b"]
    await create_topics(kafka_bootstrap, topics=old, partitions=2)
    await _old_deployment(kafka_bootstrap, old, clusters)
    backup = tmp_path / "backup.jsonl"
    out = _allot(old_name, "journal", "export", "--kafka", kafka_bootstrap, "--out", str(backup))
    assert out.returncode == 0, out.stderr
    await create_topics(kafka_bootstrap, topics=new, partitions=2)
    out = _allot(new_name, "journal", "restore", str(backup), "--kafka", kafka_bootstrap)
    assert out.returncode == 0, out.stderr

    log = tmp_path / "worker.log"
    with KilledUnderLoad(kafka_bootstrap, new_name, new, log) as workers:
        async with (
            Inbox(kafka_bootstrap, new.inbox) as inbox,
            JournalReader(kafka_bootstrap, new.journal) as journal,
        ):
            journal.on_timeout = lambda: log.read_text(errors="replace")[-3000:]
            workers.start()
            # work ends (the restored placements too), so the scheduler keeps placing
            workers.load(inbox, clusters, 1200)
            await journal.wait_for(lambda recs: inputs_seen(_since_restore(recs)) >= 300)
            workers.kill_and_restart()
            await workers.finish(journal, _folded_since_restore)

    raw = await read_all(kafka_bootstrap, new.journal)
    records = [orjson.loads(r.value) for r in raw]
    assert sum(r["type"] == "journal.restored" for r in records) == len(clusters)
    text = log.read_text()
    assert text.count("scheduler ready") == 2, text[-3000:]
    assert "inbox resumes at offsets 0:0, 1:0" in text  # the first worker: the new inbox whole
    assert_folded_exactly_once(await read_all(kafka_bootstrap, new.inbox), _since_restore(records))
    for cluster in clusters:
        mine = assert_cluster_replays(raw, cluster, tmp_path)
        since = _since_restore(mine)
        assert sum(r["type"] == "workload.placed" for r in since) > 50
        # the restored placements ended on the new inbox's reports
        assert {"x0", "x1"} <= {r["workload"] for r in since if r["type"] == "workload.finished"}


@pytest.mark.kafka
@pytest.mark.parametrize("group", [None, "g"], ids=["alone", "with-group"])
async def test_a_restore_refuses_topics_a_scheduler_runs_on(
    kafka_bootstrap: str, tmp_path: Path, group: str | None
) -> None:
    """A scheduler started on the new topics before the restore read their empty
    journal and would never see the restored one: the restore is refused, naming it,
    whether or not it runs with --group."""
    name = suffix()
    topics = Topics.suffixed(name)
    await create_topics(kafka_bootstrap, topics=topics)
    stop = asyncio.Event()
    started: list[Any] = []
    task = asyncio.create_task(
        serve(kafka_bootstrap, config=SchedulerConfig(admins=(ADMIN,)), topics=topics,
              clusters=["c"], stop=stop, tick_every=0, on_ready=started.append, group=group)
    )  # fmt: skip
    try:
        deadline = time.monotonic() + WAIT_S
        # the broker lists the worker in its presence group a moment after it is ready
        while not started or not await started[0]._live_workers():
            assert time.monotonic() < deadline and not task.done()
            await asyncio.sleep(0.2)
        backup = tmp_path / "backup.jsonl"
        core = SchedulerCore("c", SchedulerConfig(admins=(ADMIN,)))
        _write(backup, core.process(_records(_setup("c"), 0, time.time())).journal)
        out = _allot(name, "journal", "restore", str(backup), "--kafka", kafka_bootstrap)
        assert out.returncode == 2, out.stderr
        assert "a scheduler runs on" in out.stderr and "stop it first" in out.stderr
        assert await read_all(kafka_bootstrap, topics.journal) == []
    finally:
        stop.set()
        await asyncio.wait_for(task, WAIT_S)


@pytest.mark.kafka
async def test_a_restore_refuses_the_old_inbox_left_beside_a_new_journal(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """The journal topic was lost and created again, but the inbox kept its records
    (here: the old inbox copied record for record into the new topic set, offsets and
    all). The restore's mark makes the scheduler read the inbox from its start, so it
    would take every old request again (those past the dedup window as new ones): the
    restore is refused, naming the topic, and writes nothing."""
    old_name, new_name = suffix(), suffix()
    old, new = Topics.suffixed(old_name), Topics.suffixed(new_name)
    cluster = f"o{old_name}"
    await create_topics(kafka_bootstrap, topics=old)
    sent = await _old_deployment(kafka_bootstrap, old, [cluster])
    backup = tmp_path / "backup.jsonl"
    out = _allot(old_name, "journal", "export", "--kafka", kafka_bootstrap, "--out", str(backup))
    assert out.returncode == 0, out.stderr

    await create_topics(kafka_bootstrap, topics=new)
    old_inbox = await read_all(kafka_bootstrap, old.inbox)
    assert len(old_inbox) == sent
    async with Inbox(kafka_bootstrap, new.inbox) as inbox:
        for record in old_inbox:
            await inbox.producer.send(new.inbox, record.value, key=record.key)
        await inbox.producer.flush()
    out = _allot(new_name, "journal", "restore", str(backup), "--kafka", kafka_bootstrap)
    assert out.returncode == 2, out.stderr
    assert f"{new.inbox} at {kafka_bootstrap} is the inbox this journal was read from" in out.stderr
    assert f"partition 0 offset {sent - 1} is request" in out.stderr
    assert "nothing was written" in out.stderr
    assert await read_all(kafka_bootstrap, new.journal) == []

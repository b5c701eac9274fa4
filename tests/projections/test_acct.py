"""`allot acct` (sacct): one row per workload, its state, times and GPU-hours."""

from __future__ import annotations

import pytest

from projections.acct import acct_rows, totals
from projections.gantt import collect
from projections.usage import JournalBuilder
from projections.views import fold, queue_rows
from tests.projections.acct_histories import charged_and_free
from tests.projections.runs import simulated_run

H8 = list(range(8))
H4 = [0, 1, 2, 3]


def lives() -> JournalBuilder:
    """Each way a workload's life can go, on two 8-GPU hosts, times in minutes."""
    j = JournalBuilder().host("h0").host("h1")
    j.budget("lab", 1).budget("lab/a", 1).budget("lab/b", 1)
    j.submit("done", "lab/a", 8).place("done", {"h0": H8})
    j.submit("requeued", "lab/b", 4).place("requeued", {"h1": H4})
    j.submit("failed", "lab/b", 4).place("failed", {"h1": [4, 5, 6, 7]})
    j.submit("ended", "lab/a", 4, resumable=False)
    j.submit("gone", "lab/a", 1)
    j.submit("noded", "lab/b", 4, resumable=False)
    j.reject("refused", allocation="lab/c", gpus=2)
    j.at(600).preempt("requeued", beneficiary="done")  # 10 min in
    j.at(900).place("requeued", {"h1": H4})  # waits 5 min, runs again
    j.at(1200).finish("done").finish("failed", outcome="failed", exit_code=137, reason="OOM-killed")
    j.place("ended", {"h0": H4}).place("noded", {"h1": [4, 5, 6, 7]})
    j.at(1500).preempt("ended", requeued=False, beneficiary="requeued")
    j.preempt("noded", "drain", requeued=False, explain={"host": "h1"})
    j.at(1800).cancel("gone")
    j.at(3600).tick()
    return j


@pytest.fixture(scope="module")
def rows() -> dict[str, dict]:
    return {r["id"]: r for r in acct_rows(fold(lives().events))}


@pytest.mark.parametrize(
    ("wid", "state", "gpus", "start", "end", "run_s", "gpu_hours", "attempts", "reason"),
    [
        ("done", "COMPLETED", 8, 0, 1200, 1200, 8 * 1200 / 3600, 1, ""),
        ("requeued", "RUNNING", 4, 0, None, 600 + 2700, 4 * 3300 / 3600, 2, "as allot queue says"),
        # what the launcher reported: exit status and reason
        ("failed", "FAILED", 4, 0, 1200, 1200, 4 * 1200 / 3600, 1, "exit 137: OOM-killed"),
        ("ended", "PREEMPTED", 4, 1200, 1500, 300, 4 * 300 / 3600, 1, "fair_share for requeued"),
        ("gone", "CANCELLED", 1, None, 1800, 0, 0, 0, "by alice"),
        ("noded", "NODE_FAIL", 4, 1200, 1500, 300, 4 * 300 / 3600, 1, "drain (host h1 unhealthy)"),
        # a refused submission shows the GPUs it asked for, and ran none
        ("refused", "REJECTED", 2, None, 0, 0, 0, 0, "min_runtime above the cap"),
    ],
    ids=[
        "completed",
        "requeued-and-running",
        "failed",
        "ended-by-preemption",
        "cancelled-waiting",
        "ended-by-a-drain",
        "rejected",
    ],
)
def test_each_life_reads_as_sacct_would(
    rows: dict[str, dict],
    wid: str,
    state: str,
    gpus: int,
    start: float | None,
    end: float | None,
    run_s: float,
    gpu_hours: float,
    attempts: int,
    reason: str,
) -> None:
    t0 = lives().start
    r = rows[wid]
    assert r["state"] == state
    assert r["gpus"] == gpus
    assert r["start_time"] == (None if start is None else t0 + start)
    assert r["end_time"] == (None if end is None else t0 + end)
    assert r["run_s"] == run_s
    assert r["gpu_hours"] == pytest.approx(gpu_hours, abs=1e-3)
    assert r["attempts"] == attempts
    if reason == "as allot queue says":  # live work: Priority, Resources, protected until ...
        reason = next(q["reason"] for q in queue_rows(fold(lives().events)) if q["id"] == wid)
    assert r["reason"] == reason


def test_the_launchers_exit_code_is_a_number_too(rows: dict[str, dict]) -> None:
    assert rows["failed"]["exit_code"] == 137
    assert rows["done"]["exit_code"] is None


def test_the_exit_code_is_a_format_field_under_sacct_name_too(rows: dict[str, dict]) -> None:
    """`allot acct -o jobid,state,exitcode` was "unknown field exitcode" though --json
    had it."""
    from projections.acct import acct_cells, parse_acct_format

    columns = parse_acct_format("JobID,State,ExitCode")
    assert columns == ["id", "state", "exit_code"]
    headers, cells = acct_cells([rows["failed"], rows["done"]], columns)
    assert headers == ["ID", "STATE", "EXIT"]
    assert cells == [["failed", "FAILED", "137"], ["done", "COMPLETED", ""]]


def test_filters_and_totals(rows: dict[str, dict]) -> None:
    view = fold(lives().events)
    t0 = lives().start
    assert [r["id"] for r in acct_rows(view, states={"FAILED", "PREEMPTED"})] == ["failed", "ended"]
    assert {r["id"] for r in acct_rows(view, allocation="lab/b")} == {"requeued", "failed", "noded"}
    # alive at 25 min or later: not what ended before; GPU-hours only inside the window
    late = {r["id"]: r for r in acct_rows(view, since=t0 + 1500)}
    assert set(late) == {"requeued", "ended", "gone", "noded"}
    assert late["requeued"]["window_gpu_hours"] == pytest.approx(4 * 2100 / 3600, abs=1e-3)
    assert late["ended"]["window_gpu_hours"] == 0  # preempted at 25 min: nothing after
    assert totals(list(late.values()))["window_gpu_hours"] == pytest.approx(2.333, abs=1e-3)
    # with a window, -s means a state it was in then (as sacct -s with -S/-E)
    during = acct_rows(view, states={"PENDING"}, since=t0 + 700, until=t0 + 800)
    # requeued waits 10-15 min
    assert {r["id"] for r in during} == {"requeued", "ended", "gone", "noded"}
    ended_then = acct_rows(view, states={"COMPLETED", "FAILED"}, until=t0 + 1199)
    assert ended_then == []  # they end at 20 min
    ran_then = acct_rows(view, states={"RUNNING"}, since=t0 + 1300, until=t0 + 1400)
    assert {r["id"] for r in ran_then} == {"requeued", "ended", "noded"}
    # a refused submission keeps the allocation it named
    assert [r["id"] for r in acct_rows(view, allocation="lab/c/")] == ["refused"]
    assert {r["id"] for r in acct_rows(view, until=t0 - 1)} == set()
    total = totals(list(rows.values()))
    assert total["workloads"] == 7
    assert total["by_state"] == {
        "RUNNING": 1, "COMPLETED": 1, "FAILED": 1, "CANCELLED": 1, "PREEMPTED": 1,
        "NODE_FAIL": 1, "REJECTED": 1,
    }  # fmt: skip


@pytest.mark.parametrize("seed", [1, 2, 4], ids=str)
def test_a_runs_gpu_hours_add_up_to_its_timeline(seed: int) -> None:
    """Summed over workloads, the GPU-hours run equal the GPU timeline's busy time (two
    independent folds of the same simulated journal), and ended workloads are all there."""
    records = simulated_run(seed, hosts=3, count=40)
    rows = acct_rows(fold(records))
    g = collect(records)
    busy = sum((g.end[i] - g.start[i]) * g.row_len[i] for i in range(len(g.start))) / 3600
    assert sum(r["gpu_hours"] for r in rows) == pytest.approx(busy, rel=1e-6)
    assert len(rows) == 40
    finished = {r.workload for r in records if r.type == "workload.finished"}
    assert {r["id"] for r in rows if r["state"] == "COMPLETED"} == finished


@pytest.mark.parametrize(
    ("since_h", "expected", "total"),
    [
        # per workload: (charged, unallocated) GPU-hours; totals (charged, unallocated)
        (None, {"paid": (4, 0), "free": (0, 4), "mixed": (2, 1)}, (6, 5)),
        # from 1h30 on: paid 2 GPUs x 0.5 h, mixed 1 GPU x 1.5 h, free ended at 1h
        (1.5, {"paid": (1, 0), "mixed": (1.5, 0)}, (2.5, 0)),
    ],
    ids=["whole-lives", "window-from-1h30"],
)
def test_gpu_hours_split_into_charged_and_unallocated(
    since_h: float | None,
    expected: dict[str, tuple[float, float]],
    total: tuple[float, float],
) -> None:
    """GPU_H is all the time held; the charged part is what `allot shares`, `usage`
    and `rollup` count, the unallocated part is free: a manager reconciles acct with
    the shares through the split (it was one number, the two added)."""
    j = charged_and_free()
    since = None if since_h is None else j.start + since_h * 3600
    rows = {r["id"]: r for r in acct_rows(fold(j.events), since=since)}
    pre = "" if since is None else "window_"
    got = {
        wid: (r[f"{pre}charged_gpu_hours"], r[f"{pre}unallocated_gpu_hours"])
        for wid, r in rows.items()
    }
    assert got == expected  # whole quarter hours: exact
    for r in rows.values():  # the two parts make up the held time
        held = r[f"{pre}gpu_hours"]
        assert r[f"{pre}charged_gpu_hours"] + r[f"{pre}unallocated_gpu_hours"] == held
    sums = totals(list(rows.values()))
    assert (sums[f"{pre}charged_gpu_hours"], sums[f"{pre}unallocated_gpu_hours"]) == total
    assert sums[f"{pre}gpu_hours"] == sum(total)


def sweep() -> JournalBuilder:
    """Job array S: 25 tasks on one 8-GPU host; 0-7 run, 8 and 9 completed, 10 was
    cancelled, 11 failed, 12-24 wait (13 held); and a plain workload S2 beside it."""
    j = JournalBuilder().host("h0").budget("lab", 1)
    for i in range(25):
        j.submit(f"S_{i}", "lab", 1)
    j.submit("S2", "lab", 1)
    for i in (8, 9, 11):
        j.place(f"S_{i}", {"h0": [i - 8]})
    j.cancel("S_10").hold("S_13")
    j.at(60).finish("S_8").finish("S_9").finish("S_11", outcome="failed", exit_code=1)
    for i in range(8):
        j.place(f"S_{i}", {"h0": [i]})
    return j


def test_a_job_arrays_base_id_summarises_its_tasks() -> None:
    """`allot why BASE` said 'is the start of 25 workload ids; give more of the id'."""
    from projections.acct import array_summary

    view = fold(sweep().events)
    summary = array_summary(view, "S", shown=4)
    assert summary is not None
    assert summary["by_state"] == {
        "running": 8,
        "pending": 13,
        "completed": 2,
        "failed": 1,
        "cancelled": 1,
    }
    assert [t["index"] for t in summary["tasks"]] == list(range(25))  # by index, all
    held = summary["tasks"][13]
    assert (held["state"], held["reason"]) == ("PENDING", "Held")
    assert summary["tasks"][0]["nodelist"] == "h0"
    assert summary["text"] == [
        "array S: 25 tasks — 8 running, 13 pending, 2 completed, 1 failed, 1 cancelled",
        f"  S_0  running on h0 — {summary['tasks'][0]['reason']}",
        f"  S_1  running on h0 — {summary['tasks'][1]['reason']}",
        f"  S_2  running on h0 — {summary['tasks'][2]['reason']}",
        f"  S_3  running on h0 — {summary['tasks'][3]['reason']}",
        "  … 21 more (`allot acct -j S` lists every task)",
        "`allot why S_0` explains one task (its numbers and history)",
    ]
    # a workload's own id, a task's id or a prefix is not an array's base
    assert array_summary(view, "S2") is None
    assert array_summary(view, "S_1") is None
    assert array_summary(view, "") is None


@pytest.mark.parametrize(
    ("hours", "shown"),
    [
        pytest.param((11.0, 6.0, 5.0), ("11.0", "6.0", "5.0"), id="one-decimal-adds-up"),
        pytest.param((1.08, 1.04, 0.04), ("1.08", "1.04", "0.04"), id="two-decimals"),
        pytest.param((0.108, 0.054, 0.054), ("0.108", "0.054", "0.054"), id="three"),
        pytest.param((1234.56, 1000.0, 234.56), ("1,234.6", "1,000.0", "234.6"), id="thousands"),
        # per-workload rounding left them apart even at three decimals: the parts win
        pytest.param((0.11, 0.0544, 0.0544), ("0.108", "0.054", "0.054"), id="parts-win"),
    ],
)
def test_the_totals_gpu_hours_add_up_as_shown(
    hours: tuple[float, float, float], shown: tuple[str, str, str]
) -> None:
    from decimal import Decimal

    from projections.acct import split_hours

    total, charged, free = split_hours(*hours)
    assert (total, charged, free) == shown
    plain = [Decimal(x.replace(",", "")) for x in (total, charged, free)]
    assert plain[1] + plain[2] == plain[0]

"""UsageProjection: hourly rows, owed, capacity, spells — on journals small enough to
compute on paper. Cluster: hosts of 8 GPUs; leaves lab/a and lab/b weighted 3:1, so
with 16 healthy GPUs lab/a is entitled to 12 GPUs (43 200 GPU-s per hour), lab/b to 4."""

from __future__ import annotations

import pytest

from projections.usage import (
    HOUR,
    PENDING,
    RUNNING_PREEMPTIBLE,
    RUNNING_PROTECTED,
    JournalBuilder,
    UsageProjection,
    collect_spells,
    iter_journal,
)

T0 = JournalBuilder.START
H8 = list(range(8))


def cluster(hosts: int = 2) -> JournalBuilder:
    j = JournalBuilder()
    for i in range(hosts):
        j.host(f"h{i}")
    return j.budget("lab", 1).budget("lab/a", 3).budget("lab/b", 1)


def fold(events, **kw) -> UsageProjection:
    proj = UsageProjection(**kw)
    for e in events:
        proj.apply(e)
    proj.close()
    return proj


def rows_by(proj: UsageProjection) -> dict[tuple[str, float], dict]:
    return {(r["allocation"], r["hour"] - T0): r for r in proj.hourly_rows()}


@pytest.mark.parametrize("form", ["models", "dicts"])
def test_intervals_are_split_exactly_at_hour_edges(form):
    j = cluster()
    j.at(600).submit("w", "lab/a", 4)  # pending 00:10 → 00:30
    j.at(1800).place("w", {"h0": [0, 1, 2, 3]})
    j.at(2 * HOUR + 900).finish("w")  # runs 00:30 → 02:15
    proj = fold(j.events if form == "models" else j.dicts())
    rows = rows_by(proj)
    assert sorted(rows) == [("lab/a", 0.0), ("lab/a", HOUR), ("lab/a", 2 * HOUR)]
    assert [rows[("lab/a", h)]["charged_gpu_s"] for h in (0, HOUR, 2 * HOUR)] == [
        4 * 1800,
        4 * 3600,
        4 * 900,
    ]
    # demand counts the pending time too: 00:10 → 02:15
    assert [rows[("lab/a", h)]["demand_gpu_s"] for h in (0, HOUR, 2 * HOUR)] == [
        4 * 3000,
        4 * 3600,
        4 * 900,
    ]
    assert all(r["received_gpu_s"] == r["charged_gpu_s"] for r in rows.values())
    assert all(r["unallocated_gpu_s"] == 0 for r in rows.values())


def test_owed_is_share_times_capacity_capped_by_demand():
    j = cluster()
    j.submit("a1", "lab/a", 8).submit("a2", "lab/a", 8).submit("b1", "lab/b", 2)
    j.place("a1", {"h0": H8}).place("b1", {"h1": [0, 1]})  # a2 waits all hour
    j.at(HOUR).finish("a1").finish("b1").cancel("a2")
    rows = rows_by(fold(j.events))
    a, b = rows[("lab/a", 0.0)], rows[("lab/b", 0.0)]
    assert a["entitled_gpu_s"] == pytest.approx(0.75 * 16 * HOUR)
    assert a["demand_gpu_s"] == 16 * HOUR
    assert a["owed_gpu_s"] == pytest.approx(12 * HOUR)  # limited by its share
    assert a["received_gpu_s"] == 8 * HOUR
    assert b["entitled_gpu_s"] == pytest.approx(4 * HOUR)
    assert b["owed_gpu_s"] == 2 * HOUR  # limited by its demand
    assert b["received_gpu_s"] == 2 * HOUR


def test_unallocated_work_is_not_demand_and_not_received():
    j = cluster()
    j.submit("f", "lab/b", 8, min_runtime=0).place("f", {"h1": H8})
    j.at(HOUR).finish("f")
    r = rows_by(fold(j.events))[("lab/b", 0.0)]
    assert r["unallocated_gpu_s"] == 8 * HOUR
    assert r["charged_gpu_s"] == r["received_gpu_s"] == 0
    assert r["demand_gpu_s"] == r["owed_gpu_s"] == 0


@pytest.mark.parametrize(
    ("down_at", "up_at", "expected_capacity_gpu_s"),
    [
        pytest.param(None, None, 16 * HOUR, id="all-healthy"),
        pytest.param(1800, None, 16 * 1800 + 8 * 1800, id="h1-down-at-half-hour"),
        pytest.param(900, 2700, 16 * 1800 + 8 * 1800, id="h1-down-for-half-an-hour"),
        pytest.param(0, None, 8 * HOUR, id="h1-down-from-the-start"),
    ],
)
def test_unhealthy_hosts_leave_capacity(down_at, up_at, expected_capacity_gpu_s):
    j = cluster()
    j.submit("a1", "lab/a", 8).submit("a2", "lab/a", 8).place("a1", {"h0": H8})
    if down_at is not None:
        j.at(down_at).health("h1", False, "xid-79")
    if up_at is not None:
        j.at(up_at).health("h1", True)
    j.at(HOUR).finish("a1").cancel("a2")
    proj = fold(j.events)
    row = rows_by(proj)[("lab/a", 0.0)]
    assert row["entitled_gpu_s"] == pytest.approx(0.75 * expected_capacity_gpu_s)
    assert row["owed_gpu_s"] == pytest.approx(0.75 * expected_capacity_gpu_s)
    assert proj.totals()["healthy_gpu_s"] == pytest.approx(expected_capacity_gpu_s)
    assert proj.totals()["busy_gpu_s"] == 8 * HOUR  # h0 only


@pytest.mark.parametrize(
    ("change", "expected_capacity_gpu_s", "busy_gpu_s"),
    [
        pytest.param("remove", 16 * 1800 + 8 * 1800, 8 * 1800, id="h1-removed-at-half-hour"),
        pytest.param("shrink", 16 * 1800 + 12 * 1800, 8 * 1800, id="h1-down-to-4-gpus"),
        pytest.param("grow", 16 * 1800 + 20 * 1800, 8 * HOUR, id="h1-up-to-12-gpus"),
        pytest.param("unhealthy-removed", 8 * HOUR, 8 * 1800, id="unhealthy-h1-removed"),
    ],
)
def test_capacity_follows_removed_and_resized_hosts(change, expected_capacity_gpu_s, busy_gpu_s):
    """h1 runs a1 on all 8 GPUs; at half an hour it is removed or registered again with
    another count (the scheduler stops a1 when its GPUs are gone)."""
    j = cluster()
    j.submit("a1", "lab/a", 8).place("a1", {"h1": H8})
    if change == "unhealthy-removed":
        j.health("h1", False)
    j.at(1800)
    if change in ("remove", "unhealthy-removed"):
        j.add("host.removed", actor="admin", host="h1")
    else:
        j.host("h1", 4 if change == "shrink" else 12)
    if change != "grow":
        j.preempt("a1", "gpus_removed", requeued=False)
    j.at(HOUR).tick()
    tot = fold(j.events).totals()
    assert tot["healthy_gpu_s"] == pytest.approx(expected_capacity_gpu_s)
    assert tot["busy_gpu_s"] == pytest.approx(0 if change == "unhealthy-removed" else busy_gpu_s)


def test_busy_gpus_on_an_unhealthy_host_leave_occupancy_but_stay_charged():
    j = cluster()
    j.submit("a1", "lab/a", 4).place("a1", {"h1": [0, 1, 2, 3]})
    j.at(1800).health("h1", False)
    j.at(HOUR).finish("a1")
    tot = fold(j.events).totals()
    assert tot["busy_gpu_s"] == 4 * 1800
    assert tot["charged_gpu_s"] == 4 * HOUR
    assert tot["healthy_gpu_s"] == 16 * 1800 + 8 * 1800


def test_share_change_mid_hour_is_integrated():
    j = cluster()
    j.submit("a1", "lab/a", 16).place("a1", {"h0": H8, "h1": H8})
    j.at(1800).budget("lab/b", 3)  # lab/a drops from 3/4 to 1/2
    j.at(HOUR).finish("a1")
    row = rows_by(fold(j.events))[("lab/a", 0.0)]
    assert row["entitled_gpu_s"] == pytest.approx(0.75 * 16 * 1800 + 0.5 * 16 * 1800)
    assert row["owed_gpu_s"] == pytest.approx(row["entitled_gpu_s"])
    assert row["received_gpu_s"] == 16 * HOUR


def test_removed_budget_owes_nothing_afterwards():
    j = cluster()
    j.budget("lab/c", 4)  # a:3 b:1 c:4 -> a gets 3/8
    j.submit("a1", "lab/a", 8).place("a1", {"h0": H8})
    j.at(1800).add("budget.removed", actor="admin", allocation="lab/c")  # a back to 3/4
    j.at(HOUR).finish("a1")
    row = rows_by(fold(j.events))[("lab/a", 0.0)]
    assert row["entitled_gpu_s"] == pytest.approx(3 / 8 * 16 * 1800 + 3 / 4 * 16 * 1800)


def test_requeued_work_keeps_demand_terminal_work_drops_it():
    j = cluster()
    j.submit("r", "lab/a", 4).submit("n", "lab/b", 2, resumable=False)
    j.place("r", {"h0": [0, 1, 2, 3]}).place("n", {"h1": [0, 1]})
    j.at(1200).preempt("r", requeued=True).preempt("n", requeued=False)
    j.at(HOUR).cancel("r")
    rows = rows_by(fold(j.events))
    assert rows[("lab/a", 0.0)]["demand_gpu_s"] == 4 * HOUR  # waiting again, still demand
    assert rows[("lab/a", 0.0)]["charged_gpu_s"] == 4 * 1200
    assert rows[("lab/b", 0.0)]["demand_gpu_s"] == 2 * 1200  # gone when preempted for good


def test_clip_to_start_and_end():
    j = cluster()
    j.submit("w", "lab/a", 8).place("w", {"h0": H8})
    j.at(3 * HOUR).finish("w")
    proj = fold(j.events, start=T0 + 1800, end=T0 + 2 * HOUR + 600)
    rows = rows_by(proj)
    assert [rows[("lab/a", h)]["charged_gpu_s"] for h in (0.0, HOUR, 2 * HOUR)] == [
        8 * 1800,
        8 * 3600,
        8 * 600,
    ]
    assert rows[("lab/a", 0.0)]["entitled_gpu_s"] == pytest.approx(12 * 1800)
    assert proj.totals()["healthy_gpu_s"] == 16 * (HOUR + 1800 + 600)


def test_contended_time_counts_only_waiting_allocated_work():
    j = cluster()
    j.submit("f", "lab/b", 4, min_runtime=0)  # waits, but unallocated: not contention
    j.at(600).submit("a", "lab/a", 4)
    j.at(1500).place("a", {"h0": [0, 1, 2, 3]}).place("f", {"h1": [0, 1, 2, 3]})
    j.at(HOUR).finish("a").finish("f")
    tot = fold(j.events).totals()
    assert tot["contended_s"] == 900
    assert tot["contended_healthy_gpu_s"] == 16 * 900
    assert tot["contended_busy_gpu_s"] == 0


def test_requeued_allocated_work_makes_time_contended_again():
    j = cluster()
    j.submit("a", "lab/a", 8).place("a", {"h0": H8})
    j.at(1000).preempt("a", "fair_share", requeued=True)
    j.at(1300).place("a", {"h0": H8})
    j.at(HOUR).finish("a")
    tot = fold(j.events).totals()
    assert tot["contended_s"] == 300
    assert tot["contended_busy_gpu_s"] == 0


@pytest.mark.parametrize(
    ("end", "demand_gpu_s", "contended_s"),
    [
        ("released", 4 * (600 + 1200), 600 + 1200),  # waits 0-10m and 40m-1h
        ("cancelled", 4 * 600, 600),  # cancelled while held: its demand went with the hold
    ],
    ids=["held-then-released", "cancelled-on-hold"],
)
def test_work_on_hold_is_neither_demand_nor_contention(end, demand_gpu_s, contended_s):
    """`allot hold` takes waiting work out of the queue: it asks for nothing while held,
    so no GPUs are owed for it and idle GPUs beside it are not a scheduling loss."""
    j = cluster()
    j.submit("w", "lab/a", 4)
    j.at(600).hold("w")
    if end == "released":
        j.at(2400).release("w")
    else:
        j.at(2400).cancel("w")
    j.at(HOUR).tick()
    proj = fold(j.events)
    assert rows_by(proj)[("lab/a", 0.0)]["demand_gpu_s"] == demand_gpu_s
    assert proj.totals()["contended_s"] == contended_s
    assert proj.waiting_allocated == (1 if end == "released" else 0)


def test_terminal_workloads_are_dropped():
    j = cluster()
    for i in range(50):
        j.submit(f"w{i}", "lab/a", 1).place(f"w{i}", {"h0": [i % 8]})
        j.at(i + 1).finish(f"w{i}")
    j.submit("open", "lab/a", 1)
    proj = fold(j.events)
    assert list(proj.live) == ["open"]


def test_spells_split_at_protection_end():
    j = cluster()
    j.submit("p", "lab/a", 8, min_runtime=1800)  # pending 0 → 600
    j.at(600).place("p", {"h0": H8})  # protected 600 → 2400, then preemptible
    j.submit("u", "lab/b", 4, min_runtime=0).place("u", {"h1": [0, 1, 2, 3]})
    j.submit("legacy", "lab/b", 2).place("legacy", {"h1": [4, 5]}, protected_until=None)
    j.at(3000).preempt("p", requeued=True).finish("u")
    j.at(4000).place("p", {"h0": H8})
    j.at(4500).finish("legacy")
    spells = collect_spells(j.events)
    rel = sorted((w, s, a - T0, b - T0) for w, s, a, b in spells)
    assert rel == [
        ("legacy", RUNNING_PROTECTED, 600, 4500),
        ("p", PENDING, 0, 600),
        ("p", PENDING, 3000, 4000),
        ("p", RUNNING_PREEMPTIBLE, 2400, 3000),
        ("p", RUNNING_PROTECTED, 600, 2400),
        ("p", RUNNING_PROTECTED, 4000, 4500),  # still open at the end: closed there
        ("u", RUNNING_PREEMPTIBLE, 600, 3000),
    ]


def test_spells_are_streamed_through_the_callback():
    j = cluster()
    j.submit("w", "lab/a", 1).at(10).place("w", {"h0": [0]}).at(20).finish("w")
    seen = []
    proj = UsageProjection(on_spell=lambda *s: seen.append(s))
    for e in j.events[:-1]:
        proj.apply(e)
    assert [s[1] for s in seen] == [PENDING]  # the run is still open
    proj.apply(j.events[-1])
    assert [s[1] for s in seen] == [PENDING, RUNNING_PROTECTED]


def test_journal_file_round_trip(tmp_path):
    j = cluster()
    j.submit("w", "lab/a", 2).at(100).place("w", {"h0": [0, 1]}).at(5000).finish("w")
    path = j.write(tmp_path / "journal.jsonl")
    from_file = fold(iter_journal(path)).hourly_rows()
    validated = fold(iter_journal(path, validate=True)).hourly_rows()
    assert from_file == validated == fold(j.events).hourly_rows()
    assert sum(r["charged_gpu_s"] for r in from_file) == 2 * 4900


def test_apply_after_close_is_refused():
    j = cluster()
    proj = fold(j.events)
    with pytest.raises(RuntimeError):
        proj.apply(j.events[0])

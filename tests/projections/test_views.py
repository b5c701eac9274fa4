"""Read-side views (`projections.views`): queue order and reasons, the share tree, why.

Journals are built by running `domain.handle` on inputs (the domain test builders),
then folded back by the views, exactly as `allot queue/shares/why` read them.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

import orjson
import pytest

from domain import events as ev
from domain.fairshare import ratio
from projections import views as v
from streams.codec import encode
from tests.domain.builders import START, Cluster, cluster, fingerprint


def make(**config: Any) -> Cluster:
    c = cluster(**config)
    c.initial = c.state.config  # type: ignore[attr-defined]
    return c


def view_of(c: Cluster) -> v.JournalView:
    """The builder's journal, as the scheduler would have written it: its config first."""
    config = ev.ConfigSet(
        id="cfg",
        time=c.start,
        cluster=c.name,
        actor=ev.SCHEDULER,
        config=c.initial.model_dump(mode="json"),  # type: ignore[attr-defined]
    )
    return v.fold([config, *c.journal])


def warm(c: Cluster, allocation: str = "lab/a", until: str = "2h") -> None:
    """`allocation` uses the whole cluster until `until`, so it out-uses its siblings."""
    c.submit("warm", allocation, gpus=c.state.capacity, min_runtime="15m")
    c.at(until).finish("warm")


# ------------------------------------------------------------------ scenarios


def order_by_rank_then_priority() -> Cluster:
    """lab/a used GPUs before, so lab/b ranks first; priority orders inside lab/a;
    unallocated work comes last."""
    c = make(hosts=1, headroom_hosts=0)
    c.tree({"lab/a": 1, "lab/b": 1})
    warm(c)
    c.submit("a-run", "lab/a", gpus=8, min_runtime="8h")
    c.after(1).submit("a-lo", "lab/a", gpus=8, min_runtime="1h", priority=0)
    c.after(1).submit("a-hi", "lab/a", gpus=8, min_runtime="1h", priority=5)
    c.after(1).submit("u", "lab/b", gpus=8, min_runtime=0)
    c.after(1).submit("b", "lab/b", gpus=8, min_runtime="1h")
    c.at("3h").tick()
    return c


def reservation_blocks_backfill() -> Cluster:
    """A 16-GPU job holds both hosts until lab/a's protection ends; a 4-GPU job that
    would fit on the free GPUs may not backfill (it would run past that start)."""
    c = make(hosts=2, headroom_hosts=0)
    c.tree({"lab/a": 1, "lab/b": 1})
    warm(c)
    c.occupy("h0", 8, "a-h0", allocation="lab/a", min_runtime="1h")
    c.occupy("h1", 4, "a-h1", allocation="lab/a", min_runtime="1h")
    c.after(1).submit("b16", "lab/b", gpus=16, min_runtime="1h")
    c.budget("lab/b", 1)  # a full cycle: b16 reserves
    c.after(1).submit("b4", "lab/b", gpus=4, min_runtime="2h")
    c.after(1).submit("u8", "lab/b", gpus=8, min_runtime=0)
    return c


def headroom_only() -> Cluster:
    """8 hosts, one kept as headroom for short jobs: a 1-hour job does not go there."""
    c = make(hosts=8, headroom_hosts=1)
    c.tree({"lab/a": 1, "lab/b": 1})
    for i in range(7):
        c.submit(f"b{i}", "lab/b", gpus=8, min_runtime="2h")
    c.after(1).submit("long", "lab/b", gpus=8, min_runtime="1h")
    return c


def own_allocation_is_protected() -> Cluster:
    """Nothing to preempt: the running work is its own allocation's, and protected."""
    c = make(hosts=1, headroom_hosts=0)
    c.tree({"lab/a": 1})
    c.submit("a1", "lab/a", gpus=8, min_runtime="1h")
    c.after(60).submit("a2", "lab/a", gpus=8, min_runtime="1h")
    c.at("10m").tick()
    return c


QUEUE_CASES: list[tuple[str, Callable[[], Cluster], list[tuple[str, str, str]]]] = [
    (
        "rank-then-priority-then-unallocated",
        order_by_rank_then_priority,
        # b waits for GPUs ahead of the rest: they wait behind it (Slurm's Priority)
        [
            ("b", "PENDING", "Reserved"),
            ("a-hi", "PENDING", "Priority"),
            ("a-lo", "PENDING", "Priority"),
            ("u", "PENDING", "Priority"),
            ("a-run", "RUNNING", "protected until 10:00"),
        ],
    ),
    (
        "reservation-blocks-backfill",
        reservation_blocks_backfill,
        [
            ("b16", "PENDING", "Reserved"),
            ("b4", "PENDING", "Priority"),
            ("u8", "PENDING", "Priority"),
            ("a-h0", "RUNNING", "protected until 03:00"),
            ("a-h1", "RUNNING", "protected until 03:00"),
        ],
    ),
    (
        "headroom",
        headroom_only,
        [("long", "PENDING", "Headroom")]
        + [(f"b{i}", "RUNNING", "protected until 02:00") for i in range(7)],
    ),
    (
        "resources",
        own_allocation_is_protected,
        [("a2", "PENDING", "Resources"), ("a1", "RUNNING", "protected until 01:00")],
    ),
]


@pytest.mark.parametrize(
    ("build", "expected"), [pytest.param(b, e, id=i) for i, b, e in QUEUE_CASES]
)
def test_queue_order_and_reasons(
    build: Callable[[], Cluster], expected: list[tuple[str, str, str]]
) -> None:
    c = build()
    view = view_of(c)
    rows = v.queue_rows(view)
    assert [(r["id"], r["state"], r["reason"]) for r in rows] == expected
    pending = [r for r in rows if r["state"] == "PENDING"]
    assert [r["position"] for r in pending] == list(range(1, len(pending) + 1))
    # the scheduler's own sort keys, ascending
    keys = [r["sort_key"] for r in pending]
    assert keys == sorted(keys, key=lambda k: [(x is None, x) for x in k])


@pytest.mark.parametrize(
    ("running", "asks", "detail"),
    [
        pytest.param([8, 8], 8, "no free GPUs and nothing it may preempt", id="none-free"),
        pytest.param([7, 8], 2, "1 GPU free, but no host has 2 of them", id="one-free"),
        pytest.param(
            [6, 6], 4, "4 GPUs free, but no host has 4 of them and nothing", id="split-free"
        ),
        # a gang needs whole hosts: 14 free, one host whole
        pytest.param([2], 12, "14 GPUs free, but not 12 on whole hosts and nothing", id="gang"),
    ],
)
def test_a_resources_reason_counts_the_free_gpus(running: list, asks: int, detail: str) -> None:
    """ "no free GPUs" beside a host with six free read as a bug."""
    c = make(hosts=2, headroom_hosts=0)
    c.tree({"lab/a": 1})
    for i, gpus in enumerate(running):  # its own allocation's protected work: no victims
        c.submit(f"r{i}", "lab/a", gpus=gpus, min_runtime="1h")
    c.after(60).submit("wants", "lab/a", gpus=asks, min_runtime="1h")
    row = next(r for r in v.queue_rows(view_of(c)) if r["id"] == "wants")
    assert (row["state"], row["reason"]) == ("PENDING", "Resources")
    assert row["detail"].startswith(detail), row["detail"]


def test_big_work_waits_for_the_big_host_not_for_the_headroom() -> None:
    """Seven 4-GPU hosts and one 8-GPU host registered last: the headroom was the 8-GPU
    host, and 8-GPU work read "Headroom: only the headroom hosts h7 have room" for good.
    The headroom is a 4-GPU host now; 8-GPU work runs on h7, or waits for it."""
    c = make(hosts=0, headroom_hosts=1)
    for i in range(7):
        c.host(f"h{i}", 4)
    c.host("h7", 8)
    c.tree({"lab/a": 1})
    c.submit("first", "lab/a", gpus=8, min_runtime="1h")
    c.after(60).submit("second", "lab/a", gpus=8, min_runtime="1h")
    rows = {r["id"]: r for r in v.queue_rows(view_of(c))}
    assert (rows["first"]["state"], rows["first"]["nodelist"]) == ("RUNNING", "h7")
    assert (rows["second"]["reason"], rows["second"]["detail"]) == (
        "Resources",
        "28 GPUs free, but no host has 8 of them and nothing it may preempt",
    )


def _lost_capacity(how: str) -> Cluster:
    """h0, h1 (8 GPUs each), h2, h3 (4 each). `huge` (lab/b, 24 GPUs, resumable) ran on
    them all until h1 was removed (`removed`) or reported unhealthy (`unhealthy`: it is
    stopped when its protection ends). `gang-of-healthy-hosts`: h0 and h1 are unhealthy,
    `small` (4 GPUs, protected) runs on a 4-GPU host and `wide` (8 GPUs: bigger than
    every healthy host, so a gang of them) waits."""
    c = make(hosts=2, headroom_hosts=0)
    c.host("h2", 4)
    c.host("h3", 4)
    c.tree({"lab/a": 1, "lab/b": 1})
    if how == "gang-of-healthy-hosts":
        c.health("h0", False, "xid-79")
        c.health("h1", False, "xid-79")
        c.submit("small", "lab/b", gpus=4, min_runtime="1h")
        c.after(60).submit("wide", "lab/b", gpus=8, min_runtime="1h")
        return c
    c.submit("huge", "lab/b", gpus=24, min_runtime="1h")
    if how == "removed":
        c.after(60).input(ev.HostRemoved, host="h1", reason="decommissioned")
    else:
        c.after(60).health("h1", False, "xid-79")
        c.at("2h").tick()
    return c


@pytest.mark.parametrize(
    ("how", "wid", "reason", "detail"),
    [
        pytest.param(
            "removed",
            "huge",
            "PartitionConfig",
            "needs 24 GPUs; cluster test has 16 registered (hosts removed or shrunk since it "
            "was accepted): it cannot start until hosts are registered or grow",
            id="removed",
        ),
        pytest.param(
            "unhealthy",
            "huge",
            "Resources",
            "needs 24 GPUs; 16 of the cluster's 24 are healthy: it waits for unhealthy h1 "
            "to be repaired",
            id="unhealthy",
        ),
        pytest.param(
            "gang-of-healthy-hosts",
            "wide",
            "Resources",
            "4 GPUs free, but not 8 on whole hosts and nothing it may preempt",
            id="gang-of-healthy-hosts",
        ),
    ],
)
def test_work_the_cluster_cannot_hold_now_says_what_it_waits_for(
    how: str, wid: str, reason: str, detail: str
) -> None:
    """It said Resources, "the cluster has 16 healthy GPUs", alike for work that waits
    for a repair and for work that no registered host can run (Slurm: PartitionConfig).
    Work bigger than every healthy host is a gang of them (it waited for the repair of
    a big host while small ones stood free): it waits for whole healthy hosts."""
    c = _lost_capacity(how)
    assert wid in c.pending()
    view = view_of(c)
    row = next(r for r in v.queue_rows(view) if r["id"] == wid)
    assert (row["reason"], row["detail"][: len(detail)]) == (reason, detail)
    assert f"{reason}: {detail}" in "\n".join(v.why(view, wid)["text"])


def behind(ahead: str | None) -> Cluster:
    """Two 8-GPU hosts, window 1d: lab/olmo used both hosts for 2h, then `run` (its own,
    protected 8h) holds h0 and `full` h1: no free GPUs, nothing to preempt. lab/tulu
    (no usage) ranks first. `ahead`: what lab/tulu asks for before olmo's `mine` (4 GPUs):
    `waits` 8 GPUs (it waits for GPUs too), `too-big` 24 on a third host registered
    unhealthy (more than the healthy cluster: it waits for no GPUs that can free up),
    None nothing.

    Hand numbers, as of 3h: olmo charged 16 GPUs x 2h + 16 x 1h = 48 GPU-h; its budget
    is share 0.5 x 16 GPUs x 24 h = 192 GPU-h, ratio 0.25; tulu's ratio is 0."""
    c = make(hosts=2, headroom_hosts=0, window="1d")
    c.tree({"lab/olmo": 1, "lab/tulu": 1})
    warm(c, "lab/olmo")
    c.submit("run", "lab/olmo", gpus=8, min_runtime="8h")
    c.submit("full", "lab/olmo", gpus=8, min_runtime="8h")
    if ahead == "too-big":
        c.host("h2")
        c.health("h2", False, "bad GPU")
    if ahead is not None:
        c.after(1).submit("first", "lab/tulu", gpus=8 if ahead == "waits" else 24, min_runtime="1h")
    c.after(1).submit("mine", "lab/olmo", gpus=4, min_runtime="1h")
    c.at("3h").tick()
    return c


@pytest.mark.parametrize(
    ("ahead", "reason", "detail", "named"),
    [
        pytest.param(
            "waits",
            "Priority",
            "behind 1 higher-ranked pending workload, of which first of lab/tulu "
            "(position 1) gets GPUs first as they free up; now no free GPUs and nothing "
            "it may preempt",
            {
                "id": "first",
                "allocation": "lab/tulu",
                "position": 1,
                "rank": 1,
                "ratio": 0.0,
                "share": 0.5,
            },
            id="behind-higher-ranked-work-that-waits",
        ),
        pytest.param(
            None,
            "Resources",
            "no free GPUs and nothing it may preempt",
            None,
            id="first-in-line",
        ),
        pytest.param(
            "too-big",
            "Resources",
            "no free GPUs and nothing it may preempt",
            None,
            id="ahead-of-it-only-work-that-cannot-run",
        ),
    ],
)
def test_work_behind_higher_ranked_waiting_work_waits_for_priority(
    ahead: str | None, reason: str, detail: str, named: dict | None
) -> None:
    """As Slurm's Priority: higher-ranked work waits ahead and takes GPUs first as they
    free up. It said Resources; `queue` and `why` say the same."""
    view = view_of(behind(ahead))
    row = next(r for r in v.queue_rows(view) if r["id"] == "mine")
    assert (row["reason"], row["detail"], row["ahead"]) == (reason, detail, named)
    answer = v.why(view, "mine")
    now = next(line for line in answer["text"] if line.startswith("now: "))
    assert f"— {reason}: {detail}" in now


@pytest.mark.parametrize(
    ("ahead", "lines"),
    [
        pytest.param(
            "waits",
            [
                "    its allocation lab/olmo: rank 2, fair-share ratio 0.25, share 0.5",
                "    ahead of it: first (position 1) of lab/tulu: rank 1, fair-share ratio 0, "
                "share 0.5",
            ],
            id="behind-higher-ranked-work",
        ),
        pytest.param(
            None,
            ["    its allocation lab/olmo: rank 2, fair-share ratio 0.25, share 0.5"],
            id="first-in-line",
        ),
    ],
)
def test_why_a_pending_workload_shows_the_numbers_behind_its_position(
    ahead: str | None, lines: list[str]
) -> None:
    """Its allocation's rank, ratio and share, and those of the work ahead the reason
    names (it gave a position and none of them)."""
    answer = v.why(view_of(behind(ahead)), "mine")
    at = next(i for i, line in enumerate(answer["text"]) if line.startswith("now: "))
    assert answer["text"][at + 1 : at + 1 + len(lines)] == lines
    assert not any(line.startswith("    ahead") for line in answer["text"][at + 1 + len(lines) :])
    mine = {"allocation": "lab/olmo", "rank": 2, "ratio": 0.25, "share": 0.5}
    assert answer["current"]["fair_share"] == mine
    first = {"id": "first", "allocation": "lab/tulu", "position": 1, "rank": 1, "ratio": 0.0}
    assert answer["current"]["ahead"] == ({**first, "share": 0.5} if ahead else None)


def test_fold_rebuilds_the_schedulers_state() -> None:
    c = reservation_blocks_backfill()
    assert fingerprint(view_of(c).state) == fingerprint(c.state)


def test_reserved_and_priority_details_name_the_holder() -> None:
    rows = {r["id"]: r for r in v.queue_rows(view_of(reservation_blocks_backfill()))}
    assert "h[0-1]" in rows["b16"]["detail"]
    assert "03:00" in rows["b16"]["detail"]
    assert "b16" in rows["b4"]["detail"]


def test_queue_times_are_relative_to_the_journals_latest_event() -> None:
    c = order_by_rank_then_priority()
    rows = {r["id"]: r for r in v.queue_rows(view_of(c))}
    now = c.state.now
    assert rows["a-run"]["time_s"] == pytest.approx(now - (START + 2 * 3600))
    assert rows["b"]["time_s"] == pytest.approx(now - (START + 2 * 3600 + 4))
    assert rows["a-run"]["nodelist"] == "h0"
    assert rows["b"]["nodelist"] == ""


def test_running_work_past_protection_and_unallocated_is_preemptible() -> None:
    c = make(hosts=2, headroom_hosts=0)
    c.tree({"lab/a": 1})
    c.submit("prot", "lab/a", gpus=8, min_runtime="30m")
    c.submit("free", "lab/a", gpus=8, min_runtime=0)
    c.at("20m").tick()
    rows = {r["id"]: r for r in v.queue_rows(view_of(c))}
    assert rows["prot"]["reason"] == "protected until 00:30"
    assert rows["free"]["reason"] == "preemptible"
    assert "unallocated" in rows["free"]["detail"]
    c.at("40m").tick()
    rows = {r["id"]: r for r in v.queue_rows(view_of(c))}
    assert rows["prot"]["reason"] == "preemptible"


@pytest.mark.parametrize(
    ("user", "allocation", "jobs", "ids"),
    [
        pytest.param("alice", None, None, {"a1", "a2", "s_0", "s_1"}, id="user"),
        pytest.param(None, "lab/b", None, {"b1"}, id="allocation"),
        pytest.param(None, "lab", None, {"a1", "a2", "b1", "s_0", "s_1"}, id="subtree"),
        pytest.param("alice", "lab/b", None, set(), id="both"),
        pytest.param(None, None, {"a2", "b1"}, {"a2", "b1"}, id="ids"),
        pytest.param(None, None, {"s"}, {"s_0", "s_1"}, id="array-base"),
        pytest.param(None, None, {"s_1"}, {"s_1"}, id="array-task"),
        pytest.param("bob", None, {"s"}, set(), id="array-and-user"),
    ],
)
def test_queue_filters(
    user: str | None, allocation: str | None, jobs: set[str] | None, ids: set[str]
) -> None:
    c = make(hosts=1, headroom_hosts=0)
    c.tree({"lab/a": 1, "lab/b": 1})
    c.submit("a1", "lab/a", gpus=4, actor="alice")
    c.submit("a2", "lab/a", gpus=8, actor="alice")
    c.submit("b1", "lab/b", gpus=8, actor="bob")
    for task in ("s_0", "s_1"):  # a job array's tasks, as `allot submit --array` names them
        c.submit(task, "lab/a", gpus=1, actor="alice")
    rows = v.queue_rows(view_of(c), user=user, allocation=allocation, ids=jobs)
    assert {r["id"] for r in rows} == ids


# ------------------------------------------------------------------ shares


def test_share_tree_numbers() -> None:
    c = make(hosts=2, headroom_hosts=0, window="1d")
    c.tree({"lab/a": 1, "lab/b": 3})
    c.submit("a", "lab/a", gpus=8, min_runtime="2h")
    c.submit("b", "lab/b", gpus=4, min_runtime=0)
    c.submit("q", "lab/b", gpus=16, min_runtime="15m")
    c.at("1h").tick()
    view = view_of(c)
    rows = v.share_rows(view)
    by_path = {r["path"]: r for r in rows}
    # Fair-Tree order: lab/b (nothing charged yet) before lab/a
    assert [r["path"] for r in rows] == ["lab", "lab/b", "lab/a"]
    assert [r["depth"] for r in rows] == [0, 1, 1]
    a, b = by_path["lab/a"], by_path["lab/b"]
    assert (a["weight"], a["share"], b["share"]) == (1.0, 0.25, 0.75)
    assert a["usage_gpu_h"] == pytest.approx(8.0)
    assert b["usage_gpu_h"] == 0.0
    budget = 0.25 * 16 * 86400
    assert a["ratio"] == pytest.approx(8 * 3600 / budget, abs=1e-6)
    assert a["ratio"] == pytest.approx(ratio(c.state, "lab/a", c.state.now), abs=1e-6)
    assert (b["rank"], a["rank"], by_path["lab"]["rank"]) == (1, 2, None)
    assert (a["running"], a["entitled"]) == (8, 4.0)
    assert (b["running"], b["unallocated"], b["entitled"]) == (0, 4, 12.0)
    assert b["pending"] == 16 and by_path["lab"]["pending"] == 16
    assert by_path["lab"]["usage_gpu_h"] == pytest.approx(8.0)


def test_zero_share_has_infinite_ratio() -> None:
    c = make(hosts=1)
    c.tree({"lab/a": 1, "lab/zero": 0})
    rows = {r["path"]: r for r in v.share_rows(view_of(c))}
    assert rows["lab/zero"]["ratio"] is None
    assert rows["lab/zero"]["entitled"] == 0


# ------------------------------------------------------------------ why


def preempted_for_fair_share() -> Cluster:
    c = make(hosts=1, headroom_hosts=0)
    c.tree({"lab/a": 1, "lab/b": 1})
    c.submit("victim", "lab/a", gpus=8, min_runtime="15m")
    c.at("2h").submit("winner", "lab/b", gpus=8, min_runtime="30m")
    return c


def preempted_unallocated() -> Cluster:
    c = make(hosts=1, headroom_hosts=0)
    c.tree({"lab/a": 1})
    c.submit("filler", "lab/a", gpus=8, min_runtime=0)
    c.at("5m").submit("real", "lab/a", gpus=8, min_runtime="15m")
    return c


def rejected_contract() -> Cluster:
    c = make(hosts=1)
    c.tree({"lab/a": 1})
    c.submit("toolong", "lab/a", gpus=1, min_runtime="9h", id="req-toolong")
    return c


def _one(c: Cluster, kind: str, wid: str) -> Any:
    found = [e for e in c.journal if e.type == kind and getattr(e, "workload", None) == wid]
    assert found, (kind, wid)
    return found[-1]


def expect_placed(c: Cluster) -> list[str]:
    p = _one(c, "workload.placed", "winner")
    return [
        f"placed {v.iso(p.time)}",
        "h0 GPUs 0-7",
        f"protected until {v.iso(p.protected_until)}",
        f"allocation rank {p.explain['rank']}",
        f"fair-share ratio {v.show(p.explain['ratio'])}",
        f"share {v.show(p.explain['share'])}",
        "preempted victim (attempt 1) to make room",
        "submitted 2026-01-01 02:00:00 by root",
    ]


def expect_fair_share_victim(c: Cluster) -> list[str]:
    q = _one(c, "workload.preempted", "victim")
    compared = q.explain["compared"]
    assert q.explain["rule"] == "ratio"
    return [
        f"preempted {v.iso(q.time)} after running 2h for winner (lab/b)",
        "reason fair_share, rule ratio",
        *(f"{path} {v.show(value)}" for path, value in compared.items()),
        f"hysteresis {v.show(q.explain['hysteresis'])}",
        f"ranks: beneficiary {q.explain['beneficiary_rank']}, victim {q.explain['victim_rank']}",
        "requeued",
        "now: pending",
    ]


def expect_unallocated(c: Cluster) -> list[str]:
    return [
        "min runtime 0s (unallocated",
        "unallocated: not charged, never protected",
        "preempted 2026-01-01 00:05:00 after running 5m for real (lab/a): reason unallocated",
        "now: pending",
    ]


def expect_rejected(c: Cluster) -> list[str]:
    r = next(e for e in c.journal if e.type == "workload.rejected")
    return [f"request {r.ref}", r.error, "rejected; never ran"]


WHY_CASES = [
    ("placed-beneficiary", preempted_for_fair_share, "winner", expect_placed),
    ("preempted-fair-share", preempted_for_fair_share, "victim", expect_fair_share_victim),
    ("preempted-unallocated", preempted_unallocated, "filler", expect_unallocated),
    ("rejected", rejected_contract, "toolong", expect_rejected),
]


@pytest.mark.parametrize(
    ("build", "wid", "expect"), [pytest.param(b, w, e, id=i) for i, b, w, e in WHY_CASES]
)
def test_why_quotes_the_journals_numbers(
    build: Callable[[], Cluster], wid: str, expect: Callable[[Cluster], list[str]]
) -> None:
    c = build()
    answer = v.why(view_of(c), wid)
    text = "\n".join(answer["text"])
    for needle in expect(c):
        assert needle in text, (needle, text)
    orjson.dumps(answer)  # JSON-ready as is


def test_why_reclaim_shows_running_vs_entitled() -> None:
    """A hand-written journal whose preemption used the reclaim rule."""
    t = START
    base = {"cluster": "x", "time": t}
    events = [
        ev.HostRegistered(id="h", host="h0", gpus=8, **base),
        ev.BudgetSet(id="b1", allocation="lab", weight=1, **base),
        ev.BudgetSet(id="b2", allocation="lab/a", weight=1, **base),
        ev.WorkloadSubmitted(id="s", workload="w", allocation="lab/a", gpus=8, **base),
        ev.WorkloadPlaced(
            id="p",
            workload="w",
            hosts={"h0": (0, 1, 2, 3, 4, 5, 6, 7)},
            charged=True,
            protected_until=t,
            **base,
        ),
        ev.WorkloadPreempted(
            id="q",
            workload="w",
            reason="fair_share",
            beneficiary="z",
            requeued=True,
            explain={
                "rule": "reclaim",
                "compared": {"lab/b": 0.5, "lab/a": 0.52},
                "running_vs_entitled": {"lab/b": [0, 4.0], "lab/a": [8, 4.0]},
            },
            cluster="x",
            time=t + 60,
        ),
    ]
    text = "\n".join(v.why(v.fold(events), "w")["text"])
    assert "rule reclaim" in text
    assert "running vs entitled GPUs: lab/b 0/4, lab/a 8/4" in text
    assert "lab/b 0.5, lab/a 0.52" in text

    # the history timeline carries the same numbers, one line per event
    from projections.timeline import last_state, timeline_text

    history = v.why(v.fold(events), "w")["history"]
    assert [e["event"] for e in history] == ["submitted", "placed", "preempted", "requeued"]
    assert history[2]["explain"]["running_vs_entitled"] == {"lab/b": [0, 4.0], "lab/a": [8, 4.0]}
    lines = "\n".join(timeline_text(history))
    assert "on h0 GPUs 0-7 (8 GPUs), charged, protected until 2026-01-01 00:00:00" in lines
    assert "fair_share, rule reclaim for z" in lines
    assert "running/entitled lab/b 0/4, lab/a 8/4" in lines
    assert "ratios lab/b 0.5, lab/a 0.52" in lines
    assert last_state(history)["state"] == "PENDING"


def test_why_finished_and_cancelled() -> None:
    c = make(hosts=1)
    c.tree({"lab/a": 1})
    c.submit("done", "lab/a", gpus=1)
    c.submit("gone", "lab/a", gpus=1, actor="alice")
    c.submit("oom", "lab/a", gpus=1)
    c.at("1h").finish("done", attempt=1)
    c.finish("oom", attempt=1, outcome="failed", exit_code=137, reason="OOM-killed")
    c.cancel("gone", actor="alice")
    view = view_of(c)
    assert v.why(view, "done")["current"]["state"] == "FINISHED"
    assert "finished (completed) at 2026-01-01 01:00:00" in v.why(view, "done")["text"][-1]
    # what the launcher said of a failure is shown with it
    assert "finished (failed, exit 137: OOM-killed) at" in v.why(view, "oom")["text"][-1]
    assert "cancelled by alice" in v.why(view, "gone")["text"][-1]
    done = v.why(view, "done")["history"]
    assert [(e["event"], e.get("attempt")) for e in done] == [
        ("submitted", None),
        ("placed", 1),
        ("finished", 1),
    ]
    gone = v.why(view, "gone")["history"]
    assert [e["event"] for e in gone] == ["submitted", "placed", "cancelled"]
    assert gone[-1]["actor"] == "alice"


def test_why_pending_tells_position_and_reason() -> None:
    answer = v.why(view_of(reservation_blocks_backfill()), "b4")
    assert answer["current"]["state"] == "PENDING"
    now = next(line for line in answer["text"] if line.startswith("now: "))
    assert "position 2 of 3 — Priority" in now


def test_why_by_rejected_request_id() -> None:
    c = rejected_contract()
    answer = v.why(view_of(c), "req-toolong")
    assert answer["request"] == "req-toolong"
    assert "exceeds the cap" in answer["text"][0]


@pytest.mark.parametrize(
    ("asked", "hint"),
    [
        pytest.param("job-3", "no workload 'job-3' in the journal", id="close-match"),
        pytest.param("job", "'job' is the start of 2 workload ids (job-1, job-2)", id="ambiguous"),
        pytest.param("zzzzzz", "`allot queue` lists live workloads", id="nothing-close"),
    ],
)
def test_why_unknown_id_lists_close_matches(asked: str, hint: str) -> None:
    c = make(hosts=1)
    c.tree({"lab/a": 1})
    c.submit("job-1", "lab/a")
    c.submit("job-2", "lab/a")
    with pytest.raises(v.ViewError) as info:
        v.why(view_of(c), asked)
    assert hint in str(info.value)
    if asked == "job-3":
        assert "did you mean: job-2, job-1?" in str(info.value)  # closest first


def test_why_an_id_only_refused_requests_named_is_no_workload() -> None:
    """A hold and a cancel of a mistyped id are refused; `why` says no such workload,
    quoting them, and a prefix never matches such an id."""
    c = make(hosts=1)
    c.tree({"lab/a": 1})
    c.submit("01ABCDEF", "lab/a")
    c.hold("01ABXXXX", actor="alice")
    view = view_of(c)
    with pytest.raises(v.ViewError, match=r"no workload '01ABXXXX': only refused requests"):
        v.why(view, "01ABXXXX")
    assert v.why(view, "01AB")["workload"] == "01ABCDEF"  # not ambiguous


def test_an_empty_id_names_no_workload() -> None:
    c = make(hosts=1)
    c.tree({"lab/a": 1})
    c.submit("01ABCDEF", "lab/a")
    with pytest.raises(v.ViewError, match="an empty workload id names nothing"):
        v.why(view_of(c), "")


def test_a_prefix_a_refused_request_sent_as_given_still_names_its_workload() -> None:
    """`allot cancel 01ABC` of ended work used to send the prefix itself; once refused,
    `why 01ABC` said only refused requests name it, though it starts one workload."""
    c = make(hosts=1)
    c.tree({"lab/a": 1})
    c.submit("01ABCDEF", "lab/a")
    c.hold("01ABC", actor="alice")
    assert v.why(view_of(c), "01ABC")["workload"] == "01ABCDEF"


def test_why_work_ended_by_a_drain_reads_node_fail_as_acct_does() -> None:
    c = make(hosts=1)
    c.tree({"lab/a": 1})
    c.submit("job", "lab/a", gpus=1, min_runtime=0, resumable=False)
    c.at("10m").health("h0", False, reason="xid-79")
    answer = v.why(view_of(c), "job")
    assert answer["current"]["state"] == "NODE_FAIL"
    assert "its host h0 was drained as unhealthy, and it is not resumable" in answer["text"][-1]


def test_why_unique_prefix_is_enough() -> None:
    c = make(hosts=1)
    c.tree({"lab/a": 1})
    c.submit("01ABCDEF", "lab/a")
    assert v.why(view_of(c), "01ABC")["workload"] == "01ABCDEF"


# ------------------------------------------------------------------ edges


def test_empty_journal_is_a_clear_error() -> None:
    with pytest.raises(v.ViewError, match="empty"):
        v.fold([])


def test_mixed_clusters_are_refused() -> None:
    events = [
        ev.ClockTick(id="1", time=START, cluster="a"),
        ev.ClockTick(id="2", time=START, cluster="b"),
    ]
    with pytest.raises(v.ViewError, match="--cluster"):
        v.fold(events)


def test_decode_lines_skips_unknown_types_and_names_bad_records() -> None:
    good = orjson.dumps({"type": "clock.tick", "id": "t", "time": START, "cluster": "c"})
    future = orjson.dumps({"type": "workload.progress", "id": "p", "time": START})
    assert [e.id for e in v.decode_lines([good, future, good])] == ["t", "t"]
    with pytest.raises(v.ViewError, match=r"^journal record 2: not JSON: "):
        list(v.decode_lines([good, b"{oops"]))
    bad = orjson.dumps({"type": "host.registered", "id": "h", "time": START, "host": "h0"})
    with pytest.raises(v.ViewError, match=r"^journal record 1: not a valid host.registered .*gpus"):
        list(v.decode_lines([bad]))


def _unregistered_placement() -> list[bytes]:
    """A submission, a record of a type this version does not know, then the work's
    placement on a host no record registered: journal record 3, the view's 2nd."""
    common = {"time": START, "cluster": "c", "workload": "w", "allocation": "lab/a", "gpus": 1}
    submitted = ev.WorkloadSubmitted(id="s", actor="u", runtime=60.0, **common)
    future = orjson.dumps({"type": "workload.progress", "id": "p", "time": START})
    placed = ev.WorkloadPlaced(
        id="p1", cause="s", hosts={"h9": (0,)}, attempt=1, charged=True, protected_until=None,
        **common,
    )  # fmt: skip
    return [encode(submitted), future, encode(placed)]


TAIL = (
    "refers to 'h9' that no earlier record introduces: the journal must be read from its beginning"
)


@pytest.mark.parametrize(
    ("source", "says"),
    [
        pytest.param(
            lambda lines: v.decode_lines(lines),
            f"journal record 3: workload.placed p1 {TAIL}",
            id="decoded-records",  # as Kafka's are named: no lines
        ),
        pytest.param(
            lambda lines: iter(list(v.decode_lines(lines))),
            f"record 2 (workload.placed p1) {TAIL}",
            id="events-whose-place-is-unknown",
        ),
    ],
)
def test_a_record_referring_to_an_unknown_host_is_named_as_its_reader_can(
    source: Callable[[list[bytes]], Any], says: str
) -> None:
    with pytest.raises(v.ViewError) as info:
        v.fold(source(_unregistered_placement()))
    assert str(info.value) == says


def test_event_place_counts_the_records_decode_lines_skipped() -> None:
    lines, skipped = _unregistered_placement(), []
    events = list(v.decode_lines(lines, 5, skipped))
    assert skipped == [6]
    assert [v.event_place(lines, 5, skipped, i) for i in range(len(events))] == [
        "journal record 5",
        "journal record 7",
    ]


@pytest.mark.parametrize(
    ("spec", "columns"),
    [
        pytest.param(
            "%i %a %u %T %b %M %r",
            ["id", "allocation", "user", "state", "gres", "time", "reason"],
            id="letters",
        ),
        # squeue's %p and %Q are the job's priority: allot's --priority
        pytest.param("%p %Q", ["priority", "priority"], id="priority"),
        pytest.param("%.10i %R", ["id", "reason_or_nodes"], id="width-and-R"),
        pytest.param("id, user,reason", ["id", "user", "reason"], id="names"),
    ],
)
def test_parse_format(spec: str, columns: list[str]) -> None:
    assert v.parse_format(spec) == columns


@pytest.mark.parametrize(
    ("sizes", "nodes"),
    [
        # one host size: a gang takes whole hosts (12 GPUs: two 8-GPU hosts)
        pytest.param([8, 8, 8], {"one": 1, "gang": 2, "huge": 3}, id="uniform"),
        # mixed sizes: how many hosts a gang takes depends on which free up
        pytest.param([8, 4, 4], {"one": 1, "gang": None, "huge": None}, id="mixed"),
    ],
)
def test_squeues_default_format_reads_node_count_and_partition(
    sizes: list[int], nodes: dict[str, int | None]
) -> None:
    """`allot queue -o` refused squeue's default format ('%.18i %.9P %.8j %.8u %.2t
    %.10M %.6D %R'): %P (partition) and %D (node count) were unknown fields."""
    from projections.usage import JournalBuilder

    j = JournalBuilder(cluster="lab").budget("lab", 1)
    for i, gpus in enumerate(sizes):
        j.host(f"h{i}", gpus)
    j.submit("run", "lab", 12).place("run", {"h0": list(range(8)), "h1": [0, 1, 2, 3]})
    j.submit("one", "lab", 8).submit("gang", "lab", 12).submit("huge", "lab", 20)
    rows = {r["id"]: r for r in v.queue_rows(v.fold(j.events))}
    assert rows["run"]["nodes"] == 2
    assert {w: rows[w]["nodes"] for w in nodes} == nodes
    spec = "%.18i %.9P %.8j %.8u %.2t %.10M %.6D %R"
    headers, cells = v.queue_cells([rows["run"], rows["gang"]], v.parse_format(spec))
    parts = v.format_template(spec)
    assert parts is not None
    lines = [v.render_template(parts, line) for line in [headers, *cells]]
    gang = "" if nodes["gang"] is None else str(nodes["gang"])
    assert [line.split() for line in lines] == [
        ["ID", "PARTITION", "NAME", "USER", "ST", "WAIT/TIME", "NODES", "NODELIST(REASON)"],
        ["run", "lab", "alice", "R", "0s", "2", "h[0-1]"],
        [
            "gang",
            "lab",
            "alice",
            "PD",
            "0s",
            *([gang] if gang else []),
            f"({rows['gang']['reason']})",
        ],
    ]


@pytest.mark.parametrize(
    ("sizes", "per_node"),
    [
        # a gang takes whole hosts: 16 or 12 GPUs on 8-GPU hosts hold 8 on each
        pytest.param([8, 8, 8], {"run": 8, "one": 4, "twelve": 8}, id="uniform"),
        # which hosts a waiting gang gets decides what each gives it
        pytest.param([8, 4, 4], {"run": None, "one": 4, "twelve": None}, id="mixed"),
    ],
)
def test_squeues_gres_is_per_node_as_tres_per_node(
    sizes: list[int], per_node: dict[str, int | None]
) -> None:
    """%b printed a gang's total (gres/gpu:16 on NODES 2), which a Slurm user reads as
    tres-per-node: 32 GPUs. It is the GPUs on each host now; -O tres-per-job the total."""
    from projections.usage import JournalBuilder

    j = JournalBuilder(cluster="lab").budget("lab", 1)
    for i, gpus in enumerate(sizes):
        j.host(f"h{i}", gpus)
    run_hosts = {"h0": list(range(8)), "h1": list(range(sizes[1]))}
    j.submit("run", "lab", 8 + sizes[1]).place("run", run_hosts)
    j.submit("one", "lab", 4).submit("twelve", "lab", 12)
    rows = v.queue_rows(v.fold(j.events))
    assert {r["id"]: r["gpus_per_node"] for r in rows} == per_node
    _, cells = v.queue_cells(rows, v.parse_long_format("jobid,tres-per-node,tres-per-job")[0])
    gres = {wid: (node, job) for wid, node, job in cells}
    assert gres["run"] == ("gres/gpu:8" if sizes[1] == 8 else "", f"gres/gpu:{8 + sizes[1]}")
    assert gres["one"] == ("gres/gpu:4", "gres/gpu:4")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("%i %g", "not supported by allot: %g (Slurm's group name)"),
        ("%k", "not supported by allot: %k (Slurm's comment)"),
        ("%.10f", "not supported by allot: %f (Slurm's features)"),
        ("%i %d", "%d (minimum temporary disk): allot schedules GPUs only"),
    ],
)
def test_squeue_letters_allot_has_no_equivalent_of_are_refused(spec: str, message: str) -> None:
    """%g, %k, %f, %p and %d printed allot's gpus, rank, ratio, position and detail: a
    squeue user's group, comment, features, priority and tmp disk silently read as
    something else. %p is the priority now; the others say allot has none."""
    with pytest.raises(v.ViewError, match=re.escape(message)):
        v.parse_format(spec)


@pytest.mark.parametrize("name", ["group", "Comment", "feature"])
def test_squeue_long_names_allot_has_no_equivalent_of_are_refused(name: str) -> None:
    with pytest.raises(v.ViewError, match=f"not supported by allot: --Format {name} "):
        v.parse_long_format(f"jobid,{name}")


@pytest.mark.parametrize("spec", ["%Z", "id,bogus", ""])
def test_parse_format_rejects_unknown(spec: str) -> None:
    with pytest.raises(v.ViewError):
        v.parse_format(spec)


@pytest.mark.parametrize(
    ("hosts", "text"),
    [
        (["h0"], "h0"),
        (["h0", "h1", "h2", "h5"], "h[0-2,5]"),
        (["h3", "h1"], "h[1,3]"),
        (["gpu-a", "h0"], "h0,gpu-a"),
    ],
)
def test_nodelist(hosts: list[str], text: str) -> None:
    assert v.nodelist(hosts) == text
    assert sorted(v.expand_nodelist(text)) == sorted(hosts)  # what -w reads back


@pytest.mark.parametrize(
    ("text", "hosts"),
    [
        ("h3", ["h3"]),
        ("h[0-2,5],gpu7", ["h0", "h1", "h2", "h5", "gpu7"]),
        ("n[08-10]", ["n08", "n09", "n10"]),  # zero padding kept
        ("rack[1-2]-a", ["rack1-a", "rack2-a"]),
        (" h1 , h1,,", ["h1"]),
    ],
    ids=["one", "ranges-and-names", "padded", "suffix", "spaces-and-repeats"],
)
def test_expand_nodelist(text: str, hosts: list[str]) -> None:
    assert v.expand_nodelist(text) == hosts


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("h[1-", "is not closed"),
        ("h[a]", "'a' is not a number"),
        ("h[[1]]", "do not nest"),
        ("h[1][2]", "one [range] per name"),
        ("h[0-999999999]", "more than 100,000 hosts"),
    ],
    ids=["open", "not-a-number", "nested", "two-ranges", "huge"],
)
def test_expand_nodelist_names_what_it_cannot_read(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=re.escape(error)):
        v.expand_nodelist(text)


def test_rows_are_json_ready() -> None:
    view = view_of(order_by_rank_then_priority())
    orjson.dumps(v.queue_rows(view))
    orjson.dumps(v.share_rows(view))
    assert not any(
        isinstance(x, float) and not math.isfinite(x)
        for r in v.share_rows(view)
        for x in r.values()
    )


def test_a_journal_read_from_its_middle_is_one_clear_error() -> None:
    from tests.projections.runs import simulated_run

    records = simulated_run(seed=1, hosts=2, count=20)
    # from the first submission on: the hosts it is placed on were registered before
    middle = next(i for i, r in enumerate(records) if r.type == "workload.submitted")
    with pytest.raises(v.ViewError, match=r"refers to .* read from its beginning"):
        v.fold(records[middle:])


def test_host_list_says_each_hosts_state_and_why_it_is_unhealthy() -> None:
    c = cluster(hosts=16, headroom_hosts=1)
    c.tree({"lab": 1})
    c.submit("a1", "lab", gpus=8, min_runtime="1h")
    c.submit("b1", "lab", gpus=2, min_runtime="1h")
    a_host = next(iter(c.placed("a1").hosts))
    b_host = next(iter(c.placed("b1").hosts))
    empty = next(h for h in ("h0", "h1", "h2") if h not in (a_host, b_host))
    c.at("10m").health(a_host, False, reason="xid-79", actor="ops")
    c.at("12m").health(empty, False, reason="fan", actor="ops")
    c.at("20m").health(a_host, False, reason="again", actor="ops")  # changes nothing
    rows = {r["host"]: r for r in v.host_rows(c.journal)}
    assert list(rows) == [f"h{i}" for i in range(16)]  # registration order
    assert rows[a_host] | {"workloads": None} == rows[a_host] | {
        "state": "draining", "healthy": False, "held": 8, "free": 0, "workloads": None,
        "since": "2026-01-01 00:10:00", "reason": "xid-79 (by ops)",
    }  # fmt: skip
    assert rows[a_host]["workloads"] == ["a1"]
    assert (rows[b_host]["state"], rows[b_host]["held"], rows[b_host]["free"]) == ("mixed", 2, 6)
    assert rows[empty]["state"] == "drained" and rows[empty]["reason"] == "fan (by ops)"
    assert rows["h15"]["state"] == "idle" and "headroom" in rows["h15"]["reason"]
    c.at("30m").health(a_host, True, actor="ops")
    back = {r["host"]: r for r in v.host_rows(c.journal)}[a_host]
    assert (back["state"], back["reason"], back["since"]) == ("allocated", "", None)


def test_shares_say_who_manages_and_who_may_submit() -> None:
    c = cluster(hosts=1)
    c.budget("lab", 1, managers=("pm",))
    c.budget("lab/a", 1, members=("alice", "bob"), actor="pm")
    c.budget("lab/a", 2, actor="pm")  # no lists given: they stay
    rows = {r["path"]: r for r in v.share_rows(c.journal)}
    assert (rows["lab"]["managers"], rows["lab"]["members"]) == (["pm"], [])
    assert (rows["lab/a"]["managers"], rows["lab/a"]["members"]) == ([], ["alice", "bob"])
    c.budget("lab/a", 2, members=("carol",), actor="pm")  # a list given replaces it
    assert {r["path"]: r for r in v.share_rows(c.journal)}["lab/a"]["members"] == ["carol"]


@pytest.mark.parametrize(
    ("spec", "cells", "line"),
    [
        pytest.param("%i|%u|%T", ["w1", "alice", "PENDING"], "w1|alice|PENDING", id="separators"),
        pytest.param("%.6i %4u", ["w1", "alice"], "    w1 alic", id="widths-pad-and-cut"),
        pytest.param("[%i] %T.", ["w1", "RUNNING"], "[w1] RUNNING.", id="text-around"),
        pytest.param("%i %%", ["w1"], "w1 %", id="literal-percent"),
    ],
)
def test_squeue_literal_formats_keep_their_text(spec: str, cells: list[str], line: str) -> None:
    parts = v.format_template(spec)
    assert parts is not None
    assert v.render_template(parts, cells) == line


@pytest.mark.parametrize("spec", ["%1001i", "%.99999999999999999999999u|%i"])
def test_a_field_wider_than_any_screen_is_refused(spec: str) -> None:
    with pytest.raises(v.ViewError, match="a field is at most 1,000 characters wide"):
        v.format_template(spec)


@pytest.mark.parametrize("spec", ["%i %u %T", "  %i   %T ", "id,user"])
def test_fields_split_by_spaces_alone_print_as_aligned_columns(spec: str) -> None:
    assert v.format_template(spec) is None


def test_jobs_resolve_ids_array_bases_and_unique_prefixes() -> None:
    c = cluster(hosts=1)
    c.tree({"lab": 1})
    for wid in ("alpha", "beta", "sweep_0", "sweep_1", "bravo"):
        c.submit(wid, "lab", gpus=1)
    view = v.fold(c.journal)
    assert v.resolve_jobs(view, {"alpha", "sweep", "al"}) == {"alpha", "sweep"}
    # the start of one array's base names the array; PREFIX_N its task N
    assert v.resolve_jobs(view, {"swe"}) == {"sweep"}
    assert v.resolve_jobs(view, {"swe_1"}) == {"sweep_1"}
    with pytest.raises(v.ViewError, match="'b' is the start of 2 workload ids"):
        v.resolve_jobs(view, {"b"})
    with pytest.raises(v.ViewError, match="no workload 'gamma'"):
        v.resolve_jobs(view, {"gamma"})
    assert v.resolve_jobs(view, None) is None


@pytest.mark.parametrize(
    ("given", "resolved"),
    [
        pytest.param("alp", "alpha", id="unique-prefix"),
        pytest.param("alpha", "alpha", id="whole-id"),
        pytest.param("swe_10", "sweep_10", id="task-of-a-prefixed-base"),
        # sweep_1 has ended: its id is kept (the scheduler says so), never sweep_10
        pytest.param("sweep_1", "sweep_1", id="ended-task-is-not-another-index"),
        pytest.param("swe_1", "sweep_1", id="ended-task-by-prefix-is-not-another-index"),
        pytest.param("ended", "ended", id="ended-whole-id"),
        pytest.param("end", "end", id="only-ended-work-starts-it"),
        # one ended workload starts with it: sent whole, the scheduler says it ended
        pytest.param("ended-t", "ended-too", id="prefix-of-one-ended-workload"),
        pytest.param("alpha_", "alpha_", id="nothing-live-or-ended-starts-it"),
        pytest.param("zzz", "zzz", id="nothing-starts-it"),
    ],
)
def test_requests_resolve_a_prefix_among_live_work(given: str, resolved: str) -> None:
    """`allot cancel/hold/release` read ids with `resolve_live`: a unique prefix of a
    live workload, else the id as given for the scheduler to answer."""
    c = cluster(hosts=4)
    c.tree({"lab": 1})
    for wid in ("alpha", "sweep_1", "sweep_10", "ended", "ended-too"):
        c.submit(wid, "lab", gpus=1)
    for wid in ("sweep_1", "ended", "ended-too"):
        c.finish(wid)
    assert v.resolve_live(v.fold(c.journal, live_only=True), given) == resolved


def test_an_ambiguous_prefix_among_live_work_names_the_candidates() -> None:
    c = cluster(hosts=1)
    c.tree({"lab": 1})
    for wid in ("beta", "bravo", "sweep_0", "sweep_1"):
        c.submit(wid, "lab", gpus=1)
    view = v.fold(c.journal, live_only=True)
    with pytest.raises(
        v.ViewError, match=r"'b' is the start of 2 live workload ids \(beta, bravo\)"
    ):
        v.resolve_live(view, "b")
    with pytest.raises(v.ViewError, match=r"or name tasks of the job array as 'sweep_\[SPEC\]'"):
        v.resolve_live(view, "sw")


@pytest.mark.parametrize("cut", [0.3, 0.6, 1.0], ids=["early", "middle", "end"])
def test_a_view_of_live_work_only_answers_queue_shares_and_hosts_as_the_full_one(
    cut: float,
) -> None:
    """`queue`, `shares` and `host list` fold without the history of ended workloads
    (a 564k-record journal: 150 MB instead of 720 MB); their answers are the same."""
    from tests.projections.runs import simulated_run

    records = simulated_run(seed=3, hosts=3, count=60)
    records = records[: max(1, int(len(records) * cut))]
    full, live = v.fold(records), v.fold(records, live_only=True)
    assert v.queue_rows(live) == v.queue_rows(full)
    assert v.share_rows(live) == v.share_rows(full)
    assert v.host_rows(live) == v.host_rows(full)
    assert set(live.histories) <= set(live.require().workloads)
    assert len(live.histories) < len(full.histories) or cut < 1.0


def test_work_first_in_line_that_could_start_says_when_the_scheduler_looks_again() -> None:
    # a1 (short), preempted and requeued by b1 (not short: the headroom host h7 is not
    # for it), may preempt the unallocated u on h7 at once; the incremental cycles leave
    # it to the next full one, at the next bucket edge: the reason must not say "behind
    # 0 higher-ranked pending workloads"
    c = cluster(hosts=8, headroom_hosts=1, bucket="10m").tree({"lab/a": 1, "lab/b": 1})
    for i in range(6):
        c.submit(f"t{i}", "lab/a", gpus=8, min_runtime="8h")
    c.submit("a2", "lab/a", gpus=6, min_runtime="8h")
    c.submit("u", "lab/a", gpus=8, min_runtime=0)
    c.submit("a1", "lab/a", gpus=2, min_runtime="1m")
    assert set(c.placed("u").hosts) == {"h7"} and set(c.placed("a1").hosts) == {"h6"}
    c.at("10m").submit("b1", "lab/b", gpus=2, min_runtime="1h")
    assert c.preempted("a1") is not None and c.preempted("u") is None
    c.at("15m").tick()
    row = next(r for r in v.queue_rows(v.fold(c.journal)) if r["id"] == "a1")
    assert row["state"] == "PENDING" and row["reason"] == "Priority"
    assert "behind" not in row["detail"]
    assert row["detail"].endswith("starts it by 00:20 at the latest")
    c.at("20m").tick()
    assert c.placed("a1") is not None and c.preempted("u") is not None


@pytest.mark.parametrize(
    ("children", "active"),
    [(False, True), (True, False)],
    ids=["a-leaf-its-members-submit", "given-children-its-members-may-not"],
)
def test_members_of_an_allocation_given_children_read_as_inactive(
    children: bool, active: bool
) -> None:
    """`budget set lab/olmo --member alice,bob`, then a child under it: lab/olmo is no
    leaf (no submissions), and bob is no member of the child, yet shares -l listed
    alice,bob as if they could submit. They are kept, for when it is a leaf again."""
    c = cluster(hosts=1)
    c.budget("lab", 1, managers=("pm",))
    c.budget("lab/olmo", 3, members=("alice", "bob"), actor="pm")
    if children:
        c.budget("lab/olmo/pre", 1, members=("alice",), actor="pm")
    rows = {r["path"]: r for r in v.share_rows(c.journal)}
    olmo = rows["lab/olmo"]
    assert (olmo["members"], olmo["members_active"]) == (["alice", "bob"], active)
    # as admission decides: may bob submit to it (a leaf), or to the leaf under it?
    leaf = "lab/olmo/pre" if children else "lab/olmo"
    assert c.state.tree.may_submit("bob", leaf) is active
    if children:
        assert rows["lab/olmo/pre"]["members_active"] is True


@pytest.mark.parametrize(("gpus", "said"), [(1, "(1 GPU)"), (2, "(2 GPUs)")], ids=["one", "two"])
def test_the_history_says_one_gpu_in_the_singular(gpus: int, said: str) -> None:
    """`allot why` and `why --audit` printed "(1 GPUs)"."""
    from projections.timeline import timeline_text
    from projections.usage import JournalBuilder

    j = JournalBuilder(cluster="x").host("h0").budget("lab", 1).budget("lab/a", 1)
    j.submit("w", "lab/a", gpus).place("w", {"h0": list(range(gpus))})
    placed = [line for line in timeline_text(v.why(v.fold(j.events), "w")["history"])
              if " on h0 " in line]  # fmt: skip
    assert len(placed) == 1 and said in placed[0], placed

"""Per-user limits on allocations (Slurm's QOS MaxTRESPerUser=gres/gpu=N and
MaxSubmitJobsPerUser): `budget.set` `max_gpus_per_user` / `max_pending_per_user`, over
the node's subtree, -1 removes one, absent keeps it (every old record: no limit)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from domain import State
from domain import events as ev
from domain.rederive import is_decision, rederive
from tests.domain.builders import cluster


def limited(c: Any, path: str, **limits: int) -> list[Any]:
    return c.input(ev.BudgetSet, allocation=path, **limits)


def lab(**limits: int) -> Any:
    """Two 8-GPU hosts; lab/a and lab/b; `limits` set on lab/a (or on `at`)."""
    at = limits.pop("at", "lab/a")
    c = cluster(hosts=2).tree({"lab/a": 1, "lab/b": 1})
    if limits:
        limited(c, at, **limits)
    return c


# ------------------------------------------------------------ max GPUs per user
@pytest.mark.parametrize(
    "name, at, runs, waits",
    [
        # alice asks 3 x 2 GPUs against a limit of 4: the third waits
        ("leaf limit", "lab/a", [("x1", "lab/a"), ("x2", "lab/a")], [("x3", "lab/a")]),
        # a limit on lab counts alice's work in lab/a and lab/b together
        ("subtree sum", "lab", [("x1", "lab/a"), ("x2", "lab/b")], [("x3", "lab/a")]),
        ("subtree sum, other leaf", "lab", [("x1", "lab/b"), ("x2", "lab/a")], [("x3", "lab/b")]),
    ],
)
def test_gpu_limit_keeps_a_users_work_pending(name, at, runs, waits):
    c = lab(max_gpus_per_user=4, at=at)
    for wid, path in [*runs, *waits]:
        c.submit(wid, path, gpus=2, actor="alice")
    for wid, _ in runs:
        assert c.placed(wid), (name, wid)
    for wid, _ in waits:
        assert not c.placed(wid), (name, wid)
    assert c.state.user_counts(at, "alice") == (len(waits), 4)


def test_over_limit_head_does_not_block_other_users_of_the_same_shape():
    c = cluster(hosts=1).tree({"lab/a": 1, "lab/b": 1})
    limited(c, "lab/a", max_gpus_per_user=2)
    c.submit("full", "lab/b", gpus=8, actor="dan")  # the host is full: everything waits
    for wid, user in (("a1", "alice"), ("a2", "alice"), ("b1", "bob"), ("c1", "carol")):
        c.submit(wid, "lab/a", gpus=2, actor=user)
    assert c.pending() == {"a1", "a2", "b1", "c1"}
    # one full cycle over the queue: alice's second job is next in line after her first
    # but over her limit; bob's and carol's, of the same leaf and shape, start
    c.after("20m").finish("full")
    assert c.running() == {"a1", "b1", "c1"}
    c.after("1m").finish("a1")
    assert c.placed("a2")  # her own work ended: within the limit again


def test_over_limit_work_does_not_preempt_and_does_not_reserve():
    c = cluster(hosts=1).tree({"lab/a": 1, "lab/b": 1})
    limited(c, "lab/a", max_gpus_per_user=4)
    c.submit("a1", "lab/a", gpus=4, actor="alice")
    c.submit("fill", "lab/b", gpus=4, min_runtime=0, actor="bob")  # unallocated filler
    c.submit("a2", "lab/a", gpus=4, actor="alice")  # would preempt the filler
    assert c.placed("a1") and c.placed("fill")
    assert not c.placed("a2") and not c.preempted("fill")
    assert c.state.blocked.reservations == {}
    # within the limit (another user), the same request preempts the filler
    c.submit("b2", "lab/a", gpus=4, actor="bob")
    assert c.placed("b2") and c.preempted("fill")


def test_unallocated_work_is_neither_limited_nor_counted():
    c = lab(max_gpus_per_user=2)
    c.submit("a1", "lab/a", gpus=2, actor="alice")
    c.submit("free", "lab/a", gpus=4, min_runtime=0, actor="alice")
    assert c.placed("free") and not c.placed("free").charged
    c.submit("a2", "lab/a", gpus=2, actor="alice")
    assert not c.placed("a2")
    assert c.state.user_counts("lab/a", "alice")[1] == 2


def test_removing_or_raising_the_limit_starts_waiting_work():
    c = lab(max_gpus_per_user=2)
    for wid in ("a1", "a2", "a3"):
        c.submit(wid, "lab/a", gpus=2, actor="alice")
    assert [bool(c.placed(w)) for w in ("a1", "a2", "a3")] == [True, False, False]
    limited(c, "lab/a", max_gpus_per_user=4)
    assert c.placed("a2") and not c.placed("a3")
    limited(c, "lab/a", max_gpus_per_user=ev.CLEAR_LIMIT)
    assert c.placed("a3")
    assert c.state.tree.limited == {} and c.state.user_usage == {}


def test_a_limit_set_on_running_work_counts_it():
    c = lab()
    c.submit("a1", "lab/a", gpus=4, actor="alice")
    c.submit("a2", "lab/a", gpus=4, actor="alice", min_runtime=0)
    limited(c, "lab", max_gpus_per_user=4, max_pending_per_user=1)
    assert c.state.user_counts("lab", "alice") == (0, 4)
    c.submit("a3", "lab/b", gpus=1, actor="alice")
    assert not c.placed("a3")
    assert c.state.user_counts("lab", "alice") == (1, 4)


# ------------------------------------------------------------ max pending per user
def test_pending_limit_rejects_the_submission_over_it():
    c = cluster(hosts=1).tree({"lab/a": 1})
    limited(c, "lab", max_pending_per_user=2)
    c.submit("big", "lab/a", gpus=8, actor="alice")  # runs: not pending
    for wid in ("p1", "p2"):
        c.submit(wid, "lab/a", gpus=8, actor="alice")
    out = c.submit("p3", "lab/a", gpus=8, actor="alice")
    (rejected,) = c.rejections(out)
    assert rejected.type == "workload.rejected" and rejected.workload == "p3"
    assert "2 pending workloads under 'lab'" in rejected.error
    assert "max_pending_per_user 2" in rejected.error
    assert "QOSMaxSubmitJobPerUserLimit" in rejected.error
    # another user is not counted against alice's
    assert not c.rejections(c.submit("q1", "lab/a", gpus=8, actor="bob"))
    # held work still waits in the queue: it counts
    c.hold("p1")
    assert c.rejections(c.submit("p4", "lab/a", gpus=8, actor="alice"))
    c.cancel("p1")
    assert not c.rejections(c.submit("p5", "lab/a", gpus=8, actor="alice"))


def test_pending_limit_counts_requeued_work_without_refusing_it():
    c = cluster(hosts=1).tree({"lab/a": 1})
    limited(c, "lab/a", max_pending_per_user=1)
    c.submit("r", "lab/a", gpus=8, actor="alice")
    c.submit("p", "lab/a", gpus=8, actor="alice")
    # past its protection, r is drained off the cordoned host and requeued: two
    # pending, over the limit, and nothing refused it
    c.after("20m").health("h0", False)
    assert c.preempted("r").requeued and not c.rejections()
    assert c.state.user_counts("lab/a", "alice")[0] == 2
    assert c.rejections(c.submit("p2", "lab/a", gpus=1, actor="alice"))


def test_work_bigger_than_the_gpu_limit_is_rejected_at_submission():
    c = lab(max_gpus_per_user=4)
    (rejected,) = c.rejections(c.submit("w", "lab/a", gpus=8, actor="alice"))
    assert "at most 4 GPUs at once (max_gpus_per_user)" in rejected.error
    assert not c.rejections(c.submit("u", "lab/a", gpus=8, min_runtime=0, actor="alice"))


@pytest.mark.parametrize("value", [0, -2, 2**31])
def test_limit_values_out_of_range_are_refused(value):
    c = lab()
    (rejected,) = c.rejections(limited(c, "lab/a", max_gpus_per_user=value))
    assert "max_gpus_per_user must be at least 1" in rejected.error
    assert c.state.tree.limited == {}


def test_limits_are_set_by_the_managers_above_as_weights_are():
    c = cluster(hosts=1)
    c.budget("lab", 1, managers=("pi",))
    c.budget("lab/a", 1, actor="pi", members=("alice",))
    (rejected,) = c.rejections(limited(c, "lab/a", max_gpus_per_user=2, actor="alice"))
    assert "not a manager of 'lab'" in rejected.error
    assert not c.rejections(limited(c, "lab/a", max_gpus_per_user=2, actor="pi"))


# ------------------------------------------------------------ old journals
def test_a_journal_without_limits_keeps_its_bytes_and_rederives():
    c = lab()
    for i in range(6):
        c.submit(f"w{i}", "lab/a" if i % 2 else "lab/b", gpus=4, actor=f"u{i % 3}")
    c.after("30m").tick()
    records = [ev.event_to_dict(e) for e in c.journal]
    budget = [r for r in records if r["type"] == "budget.set"]
    assert budget and all(not set(ev.USER_LIMITS) & r.keys() for r in budget)
    # parsed back, each record dumps to its own bytes
    for record in records:
        parsed = ev.parse_event(record)
        assert orjson.dumps(ev.event_to_dict(parsed)) == orjson.dumps(record)
    journal = [ev.parse_event(r) for r in records]
    state = State("test")
    remade = [d for _, out in rederive(state, journal) for d in out]
    assert remade == [e for e in journal if is_decision(e)]
    assert state.tree.limited == {} and state.user_usage == {}

"""A host's life after registration: its GPU count changes (a board replaced, a GPU
pulled) and it is removed for good. Capacity follows; running work on GPUs that left
the cluster stops as on a lost node (resumable work requeued with its submit time, up
to `max_lost_requeues` times; other work ends)."""

from __future__ import annotations

from typing import Any

import pytest

from domain import events as ev
from domain.state import RUNNING
from tests.domain.builders import Cluster, cluster, fingerprint


def _busy_node() -> Cluster:
    """h0 (8 GPUs): `low` on GPUs 0-3, `high` on 4-7; h1 (8 GPUs) cordoned, so the
    work stays where it is unless h1 comes back."""
    c = cluster(hosts=2).tree({"lab/a": 1})
    c.occupy("h0", 4, "low", min_runtime="30m")
    c.occupy("h0", 4, "high", min_runtime="30m", resumable=False)
    c.health("h1", False)
    return c


RESIZE_CASES = [
    # (new count, stopped: workload -> requeued, capacity, h0's free GPUs after)
    (7, {"high": False}, 15, [4, 5, 6]),  # GPU 7 pulled: high (4-7) ends, not resumable
    (4, {"high": False}, 12, []),  # exactly the GPUs `low` holds survive
    (3, {"low": True, "high": False}, 11, [0, 1, 2]),  # low requeued, nowhere to go
    (12, {}, 20, [8, 9, 10, 11]),  # a bigger board: new GPUs free, nothing stops
]


@pytest.mark.parametrize(
    ("gpus", "stopped", "capacity", "free"),
    RESIZE_CASES,
    ids=["one-gpu-pulled", "down-to-the-held-half", "below-every-workload", "grown"],
)
def test_a_host_registered_again_takes_its_new_count(
    gpus: int, stopped: dict[str, bool], capacity: int, free: list[int]
) -> None:
    c = _busy_node()
    out = c.at("5m").host("h0", gpus)
    assert out[0].type == "host.registered" and out[0].gpus == gpus
    preempted = {e.workload: e for e in out if e.type == "workload.preempted"}
    assert {w: e.requeued for w, e in preempted.items()} == stopped
    for e in preempted.values():
        assert e.reason == "gpus_removed" and e.beneficiary is None
        assert e.explain["host"] == "h0" and e.explain["host_gpus"] == gpus
        assert e.explain["gpus"] and all(g >= gpus for g in e.explain["gpus"])
    host = c.state.hosts["h0"]
    assert (host.gpus, c.state.capacity, host.free) == (gpus, capacity, free)
    assert ("h0" in c.state.with_free) == bool(free)  # where placement looks for room
    assert c.state.healthy_capacity == gpus  # h1 is cordoned
    for wid in ("low", "high"):
        if wid not in stopped:
            assert c.state.workloads[wid].state == RUNNING and c.hosts_of(wid) == {"h0"}
        elif stopped[wid]:
            assert c.state.workloads[wid].state != RUNNING  # waits, its submit time kept
        else:
            assert wid not in c.state.workloads
    assert not c.state.gpus_removed


def test_a_grown_host_places_waiting_work_on_its_new_gpus() -> None:
    c = cluster(hosts=1).tree({"lab/a": 1})
    c.submit("first", "lab/a", gpus=8)
    c.submit("wide", "lab/a", gpus=4)
    assert c.placed("wide") is None
    out = c.at("1m").host("h0", 12)
    placed = [e for e in out if e.type == "workload.placed"]
    assert [(e.workload, e.hosts) for e in placed] == [("wide", {"h0": (8, 9, 10, 11)})]


def test_gpus_given_back_after_a_shrink_are_only_those_that_exist() -> None:
    c = cluster(hosts=1).tree({"lab/a": 1})
    c.submit("w", "lab/a", gpus=8)
    c.at("1m").host("h0", 6)  # w held 0-7: stopped and requeued; 8 GPUs fit nowhere now
    assert c.placed("w").attempt == 1 and c.state.workloads["w"].state != RUNNING
    assert c.state.hosts["h0"].free == [0, 1, 2, 3, 4, 5]
    c.submit("six", "lab/a", gpus=6)
    assert c.placed("six").hosts == {"h0": (0, 1, 2, 3, 4, 5)}


REMOVE_CASES = [
    # (resumable, max_lost_requeues, requeued)
    (True, 5, True),
    (False, 5, False),
    (True, 0, False),  # its lost-node requeues are used up: it ends
]


@pytest.mark.parametrize(
    ("resumable", "max_lost", "requeued"),
    REMOVE_CASES,
    ids=["resumable-requeued", "not-resumable-ends", "requeues-used-up"],
)
def test_a_removed_host_stops_its_work_as_a_lost_node(
    resumable: bool, max_lost: int, requeued: bool
) -> None:
    c = cluster(hosts=2, max_lost_requeues=max_lost).tree({"lab/a": 1})
    c.occupy("h0", 8, "w", min_runtime="1h", resumable=resumable)
    c.occupy("h1", 8, "other", min_runtime="1h")
    out = c.at("10m").input(ev.HostRemoved, host="h0", reason="decommissioned")
    assert [e.type for e in out] == ["host.removed", "workload.preempted"]
    p = out[1]
    assert (p.workload, p.reason, p.requeued) == ("w", "gpus_removed", requeued)
    assert p.explain["gpus"] == list(range(8)) and p.explain["host_gpus"] == 0
    assert "h0" not in c.state.hosts
    assert (c.state.capacity, c.state.healthy_capacity) == (8, 8)
    assert ("w" in c.state.workloads) is requeued
    if requeued:
        assert c.state.workloads["w"].lost == 1 and c.state.workloads["w"].state != RUNNING
    assert c.hosts_of("other") == {"h1"}  # work on other hosts is untouched


def test_a_removed_name_may_be_registered_again_as_a_new_host() -> None:
    c = cluster(hosts=2).tree({"lab/a": 1})
    c.input(ev.HostRemoved, host="h0")
    c.host("h2", 8)
    out = c.host("h0", 4)
    assert out[0].type == "host.registered"
    hosts = c.state.hosts
    assert [(n, h.gpus, h.index) for n, h in hosts.items()] == [
        ("h1", 8, 1),
        ("h2", 8, 2),
        ("h0", 4, 3),
    ]
    assert (c.state.capacity, c.state.largest_host, c.state.smallest_host) == (20, 8, 4)


def test_removing_an_unhealthy_host_forgets_its_cordon() -> None:
    c = cluster(hosts=2).tree({"lab/a": 1})
    c.health("h0", False)
    c.input(ev.HostRemoved, host="h0")
    assert not c.state.cordoned and c.state.healthy_capacity == 8 == c.state.capacity
    c.submit("w", "lab/a", gpus=8)
    assert c.placed("w").hosts == {"h1": tuple(range(8))}


REFUSED_REMOVALS: list[tuple[dict[str, Any], str]] = [
    ({"host": "nope"}, "unknown host 'nope'; `allot host list` lists registered hosts"),
    ({"host": "h0", "actor": "mallory"}, "'mallory' may not remove hosts; ask an admin (root)"),
    ({"host": "h0", "reason": "bad\nline"}, "has control"),
]


@pytest.mark.parametrize(
    ("fields", "says"), REFUSED_REMOVALS, ids=["unknown-host", "not-admin", "hidden-characters"]
)
def test_a_refused_removal_changes_nothing(fields: dict[str, Any], says: str) -> None:
    c = cluster(hosts=2, admins=["root"]).tree({"lab/a": 1})
    c.submit("w", "lab/a", gpus=4)
    before = fingerprint(c.state)
    out = c.input(ev.HostRemoved, **fields)
    assert [e.type for e in out] == ["host.rejected"]
    assert says in out[0].error, out[0].error
    assert fingerprint(c.state) == before


def _behind_work_that_no_longer_fits() -> Cluster:
    """`huge` (lab/b, 32 GPUs, resumable) ran on h0-h3 until h3 was removed: requeued,
    it now needs more GPUs than the cluster has. Then h0 and h1 fill with protected
    lab/a work (h0 until 30m and 2h, h1 until 1h) and `big` (lab/b, 16 GPUs), ranked
    behind `huge` by submit time, waits for whole hosts."""
    c = cluster(hosts=4).tree({"lab/a": 1, "lab/b": 1})
    c.submit("huge", "lab/b", gpus=32, min_runtime="1h")
    c.input(ev.HostRemoved, host="h3", reason="decommissioned")
    assert c.preempted("huge").requeued and c.state.capacity == 24
    c.occupy("h0", 4, "a-30m", min_runtime="30m")
    c.occupy("h0", 4, "a-2h", min_runtime="2h")
    c.occupy("h1", 8, "a-1h", min_runtime="1h")
    c.at("1m").submit("big", "lab/b", gpus=16, min_runtime="1h")
    assert c.pending() == {"huge", "big"}
    return c


def test_work_that_cannot_fit_the_cluster_leaves_the_reservation_to_work_that_can() -> None:
    """It held the only reservation and reserved nothing with it: `big` got none, and
    work that would delay it took the free host (rule 10 off for the whole cluster)."""
    c = _behind_work_that_no_longer_fits()
    held = c.state.blocked.reservations
    assert {wid for wid, _ in held.values()} == {"big"} and "h2" in held
    c.at("2m").submit("late", "lab/a", gpus=4, min_runtime="2h")
    assert c.placed("late") is None  # it would delay `big`
    c.at("2m").submit("late-short", "lab/a", gpus=4, min_runtime="10m")
    assert c.placed("late-short").explain["backfill"]["reserved_for"] == "big"

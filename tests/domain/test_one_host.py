"""Work asked on one host (`one_host`, for NVLink): all its GPUs on a single host, never a
gang over smaller ones — in placement, preemption, reservations and admission — while
work that does not ask keeps today's shape (rule 5)."""

from __future__ import annotations

import pytest

from domain import State, handle
from domain import events as ev
from tests.domain.builders import Cluster, cluster


def _mixed(sizes: list[int], down: tuple[str, ...] = ()) -> Cluster:
    """Hosts h0, h1, ... of `sizes`, those in `down` unhealthy; leaf lab/a."""
    c = cluster(hosts=0, headroom_hosts=0).tree({"lab/a": 1})
    for i, size in enumerate(sizes):
        c.host(f"h{i}", size)
    for name in down:
        c.health(name, False, "xid-79")
    return c


PLACEMENT_CASES = [
    # sizes, unhealthy, GPUs, one_host -> hosts it runs on (None: it waits)
    ([8, 4, 4], ("h0",), 8, False, {"h1", "h2"}),
    ([8, 4, 4], ("h0",), 8, True, None),
    ([8, 4, 4], (), 8, True, {"h0"}),
    ([8, 4, 4], (), 4, True, {"h1"}),
    ([16, 8, 8], ("h0",), 12, False, {"h1", "h2"}),
    ([16, 8, 8], ("h0",), 12, True, None),
]


@pytest.mark.parametrize(
    ("sizes", "down", "gpus", "one_host", "expected"),
    PLACEMENT_CASES,
    ids=["gang-while-big-down", "waits-while-big-down", "big-host", "small", "12-gang", "12-waits"],
)
def test_work_asked_on_one_host_waits_where_a_gang_would_run(
    sizes: list[int], down: tuple[str, ...], gpus: int, one_host: bool, expected: set | None
) -> None:
    """While the only host big enough is down, work that asked for one host waits for
    it instead of running as a gang over the free smaller hosts."""
    c = _mixed(sizes, down)
    c.submit("w", "lab/a", gpus=gpus, min_runtime="1h", one_host=one_host or None)
    assert not c.rejections()
    placed = c.placed("w")
    assert (None if placed is None else set(placed.hosts)) == expected


def test_it_starts_on_the_big_host_once_repaired() -> None:
    c = _mixed([8, 4, 4], down=("h0",))
    c.submit("w", "lab/a", gpus=8, min_runtime="1h", one_host=True)
    c.after(60).submit("small", "lab/a", gpus=4, min_runtime="1h")
    assert c.pending() == {"w"} and c.hosts_of("small") == {"h1"}
    c.after(60).health("h0", True)
    assert c.hosts_of("w") == {"h0"}


def test_a_gang_behind_it_is_not_skipped_for_its_failure() -> None:
    """A cycle skips work of a group needing at least as many GPUs as work that failed;
    work asked on one host that no healthy host can hold fails where a gang fits, so
    its failure must not keep the gang behind it waiting."""
    c = _mixed([8, 8, 16], down=("h2",))
    c.submit("one", "lab/a", gpus=16, min_runtime="1h", one_host=True)
    c.after(60).submit("gang", "lab/a", gpus=16, min_runtime="1h")
    assert c.pending() == {"one"} and c.hosts_of("gang") == {"h0", "h1"}


PREEMPTION_CASES = [
    # big host h0 down?, one_host -> victims, hosts the beneficiary runs on (None: waits)
    (True, False, {"u1", "u2"}, {"h1", "h2"}),
    (True, True, set(), None),
    (False, True, {"u0"}, {"h0"}),
]


@pytest.mark.parametrize(
    ("big_down", "one_host", "victims", "hosts"),
    PREEMPTION_CASES,
    ids=["gang-frees-two-hosts", "one-host-frees-nothing-small", "one-host-frees-h0"],
)
def test_preemption_frees_one_host_for_it(
    big_down: bool, one_host: bool, victims: set[str], hosts: set[str] | None
) -> None:
    """Unallocated work fills every host; allocated 8-GPU work preempts for room. Asked
    on one host, it only ever clears one host big enough — never a gang of small hosts
    (whose GPUs together would not give it NVLink)."""
    c = _mixed([8, 4, 4])
    c.submit("u0", "lab/a", gpus=8, min_runtime=0)
    c.submit("u1", "lab/a", gpus=4, min_runtime=0)
    c.submit("u2", "lab/a", gpus=4, min_runtime=0)
    assert c.hosts_of("u0") == {"h0"} and c.running() == {"u0", "u1", "u2"}
    if big_down:
        c.health("h0", False, "xid-79")  # unallocated u0 is drained at once
    c.after(60).submit("w", "lab/a", gpus=8, min_runtime="1h", one_host=one_host or None)
    took = {e.workload for e in c.preemptions() if e.beneficiary == "w"}
    assert took == victims
    placed = c.placed("w")
    assert (None if placed is None else set(placed.hosts)) == hosts


def test_it_reserves_one_host_and_nothing_while_none_that_big_is_healthy() -> None:
    """Blocked top work reserves the hosts that free soonest (rule 10). Asked on one
    host it holds one host big enough; while none is healthy it can hold nothing, so it
    leaves the reservation to the gang behind it."""
    c = _mixed([8, 4, 4])
    c.submit("big", "lab/a", gpus=8, min_runtime="1h", expected_runtime="2h")
    assert c.hosts_of("big") == {"h0"}
    c.after(60).submit("w", "lab/a", gpus=8, min_runtime="1h", one_host=True)
    assert c.pending() == {"w"}  # h1 and h2 together are no host of 8
    reserved = c.state.blocked.reservations
    assert {name: held[0] for name, held in reserved.items()} == {"h0": "w"}

    c = _mixed([8, 4, 4])
    c.submit("a", "lab/a", gpus=4, min_runtime="1h", expected_runtime="2h")
    c.submit("b", "lab/a", gpus=4, min_runtime="1h", expected_runtime="2h")
    c.submit("c", "lab/a", gpus=8, min_runtime="1h")
    assert c.hosts_of("c") == {"h0"} and c.running() == {"a", "b", "c"}
    c.after(60).health("h0", False, "xid-79")  # c is protected: it runs on, draining
    c.after(60).submit("w", "lab/a", gpus=8, min_runtime="1h", one_host=True)
    c.after(60).submit("gang", "lab/a", gpus=8, min_runtime="1h")
    reserved = c.state.blocked.reservations
    assert {name: held[0] for name, held in reserved.items()} == {"h1": "gang", "h2": "gang"}


REJECTION_CASES = [
    # sizes, unhealthy, GPUs, one_host -> rejected
    ([8, 4, 4], (), 12, True, True),
    ([8, 4, 4], (), 12, False, False),  # a gang of h0 and a 4-GPU host
    ([8, 4, 4], ("h0",), 8, True, False),  # the biggest registered host may be repaired
    ([8, 8], (), 8, True, False),
]


@pytest.mark.parametrize(
    ("sizes", "down", "gpus", "one_host", "rejected"),
    REJECTION_CASES,
    ids=["bigger-than-every-host", "a-gang", "biggest-down", "fits"],
)
def test_work_asked_on_one_host_bigger_than_every_host_is_refused(
    sizes: list[int], down: tuple[str, ...], gpus: int, one_host: bool, rejected: bool
) -> None:
    c = _mixed(sizes, down)
    out = c.submit("w", "lab/a", gpus=gpus, min_runtime="1h", one_host=one_host or None)
    refusals = c.rejections(out)
    assert bool(refusals) == rejected
    if rejected:
        assert refusals[0].error == (
            "asks for 12 GPUs on one host (one_host) but the biggest host of cluster 'test' "
            "has 8; submit with at most 8 GPUs, or without one_host to run on whole hosts"
        )
        assert "w" not in c.state.workloads


def _replayed(inputs: list[object]) -> list[dict]:
    state = State("test")
    out: list[dict] = []
    for event in inputs:
        out.extend(ev.event_to_dict(e) for e in handle(state, event))
    return out


@pytest.mark.parametrize("one_host", [None, True])
def test_journals_replay_identically_and_old_ones_carry_no_new_key(one_host: bool | None) -> None:
    """A journal written without the field (every journal before it) has no
    `one_host` key and replays to the same records; one that has it replays alike."""
    c = _mixed([8, 4, 4], down=("h0",))
    c.submit("w", "lab/a", gpus=8, min_runtime="1h", one_host=one_host)
    c.after(60).submit("x", "lab/a", gpus=4, min_runtime="1h")
    c.after(60).health("h0", True)
    journal = [ev.event_to_dict(e) for e in c.journal]
    submitted = [r for r in journal if r["type"] == "workload.submitted"]
    assert [("one_host" in r) for r in submitted] == [one_host is not None, False]
    assert _replayed(c.inputs) == journal
    assert c.hosts_of("w") == ({"h0"} if one_host else {"h1", "h2"})

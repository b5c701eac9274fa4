"""Flap damping (config `health_holddown`): a host that fails again soon after its
return to service stays cordoned after its next healthy report until it has stayed
healthy for the hold-down, or an admin forces it back."""

from __future__ import annotations

from typing import Any

import pytest

from domain import next_wakeup
from tests.domain.builders import Cluster, cluster, fingerprint, seconds

HOLDDOWN = "10m"

# (minutes after the start, report): down/up are health reports, force an admin's
# `--healthy --force`, tick a clock tick (time passes)
Step = tuple[int, str]

CASES: list[tuple[str, str | int, list[Step], bool, int | None]] = [
    # id, holddown, steps, usable at the end, held until (minutes) at the end
    ("off-by-default", 0, [(0, "down"), (1, "up"), (2, "down"), (3, "up")], True, None),
    ("first-repair-not-damped", HOLDDOWN, [(0, "down"), (1, "up")], True, None),
    ("flap-held-down", HOLDDOWN, [(0, "down"), (1, "up"), (2, "down"), (3, "up")], False, 13),
    (
        "failure-after-holddown-is-no-flap",
        HOLDDOWN,
        [(0, "down"), (1, "up"), (12, "down"), (13, "up")],
        True,
        None,
    ),
    (
        "returns-when-holddown-passed",
        HOLDDOWN,
        [(0, "down"), (1, "up"), (2, "down"), (3, "up"), (13, "tick")],
        True,
        None,
    ),
    (
        "repeated-healthy-report-keeps-the-end",
        HOLDDOWN,
        [(0, "down"), (1, "up"), (2, "down"), (3, "up"), (8, "up")],
        False,
        13,
    ),
    (
        "failure-while-held-starts-it-over",
        HOLDDOWN,
        [(0, "down"), (1, "up"), (2, "down"), (3, "up"), (5, "down"), (6, "up"), (13, "tick")],
        False,
        16,
    ),
    (
        "failure-soon-after-its-return-holds-again",
        HOLDDOWN,
        [(0, "down"), (1, "up"), (2, "down"), (3, "up"), (13, "tick"), (14, "down"), (15, "up")],
        False,
        25,
    ),
    (
        "force-returns-at-once",
        HOLDDOWN,
        [(0, "down"), (1, "up"), (2, "down"), (3, "up"), (5, "force")],
        True,
        None,
    ),
    (
        "force-forgets-the-flap",
        HOLDDOWN,
        [(0, "down"), (1, "up"), (2, "down"), (3, "force"), (20, "down"), (21, "up")],
        True,
        None,
    ),
]


def _play(c: Cluster, steps: list[Step]) -> None:
    for minute, report in steps:
        c.at(f"{minute}m")
        if report == "tick":
            c.tick()
        else:
            c.health("h0", report != "down", **({"force": True} if report == "force" else {}))


@pytest.mark.parametrize(
    ("holddown", "steps", "usable", "held_until"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_a_flapping_host_is_held_down(
    holddown: str | int, steps: list[Step], usable: bool, held_until: int | None
) -> None:
    c = cluster(hosts=1, health_holddown=holddown).tree({"lab/a": 1})
    _play(c, steps)
    host = c.state.hosts["h0"]
    assert host.healthy is usable
    expected = None if held_until is None else c.start + held_until * 60
    assert host.held_until == expected
    assert c.state.held_down == ({} if expected is None else {"h0": expected})
    assert c.rejections() == []
    c.submit("w", "lab/a", gpus=1, min_runtime=0)
    assert bool(c.placed("w")) is usable


def _held_down_with_waiting_work() -> Cluster:
    # (hour-long buckets: no bucket edge comes first)
    c = cluster(hosts=1, health_holddown=HOLDDOWN, bucket="1h").tree({"lab/a": 1})
    _play(c, [(0, "down"), (1, "up"), (2, "down"), (3, "up")])
    c.at("4m").submit("w", "lab/a", gpus=1, min_runtime=0)
    return c


def test_waiting_work_starts_at_the_end_of_the_holddown() -> None:
    c = _held_down_with_waiting_work()
    assert not c.placed("w")
    assert next_wakeup(c.state) == c.start + seconds("13m")
    c.at("13m").tick()
    placed = c.placed("w")
    assert placed and placed.time == c.start + seconds("13m")


def test_a_held_down_host_counts_as_unhealthy_capacity() -> None:
    c = _held_down_with_waiting_work()
    assert (c.state.healthy_capacity, list(c.state.cordoned)) == (0, ["h0"])
    c.at("13m").tick()
    assert (c.state.healthy_capacity, list(c.state.cordoned)) == (8, [])


def test_fewer_drain_preemptions_with_the_holddown() -> None:
    """Unallocated work on a host flapping every two minutes: without the hold-down it
    is placed back and drained at every flap; with it, once."""

    def drains(holddown: str | int) -> int:
        c = cluster(hosts=1, health_holddown=holddown).tree({"lab/a": 1})
        c.submit("w", "lab/a", gpus=1, min_runtime=0, resumable=True)
        for minute in range(0, 20, 2):
            c.at(f"{minute}m").health("h0", False)
            c.at(f"{minute + 1}m").health("h0", True)
        return sum(p.reason == "drain" for p in c.preemptions("w"))

    assert (drains(0), drains(HOLDDOWN)) == (10, 2)


REFUSED: list[tuple[dict[str, Any], str]] = [
    ({"healthy": False, "force": True}, "force overrides the flap hold-down"),
    ({"healthy": True, "force": True, "actor": "mallory"}, "'mallory' may not report host"),
]


@pytest.mark.parametrize(("fields", "says"), REFUSED, ids=["force-unhealthy", "not-admin"])
def test_a_refused_force_changes_nothing(fields: dict[str, Any], says: str) -> None:
    c = cluster(hosts=1, health_holddown=HOLDDOWN, admins=["root"]).tree({"lab/a": 1})
    _play(c, [(0, "down"), (1, "up"), (2, "down"), (3, "up")])
    before = fingerprint(c.state), dict(c.state.held_down)
    out = c.health("h0", **fields)
    assert [e.type for e in out] == ["host.rejected"]
    assert says in out[0].error, out[0].error
    assert (fingerprint(c.state), c.state.held_down) == before


def test_force_is_left_out_of_records_unless_true() -> None:
    from domain.events import event_to_dict

    c = cluster(hosts=1, health_holddown=HOLDDOWN)
    plain = c.health("h0", False)[0]
    forced = c.health("h0", True, force=True)[0]
    assert "force" not in event_to_dict(plain) and event_to_dict(forced)["force"] is True

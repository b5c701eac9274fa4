"""Scenario files -> setup events and the time-ordered inputs a simulator feeds the core."""

from __future__ import annotations

import copy
import itertools
import math
import statistics
from pathlib import Path
from typing import Any

import pytest
import yaml

from domain.events import BudgetSet, HostHealth, HostRegistered, WorkloadSubmitted, event_to_dict
from domain.tree import parent_of
from projections.generate import GenerateSpec, arrival_offsets
from projections.scenario import DEFAULT_START, Scenario, ScenarioError, load_scenario
from projections.simulate import split_overrides

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
FIXTURES = Path(__file__).parent / "fixtures_scenario"


def base(**changes: Any) -> dict[str, Any]:
    """A small valid scenario; `changes` replace top-level keys."""
    raw: dict[str, Any] = {
        "cluster": {"name": "lab", "hosts": 4, "gpus_per_host": 8},
        "allocations": [
            {"path": "lab/olmo", "weight": 5, "managers": ["pm-olmo"]},
            {"path": "lab/olmo/pretrain", "weight": 7, "members": ["alice", "bob"]},
            {"path": "lab/olmo/evals", "weight": 1},
        ],
        "workloads": [
            {"generate": gen()},
        ],
        "config": {"window": "7d"},
    }
    raw.update(changes)
    return raw


def gen(**changes: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "seed": 1,
        "allocation": "lab/olmo/pretrain",
        "count": 50,
        "arrival": "poisson",
        "rate_per_h": 20,
        "gpus": [1, 2],
        "runtime": {"lognormal": {"median": "10m", "sigma": 1}},
        "min_runtime": "15m",
        "resumable": False,
        "tags": ["debug"],
    }
    spec.update(changes)
    return spec


def load(tmp_path: Path, raw: dict[str, Any], name: str = "lab.yaml", **kw: Any) -> Scenario:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_scenario(path, **kw)


def submitted(sc: Scenario) -> list[WorkloadSubmitted]:
    return [e for e in sc.timed_inputs() if isinstance(e, WorkloadSubmitted)]


def dumped(events: Any) -> list[dict[str, Any]]:
    return [event_to_dict(e) for e in events]


# ---------------------------------------------------------------- setup events


SETUP_CASES = [
    pytest.param(
        base(),
        ["lab", "lab/olmo", "lab/olmo/pretrain", "lab/olmo/evals"],
        {"lab": 1.0, "lab/olmo": 5.0, "lab/olmo/pretrain": 7.0, "lab/olmo/evals": 1.0},
        id="implied-root-weight-1",
    ),
    pytest.param(
        base(
            allocations=[
                {"path": "x/y/z", "weight": 2},
                {"path": "x", "weight": 3},
                {"path": "w", "weight": 0.5},
            ],
            workloads=[],
        ),
        ["x", "x/y", "x/y/z", "w"],
        {"x": 3.0, "x/y": 1.0, "x/y/z": 2.0, "w": 0.5},
        id="child-declared-before-parent",
    ),
    pytest.param(
        base(allocations=[], workloads=[]),
        [],
        {},
        id="no-allocations",
    ),
]


@pytest.mark.parametrize(("raw", "order", "weights"), SETUP_CASES)
def test_setup_events(tmp_path: Path, raw: dict, order: list[str], weights: dict) -> None:
    sc = load(tmp_path, raw)
    events = sc.setup_events()
    hosts = [e for e in events if isinstance(e, HostRegistered)]
    budgets = [e for e in events if isinstance(e, BudgetSet)]
    assert len(events) == len(hosts) + len(budgets)
    # hosts first, h0..h{n-1}, each with gpus_per_host
    assert events[: len(hosts)] == hosts
    assert [h.host for h in hosts] == ["h0", "h1", "h2", "h3"]
    assert {h.gpus for h in hosts} == {8}
    # budget tree: every parent before its children, implied parents weight 1
    assert [b.allocation for b in budgets] == order
    assert {b.allocation: b.weight for b in budgets} == weights
    seen: set[str] = set()
    for b in budgets:
        parent = parent_of(b.allocation)
        assert parent is None or parent in seen
        seen.add(b.allocation)
    # envelope: at start, actor scenario, setup-<n> ids, cluster name
    assert [e.id for e in events] == [f"setup-{i}" for i in range(len(events))]
    assert {e.time for e in events} == {DEFAULT_START}
    assert {e.actor for e in events} == {"scenario"}
    assert {e.cluster for e in events} == {"lab"}


def test_setup_carries_principals(tmp_path: Path) -> None:
    budgets = {
        e.allocation: e for e in load(tmp_path, base()).setup_events() if e.type == "budget.set"
    }
    assert budgets["lab/olmo"].managers == ("pm-olmo",)
    assert budgets["lab/olmo/pretrain"].members == ("alice", "bob")
    assert budgets["lab"].managers is None and budgets["lab"].members is None


def test_scenario_facts(tmp_path: Path) -> None:
    sc = load(tmp_path, base(config={"window": "3d", "placement": "spread"}), name="small.yaml")
    assert (sc.name, sc.cluster_name, sc.hosts, sc.gpus_per_host) == ("small", "lab", 4, 8)
    assert sc.start == DEFAULT_START == 1767225600.0
    assert sc.horizon is None
    assert sc.config.window == 3 * 86400 and sc.config.placement == "spread"
    assert sc.leaves == ["lab/olmo/pretrain", "lab/olmo/evals"]
    assert sc.workload_count == 50 == len(submitted(sc))


@pytest.mark.parametrize(
    ("start", "epoch"),
    [
        pytest.param("2026-01-05T00:00:00Z", 1767571200.0, id="iso-z"),
        pytest.param("2026-01-05T01:00:00+01:00", 1767571200.0, id="iso-offset"),
        pytest.param("2026-01-05 00:00:00", 1767571200.0, id="naive-is-utc"),
        pytest.param(1767571200, 1767571200.0, id="epoch-number"),
    ],
)
def test_start(tmp_path: Path, start: Any, epoch: float) -> None:
    sc = load(tmp_path, base(start=start))
    assert sc.start == epoch
    assert all(e.time == epoch for e in sc.setup_events())
    assert min(e.time for e in sc.timed_inputs()) > epoch


def test_start_as_yaml_timestamp(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("cluster: {name: c, hosts: 1}\nstart: 2026-01-05T00:00:00Z\n")
    assert load_scenario(path).start == 1767571200.0


# ---------------------------------------------------------------- durations


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        pytest.param("30s", 30.0, id="seconds"),
        pytest.param("15m", 900.0, id="minutes"),
        pytest.param("8h", 28800.0, id="hours"),
        pytest.param("7d", 604800.0, id="days"),
        pytest.param("1h30m", 5400.0, id="compound"),
        pytest.param(90, 90.0, id="plain-int"),
        pytest.param(2.5, 2.5, id="plain-float"),
    ],
)
def test_durations(tmp_path: Path, text: Any, seconds: float) -> None:
    raw = base(
        horizon=text,
        health=[{"at": text, "host": 0, "healthy": False}],
        workloads=[{"generate": gen(min_runtime=text, start=text, runtime=text, count=3)}],
    )
    sc = load(tmp_path, raw)
    assert sc.horizon == seconds
    health = [e for e in sc.timed_inputs() if isinstance(e, HostHealth)]
    assert health[0].time == sc.start + seconds
    subs = submitted(sc)
    assert {s.min_runtime for s in subs} == {seconds}
    assert {s.runtime for s in subs} == {max(1.0, seconds)}  # runtimes are at least 1 s
    assert min(s.time for s in subs) > sc.start + seconds  # poisson arrivals after `start`


# ---------------------------------------------------------------- health


@pytest.mark.parametrize(
    ("host", "name"),
    [
        pytest.param(3, "h3", id="index"),
        pytest.param("h3", "h3", id="name"),
        pytest.param(0, "h0", id="first"),
        pytest.param("3", "h3", id="index-as-string"),
    ],
)
def test_health_host(tmp_path: Path, host: Any, name: str) -> None:
    raw = base(health=[{"at": "2d", "host": host, "healthy": False, "reason": "xid-79"}])
    sc = load(tmp_path, raw)
    [event] = [e for e in sc.timed_inputs() if isinstance(e, HostHealth)]
    assert (event.host, event.healthy, event.reason) == (name, False, "xid-79")
    assert event.time == sc.start + 2 * 86400
    assert (event.cluster, event.actor, event.id) == ("lab", "scenario", "health-0")


def test_health_sorted_and_merged(tmp_path: Path) -> None:
    raw = base(
        health=[
            {"at": "3h", "host": "h1", "healthy": True, "reason": "repaired"},
            {"at": "1h", "host": 1, "healthy": False},
        ]
    )
    events = list(load(tmp_path, raw).timed_inputs())
    health = [(e.time, e.healthy) for e in events if isinstance(e, HostHealth)]
    assert [h for _, h in health] == [False, True]
    times = [e.time for e in events]
    assert times == sorted(times)
    assert any(t > health[0][0] for t in times) and any(t < health[0][0] for t in times)


@pytest.mark.parametrize(
    ("horizon", "late"),
    [
        pytest.param(None, [], id="no-horizon"),
        pytest.param("1d", [], id="all-inside-one-at-the-horizon"),
        pytest.param(
            "12h",
            [
                "lab.yaml: health[1].at: 1d comes after the horizon (12h): this health change"
                " is not simulated"
            ],
            id="one-after",
        ),
    ],
)
def test_health_after_the_horizon_is_named(
    tmp_path: Path, horizon: str | None, late: list[str]
) -> None:
    """`allot simulate` warns with these lines, as it does for late trace rows: health
    changes after the horizon were dropped without a word."""
    raw = base(health=[{"at": "1h", "host": 0}, {"at": "1d", "host": 1}])
    if horizon is not None:
        raw["horizon"] = horizon
    assert load(tmp_path, raw).late_health() == late


@pytest.mark.parametrize(
    "host", [pytest.param(4, id="index-too-big"), pytest.param("h9", id="name"), "gpu1", -1]
)
def test_health_unknown_host(tmp_path: Path, host: Any) -> None:
    with pytest.raises(ScenarioError, match=r"lab\.yaml: health\[0\]\.host: no host .*h0\.\.h3"):
        load(tmp_path, base(health=[{"at": "1h", "host": host}]))


# ---------------------------------------------------------------- host groups

GROUPS = [{"count": 2, "gpus": 8}, {"count": 3, "gpus": 4, "prefix": "ws"}, {"count": 1, "gpus": 2}]


def mixed(**changes: Any) -> dict[str, Any]:
    return base(cluster={"name": "lab", "hosts": copy.deepcopy(GROUPS)}, **changes)


def test_host_groups_register_in_file_order(tmp_path: Path) -> None:
    """Each prefix numbers its hosts from 0 on, across its groups: the `h` group after
    the workstations goes on from h2, so no name depends on another prefix's groups."""
    sc = load(tmp_path, mixed())
    hosts = [e for e in sc.setup_events() if isinstance(e, HostRegistered)]
    assert [(h.host, h.gpus) for h in hosts] == [
        ("h0", 8), ("h1", 8), ("ws0", 4), ("ws1", 4), ("ws2", 4), ("h2", 2),
    ]  # fmt: skip
    assert [h.id for h in hosts] == [f"setup-{i}" for i in range(6)]
    assert (sc.hosts, sc.capacity, sc.gpus_per_host) == (6, 30, 8)  # gpus_per_host: the biggest


@pytest.mark.parametrize(
    "cluster",
    [
        pytest.param({"name": "lab", "hosts": [{"count": 4, "gpus": 8}]}, id="one-group"),
        pytest.param(
            {"name": "lab", "hosts": [{"count": 1, "gpus": 8}, {"count": 3, "gpus": 8}]},
            id="two-groups-of-h",
        ),
        pytest.param({"name": "lab", "hosts": 4}, id="gpus-per-host-default-8"),
    ],
)
def test_a_number_of_hosts_is_one_group_of_h(tmp_path: Path, cluster: dict) -> None:
    """Old scenarios keep their setup events (so their journals) byte for byte."""
    old = load(tmp_path, base(), name="old.yaml").setup_events()
    assert dumped(load(tmp_path, base(cluster=cluster)).setup_events()) == dumped(old)


@pytest.mark.parametrize(
    ("host", "name"),
    [
        pytest.param("ws2", "ws2", id="name"),
        pytest.param(4, "ws2", id="index-in-registration-order"),
        pytest.param("4", "ws2", id="index-as-string"),
        pytest.param("h2", "h2", id="name-of-a-later-h-group"),
        pytest.param(5, "h2", id="last-index"),
        pytest.param("ws02", "ws2", id="leading-zero"),
    ],
)
def test_health_host_of_host_groups(tmp_path: Path, host: Any, name: str) -> None:
    sc = load(tmp_path, mixed(health=[{"at": "1h", "host": host}]))
    [event] = [e for e in sc.timed_inputs() if isinstance(e, HostHealth)]
    assert event.host == name


@pytest.mark.parametrize("host", ["ws3", 6, "h3", "gpu1", "ws", -1])
def test_health_unknown_host_of_host_groups(tmp_path: Path, host: Any) -> None:
    with pytest.raises(
        ScenarioError,
        match=r"lab\.yaml: health\[0\]\.host: no host .*: hosts are h0\.\.h1, ws0\.\.ws2, h2"
        r" \(or their index 0\.\.5\)$",
    ):
        load(tmp_path, mixed(health=[{"at": "1h", "host": host}]))


HOST_GROUP_ERRORS = [
    pytest.param(
        [{"count": 2, "gpu": 8}],
        r"cluster\.hosts\[0\]\.gpu: unknown key 'gpu' \(did you mean 'gpus'\?\);"
        r" known keys: count, gpus, prefix",
        id="key",
    ),
    pytest.param([{"count": 2}], r"cluster\.hosts\[0\]\.gpus: missing \(required\)", id="no-gpus"),
    pytest.param(
        [{"count": 2, "gpus": 8}, {"count": 0, "gpus": 4}],
        r"cluster\.hosts\[1\]\.count: Input should be greater than 0 \(got 0\)",
        id="count",
    ),
    pytest.param(
        [{"count": 2, "gpus": 2048}],
        r"cluster\.hosts\[0\]\.gpus: Input should be less than or equal to 1024",
        id="gpus-too-many",
    ),
    pytest.param(
        [{"count": 2, "gpus": 8, "prefix": "ws1"}],
        r"cluster\.hosts\[0\]\.prefix: 'ws1' is not a host name prefix: .*not ending in a digit",
        id="prefix-ends-in-a-digit",  # ws1 + 0 would be ws10 of a prefix ws
    ),
    pytest.param(
        [{"count": 2, "gpus": 8, "prefix": "dgx a"}],
        r"cluster\.hosts\[0\]\.prefix: 'dgx a' is not a host name prefix",
        id="prefix-with-a-space",
    ),
    pytest.param(
        [{"count": 2, "gpus": 8, "prefix": ""}],
        r"cluster\.hosts\[0\]\.prefix: '' is not a host name prefix",
        id="prefix-empty",  # names 0, 1, ... would read as indices
    ),
    pytest.param([], r"cluster\.hosts: List should have at least 1 item", id="no-groups"),
    pytest.param(
        {"count": 2, "gpus": 8},
        r"cluster\.hosts: a number of hosts \(each of gpus_per_host GPUs\) or a list of host"
        r" groups, e\.g\. \[\{count: 96, gpus: 8\}",
        id="a-group-not-in-a-list",
    ),
    pytest.param(
        [3], r"cluster\.hosts\[0\]: Input should be a valid dictionary", id="a-number-in-the-list"
    ),
    pytest.param(
        [{"count": 60_000, "gpus": 8}, {"count": 60_000, "gpus": 4, "prefix": "ws"}],
        r"cluster\.hosts: the host groups hold 120000 hosts, more than 100000",
        id="too-many-hosts",
    ),
]


@pytest.mark.parametrize(("hosts", "message"), HOST_GROUP_ERRORS)
def test_bad_host_groups_name_the_key(tmp_path: Path, hosts: Any, message: str) -> None:
    with pytest.raises(ScenarioError, match=r"(?m)^lab\.yaml: " + message):  # one line each
        load(tmp_path, base(cluster={"name": "lab", "hosts": hosts}))


def test_gpus_per_host_does_not_go_with_host_groups(tmp_path: Path) -> None:
    cluster = {"name": "lab", "hosts": [{"count": 2, "gpus": 4}], "gpus_per_host": 8}
    with pytest.raises(
        ScenarioError,
        match=r"^lab\.yaml: cluster\.gpus_per_host: gpus_per_host goes with a number of hosts;"
        r" with host groups each group gives its own gpus$",
    ):
        load(tmp_path, base(cluster=cluster))


# ---------------------------------------------------------------- errors


def _set(raw: dict, path: tuple, value: Any) -> dict:
    raw = copy.deepcopy(raw)
    target = raw
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return raw


WRONG_KEY = [
    pytest.param(
        ("workloads", 0, "generate", "rate_per_hour"),
        3,
        r"workloads\[0\]\.generate\.rate_per_hour: unknown key .*did you mean 'rate_per_h'",
        id="generator-key",
    ),
    pytest.param(("cluster", "gpus"), 8, r"cluster\.gpus: unknown key 'gpus'", id="cluster-key"),
    pytest.param(
        ("allocations", 1, "member"),
        ["x"],
        r"allocations\[1\]\.member: unknown key .*did you mean 'members'",
        id="alloc-key",
    ),
    pytest.param(
        ("horizn",),
        "1d",
        r"lab\.yaml: horizn: unknown key .*did you mean 'horizon'",
        id="top-level",
    ),
    pytest.param(
        ("workloads", 0, "generate", "runtime"),
        {"gamma": {"k": 1}},
        r"workloads\[0\]\.generate\.runtime\.gamma: unknown key 'gamma'",
        id="runtime-distribution",
    ),
    pytest.param(
        ("workloads", 0, "generate", "runtime"),
        {"lognormal": {"median": "1h", "sigma": 1, "mean": 3}},
        r"workloads\[0\]\.generate\.runtime\.lognormal\.mean: unknown key",
        id="nested-distribution-key",
    ),
    pytest.param(
        ("workloads", 0),
        {"generat": gen()},
        r"workloads\[0\]\.generat: unknown key .*did you mean 'generate'",
        id="entry-kind",
    ),
    pytest.param(
        ("config", "windw"),
        "3d",
        r"config\.windw: unknown key 'windw' \(did you mean 'window'\?\)",
        id="config-key",
    ),
    pytest.param(
        ("health",),
        [{"at": "1h", "host": 1, "why": "x"}],
        r"health\[0\]\.why: unknown key",
        id="health-key",
    ),
]

WRONG_VALUE = [
    pytest.param(
        ("workloads", 0, "generate", "rate_per_h"),
        0,
        r"^lab\.yaml: workloads\[0\]\.generate\.rate_per_h: Input should be greater than 0",
        id="rate-zero",
    ),
    pytest.param(
        ("workloads", 0, "generate", "count"),
        -5,
        r"workloads\[0\]\.generate\.count: Input should be greater than 0",
        id="count",
    ),
    pytest.param(
        ("workloads", 0, "generate", "min_runtime"),
        "15 minutes",
        r"workloads\[0\]\.generate\.min_runtime: not a duration: '15 minutes'",
        id="duration",
    ),
    pytest.param(
        ("workloads", 0, "generate", "arrival"),
        "weekly",
        r"workloads\[0\]\.generate\.arrival: Input should be 'poisson', 'uniform' or 'burst'",
        id="arrival",
    ),
    pytest.param(
        ("workloads", 0, "generate", "gpus"),
        [1, 0],
        r"workloads\[0\]\.generate\.gpus\.choices\[1\]: Input should be greater than 0",
        id="gpus",
    ),
    pytest.param(
        ("workloads", 0, "generate", "gpus"),
        {"choices": [1, 2], "weights": [1]},
        r"workloads\[0\]\.generate\.gpus: weights has 1 entry but choices has 2",
        id="gpu-weights",
    ),
    pytest.param(
        ("workloads", 0, "generate", "runtime"),
        {"lognormal": {"median": "1h"}},
        r"workloads\[0\]\.generate\.runtime\.lognormal\.sigma: missing",
        id="missing",
    ),
    pytest.param(
        ("workloads", 0, "generate", "runtime"),
        {"uniform": {"min": "2h", "max": "1h"}},
        r"workloads\[0\]\.generate\.runtime\.uniform: max must be >= min",
        id="uniform",
    ),
    pytest.param(
        ("workloads", 0, "generate", "arrival"),
        "burst",
        r"workloads\[0\]\.generate: rate_per_h does not go with arrival: burst",
        id="burst-with-rate",
    ),
    pytest.param(
        ("workloads", 0),
        {"generate": gen(rate_per_h=None)},
        r"workloads\[0\]\.generate: arrival poisson needs rate_per_h",
        id="needs-rate",
    ),
    pytest.param(
        ("workloads", 0),
        {},
        r"workloads\[0\]: each workloads entry needs exactly one",
        id="empty-entry",
    ),
    pytest.param(
        ("workloads", 0, "trace"),
        {"file": "x.csv", "format": "csv"},
        r"workloads\[0\]\.trace\.format: Input should be 'allot-csv'",
        id="trace-format",
    ),
    pytest.param(
        ("cluster", "hosts"), 0, r"cluster\.hosts: Input should be greater than 0", id="hosts"
    ),
    pytest.param(
        ("allocations", 0, "weight"),
        -1,
        r"allocations\[0\]\.weight: Input should be greater than or equal to 0",
        id="weight",
    ),
    pytest.param(
        ("allocations", 0, "path"),
        "lab//olmo",
        r"allocations\[0\]\.path: 'lab//olmo' is not an allocation path",
        id="path",
    ),
    pytest.param(
        ("allocations",),
        [{"path": "a"}, {"path": "a"}],
        r"allocations\[1\]\.path: duplicate allocation 'a'",
        id="duplicate-path",
    ),
    # beyond the domain's bound every submission failed to build: a pydantic traceback,
    # and OUT/.fairshare.partial left behind
    pytest.param(
        ("workloads", 0, "generate", "priority"),
        2**31,
        r"workloads\[0\]\.generate\.priority: Input should be less than or equal to 2147483647",
        id="generate-priority",
    ),
    pytest.param(
        ("workloads", 0),
        {"trace": {"file": "t.csv", "format": "allot-csv", "priority": -(2**31)}},
        r"workloads\[0\]\.trace\.priority: Input should be greater than or equal to -2147483647",
        id="trace-priority",
    ),
    pytest.param(  # idle time to year 1e30 ran for ever, memory growing
        ("horizon",), 1e30, r"horizon: horizon must be at most 3650d", id="horizon-centuries"
    ),
    pytest.param(
        ("cluster", "hosts"),
        100_000_000,
        r"cluster\.hosts: Input should be less than or equal to 100000",
        id="hosts-beyond-memory",
    ),
    pytest.param(
        ("cluster", "gpus_per_host"),
        10_000,
        r"cluster\.gpus_per_host: Input should be less than or equal to 1024",
        id="gpus-per-host",
    ),
    pytest.param(("start",), "tomorrow", r"start: not a time: 'tomorrow'", id="start"),
    pytest.param(("config", "window"), "forever", r"config\.window: not a duration", id="config"),
    pytest.param(
        ("config", "headroom_hosts"),
        -1,
        r"config\.headroom_hosts: Input should be greater than or equal to 0",
        id="config-range",
    ),
    pytest.param(
        ("workloads", 0, "generate", "allocation"),
        "lab/olmo/pretrian",
        r"workloads\[0\]\.generate\.allocation: unknown allocation 'lab/olmo/pretrian' "
        r"\(did you mean 'lab/olmo/pretrain'\?\); leaves are: lab/olmo/pretrain, "
        r"lab/olmo/evals",
        id="unknown-allocation",
    ),
    pytest.param(
        ("workloads", 0, "generate", "allocation"),
        "lab/olmo",
        r"workloads\[0\]\.generate\.allocation: 'lab/olmo' is not a leaf allocation",
        id="not-a-leaf",
    ),
    pytest.param(
        ("workloads", 0, "generate", "user"),
        "mallory",
        r"workloads\[0\]\.generate\.user: 'mallory' may not submit to 'lab/olmo/pretrain'",
        id="user-not-member",
    ),
]


@pytest.mark.parametrize(("path", "value", "message"), WRONG_KEY + WRONG_VALUE)
def test_bad_scenario_names_the_key(tmp_path: Path, path: tuple, value: Any, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        load(tmp_path, _set(base(), path, value))


def test_first_line_shape(tmp_path: Path) -> None:
    """The exact form users see: `<file>: <key path>: <problem>`."""
    raw = _set(base(), ("workloads", 0, "generate", "rate_per_h"), 0)
    with pytest.raises(ScenarioError) as info:
        load(tmp_path, raw)
    assert str(info.value).startswith(
        "lab.yaml: workloads[0].generate.rate_per_h: Input should be greater than 0"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("cluster: [1, 2\n", r"lab\.yaml:\d+:\d+: not valid YAML", id="yaml-syntax"),
        pytest.param("- a\n- b\n", r"a scenario is a mapping", id="not-a-mapping"),
        pytest.param("allocations: []\n", r"lab\.yaml: cluster: missing", id="no-cluster"),
        # PyYAML keeps the last of two equal keys: the run used a value nobody saw
        pytest.param(
            "cluster: {name: c, hosts: 1}\nhorizon: 1d\nhorizon: 2h\n",
            r"lab\.yaml:3:1: not valid YAML: key 'horizon' given twice",
            id="duplicate-key",
        ),
        # a 13th month: PyYAML's date constructor raised a bare ValueError (traceback)
        pytest.param(
            "cluster: {name: c, hosts: 1}\nstart: 2026-13-01\n",
            r"lab\.yaml: not valid YAML: month must be in 1\.\.12",
            id="impossible-date",
        ),
        # accepted, then the summary's dates failed after the whole run
        pytest.param(
            "cluster: {name: c, hosts: 1}\nstart: 99999999999999\n",
            r"lab\.yaml: start: 99999999999999 is out of range",
            id="start-past-9999",
        ),
    ],
)
def test_unreadable_file(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "lab.yaml"
    path.write_text(text)
    with pytest.raises(ScenarioError, match=message):
        load_scenario(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match="no such scenario file"):
        load_scenario(tmp_path / "nope.yaml")


# ---------------------------------------------------------------- overrides


@pytest.mark.parametrize(
    ("overrides", "field", "value"),
    [
        pytest.param({"window": "3d"}, "window", 3 * 86400.0, id="duration"),
        pytest.param({"placement": "spread"}, "placement", "spread", id="string"),
        pytest.param({"headroom_hosts": "2"}, "headroom_hosts", 2, id="string-int"),
        pytest.param({}, "window", 86400.0, id="scenario-value-kept"),
    ],
)
def test_overrides(tmp_path: Path, overrides: dict, field: str, value: Any) -> None:
    sc = load(tmp_path, base(config={"window": "1d", "max_min_runtime": "4h"}), overrides=overrides)
    assert getattr(sc.config, field) == value
    assert sc.config.max_min_runtime == 4 * 3600  # scenario config kept under overrides


@pytest.mark.parametrize(
    ("pairs", "admins"),
    [
        pytest.param(["admins=alice"], ("alice",), id="one-name"),
        pytest.param(["admins=alice, bob"], ("alice", "bob"), id="comma-separated"),
        pytest.param(["admins=alice,"], ("alice",), id="trailing-comma"),
        pytest.param(['admins=["alice"]'], ("alice",), id="json-list"),
    ],
)
def test_set_admins_reads_a_list_of_names(tmp_path: Path, pairs: list, admins: tuple) -> None:
    overrides, engine = split_overrides(pairs)
    assert engine == {}
    assert load(tmp_path, base(), overrides=overrides).config.admins == admins


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        pytest.param({"windw": "3d"}, r"--set: windw: unknown key 'windw'", id="unknown-key"),
        pytest.param({"window": "x"}, r"--set: window: not a duration", id="bad-value"),
    ],
)
def test_bad_overrides(tmp_path: Path, overrides: dict, message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        load(tmp_path, base(), overrides=overrides)


# ---------------------------------------------------------------- submissions


def test_generated_submissions(tmp_path: Path) -> None:
    sc = load(tmp_path, base(horizon="30d"))
    subs = submitted(sc)
    assert len(subs) == 50
    assert [s.workload for s in subs] == [f"0-{n:06d}" for n in range(50)]
    assert len({s.id for s in subs}) == 50
    for s in subs:
        assert s.cluster == "lab" and s.allocation == "lab/olmo/pretrain"
        assert s.actor == "alice"  # first member of the leaf
        assert s.gpus in (1, 2)
        assert s.min_runtime == 900.0 and s.resumable is False and s.tags == ("debug",)
        assert s.runtime is not None and s.runtime >= 1.0
        assert s.expected_runtime is None
    assert {s.gpus for s in subs} == {1, 2}


@pytest.mark.parametrize(
    ("allocation", "user", "actor"),
    [
        pytest.param("lab/olmo/pretrain", None, "alice", id="first-member"),
        pytest.param("lab/olmo/evals", None, "pm-olmo", id="manager-up-the-path"),
        pytest.param("lab/olmo/pretrain", "bob", "bob", id="explicit-member"),
        pytest.param("lab/olmo/pretrain", "pm-olmo", "pm-olmo", id="explicit-manager"),
        pytest.param("free/for-all", None, "sim", id="nobody-declared"),
    ],
)
def test_actor_defaults(tmp_path: Path, allocation: str, user: str | None, actor: str) -> None:
    allocations = [*base()["allocations"], {"path": "free/for-all"}]
    raw = base(
        allocations=allocations, workloads=[{"generate": gen(allocation=allocation, user=user)}]
    )
    if user is None:
        del raw["workloads"][0]["generate"]["user"]
    assert {s.actor for s in submitted(load(tmp_path, raw))} == {actor}


def test_contract_fields(tmp_path: Path) -> None:
    spec = gen(
        min_runtime=0,
        resumable=True,
        priority=2,
        tags=["filler", "x"],
        expected_runtime=True,
        name="sweep",
        runtime="2h",
        gpus=8,
        count=3,
    )
    subs = submitted(load(tmp_path, base(workloads=[{"generate": spec}])))
    assert [(s.min_runtime, s.resumable, s.priority, s.tags) for s in subs] == [
        (0.0, True, 2, ("filler", "x"))
    ] * 3
    assert [(s.gpus, s.runtime, s.expected_runtime) for s in subs] == [(8, 7200.0, 7200.0)] * 3
    assert [s.name for s in subs] == ["sweep-0", "sweep-1", "sweep-2"]


def test_default_contract(tmp_path: Path) -> None:
    spec = gen()
    del spec["min_runtime"], spec["resumable"], spec["tags"]
    subs = submitted(load(tmp_path, base(workloads=[{"generate": spec}])))
    assert {(s.min_runtime, s.resumable, s.priority, s.tags) for s in subs} == {
        (900.0, False, 0, ())
    }


def test_inputs_sorted_and_unique(tmp_path: Path) -> None:
    raw = base(
        health=[{"at": "30m", "host": 1}],
        workloads=[
            {"generate": gen(seed=1)},
            {"generate": gen(seed=2, allocation="lab/olmo/evals", arrival="uniform", rate_per_h=7)},
            {"generate": gen(seed=3, arrival="burst", rate_per_h=None, count=10, start="20m")},
        ],
    )
    sc = load(tmp_path, raw)
    events = list(sc.timed_inputs())
    assert len(events) == 50 + 50 + 10 + 1 == sc.workload_count + 1
    times = [e.time for e in events]
    assert times == sorted(times)
    assert len({e.id for e in events}) == len(events)
    assert len({e.workload for e in events if isinstance(e, WorkloadSubmitted)}) == 110
    assert {e.cluster for e in events} == {"lab"}
    # the burst: all ten at start + 20m, in entry order
    burst = [e for e in events if getattr(e, "workload", "").startswith("2-")]
    assert {e.time for e in burst} == {sc.start + 1200}
    assert [e.workload for e in burst] == [f"2-{n:06d}" for n in range(10)]


def test_timed_inputs_is_lazy(tmp_path: Path) -> None:
    sc = load(tmp_path, base(workloads=[{"generate": gen(count=1_000_000, rate_per_h=1000)}]))
    assert sc.workload_count == 1_000_000
    iterator = sc.timed_inputs()
    assert not isinstance(iterator, list)
    first = [next(iterator) for _ in range(3)]
    assert [e.workload for e in first] == ["0-000000", "0-000001", "0-000002"]


# ---------------------------------------------------------------- determinism


def two_generators(seed_a: int, seed_b: int) -> dict[str, Any]:
    return base(
        health=[{"at": "1h", "host": 2}],
        workloads=[
            {"generate": gen(seed=seed_a, count=200)},
            {
                "generate": gen(
                    seed=seed_b,
                    allocation="lab/olmo/evals",
                    gpus={"choices": [1, 8], "weights": [9, 1]},
                    runtime={"exponential": {"mean": "1h"}},
                )
            },
        ],
    )


def entry(events: list[dict], index: int) -> list[dict]:
    return [e for e in events if e.get("workload", "").startswith(f"{index}-")]


def test_same_scenario_same_events(tmp_path: Path) -> None:
    first = load(tmp_path, two_generators(1, 2), name="a.yaml")
    second = load(tmp_path, two_generators(1, 2), name="b.yaml")
    assert dumped(first.setup_events()) == dumped(second.setup_events())
    a, b = dumped(first.timed_inputs()), dumped(second.timed_inputs())
    assert a == b
    assert [e.model_dump_json() for e in first.timed_inputs()] == [
        e.model_dump_json() for e in second.timed_inputs()
    ]
    # iterating a scenario twice gives the same events as well
    assert dumped(first.timed_inputs()) == a


@pytest.mark.parametrize(
    ("seeds", "changed", "unchanged"),
    [
        pytest.param((1, 99), 1, 0, id="change-second-seed"),
        pytest.param((99, 2), 0, 1, id="change-first-seed"),
    ],
)
def test_seed_changes_only_its_entry(
    tmp_path: Path, seeds: tuple[int, int], changed: int, unchanged: int
) -> None:
    before = dumped(load(tmp_path, two_generators(1, 2), name="a.yaml").timed_inputs())
    after = dumped(load(tmp_path, two_generators(*seeds), name="b.yaml").timed_inputs())
    assert entry(before, unchanged) == entry(after, unchanged)
    assert entry(before, changed) != entry(after, changed)
    assert len(entry(before, changed)) == len(entry(after, changed))


def test_entries_independent_of_neighbours(tmp_path: Path) -> None:
    """Adding an entry in front only renumbers ids; the sampled work stays the same."""
    alone = submitted(load(tmp_path, base(workloads=[{"generate": gen(seed=5)}]), name="a.yaml"))
    raw = base(workloads=[{"generate": gen(seed=6, count=77)}, {"generate": gen(seed=5)}])
    together = [s for s in submitted(load(tmp_path, raw, name="b.yaml")) if s.workload[0] == "1"]
    assert [(s.time, s.gpus, s.runtime) for s in alone] == [
        (s.time, s.gpus, s.runtime) for s in together
    ]


def test_runtime_change_keeps_arrivals(tmp_path: Path) -> None:
    a = submitted(load(tmp_path, base(workloads=[{"generate": gen(runtime="1h")}]), name="a.yaml"))
    b = submitted(load(tmp_path, base(workloads=[{"generate": gen(runtime="2h")}]), name="b.yaml"))
    assert [(s.time, s.gpus) for s in a] == [(s.time, s.gpus) for s in b]
    assert {s.runtime for s in a} == {3600.0} and {s.runtime for s in b} == {7200.0}


# ---------------------------------------------------------------- distributions


def spec(**changes: Any) -> GenerateSpec:
    return GenerateSpec.model_validate(gen(**changes))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_poisson_rate(seed: int) -> None:
    count, rate = 20_000, 30.0
    offsets = arrival_offsets(spec(seed=seed, count=count, rate_per_h=rate, start="1h"))
    assert len(offsets) == count
    assert offsets == sorted(offsets) and offsets[0] > 3600
    hours = (offsets[-1] - 3600) / 3600
    # expected count/rate = 666.7 h; std of the sum of 20k exponentials is 0.7% of it
    assert abs(hours - count / rate) / (count / rate) < 0.03
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    # exponential gaps: standard deviation equals the mean (uniform gaps would give 0)
    assert 0.9 < statistics.pstdev(gaps) / statistics.fmean(gaps) < 1.1
    # arrivals in one hour are Poisson: variance ~ mean
    per_hour = [0] * (int(hours) + 2)
    for t in offsets:
        per_hour[int((t - 3600) // 3600)] += 1
    counts = per_hour[:-2]
    assert abs(statistics.fmean(counts) - rate) < 1.5
    assert 0.8 < statistics.pvariance(counts) / statistics.fmean(counts) < 1.25


def test_uniform_arrival_is_evenly_spaced() -> None:
    offsets = arrival_offsets(spec(arrival="uniform", count=5, rate_per_h=4, start="10m"))
    assert offsets == [600.0, 1500.0, 2400.0, 3300.0, 4200.0]


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        pytest.param({"count": 3, "start": "1h"}, [3600.0] * 3, id="all-at-start"),
        pytest.param(
            {"bursts": [{"at": "2h", "count": 2}, {"at": "30m", "count": 1}], "start": "1h"},
            [5400.0, 10800.0, 10800.0],
            id="bursts-sorted",
        ),
        pytest.param(
            {"bursts": [{"at": 0, "count": 2}], "count": 2}, [0.0, 0.0], id="count-matches"
        ),
    ],
)
def test_burst_arrival(changes: dict, expected: list[float]) -> None:
    changes = {"count": None, **changes}
    assert arrival_offsets(spec(arrival="burst", rate_per_h=None, **changes)) == expected


def test_burst_spread() -> None:
    offsets = arrival_offsets(
        spec(
            arrival="burst",
            rate_per_h=None,
            count=None,
            spread="1h",
            bursts=[{"at": "1d", "count": 500}, {"at": "2d", "count": 500}],
        )
    )
    assert offsets == sorted(offsets)
    first, second = offsets[:500], offsets[500:]
    assert min(first) >= 86400 and max(first) <= 86400 + 3600
    assert min(second) >= 2 * 86400 and max(second) <= 2 * 86400 + 3600
    assert max(first) - min(first) > 3000  # actually spread, not all at `at`


def test_burst_count_mismatch() -> None:
    with pytest.raises(ValueError, match="count 3 != sum of bursts' counts 2"):
        spec(arrival="burst", rate_per_h=None, count=3, bursts=[{"at": 0, "count": 2}])


@pytest.mark.parametrize(
    ("gpus", "expected"),
    [
        pytest.param(8, {8: 1.0}, id="fixed"),
        pytest.param([1, 2, 4], {1: 1 / 3, 2: 1 / 3, 4: 1 / 3}, id="uniform-choice"),
        pytest.param({"choices": [8, 64], "weights": [3, 1]}, {8: 0.75, 64: 0.25}, id="weighted"),
        pytest.param(
            {"choices": [1, 2, 4], "weights": [1, 0, 1]}, {1: 0.5, 4: 0.5}, id="zero-weight"
        ),
    ],
)
def test_gpu_choices(tmp_path: Path, gpus: Any, expected: dict[int, float]) -> None:
    raw = base(workloads=[{"generate": gen(count=6000, gpus=gpus, rate_per_h=1000)}])
    subs = submitted(load(tmp_path, raw))
    assert {s.gpus for s in subs} == set(expected)
    for value, fraction in expected.items():
        observed = sum(s.gpus == value for s in subs) / len(subs)
        assert abs(observed - fraction) < 0.03, (value, observed)


@pytest.mark.parametrize(
    ("runtime", "median", "mean", "low", "high"),
    [
        pytest.param(
            {"lognormal": {"median": "10m", "sigma": 1}},
            600,
            600 * math.exp(0.5),
            1,
            math.inf,
            id="lognormal",
        ),
        pytest.param(
            {"lognormal": {"median": "10m", "sigma": 1, "max": "20m", "min": "5m"}},
            600,
            None,
            300,
            1200,
            id="lognormal-capped",
        ),
        pytest.param(
            {"exponential": {"mean": "1h"}}, 3600 * math.log(2), 3600, 1, math.inf, id="exponential"
        ),
        pytest.param(
            {"uniform": {"min": "1h", "max": "3h"}}, 7200, 7200, 3600, 10800, id="uniform"
        ),
        pytest.param("45m", 2700, 2700, 2700, 2700, id="fixed"),
    ],
)
def test_runtime_distributions(
    tmp_path: Path, runtime: Any, median: float, mean: float | None, low: float, high: float
) -> None:
    raw = base(workloads=[{"generate": gen(count=8000, runtime=runtime, rate_per_h=1000)}])
    values = [s.runtime for s in submitted(load(tmp_path, raw))]
    assert low <= min(values) and max(values) <= high
    assert abs(statistics.median(values) - median) / median < 0.06
    if mean is not None:
        assert abs(statistics.fmean(values) - mean) / mean < 0.06
    if low != high:
        assert len(set(values)) > 1000


# ---------------------------------------------------------------- traces


def test_trace_entries() -> None:
    import projections.traces  # noqa: F401 - the readers this depends on

    sc = load_scenario(FIXTURES / "traces.yaml")
    assert sc.workload_count == 3 + 2 + 3
    events = list(sc.timed_inputs())
    times = [e.time for e in events]
    assert times == sorted(times)
    assert len({e.id for e in events}) == len(events)
    by_id = {e.workload: e for e in events if isinstance(e, WorkloadSubmitted)}
    start = sc.start
    # row values win over the entry's defaults; offset 1m shifts the whole trace
    a = by_id["job-a"]
    assert (a.time, a.allocation, a.gpus, a.runtime) == (start + 60, "team/a", 8, 3600.0)
    assert (a.actor, a.min_runtime, a.resumable, a.priority, a.tags) == (
        "alice",
        7200.0,
        True,
        2,
        ("train",),
    )
    # a row without id, user or contract: generated id, entry defaults, default user
    b = by_id["0-000001"]
    assert (b.time, b.allocation, b.min_runtime, b.resumable, b.priority) == (
        start + 120,
        "team/b",
        1800.0,
        True,
        0,
    )
    assert b.actor == "boss"  # no members in team/b: the first manager up the path
    assert b.tags == ("debug", "small")
    c = by_id["job-c"]
    assert (c.min_runtime, c.resumable, c.actor) == (0.0, False, "alice")
    # second trace: allocation map, then prefix; entry tags; no entry defaults -> 15m, false
    mapped, prefixed = by_id["1-000000"], by_id["1-000001"]
    assert (mapped.allocation, mapped.time, mapped.actor) == ("team/a", start + 30, "alice")
    assert (prefixed.allocation, prefixed.actor) == ("team/vc2", "boss")
    assert (mapped.min_runtime, mapped.resumable, mapped.tags) == (900.0, False, ("imported",))
    assert (mapped.expected_runtime, prefixed.expected_runtime) == (100.0, 200.0)
    assert a.expected_runtime is None
    # health event at 60 s sorts before the submission at the same time
    at_60 = [e for e in events if e.time == start + 60]
    assert [type(e) for e in at_60] == [HostHealth, WorkloadSubmitted]
    # generator entry (index 2) merged in
    assert [e.time - start for e in events if getattr(e, "workload", "").startswith("2-")] == [
        30.0,
        90.0,
        150.0,
    ]


def test_trace_duplicate_ids(tmp_path: Path) -> None:
    import projections.traces  # noqa: F401

    (tmp_path / "t.csv").write_text(
        "submit_time,runtime,gpus,allocation,workload\n0,1,1,lab/olmo/evals,j1\n"
    )
    raw = base(workloads=[{"trace": {"file": "t.csv", "format": "allot-csv"}}] * 2)
    with pytest.raises(ScenarioError, match=r"workloads\[1\]\.trace\.file: workload id 'j1'"):
        load(tmp_path, raw)


def test_trace_rows_must_go_to_leaves_of_the_scenario(tmp_path: Path) -> None:
    """As a generator's allocation is checked at load, so are a trace's rows: Philly VC
    names without a prefix or map used to give a run of 0 workloads, every row rejected."""
    import projections.traces  # noqa: F401

    rows = ["6214e9", "7f04d8", "6214e9", "lab/olmo", "11d7e2", "103959", "lab/olmo/evals"]
    (tmp_path / "vc.csv").write_text(
        "submit_time,runtime,gpus,allocation\n"
        + "".join(f"{n},60,1,{vc}\n" for n, vc in enumerate(rows))
    )
    raw = base(
        workloads=[{"generate": gen()}, {"trace": {"file": "vc.csv", "format": "allot-csv"}}]
    )
    with pytest.raises(ScenarioError) as caught:
        load(tmp_path, raw)
    assert str(caught.value) == (
        "lab.yaml: workloads[1].trace: vc.csv: 6 of 7 rows go to allocations that are not"
        " leaves of this scenario: '6214e9', '7f04d8', 'lab/olmo' and 2 more;"
        " leaves are: lab/olmo/pretrain, lab/olmo/evals;"
        " map the trace's tenants with allocation_prefix or allocation_map"
    )
    raw["workloads"][1]["trace"]["allocation_prefix"] = "lab/olmo/"
    with pytest.raises(ScenarioError, match=r"\(with allocation_prefix 'lab/olmo/'\)"):
        load(tmp_path, raw)
    (tmp_path / "vc.csv").write_text("submit_time,runtime,gpus,allocation\n0,60,1,evals\n")
    assert load(tmp_path, raw).workload_count == gen()["count"] + 1


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param(None, r"workloads\[0\]\.trace: .*missing\.csv", id="missing-file"),
        pytest.param(
            "submit_time,runtime,gpus,allocation\n0,x,1,a/b\n",
            r"workloads\[0\]\.trace: .*t\.csv:2: column runtime",
            id="bad-row",
        ),
    ],
)
def test_trace_errors(tmp_path: Path, text: str | None, message: str) -> None:
    import projections.traces  # noqa: F401

    name = "missing.csv" if text is None else "t.csv"
    if text is not None:
        (tmp_path / name).write_text(text)
    raw = base(workloads=[{"trace": {"file": name, "format": "allot-csv"}}])
    with pytest.raises(ScenarioError, match=message):
        load(tmp_path, raw)


def test_trace_skip_bad(tmp_path: Path) -> None:
    import projections.traces  # noqa: F401

    (tmp_path / "t.csv").write_text(
        "submit_time,runtime,gpus,allocation\n0,x,1,lab/olmo/evals\n5,10,1,lab/olmo/evals\n"
    )
    raw = base(workloads=[{"trace": {"file": "t.csv", "format": "allot-csv", "skip_bad": True}}])
    sc = load(tmp_path, raw)
    assert sc.workload_count == 1
    assert sc.trace_stats[0].skipped_bad == 1
    assert sc.skipped_rows() == [
        "lab.yaml: workloads[0].trace: t.csv: skipped 1 bad row of 2 (skip_bad: true); the "
        f"first: {tmp_path / 't.csv'}:2: column runtime: 'x' is not a duration (use seconds "
        "or e.g. 30s, 15m, 8h, 7d)"
    ]
    [event] = submitted(sc)
    assert (event.time, event.actor) == (sc.start + 5, "pm-olmo")
    (tmp_path / "t.csv").write_text("submit_time,runtime,gpus,allocation\n5,10,1,lab/olmo/evals\n")
    assert load(tmp_path, raw).skipped_rows() == []  # nothing to say


def test_trace_pods_never_scheduled_are_not_simulated_and_said(tmp_path: Path) -> None:
    import projections.traces  # noqa: F401

    (tmp_path / "pods.csv").write_text(
        "name,num_gpu,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
        "ran,1,evals,Running,0,60,5\nwaited,1,evals,Pending,10,70,\n"
    )
    raw = base(
        workloads=[
            {
                "trace": {
                    "file": "pods.csv",
                    "format": "alibaba-openb",
                    "allocation_prefix": "lab/olmo/",
                }
            }
        ]
    )
    sc = load(tmp_path, raw)
    assert sc.workload_count == 1
    assert sc.skipped_rows() == [
        "lab.yaml: workloads[0].trace: pods.csv: skipped 1 of 2 pods, never scheduled in the"
        " trace (no run, so no runtime to simulate)"
    ]


# ---------------------------------------------------------------- examples


def shape(sc: Scenario) -> dict[str, Any]:
    """What a scenario asks of its cluster, over its horizon."""
    assert sc.horizon is not None
    end = sc.start + sc.horizon
    work = unallocated = 0.0
    tags: dict[str, list[WorkloadSubmitted]] = {}
    for e in submitted(sc):
        if e.time >= end:
            continue
        assert e.runtime is not None
        work += e.gpus * e.runtime
        if e.min_runtime == 0:
            unallocated += e.gpus * e.runtime
        for tag in e.tags:
            tags.setdefault(tag, []).append(e)
    capacity = sc.hosts * sc.gpus_per_host * sc.horizon
    return {"demand": work / capacity, "unallocated": unallocated / capacity, "tags": tags}


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.yaml")), ids=lambda p: p.name)
def test_examples_load(path: Path) -> None:
    sc = load_scenario(path)
    assert sc.workload_count > 0
    events = list(sc.timed_inputs())
    assert len(events) == sc.workload_count + len(sc.spec.health)
    assert len({e.id for e in events}) == len(events)
    known = set(sc.leaves)
    assert {e.allocation for e in events if isinstance(e, WorkloadSubmitted)} <= known
    for e in events:
        if isinstance(e, WorkloadSubmitted):
            assert 0 <= e.min_runtime <= sc.config.max_min_runtime
            assert e.gpus <= 64


def test_lab_example_shape() -> None:
    sc = load_scenario(EXAMPLES / "lab.yaml")
    assert sc.hosts * sc.gpus_per_host == 1024 and sc.gpus_per_host == 8
    assert len(sc.leaves) == 15
    tops = [p for p, _ in sc.allocations if "/" not in p]
    assert len(tops) == 3
    leaf_weights = {a.weight for p, a in sc.allocations if p in sc.leaves and a}
    assert len(leaf_weights) > 3  # unequal weights
    assert 7 * 86400 <= sc.horizon <= 8 * 86400
    assert 5_000 <= sc.workload_count <= 15_000
    s = shape(sc)
    assert 2.0 <= s["demand"] <= 3.0, s["demand"]
    debug = s["tags"]["debug"]
    assert len(debug) > 1000
    assert all(e.gpus <= 2 and 0 < e.min_runtime <= 900 for e in debug)
    assert statistics.median(e.runtime for e in debug) < 30 * 60
    train = s["tags"]["train"]
    assert all(8 <= e.gpus <= 64 and e.resumable and 3600 <= e.min_runtime <= 7200 for e in train)
    assert statistics.median(e.runtime for e in train) > 3 * 3600
    filler = s["tags"]["filler"]
    assert filler and all(e.min_runtime == 0 for e in filler)
    assert 0 < s["unallocated"] < 0.5
    # bursty teams: some minute of the week sees a sweep's worth of submissions at once
    per_minute: dict[int, int] = {}
    for e in submitted(sc):
        minute = int(e.time // 60)
        per_minute[minute] = per_minute.get(minute, 0) + 1
    assert max(per_minute.values()) >= 5
    health = [e for e in sc.timed_inputs() if isinstance(e, HostHealth)]
    assert any(not e.healthy for e in health)


def test_debug_flood_example_shape() -> None:
    sc = load_scenario(EXAMPLES / "debug-flood.yaml")
    assert sc.hosts * sc.gpus_per_host == 256
    s = shape(sc)
    assert 2.0 <= s["demand"] <= 3.0, s["demand"]
    debug, train = s["tags"]["debug"], s["tags"]["train"]
    assert len(debug) > 5 * len(train)
    assert all(e.gpus <= 2 and e.min_runtime <= 900 and e.priority == 1 for e in debug)
    assert all(8 <= e.gpus <= 64 and e.resumable for e in train)
    high = sum(e.priority == 2 for e in train) / len(train)
    assert high > 0.9  # priority inflation: training is (almost) all HIGH


def test_mixed_example_shape() -> None:
    sc = load_scenario(EXAMPLES / "mixed.yaml")
    assert sc.host_sizes == [(f"h{i}", 8) for i in range(12)] + [(f"ws{i}", 4) for i in range(16)]
    assert sc.host_name(17) == "ws5"  # as its comment says
    subs = submitted(sc)
    nvlink = [e for e in subs if e.one_host]
    assert nvlink and all(e.gpus == 8 and "nvlink" in e.tags for e in nvlink)
    assert any(e.gpus > 8 for e in subs) and any(e.gpus <= 2 for e in subs)
    health = [e for e in sc.timed_inputs() if isinstance(e, HostHealth)]
    assert {e.host for e in health} == {"h3", "ws5"}


@pytest.mark.parametrize(
    ("horizon", "offset", "late"),
    [(None, 0, 0), ("1h", 0, 1), ("1h", "30m", 2), ("3h", 0, 0)],
    ids=["no-horizon", "one-after", "offset-moves-rows-later", "all-inside"],
)
def test_trace_rows_after_the_horizon_are_counted(
    tmp_path: Path, horizon: str | None, offset: Any, late: int
) -> None:
    """`allot simulate` warns about them: a horizon shorter than the trace dropped
    rows without a word. A row at the horizon itself is still simulated."""
    (tmp_path / "t.csv").write_text(
        "submit_time,runtime,gpus,allocation\n0,60,1,lab/olmo/evals\n"
        "3600,60,1,lab/olmo/evals\n7200,60,1,lab/olmo/evals\n"
    )
    raw = base(workloads=[{"trace": {"file": "t.csv", "format": "allot-csv", "offset": offset}}])
    if horizon is not None:
        raw["horizon"] = horizon
    assert load(tmp_path, raw).beyond_horizon() == late


TEN_YEARS = 3650 * 86400


@pytest.mark.parametrize(
    ("trace", "text", "horizon", "refused"),
    [
        pytest.param(
            {"format": "philly", "allocation_prefix": "lab/olmo/"},
            "timestamp,duration,num_gpus,cluster\n1970-01-01 00:00:00,60,1,evals\n"
            "2017-10-03 09:00:00,60,1,evals\n",
            None,
            r"workloads\[0\]\.trace: t\.csv: its submissions span 17442d9h and the last comes"
            r" 17442d9h after the start, more than 3650d \(ten years\) of simulated time; check"
            r" the trace for a placeholder date",
            id="philly-1970-placeholder",
        ),
        pytest.param(
            {"format": "philly", "allocation_prefix": "lab/olmo/"},
            "timestamp,duration,num_gpus,cluster\n1970-01-01 00:00:00,60,1,evals\n"
            "2017-10-03 09:00:00,60,1,evals\n",
            "1d",
            None,
            id="philly-placeholder-with-a-horizon",
        ),
        pytest.param(
            {"format": "allot-csv", "offset": "1d"},
            f"submit_time,runtime,gpus,allocation\n0,60,1,lab/olmo/evals\n"
            f"{TEN_YEARS},60,1,lab/olmo/evals\n",
            None,
            r"the last comes 3651d after the start",
            id="offset-pushes-past",
        ),
        pytest.param(
            {"format": "allot-csv"},
            f"submit_time,runtime,gpus,allocation\n{TEN_YEARS},60,1,lab/olmo/evals\n",
            None,
            None,
            id="ten-years-exactly",
        ),
    ],
)
def test_trace_spanning_more_than_ten_years_needs_a_horizon(
    tmp_path: Path, trace: dict[str, Any], text: str, horizon: str | None, refused: str | None
) -> None:
    """The explicit horizon is bounded to ten years for memory's sake; without one, the
    run lasted until a 1970 placeholder's 2017 neighbours had ended: 47 years."""
    import projections.traces  # noqa: F401

    (tmp_path / "t.csv").write_text(text)
    raw = base(workloads=[{"trace": {"file": "t.csv", **trace}}])
    if horizon is not None:
        raw["horizon"] = horizon
    if refused is None:
        assert load(tmp_path, raw).workload_count == text.count("\n") - 1
        return
    with pytest.raises(ScenarioError, match=refused):
        load(tmp_path, raw)


def test_imported_traces_leave_actor_and_ids_to_the_scenario(tmp_path: Path) -> None:
    """An imported file said `"actor": "trace"` (no member of lab/olmo/pretrain: every
    submission rejected) and numbered its rows w0000001, ...: two imported files in one
    scenario were refused ("workload id 'w0000001' ... is used twice")."""
    from projections.traces import read_trace, write_submissions

    philly = tmp_path / "philly.csv"
    philly.write_text(
        "timestamp,duration,num_gpus,cluster\n2017-10-03 09:00:00,60,1,pretrain\n"
        "2017-10-03 09:01:00,60,1,pretrain\n"
    )
    openb = tmp_path / "openb.csv"
    openb.write_text(
        "name,num_gpu,qos,creation_time,deletion_time,scheduled_time\n,1,pretrain,0,60,0\n"
    )
    for source, fmt in ((philly, "philly"), (openb, "alibaba-openb")):
        result = read_trace(source, fmt, allocation_prefix="lab/olmo/")
        write_submissions(result.submissions, source.with_suffix(".jsonl"))
    raw = base(
        workloads=[
            {"trace": {"file": "philly.jsonl", "format": "allot-jsonl"}},
            {"trace": {"file": "openb.jsonl", "format": "allot-jsonl"}},
        ]
    )
    events = submitted(load(tmp_path, raw))
    assert sorted(e.workload for e in events) == ["0-000000", "0-000001", "1-000000"]
    assert {e.actor for e in events} == {"alice"}  # the leaf's first member, as for the CSV


@pytest.mark.parametrize(
    ("trace", "text", "message"),
    [
        pytest.param(
            {"allocation_prefix": "lab/my olmo/"},
            "submit_time,runtime,gpus,allocation\n0,60,1,evals\n",
            r"lab\.yaml: workloads\[0\]\.trace: allocation_prefix 'lab/my olmo/' makes no"
            r" allocation path",
            id="prefix",
        ),
        pytest.param(
            {},
            "submit_time,runtime,gpus,allocation\n0,60,1,lab/my evals\n",
            r"makes no allocation path .*; allocation_map can name it$",
            id="row-hint",
        ),
    ],
)
def test_trace_errors_name_the_scenarios_keys_not_the_commands_flags(
    tmp_path: Path, trace: dict[str, Any], text: str, message: str
) -> None:
    """They said --allocation-prefix and --allocation-map, options a scenario has not."""
    import projections.traces  # noqa: F401

    (tmp_path / "t.csv").write_text(text)
    raw = base(workloads=[{"trace": {"file": "t.csv", "format": "allot-csv", **trace}}])
    with pytest.raises(ScenarioError, match=message):
        load(tmp_path, raw)

"""The whole-lab roll-up (projections.rollup): sums up the tree and across clusters,
delivered from sums, time ranges — on hand-made journals worked out on paper and on
two real simulations of tiny.yaml under different cluster names.

Hand-made clusters have hosts of 8 GPUs; times are seconds after T0 (2026-01-01 00:00).
"""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from projections.rollup import Amounts, Rollup, RollupError, RollupResult, rollup
from projections.summary import summarize
from projections.usage import HOUR, JournalBuilder, UsageProjection, iter_journal, period_totals

T0 = JournalBuilder.START
H8 = list(range(8))
TINY = Path(__file__).resolve().parents[1] / "e2e" / "fixtures" / "tiny.yaml"
FIELDS = ("charged", "unallocated", "demand", "owed", "received", "met", "strict")


def gpu_h(x: float) -> float:
    return x * HOUR


def amounts_equal(a: Amounts, b: Amounts) -> None:
    for f in FIELDS:
        assert getattr(a, f) == pytest.approx(getattr(b, f), rel=1e-9, abs=1e-6), f


def summed(parts: list[Amounts]) -> Amounts:
    out = Amounts()
    for p in parts:
        out.add(p)
    return out


def check_conservation(result: RollupResult) -> None:
    """Every node = Σ children (+ its own accounts) = Σ of its per-cluster breakdown;
    the lab total = Σ roots = Σ clusters."""
    own: dict[str, Amounts] = {}
    for path, node in result.nodes.items():
        amounts_equal(node.amounts, summed(list(node.by_cluster.values())))
        assert set(node.by_cluster) == node.clusters
        children = summed([result.nodes[c].amounts for c in node.children])
        # what was charged to the node itself (a leaf, or a former leaf)
        rest = Amounts(*(getattr(node.amounts, f) - getattr(children, f) for f in FIELDS))
        if node.children:
            own[path] = rest
        for f in FIELDS:
            assert getattr(rest, f) >= -1e-6, (path, f)
        d = node.amounts.delivered
        assert d is None or 0.0 <= d <= 1.0
        assert node.amounts.met <= node.amounts.owed + 1e-6
        assert node.amounts.met <= node.amounts.received + 1e-6
    amounts_equal(result.total, summed([result.nodes[r].amounts for r in result.roots]))
    amounts_equal(result.total, summed([c.amounts for c in result.clusters.values()]))


def interleave(*journals: JournalBuilder) -> list:
    """Records of several clusters merged by time (each cluster keeps its order)."""
    tagged = [(e.time, i, n, e) for i, j in enumerate(journals) for n, e in enumerate(j.events)]
    return [e for *_, e in sorted(tagged, key=lambda x: x[:3])]


def concat(*journals: JournalBuilder) -> list:
    return [e for j in journals for e in j.events]


def cluster(name: str, hosts: int = 1, **weights: float) -> JournalBuilder:
    j = JournalBuilder(cluster=name)
    for i in range(hosts):
        j.host(f"h{i}")
    for path, weight in (weights or {"lab": 1, "lab/a": 1}).items():
        j.budget(path.replace("__", "/"), weight)
    return j


# ------------------------------------------------------------------ hand-made journals


def east_west() -> tuple[JournalBuilder, JournalBuilder]:
    """east: lab/a only leaf (share 1, 8 GPUs); `a1` 2 GPUs runs 0 → 5h:
        owed = received = 10 GPU-h, delivered 1.0.
    west: lab/a only leaf (share 1, 16 GPUs); `w1` 8 GPUs runs, `w2` 8 GPUs waits,
        0 → 6.25h: demand 16/h = entitlement, owed 100, received 50, delivered 0.5.
    lab/a overall: (10 + 50) / (10 + 100) = 0.5454..., not the mean 0.75."""
    east = cluster("east")
    east.submit("a1", "lab/a", 2).place("a1", {"h0": [0, 1]})
    east.at(5 * HOUR).finish("a1")
    west = cluster("west", hosts=2)
    west.submit("w1", "lab/a", 8).submit("w2", "lab/a", 8).place("w1", {"h0": H8})
    west.at(6.25 * HOUR).finish("w1").cancel("w2")
    return east, west


def surplus_and_shortfall() -> tuple[JournalBuilder, JournalBuilder]:
    """east: lab/a and lab/b weighted 1:1 on 8 GPUs (4 each); `a1` 8 GPUs on lab/a for
        1h: owed min(4, 8) = 4, received 8 (a surplus).
    west: lab/a only leaf on 8 GPUs; `w1` 4 GPUs runs, `w2` 4 GPUs waits, 1h: owed 8,
        received 4.
    lab/a: met = min(8, 4) + min(4, 8) = 8 of 12 owed = 0.667; pooling received/owed
    would say 12/12 = 1.0 and the mean of 1.0 and 0.5 is 0.75."""
    east = cluster("east", lab=1, lab__a=1, lab__b=1)
    east.submit("a1", "lab/a", 8).place("a1", {"h0": H8})
    east.at(HOUR).finish("a1")
    west = cluster("west")
    west.submit("w1", "lab/a", 4).submit("w2", "lab/a", 4).place("w1", {"h0": [0, 1, 2, 3]})
    west.at(HOUR).finish("w1").cancel("w2")
    return east, west


@pytest.mark.parametrize("merge", [concat, interleave], ids=["concatenated", "interleaved"])
@pytest.mark.parametrize(
    ("journals", "path", "owed_h", "received_h", "expected", "mean_of_ratios"),
    [
        pytest.param(east_west, "lab/a", 110, 60, 60 / 110, 0.75, id="ratio-of-sums-not-mean"),
        pytest.param(east_west, "lab", 110, 60, 60 / 110, 0.75, id="same-at-the-root"),
        pytest.param(
            surplus_and_shortfall,
            "lab/a",
            12,
            12,
            8 / 12,
            0.75,
            id="surplus-on-one-cluster-does-not-pay-another",
        ),
    ],
)
def test_delivered_is_computed_from_sums(
    merge, journals, path, owed_h, received_h, expected, mean_of_ratios
):
    east, west = journals()
    result = rollup(merge(east, west), since=T0)
    node = result.nodes[path]
    assert node.amounts.owed == pytest.approx(gpu_h(owed_h))
    assert node.amounts.received == pytest.approx(gpu_h(received_h))
    assert node.amounts.charged == node.amounts.received
    assert node.amounts.delivered == pytest.approx(expected)
    assert node.amounts.delivered != pytest.approx(mean_of_ratios)
    per_cluster = [a.delivered for a in node.by_cluster.values() if a.delivered is not None]
    assert sum(per_cluster) / len(per_cluster) == pytest.approx(mean_of_ratios)
    check_conservation(result)


def test_one_account_delivered_is_the_usage_projections_min_one_received_over_owed():
    east, _ = surplus_and_shortfall()
    result = rollup(east.events, since=T0)
    a = result.nodes["lab/a"].amounts
    assert (a.owed, a.received) == (pytest.approx(gpu_h(4)), pytest.approx(gpu_h(8)))
    assert a.delivered == 1.0
    assert result.nodes["lab/b"].amounts.owed == 0
    assert result.nodes["lab/b"].amounts.delivered is None


def disjoint() -> tuple[JournalBuilder, JournalBuilder]:
    """east funds lab/olmo/{pretrain,sft}; west funds lab/tulu/rl and a second root
    ops/infra; they share only `lab`."""
    east = cluster("east", hosts=2, lab=1, lab__olmo=1, lab__olmo__pretrain=3, lab__olmo__sft=1)
    east.submit("p1", "lab/olmo/pretrain", 8).place("p1", {"h0": H8})
    east.submit("s1", "lab/olmo/sft", 2).place("s1", {"h1": [0, 1]})
    east.at(2 * HOUR).finish("s1")
    east.at(3 * HOUR).finish("p1")
    west = cluster("west", hosts=2, lab=1, lab__tulu=1, lab__tulu__rl=1, ops=1, ops__infra=1)
    west.submit("r1", "lab/tulu/rl", 16).place("r1", {"h0": H8, "h1": H8})
    west.at(HOUR).finish("r1").submit("i1", "ops/infra", 1).place("i1", {"h0": [0]})
    west.at(3 * HOUR).finish("i1")
    return east, west


def test_clusters_with_disjoint_subtrees():
    east, west = disjoint()
    result = rollup(interleave(east, west), since=T0)
    assert result.roots == ["lab", "ops"]
    assert list(result.nodes) == [
        "lab",
        "lab/olmo",
        "lab/olmo/pretrain",
        "lab/olmo/sft",
        "lab/tulu",
        "lab/tulu/rl",
        "ops",
        "ops/infra",
    ]
    clusters = {p: sorted(n.clusters) for p, n in result.nodes.items()}
    assert clusters == {
        "lab": ["east", "west"],
        "lab/olmo": ["east"],
        "lab/olmo/pretrain": ["east"],
        "lab/olmo/sft": ["east"],
        "lab/tulu": ["west"],
        "lab/tulu/rl": ["west"],
        "ops": ["west"],
        "ops/infra": ["west"],
    }
    charged = {p: n.amounts.charged / HOUR for p, n in result.nodes.items()}
    assert charged == {
        "lab": 8 * 3 + 2 * 2 + 16,
        "lab/olmo": 28,
        "lab/olmo/pretrain": 24,
        "lab/olmo/sft": 4,
        "lab/tulu": 16,
        "lab/tulu/rl": 16,
        "ops": 2,
        "ops/infra": 2,
    }
    assert result.total.charged == gpu_h(28 + 16 + 2)
    lab = result.nodes["lab"].by_cluster
    assert (lab["east"].charged, lab["west"].charged) == (gpu_h(28), gpu_h(16))
    # a subtree funded on one cluster only is that cluster's numbers alone
    alone = rollup(east.events, since=T0, until=result.until)
    amounts_equal(result.nodes["lab/olmo"].amounts, alone.nodes["lab/olmo"].amounts)
    check_conservation(result)


# ------------------------------------------------------------------ single cluster = usage


def fold_usage(events, start: float, end: float) -> UsageProjection:
    proj = UsageProjection(start=start, end=end)
    for e in events:
        if e.time <= end:
            proj.apply(e)
    proj.close(end=min(end, events[-1].time))
    return proj


def mixed_run() -> JournalBuilder:
    """Two leaves on 16 GPUs (3:1), preemption, unallocated filler, a sick host."""
    j = cluster("solo", hosts=2, lab=1, lab__a=3, lab__b=1)
    j.submit("a1", "lab/a", 8).place("a1", {"h0": H8})
    j.submit("f1", "lab/b", 4, min_runtime=0).place("f1", {"h1": [4, 5, 6, 7]})
    j.at(600).submit("d1", "lab/a", 2, min_runtime=900).place("d1", {"h1": [0, 1]})
    j.at(1200).submit("b1", "lab/b", 4)
    j.at(1800).preempt("f1", "unallocated", beneficiary="b1").place("b1", {"h1": [4, 5, 6, 7]})
    j.at(2400).finish("d1").place("f1", {"h1": [0, 1, 2, 3]}).health("h0", False, "xid")
    j.at(3600).finish("a1").submit("a2", "lab/a", 8)
    j.at(5400).finish("b1").health("h0", True)
    j.at(6000).place("a2", {"h0": H8})
    j.at(7200).finish("f1").tick()
    j.at(9000).finish("a2")
    return j


@pytest.mark.parametrize("form", ["models", "dicts"])
@pytest.mark.parametrize(
    ("since", "until"),
    [
        pytest.param(0, 9000, id="whole-run"),
        pytest.param(900, 4000, id="mid-hour-edges"),
        pytest.param(3600, 7200, id="second-hour"),
    ],
)
def test_single_cluster_equals_the_usage_projection(form, since, until):
    j = mixed_run()
    records = j.events if form == "models" else j.dicts()
    result = rollup(records, since=T0 + since, until=T0 + until)
    sums = period_totals(fold_usage(j.events, T0 + since, T0 + until).hourly_rows())
    assert sorted(sums) == ["lab/a", "lab/b"]
    for leaf, acc in sums.items():
        node = result.nodes[leaf]
        assert node.amounts.charged == pytest.approx(acc["charged_gpu_s"])
        assert node.amounts.owed == pytest.approx(acc["owed_gpu_s"])
        assert node.amounts.received == pytest.approx(acc["received_gpu_s"])
        assert node.amounts.demand == pytest.approx(acc["demand_gpu_s"])
        assert node.amounts.unallocated == pytest.approx(acc["unallocated_gpu_s"])
        assert node.amounts.strict == pytest.approx(acc["strict_gpu_s"])
    # the summary's delivered (DESIGN §2) per allocation and overall
    summary = summarize(j.events, policy="fairshare", start=T0 + since, end=T0 + until)
    d = summary["delivered"]
    for leaf, value in d["by_allocation"].items():
        assert result.nodes[leaf].amounts.delivered == pytest.approx(value, abs=1e-6)
    assert result.nodes["lab"].amounts.delivered == pytest.approx(d["overall"], abs=1e-6)
    assert result.total.delivered_hourly_strict == pytest.approx(d["hourly_strict"], abs=1e-6)
    check_conservation(result)


# ------------------------------------------------------------------ time range


def ranged() -> list:
    """east: a1 4 GPUs on lab/a 0 → 4h (window 2h journaled); west: w1 2 GPUs on lab/a
    0 → 2h, then its journal ends (window 3h)."""
    east = cluster("east")
    east.add("config.set", actor="admin", config={"window": "2h"})
    east.submit("a1", "lab/a", 4).place("a1", {"h0": [0, 1, 2, 3]})
    east.at(4 * HOUR).finish("a1")
    west = cluster("west")
    west.add("config.set", actor="admin", config={"window": 3 * HOUR})
    west.submit("w1", "lab/a", 2).place("w1", {"h0": [0, 1]})
    west.at(2 * HOUR).tick()
    return interleave(east, west)


@pytest.mark.parametrize(
    ("since", "until", "east_h", "west_h", "window"),
    [
        # default: the largest journaled window (3h) before the latest record (4h)
        pytest.param(None, None, 4 * 3, 2 * 1, 3 * HOUR, id="default-window"),
        pytest.param("2026-01-01", None, 4 * 4, 2 * 2, None, id="iso-since"),
        pytest.param("2026-01-01T01:00", "2026-01-01T03:30", 4 * 2.5, 2 * 1, None, id="iso-range"),
        pytest.param("90m", None, 4 * 1.5, 0, None, id="duration-before-latest"),
        pytest.param(T0 + 1800, T0 + 2700, 4 * 0.25, 2 * 0.25, None, id="epoch-seconds"),
        pytest.param(None, "3h", 4 * 1, 2 * 1, 3 * HOUR, id="until-moves-the-window"),
        pytest.param("now", None, 0, 0, None, id="empty-range"),
    ],
)
def test_time_range(since, until, east_h, west_h, window):
    result = rollup(ranged(), since=since, until=until)
    assert result.window == window
    node = result.nodes["lab/a"]
    assert node.by_cluster["east"].charged == pytest.approx(gpu_h(east_h))
    assert node.by_cluster["west"].charged == pytest.approx(gpu_h(west_h))
    assert node.amounts.charged == pytest.approx(gpu_h(east_h + west_h))
    # west's journal ends at 2h: it is not extrapolated to the latest record (4h)
    assert result.clusters["west"].end <= T0 + 2 * HOUR
    check_conservation(result)


def test_default_window_without_config_is_seven_days():
    east, west = east_west()
    result = rollup(concat(east, west))
    assert result.window == 7 * 86400.0
    assert result.until == T0 + 6.25 * HOUR
    assert result.since == result.until - 7 * 86400.0


@pytest.mark.parametrize(
    ("records", "kw", "message"),
    [
        pytest.param([], {}, "the journal is empty", id="empty"),
        pytest.param(
            ranged(), {"clusters": ["north"]}, "no records of cluster 'north'", id="cluster"
        ),
        pytest.param(ranged(), {"since": "yesterday"}, "not a time: 'yesterday'", id="bad-time"),
        pytest.param(
            ranged(), {"since": "1h", "until": "2h"}, "is before --since", id="until-before-since"
        ),
    ],
)
def test_errors(records, kw, message):
    clusters = kw.pop("clusters", None)
    with pytest.raises(RollupError, match=message):
        rollup(records, clusters=clusters, **kw)


def test_unknown_allocation_names_close_matches():
    result = rollup(ranged())
    with pytest.raises(RollupError, match=r"unknown allocation 'lab/b'.*did you mean lab/a"):
        result.rows(allocation="lab/b")


def test_lines_that_are_not_json_are_named():
    r = Rollup()
    with pytest.raises(RollupError, match=r"^journal record 2: not JSON: "):
        r.apply_lines([orjson.dumps(JournalBuilder().host("h0").dicts()[0]), b"{oops"])


def test_cluster_filter_and_depth():
    east, west = disjoint()
    result = rollup(interleave(east, west), since=T0, clusters=["west"])
    assert sorted(result.clusters) == ["west"]
    assert [n.path for n in result.rows(depth=1)] == ["lab", "lab/tulu", "ops", "ops/infra"]
    assert [n.path for n in result.rows(depth=0)] == ["lab", "ops"]
    assert [n.path for n in result.rows(allocation="lab/tulu")] == ["lab/tulu", "lab/tulu/rl"]
    payload = result.as_json(depth=0)
    assert [a["path"] for a in payload["allocations"]] == ["lab", "ops"]
    assert payload["total"]["charged_gpu_h"] == 18.0


def test_depth_counts_from_the_allocation_asked_for():
    """`-a lab/tulu --depth 0` is lab/tulu alone, as `allot shares -A` starts its tree
    there; counted from the roots it was nothing (lab/tulu is one level down)."""
    east, west = disjoint()
    result = rollup(interleave(east, west), since=T0, clusters=["west"])
    assert [n.path for n in result.rows(allocation="lab/tulu", depth=0)] == ["lab/tulu"]
    assert [n.path for n in result.rows(allocation="lab/tulu", depth=1)] == [
        "lab/tulu",
        "lab/tulu/rl",
    ]
    assert [n.path for n in result.rows(allocation="lab", depth=1)] == ["lab", "lab/tulu"]


# ------------------------------------------------------------------ property


def stop(j: JournalBuilder, at: float, how: str, wid: str) -> None:
    j.at(at)
    if how == "run":
        j.finish(wid)
    else:
        j.cancel(wid)


@st.composite
def journals(draw):
    leaves = ["lab/a", "lab/b/x", "lab/b/y", "ops/z"]
    out = []
    for name in ("east", "west"):
        j = JournalBuilder(cluster=name).host("h0").host("h1")
        known = draw(st.lists(st.sampled_from(leaves), min_size=1, max_size=4, unique=True))
        for leaf in known:
            j.budget(leaf, draw(st.integers(1, 4)))
        ends: list[tuple[float, str, str]] = []
        t = 0.0
        for i in range(draw(st.integers(0, 6))):
            t += draw(st.integers(0, 5400))
            for end in sorted(e for e in ends if e[0] <= t):
                stop(j, *end)
                ends.remove(end)
            j.at(t)
            wid = f"{name}-{i}"
            gpus = draw(st.integers(1, 8))
            j.submit(
                wid, draw(st.sampled_from(known)), gpus, min_runtime=draw(st.sampled_from([0, 900]))
            )
            if draw(st.booleans()):
                j.place(wid, {f"h{i % 2}": list(range(gpus))})
                ends.append((t + draw(st.integers(1, 3 * 3600)), "run", wid))
            else:
                ends.append((t + draw(st.integers(1, 3 * 3600)), "wait", wid))
        for end in sorted(ends):
            stop(j, *end)
        out.append(j)
    since = T0 + draw(st.integers(0, 4 * 3600))
    return out, since, since + draw(st.integers(0, 12 * 3600))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(journals())
def test_property_every_node_is_the_sum_of_its_children_and_clusters(drawn):
    (east, west), since, until = drawn
    result = rollup(interleave(east, west), since=since, until=until)
    check_conservation(result)
    for path, node in result.nodes.items():
        if node.leaf:
            continue
        # no work is charged to an inner node here: it is exactly Σ children
        amounts_equal(node.amounts, summed([result.nodes[c].amounts for c in node.children]))
        assert path in ("lab", "lab/b", "ops")


# ------------------------------------------------------------------ real simulations


@pytest.fixture(scope="module")
def simulated(tmp_path_factory) -> dict:
    """tiny.yaml simulated twice: as cluster `east`, and as `west` with half the hosts,
    another seed and lab/eval renamed lab/infer. Returns journals and summaries."""
    from projections.scenario import scenario_from_dict
    from projections.simulate import RunSpec, run_policy

    out = tmp_path_factory.mktemp("rollup-sim")
    raw = yaml.safe_load(TINY.read_text())
    variants = {"east": raw}
    west = orjson.loads(orjson.dumps(raw).replace(b"lab/eval", b"lab/infer"))
    west["cluster"]["hosts"] = 2
    west["workloads"][0]["generate"]["seed"] = 11
    variants["west"] = west
    runs = {}
    for name, spec_raw in variants.items():
        spec_raw = {**spec_raw, "cluster": {**spec_raw["cluster"], "name": name}}
        sc = scenario_from_dict(spec_raw, source=name)
        spec = RunSpec.of_scenario(sc)
        summary = run_policy(spec, "fairshare", out / name, reports=False)
        runs[name] = {
            "journal": out / name / "fairshare" / "journal.jsonl",
            "summary": summary,
            "start": sc.start,
            "end": sc.end_time(),
        }
    lab = out / "lab.jsonl"
    lab.write_bytes(b"".join(run["journal"].read_bytes() for run in runs.values()))
    return {"runs": runs, "lab": lab}


def test_two_simulated_clusters_roll_up(simulated):
    runs = simulated["runs"]
    start, end = runs["east"]["start"], runs["east"]["end"]
    r = Rollup()
    r.apply_lines(simulated["lab"].read_bytes().splitlines())
    result = r.result(since=start, until=end)
    assert sorted(result.clusters) == ["east", "west"]
    assert list(result.nodes) == ["lab", "lab/eval", "lab/infer", "lab/train"]
    assert sorted(result.nodes["lab/train"].clusters) == ["east", "west"]
    assert sorted(result.nodes["lab/infer"].clusters) == ["west"]
    check_conservation(result)
    for name, run in runs.items():
        d = run["summary"]["delivered"]
        lab = result.nodes["lab"].by_cluster[name]
        # each cluster's share of the roll-up is that simulation's own summary
        assert lab.delivered == pytest.approx(d["overall"], abs=1e-6)
        assert lab.owed / HOUR == pytest.approx(sum(d["owed_gpu_h"].values()), abs=0.01)
        assert lab.received / HOUR == pytest.approx(sum(d["received_gpu_h"].values()), abs=0.01)
        for leaf, value in d["by_allocation"].items():
            assert result.nodes[leaf].by_cluster[name].delivered == pytest.approx(value, abs=1e-6)
        charged = run["summary"]["gpu_hours"]["charged"]
        assert result.clusters[name].amounts.charged / HOUR == pytest.approx(charged, abs=0.01)
    # the lab's number is met/owed of the sums, not the mean of the clusters' numbers
    met = sum(result.nodes["lab"].by_cluster[c].met for c in runs)
    owed = sum(result.nodes["lab"].by_cluster[c].owed for c in runs)
    assert result.total.delivered == pytest.approx(met / owed)


def test_one_cluster_of_a_mixed_journal_equals_its_own_journal(simulated):
    runs = simulated["runs"]
    start, end = runs["west"]["start"], runs["west"]["end"]
    mixed = Rollup(["west"])
    mixed.apply_lines(simulated["lab"].read_bytes().splitlines())
    picked = mixed.result(since=start, until=end)
    alone = rollup(iter_journal(runs["west"]["journal"]), since=start, until=end)
    assert list(picked.nodes) == list(alone.nodes) == ["lab", "lab/infer", "lab/train"]
    for path in alone.nodes:
        amounts_equal(picked.nodes[path].amounts, alone.nodes[path].amounts)
    assert not math.isnan(alone.total.delivered or 0.0)

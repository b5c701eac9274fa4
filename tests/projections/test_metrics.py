"""MetricsCollector: Prometheus metrics folded from small hand-built journals.

Cluster: hosts of 8 GPUs; leaves lab/a and lab/b weighted 3:1 (with 16 healthy GPUs
lab/a is entitled to 12 GPUs, lab/b to 4). Times are seconds after JournalBuilder.START.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from domain.fairshare import ratio as fair_ratio
from projections.metrics import (
    ENDED_STATES,
    METRIC_NAMES,
    MetricsCollector,
    exposed_series_names,
    exposition,
)
from projections.usage import HOUR, JournalBuilder
from projections.views import fold

T0 = JournalBuilder.START
H8 = list(range(8))
DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "dashboards" / "allot.json"
# `host`: registered hosts (the flapping count); `path`: the data folder
ALLOWED_LABELS = {"cluster", "state", "reason", "class", "type", "allocation", "host", "path", "le"}


def cluster(hosts: int = 2, name: str = "test") -> JournalBuilder:
    j = JournalBuilder(cluster=name)
    for i in range(hosts):
        j.host(f"h{i}")
    return j.budget("lab", 1).budget("lab/a", 3).budget("lab/b", 1)


def collect(j: JournalBuilder, clock: float | None = None) -> MetricsCollector:
    now = clock if clock is not None else j.now
    return MetricsCollector(clock=lambda: now).apply_all(j.events)


def samples(c: MetricsCollector) -> dict[tuple[str, frozenset], float]:
    """{(sample name, labels): value} as a scrape would show them."""
    out = {}
    for family in text_string_to_metric_families(exposition(c.registry())):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def value(c: MetricsCollector, name: str, **labels: str) -> float:
    labels.setdefault("cluster", "test")
    return samples(c)[(name, frozenset(labels.items()))]


# ------------------------------------------------------------------ values


def test_gpus_by_state_partition_the_registered_gpus() -> None:
    j = cluster(hosts=3)
    j.submit("a1", "lab/a", gpus=4).place("a1", {"h0": [0, 1, 2, 3]})
    j.submit("f1", "lab/b", gpus=2, min_runtime=0).place("f1", {"h0": [4, 5]})
    j.at(60).health("h2", False, "xid-79")
    c = collect(j)
    got = {
        s: value(c, "allot_gpus", state=s) for s in ("allocated", "unallocated", "idle", "cordoned")
    }
    assert got == {"allocated": 4, "unallocated": 2, "idle": 2 + 8, "cordoned": 8}
    assert sum(got.values()) == 24
    j.at(120).health("h2", True, "repaired").finish("a1")
    c = collect(j)
    assert value(c, "allot_gpus", state="cordoned") == 0
    assert value(c, "allot_gpus", state="allocated") == 0
    assert value(c, "allot_gpus", state="idle") == 22
    # work still running on a host that turned unhealthy (protected, draining) holds its
    # GPUs there: counted as running, as `allot shares` does; only the free are cordoned
    j.at(180).health("h0", False, "xid-79")
    c = collect(j)
    got = {
        s: value(c, "allot_gpus", state=s) for s in ("allocated", "unallocated", "idle", "cordoned")
    }
    assert got == {"allocated": 0, "unallocated": 2, "idle": 16, "cordoned": 6}


def test_workloads_by_state() -> None:
    j = cluster()
    j.submit("a1", "lab/a", gpus=8).submit("a2", "lab/a", gpus=8).submit("a3", "lab/a", gpus=8)
    j.at(10).place("a1", {"h0": H8})
    j.at(20).cancel("a3")
    c = collect(j)
    assert value(c, "allot_workloads", state="pending") == 1
    assert value(c, "allot_workloads", state="running") == 1


def test_workloads_and_gpus_per_allocation() -> None:
    """A Kueue operator's panels are per ClusterQueue (kueue_pending_workloads,
    kueue_cluster_queue_resource_usage); allot's counts were per cluster only, so who
    waits and who holds the GPUs could not be graphed. Every leaf has its series, idle
    ones at 0, and the GPUs add up to allot_gpus's allocated and unallocated."""
    j = cluster()
    j.submit("a1", "lab/a", gpus=8).submit("a2", "lab/a", gpus=8)
    j.submit("f1", "lab/b", gpus=2, min_runtime=0)
    j.at(10).place("a1", {"h0": H8}).place("f1", {"h1": [0, 1]})
    c = collect(j)
    per = {
        (a, s): value(c, "allot_allocation_workloads", allocation=a, state=s)
        for a in ("lab/a", "lab/b")
        for s in ("pending", "running")
    }
    assert per == {
        ("lab/a", "pending"): 1,
        ("lab/a", "running"): 1,
        ("lab/b", "pending"): 0,
        ("lab/b", "running"): 1,
    }
    held = {
        (a, s): value(c, "allot_allocation_gpus", allocation=a, state=s)
        for a in ("lab/a", "lab/b")
        for s in ("allocated", "unallocated")
    }
    assert held == {
        ("lab/a", "allocated"): 8,
        ("lab/a", "unallocated"): 0,
        ("lab/b", "allocated"): 0,
        ("lab/b", "unallocated"): 2,
    }
    for s in ("allocated", "unallocated"):
        assert sum(v for (_, st), v in held.items() if st == s) == value(c, "allot_gpus", state=s)
    # a leaf with no work yet is there, at 0
    j.at(20).budget("lab/c", 1)
    c = collect(j)
    assert value(c, "allot_allocation_workloads", allocation="lab/c", state="pending") == 0
    assert value(c, "allot_allocation_gpus", allocation="lab/c", state="allocated") == 0


def test_preemptions_and_waits_per_allocation() -> None:
    """allot_preemptions_total and allot_queue_wait_seconds had no allocation: an
    operator could not graph who is preempted or who waits (Kueue has both per
    ClusterQueue). New series, so the existing ones' sums do not change; they add up
    to them."""
    j = cluster()
    j.submit("a1", "lab/a", gpus=8).submit("f1", "lab/b", gpus=8, min_runtime=0)
    j.at(30).place("f1", {"h1": H8})
    j.at(HOUR).place("a1", {"h0": H8})
    j.submit("a2", "lab/a", gpus=8)
    j.at(HOUR + 60).preempt("f1", "unallocated", beneficiary="a2").place("a2", {"h1": H8})
    j.at(2 * HOUR).preempt("a1", "requested")  # requeued: its wait after is not counted
    j.at(3 * HOUR).place("a1", {"h0": H8})
    c = collect(j)

    def preempted(allocation: str, reason: str) -> float:
        return value(c, "allot_allocation_preemptions_total", allocation=allocation, reason=reason)

    assert preempted("lab/b", "unallocated") == 1  # the preempted work's, not the beneficiary's
    assert preempted("lab/a", "unallocated") == 0
    assert preempted("lab/a", "requested") == 1
    assert preempted("lab/b", "fair_share") == 0  # every reason of every leaf, at 0
    for reason in ("unallocated", "requested", "fair_share"):
        total = value(c, "allot_preemptions_total", reason=reason)
        assert preempted("lab/a", reason) + preempted("lab/b", reason) == total

    def waits(allocation: str, sample: str, **labels: str) -> float:
        name = f"allot_allocation_queue_wait_seconds_{sample}"
        return value(c, name, allocation=allocation, **labels)

    assert waits("lab/a", "count") == 2  # a1 and a2, first placements only
    assert waits("lab/a", "sum") == HOUR + 60
    assert waits("lab/a", "bucket", le="60.0") == 1  # a2 waited 60 s
    assert waits("lab/a", "bucket", le="3600.0") == 2
    assert waits("lab/b", "count") == 1 and waits("lab/b", "sum") == 30
    for sample in ("count", "sum"):
        by_class = sum(
            value(c, f"allot_queue_wait_seconds_{sample}", **{"class": k})
            for k in ("short", "other")
        )
        assert waits("lab/a", sample) + waits("lab/b", sample) == by_class
    # a leaf with nothing yet has its series, at 0 (increase() misses a counter's
    # first step when the series only appears with it)
    j.at(4 * HOUR).budget("lab/c", 1)
    c = collect(j)
    assert value(c, "allot_allocation_preemptions_total", allocation="lab/c", reason="drain") == 0
    assert value(c, "allot_allocation_queue_wait_seconds_count", allocation="lab/c") == 0
    assert (
        value(c, "allot_allocation_queue_wait_seconds_bucket", allocation="lab/c", le="+Inf") == 0
    )


def test_queue_wait_histogram_by_class() -> None:
    j = cluster()
    j.submit("d1", "lab/b", gpus=1, min_runtime=3600, tags=("debug",))  # tagged debug
    j.submit("s1", "lab/b", gpus=2, min_runtime=600)  # short and small by the rule
    j.submit("t1", "lab/a", gpus=8, min_runtime=3600)  # other
    j.at(30).place("d1", {"h1": [0]}).place("s1", {"h1": [1, 2]})
    j.at(2 * HOUR).place("t1", {"h0": H8})
    # a requeue's wait is not a queue wait (submit → first placement only)
    j.at(3 * HOUR).preempt("t1").at(4 * HOUR).place("t1", {"h0": H8})
    c = collect(j)
    assert value(c, "allot_queue_wait_seconds_count", **{"class": "short"}) == 2
    assert value(c, "allot_queue_wait_seconds_sum", **{"class": "short"}) == 60
    assert value(c, "allot_queue_wait_seconds_bucket", **{"class": "short", "le": "10.0"}) == 0
    assert value(c, "allot_queue_wait_seconds_bucket", **{"class": "short", "le": "30.0"}) == 2
    assert value(c, "allot_queue_wait_seconds_count", **{"class": "other"}) == 1
    assert value(c, "allot_queue_wait_seconds_sum", **{"class": "other"}) == 2 * HOUR
    assert value(c, "allot_queue_wait_seconds_bucket", **{"class": "other", "le": "3600.0"}) == 0
    assert value(c, "allot_queue_wait_seconds_bucket", **{"class": "other", "le": "+Inf"}) == 1


def test_the_oldest_wait_shows_work_still_in_the_queue() -> None:
    """The histogram only sees waits that ended: a short job stuck in the queue showed
    nowhere, so the short-jobs alert could not fire for it."""
    j = cluster()
    j.submit("stuck", "lab/b", gpus=1, min_runtime=600)  # short, never placed
    j.submit("held", "lab/b", gpus=1, min_runtime=600).hold("held")  # not waiting to run
    j.submit("big", "lab/a", gpus=8, min_runtime=3600).place("big", {"h0": H8})
    j.at(HOUR).preempt("big")  # requeued: its wait starts again now
    j.at(HOUR + 900).tick()
    c = collect(j)
    assert value(c, "allot_oldest_wait_seconds", **{"class": "short"}) == HOUR + 900
    assert value(c, "allot_oldest_wait_seconds", **{"class": "other"}) == 900
    j.place("stuck", {"h1": [0]})
    assert value(collect(j), "allot_oldest_wait_seconds", **{"class": "short"}) == 0


def test_preemptions_decisions_and_rejections_are_counted() -> None:
    j = cluster()
    j.submit("f1", "lab/b", gpus=8, min_runtime=0).place("f1", {"h0": H8})
    j.submit("f2", "lab/b", gpus=8, min_runtime=0).place("f2", {"h1": H8})
    j.at(60).preempt("f1", "unallocated").preempt("f2", "fair_share", requeued=False)
    j.reject("bad1").reject("bad2")
    j.add("budget.rejected", ref="in-b", error="not a manager", allocation="lab")
    j.add("host.drained", host="h1")
    c = collect(j)
    assert value(c, "allot_preemptions_total", reason="unallocated") == 1
    assert value(c, "allot_preemptions_total", reason="fair_share") == 1
    assert value(c, "allot_preemptions_total", reason="drain") == 0
    assert value(c, "allot_decisions_total", type="placed") == 2
    assert value(c, "allot_decisions_total", type="preempted") == 2
    assert value(c, "allot_decisions_total", type="drained") == 1
    assert value(c, "allot_rejected_inputs_total", reason="workload.rejected") == 2
    assert value(c, "allot_rejected_inputs_total", reason="budget.rejected") == 1
    assert value(c, "allot_rejected_inputs_total", reason="host.rejected") == 0
    assert value(c, "allot_journal_records_total") == len(j.events)


def test_a_flapping_host_counts_its_cordons() -> None:
    """h3 reported unhealthy and healthy again every few seconds (a bad NIC) showed
    nowhere: its health now is one moment of it, `host list -R` empty whenever it was
    healthy. Only a change from healthy counts: a probe repeating `unhealthy` does not."""
    j = cluster(hosts=4)
    for i in range(3):
        j.at(10 * i).health("h3", False, "nic").at(10 * i + 5).health("h3", True)
    j.at(40).health("h1", False, "ecc").at(45).health("h1", False, "ecc again")
    c = collect(j)
    assert value(c, "allot_host_cordons_total", host="h3") == 3
    assert value(c, "allot_host_cordons_total", host="h1") == 1
    assert not [
        k for k in samples(c) if k[0] == "allot_host_cordons_total" and ("host", "h0") in k[1]
    ]


def test_the_data_folders_disk_space_is_exposed(tmp_path: Path) -> None:
    """A --data folder on a disk at 95% gave no sign before `allot serve` stopped on the
    full disk; the folder's filesystem is now read at each scrape."""
    c = collect(cluster())
    assert not [k for k in samples(c) if k[0].startswith("allot_data_filesystem")]
    c.data_dir = tmp_path
    folder = frozenset({("path", str(tmp_path))})
    scraped = samples(c)
    free = scraped[("allot_data_filesystem_avail_bytes", folder)]
    assert 0 < free <= scraped[("allot_data_filesystem_size_bytes", folder)]


def test_ended_workloads_are_counted_by_how_they_ended() -> None:
    j = cluster()
    j.submit("ok", "lab/a", gpus=1).place("ok", {"h0": [0]})
    j.submit("oom", "lab/a", gpus=1).place("oom", {"h0": [1]})
    j.submit("gone", "lab/a", gpus=1)
    j.submit("kept", "lab/b", gpus=8, min_runtime=0).place("kept", {"h1": H8})
    j.submit("drained", "lab/b", gpus=1, resumable=False).place("drained", {"h0": [2]})
    j.at(60).finish("ok").finish("oom", outcome="failed").cancel("gone")
    j.preempt("kept", "unallocated")  # requeued: it has not ended
    j.preempt("drained", "drain", requeued=False)
    c = collect(j)
    ended = {s: value(c, "allot_workloads_ended_total", state=s) for s in ENDED_STATES}
    assert ended == {
        "completed": 1, "failed": 1, "lost": 0, "cancelled": 1, "preempted": 0, "node_fail": 1,
    }  # fmt: skip


def test_decision_latency_measures_from_the_causing_record() -> None:
    j = cluster()
    j.at(100).submit("a1", "lab/a", gpus=8)
    cause = j.events[-1].id
    j.at(100.25).add(
        "workload.placed",
        workload="a1",
        allocation="lab/a",
        gpus=8,
        hosts={"h0": H8},
        charged=True,
        protected_until=T0 + 4000,
        cause=cause,
    )
    j.at(200).add("host.drained", host="h1", cause="never-seen")  # unknown cause: not observed
    c = collect(j)
    assert value(c, "allot_decision_latency_seconds_count") == 1
    assert value(c, "allot_decision_latency_seconds_sum") == pytest.approx(0.25)
    assert value(c, "allot_decision_latency_seconds_bucket", le="0.1") == 0
    assert value(c, "allot_decision_latency_seconds_bucket", le="0.25") == 1


def test_fair_share_ratio_is_the_schedulers() -> None:
    j = cluster()
    j.submit("a1", "lab/a", gpus=8).place("a1", {"h0": H8})
    j.at(2 * HOUR).tick()
    c = collect(j)
    state = fold(j.events).require()
    for path in ("lab", "lab/a", "lab/b"):
        assert value(c, "allot_fair_share_ratio", allocation=path) == pytest.approx(
            fair_ratio(state, path, state.now)
        )
    # 8 GPUs for 2 h against 3/4 of 16 GPUs over the default 7-day window
    assert value(c, "allot_fair_share_ratio", allocation="lab/a") == pytest.approx(
        8 * 2 * HOUR / (0.75 * 16 * 7 * 86400)
    )
    assert value(c, "allot_fair_share_ratio", allocation="lab/b") == 0


def test_delivered_ratio_and_its_counters() -> None:
    j = cluster()
    # lab/a waits 1 h for 8 GPUs, then runs 1 h: owed 8 GPU-h over 2 h... received 1 h
    j.submit("a1", "lab/a", gpus=8)
    j.at(HOUR).place("a1", {"h0": H8})
    # lab/b wants 4 (its entitlement) and gets them at once
    j.submit("b1", "lab/b", gpus=4).place("b1", {"h1": [0, 1, 2, 3]})
    j.at(2 * HOUR).tick()
    c = collect(j)
    assert value(c, "allot_owed_gpu_seconds_total", allocation="lab/a") == pytest.approx(
        8 * 2 * HOUR
    )
    assert value(c, "allot_received_gpu_seconds_total", allocation="lab/a") == pytest.approx(
        8 * HOUR
    )
    assert value(c, "allot_delivered_ratio", allocation="lab/a") == pytest.approx(0.5)
    assert value(c, "allot_delivered_ratio", allocation="lab/b") == pytest.approx(1.0)


def test_journal_lag_uses_the_wall_clock() -> None:
    j = cluster().at(100).tick()
    c = collect(j, clock=T0 + 130)
    assert value(c, "allot_journal_lag_seconds") == pytest.approx(30)
    assert value(c, "allot_journal_last_record_timestamp_seconds") == T0 + 100
    assert value(collect(j, clock=T0), "allot_journal_lag_seconds") == 0  # never negative


def test_wire_dicts_fold_like_models_and_unknown_types_are_skipped() -> None:
    j = cluster()
    j.submit("a1", "lab/a", gpus=8).at(10).place("a1", {"h0": H8}).at(20).tick()
    models = collect(j)
    dicts = MetricsCollector(clock=lambda: j.now)
    dicts.apply_all(j.dicts())
    dicts.apply({"type": "gpu.melted", "id": "x", "time": j.now, "cluster": "test"})
    assert exposition(dicts.registry()) == exposition(models.registry())
    assert dicts.skipped == 1


def test_clusters_are_folded_apart() -> None:
    a = cluster(hosts=1, name="east")
    b = cluster(hosts=2, name="west")
    c = MetricsCollector(clock=lambda: T0).apply_all([*a.events, *b.events])
    got = samples(c)
    assert got[("allot_gpus", frozenset({"cluster": "east", "state": "idle"}.items()))] == 8
    assert got[("allot_gpus", frozenset({"cluster": "west", "state": "idle"}.items()))] == 16


def test_empty_collector_exposes_nothing_but_is_valid() -> None:
    text = exposition(MetricsCollector().registry())
    assert list(text_string_to_metric_families(text))  # families, no samples
    assert "allot_gpus{" not in text


# ------------------------------------------------------------ exposition


def big_journal(workloads: int) -> JournalBuilder:
    j = cluster(hosts=4)
    for i in range(workloads):
        wid, user = f"w{i:04d}", f"user{i}"
        tags = ("debug",) if i % 3 == 0 else ("train",)
        j.at(i * 60).submit(wid, "lab/a" if i % 2 else "lab/b", gpus=1, tags=tags, actor=user)
        j.place(wid, {f"h{i % 4}": [i % 8]})
        j.at(i * 60 + 30).finish(wid) if i % 5 else j.at(i * 60 + 30).preempt(wid)
    j.reject("nope")
    return j


def test_exposition_names_every_metric_with_its_type() -> None:
    text = exposition(collect(big_journal(20)).registry())
    for name, kind in METRIC_NAMES.items():
        assert f"# TYPE {name} {kind}" in text, name
    for name in METRIC_NAMES:
        assert name.startswith("allot_")
        if METRIC_NAMES[name] == "counter":
            assert name.endswith("_total")
    assert {m for m in re.findall(r"^(allot_\w+)", text, re.M)} <= exposed_series_names()


def test_help_texts_say_what_an_operator_reads_off_them() -> None:
    """`GPUs by state.` left on call guessing what `cordoned` is; the lag's help did
    not say what value is normal."""
    text = exposition(collect(big_journal(3)).registry())
    helps = dict(re.findall(r"^# HELP (allot_\w+) (.*)$", text, re.M))
    assert "cordoned (free on unhealthy hosts)" in helps["allot_gpus"]
    assert "ticks every 10 s" in helps["allot_journal_lag_seconds"]
    assert "of the preempted work" in helps["allot_allocation_preemptions_total"]
    assert "kueue_admission_wait_time_seconds" in helps["allot_allocation_queue_wait_seconds"]


def test_labels_are_bounded() -> None:
    small, big = big_journal(10), big_journal(200)
    small_series, big_series = samples(collect(small)), samples(collect(big))
    # the number of series does not grow with the number of workloads or users
    assert set(small_series) == set(big_series)
    ids = {e.workload for e in big.events if getattr(e, "workload", None)}
    users = {e.actor for e in big.events}
    for _, labels in big_series:
        names = {k for k, _ in labels}
        assert names <= ALLOWED_LABELS
        for _, v in labels:
            assert v not in ids and v not in users


def test_private_registries_do_not_leak() -> None:
    a = collect(cluster(hosts=1))
    b = MetricsCollector()
    assert "allot_gpus{" in exposition(a.registry())
    assert "allot_gpus{" not in exposition(b.registry())
    assert not [m for m in REGISTRY.collect() if m.name.startswith("allot_")]


# ------------------------------------------------------------ grafana


def _promql_metric_names(expr: str) -> set[str]:
    """Series names an expression selects: identifiers that are not functions,
    keywords, label names (inside {} or by/without/on/ignoring ()) or durations."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings (label values)
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # range selectors
    expr = re.sub(r"\$\w+", "", expr)  # grafana variables
    keywords = {"by", "without", "on", "ignoring", "and", "or", "unless", "bool", "offset"}
    names = set()
    for m in re.finditer(r"[0-9][0-9A-Za-z_.+-]*|[A-Za-z_:][A-Za-z0-9_:]*", expr):
        word, rest = m.group(), expr[m.end() :].lstrip()
        if word[0].isdigit() or word in keywords or rest.startswith("("):
            continue
        names.add(word)
    return names


def dashboard_queries() -> list[str]:
    dash = json.loads(DASHBOARD.read_text())
    queries = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    for var in dash.get("templating", {}).get("list", []):
        q = var.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.fullmatch(r"label_values\((\w+),\s*\w+\)", q or "")
        queries.append(m.group(1) if m else q)
    return queries


def test_promql_name_extraction() -> None:
    assert _promql_metric_names(
        'histogram_quantile(0.9, sum by (class, le) (rate(x_bucket{a=~"$c"}[$__rate_interval])))'
    ) == {"x_bucket"}
    assert _promql_metric_names("sum without (le) (a) / on (cluster) b offset 5m") == {"a", "b"}


def test_dashboard_has_a_fixed_uid_and_the_required_panels() -> None:
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] == "allot-overview"
    titles = {p["title"] for p in dash["panels"]}
    for want in (
        "GPUs by state",
        "Queue wait p90 by class",
        "Preemptions by reason",
        "Delivered per allocation",
        "Fair-share ratio per allocation",
        "Journal lag",
        # who holds, who waits, who is preempted (a Kueue dashboard's per-ClusterQueue
        # panels): the per-allocation series were exported but not graphed
        "GPUs held per allocation",
        "Pending workloads per allocation",
        "Preemptions per allocation",
        "Queue wait p90 per allocation",
    ):
        assert want in titles
    assert len({p["id"] for p in dash["panels"]}) == len(dash["panels"])


def test_a_panel_of_unaggregated_series_names_the_cluster_in_its_legend() -> None:
    """The dashboard shows every cluster at once by default and each cluster has its own
    budget tree under the same paths: a legend of `{{allocation}}` alone gave the lines
    of two clusters one name."""
    dash = json.loads(DASHBOARD.read_text())
    plain = [
        (panel["title"], target)
        for panel in dash["panels"]
        for target in panel.get("targets", [])
        if re.fullmatch(r"[A-Za-z_:][A-Za-z0-9_:]*(\{[^}]*\})?", target["expr"].strip())
    ]
    assert plain, "no panel plots series as they are scraped"
    for title, target in plain:
        assert "{{cluster}}" in target.get("legendFormat", ""), title


def test_every_dashboard_query_uses_only_exposed_metrics() -> None:
    exposed = exposed_series_names()
    queries = dashboard_queries()
    assert queries
    for expr in queries:
        names = _promql_metric_names(expr)
        assert names, f"no metric in {expr!r}"
        assert names <= exposed, f"{expr!r} uses {sorted(names - exposed)}"


def test_metric_names_match_what_is_scraped() -> None:
    """METRIC_NAMES (what the dashboard test trusts) is what the collector emits."""
    text = exposition(collect(big_journal(5)).registry())
    emitted = {f.name for f in text_string_to_metric_families(text)}
    # the parser strips _total from counter family names
    declared = {n.removesuffix("_total") for n in METRIC_NAMES}
    assert emitted == declared


def test_a_recovering_scheduler_shows_only_that_it_recovers() -> None:
    """`serve --metrics-port` answers while it rebuilds its state (a long recovery
    looked like a dead exporter) but shows no half-folded numbers meanwhile."""
    c = collect(cluster())
    c.recovering = True
    text = exposition(c.registry())
    assert "allot_scheduler_recovering 1.0" in text
    assert {m for m in re.findall(r"^(allot_\w+)", text, re.M)} == {"allot_scheduler_recovering"}
    c.recovering = False
    text = exposition(c.registry())
    assert "allot_scheduler_recovering 0.0" in text and "allot_gpus{" in text


PROMETHEUS_DIR = DASHBOARD.parents[2] / "prometheus"
SCRAPE_LABELS = {"job", "instance"}  # Prometheus adds these to every scraped series


def _exposed_labels() -> dict[str, set[str]]:
    """Series name -> the label names the collector gives it (a host cordoned once, and
    a data folder, so that their series are there too)."""
    j = big_journal(5)
    j.health("h1", False, "nic")
    collector = collect(j)
    collector.data_dir = Path(__file__).parent
    text = exposition(collector.registry())
    out: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, set()).update(sample.labels)
    return out


def _selectors(expr: str) -> list[tuple[str, set[str]]]:
    """(series name, label names matched) of every `name{...}` selector in `expr`."""
    return [
        (name, set(re.findall(r"(\w+)\s*[=!]~?", matchers)))
        for name, matchers in re.findall(r"([A-Za-z_:][\w:]*)\{([^}]*)\}", expr)
    ]


def test_every_alert_rule_uses_only_exposed_metrics_and_labels() -> None:
    """promtool's unit tests feed the rules made-up series: a rule naming a metric or
    label allot does not export (a rename) would pass them and never fire. Also the
    tests' input series must be real, or they prove nothing."""
    import yaml

    rules = yaml.safe_load((PROMETHEUS_DIR / "alerts.yml").read_text())
    exprs = [r["expr"] for g in rules["groups"] for r in g["rules"]]
    tests = yaml.safe_load((PROMETHEUS_DIR / "alerts_test.yml").read_text())
    series = [s["series"] for t in tests["tests"] for s in t["input_series"]]
    assert exprs and series
    labels = _exposed_labels()
    labels["up"] = set()
    for expr in exprs:
        names = _promql_metric_names(expr)
        assert names and names <= set(labels), f"{expr!r} uses {sorted(names - set(labels))}"
    for expr in exprs + series:
        for name, used in _selectors(expr):
            unknown = used - labels[name] - SCRAPE_LABELS
            assert not unknown, f"{expr!r}: {name} has no label {sorted(unknown)}"

"""Idle GPUs from launcher readings: `allot queue`/`why`, `allot idle` and the metric
`allot_allocation_idle_gpus` agree on who holds GPUs that do no work."""

from __future__ import annotations

from domain import events as ev
from projections import views as v
from projections.metrics import MetricsCollector, exposition
from tests.domain.builders import cluster


def _journal(readings: list[tuple[str, float]]) -> list:
    """Two workloads running; at 10-minute steps the launcher reads (workload, util)."""
    c = cluster(hosts=1)
    c.budget("lab/a", 1, members=("alice",))
    c.budget("lab/b", 1, members=("bob",))
    c.submit("idler", "lab/a", gpus=4, min_runtime="2h", actor="alice")
    c.submit("worker", "lab/b", gpus=2, min_runtime="10m", actor="bob")
    for wid, util in readings:
        c.after("10m")
        c.input(ev.WorkloadUtilization, workload=wid, attempt=1, utilization=util,
                interval=600.0, actor="launcher")  # fmt: skip
    return c.journal


def _idle_metric(journal: list) -> dict[str, float]:
    collector = MetricsCollector()
    for e in journal:
        collector.apply(e)
    out = {}
    for line in exposition(collector.registry()).splitlines():
        if line.startswith("allot_allocation_idle_gpus{"):
            labels, value = line.rsplit(" ", 1)
            out[labels.split('allocation="')[1].split('"')[0]] = float(value)
    return out


def test_work_below_the_threshold_for_idle_after_is_idle_everywhere() -> None:
    # idler reads ~0% from its start to the last reading, 60 minutes later; worker is busy
    journal = _journal([("idler", 0.0), ("worker", 0.9)] * 2 + [("idler", 0.01)] * 2)
    view = v.fold(journal)
    rows = {r["id"]: r for r in v.queue_rows(view)}
    idler, worker = rows["idler"], rows["worker"]
    assert idler["usage"]["idle"] and idler["usage"]["idle_s"] == 60 * 60.0  # since it started
    assert "idle 1h" in idler["reason"] and "GPU utilization 1%" in idler["detail"]
    assert not worker["usage"]["idle"] and "idle" not in worker["reason"]
    assert "idle for 1h" in v.why(view, "idler")["current"]["text"]
    idle = v.idle_rows(view)
    assert [(r["id"], r["user"], r["gpus"], r["protected"]) for r in idle] == [
        ("idler", "alice", 4, True)
    ]
    assert _idle_metric(journal) == {"lab/a": 4.0, "lab/b": 0.0}


def test_a_busy_reading_ends_idleness_and_a_short_idle_spell_is_not_idle() -> None:
    journal = _journal([("idler", 0.0), ("idler", 0.0), ("idler", 0.5), ("idler", 0.0)])
    view = v.fold(journal)
    (row,) = [r for r in v.queue_rows(view) if r["id"] == "idler"]
    assert row["usage"]["idle_s"] == 600.0 and not row["usage"]["idle"]  # < idle_after 30m
    assert v.idle_rows(view) == [] and len(v.idle_rows(view, every=True)) == 1
    assert _idle_metric(journal)["lab/a"] == 0.0


def test_without_readings_or_with_stale_ones_nothing_is_idle() -> None:
    journal = _journal([("idler", 0.0)] * 4)
    c_late = cluster(hosts=1)  # (the same journal, then 40 minutes of silence)
    view = v.fold(journal)
    assert v.idle_rows(view)
    later = [*journal, ev.ClockTick(id="t", time=journal[-1].time + 2400, cluster=c_late.name)]
    later_view = v.fold(later)
    (row,) = [r for r in v.queue_rows(later_view) if r["id"] == "idler"]
    assert row["usage"]["stale"] and row["usage"]["idle_s"] is None
    assert v.idle_rows(later_view) == [] and _idle_metric(later)["lab/a"] == 0.0
    assert all("usage" not in r or r["usage"] is None for r in v.queue_rows(_journal([])))

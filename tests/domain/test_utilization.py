"""`workload.utilization`: a launcher's GPU reading is journaled (or rejected like a
late `workload.finished`) but never changes a decision (idle-GPU detection is
observability, not policy)."""

from __future__ import annotations

from domain import events as ev
from domain.decide import handle
from domain.state import State
from tests.domain.builders import cluster


def _scenario(report: bool) -> list:
    """Busy fair-share contention, with (or without) a reading between every input."""
    c = cluster(hosts=2)
    c.budget("lab/a", 1)
    c.budget("lab/b", 1)
    for n in range(4):
        c.submit(f"a{n}", "lab/a", gpus=4, min_runtime="20m", resumable=True)
    for step in range(12):
        c.after("7m")
        if report:
            for wid, w in list(c.state.workloads.items()):
                if w.state == "running":
                    # ids outside the driver's numbering, so decisions' `cause` match
                    reading = ev.WorkloadUtilization(id=f"u-{wid}-{step}", time=c.now,
                        cluster=c.name, actor="launcher", workload=wid, attempt=w.attempt,
                        utilization=0.0, interval=420.0)  # fmt: skip
                    assert c.send(reading) == [reading]
        if step == 2:
            for n in range(3):
                c.submit(f"b{n}", "lab/b", gpus=4, min_runtime="20m")
        c.tick()
    return [e for e in c.journal if e.type not in ev.INPUT_TYPES]


def test_decisions_are_byte_identical_with_and_without_readings() -> None:
    with_readings, without = _scenario(True), _scenario(False)
    assert any(e.type == "workload.preempted" for e in without)  # decisions to compare
    assert [ev.event_to_dict(e) for e in with_readings] == [ev.event_to_dict(e) for e in without]


def test_a_reading_of_the_running_attempt_is_journaled_and_folds_nothing() -> None:
    c = cluster(hosts=1)
    c.budget("lab/a", 1)
    c.submit("w1", "lab/a", gpus=2)
    before = c.state.version, c.state.shape_version, c.state.seq
    out = c.input(ev.WorkloadUtilization, workload="w1", attempt=1, utilization=0.01, memory=0.5)
    assert [e.type for e in out] == ["workload.utilization"]  # no cycle after it
    assert (c.state.version, c.state.shape_version, c.state.seq) == before


def test_readings_of_unknown_pending_or_old_attempts_are_rejected() -> None:
    c = cluster(hosts=1)
    c.budget("lab/a", 1)
    c.submit("w1", "lab/a", gpus=8, min_runtime=0)
    c.submit("w2", "lab/a", gpus=8, min_runtime="1h")  # preempts w1 (unallocated)
    assert c.state.workloads["w1"].state == "pending"
    for wid, attempt in (("nobody", 1), ("w1", 1), ("w2", 2)):
        out = c.input(ev.WorkloadUtilization, workload=wid, attempt=attempt, utilization=0.5)
        assert [e.type for e in out] == ["workload.rejected"], (wid, out)
        assert ev.is_informational(out[0])  # a refused reading causes no cycle either
    errors = [e.error for e in c.journal if e.type == "workload.rejected"]
    assert "unknown workload 'nobody'" in errors[0]
    assert "not running" in errors[1]
    assert "attempt 2" in errors[2] and "stale report" in errors[2]


def test_out_of_range_readings_are_refused_at_the_edge() -> None:
    state = State("c")
    for bad in ({"utilization": 1.5}, {"utilization": -0.1}, {"utilization": 0.5, "interval": 0}):
        raw = {"type": "workload.utilization", "id": "r", "time": 1.0, "cluster": "c",
               "workload": "w", "attempt": 1, **bad}  # fmt: skip
        out = handle(state, ev.parse_input(raw, 1.0))
        assert out[0].type == "workload.rejected", bad

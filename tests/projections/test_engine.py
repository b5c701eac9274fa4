"""The simulator's executor: completions, preemption progress and checkpoint loss."""

from __future__ import annotations

import pytest

from domain import events as ev
from domain.config import SchedulerConfig
from projections.engine import Engine, EngineOptions

T0 = 1_767_225_600.0


def _setup() -> list:
    return [
        ev.HostRegistered(id="h", time=T0, cluster="c", host="h0", gpus=8),
        ev.BudgetSet(id="b1", time=T0, cluster="c", allocation="lab", weight=1),
        ev.BudgetSet(id="b2", time=T0, cluster="c", allocation="lab/a", weight=1),
    ]


def _inputs() -> list:
    return [
        ev.WorkloadSubmitted(
            id="s",
            time=T0,
            cluster="c",
            workload="w",
            allocation="lab/a",
            gpus=8,
            min_runtime=900,
            resumable=True,
            runtime=3600,
        ),
        ev.HostHealth(
            id="sick", time=T0 + 1800, cluster="c", host="h0", healthy=False, reason="xid"
        ),
        ev.HostHealth(id="well", time=T0 + 2400, cluster="c", host="h0", healthy=True),
    ]


@pytest.mark.parametrize(
    ("loss", "finish_after"),
    [(0.0, 2400 + 1800), (600.0, 2400 + 2400), (5000.0, 2400 + 3600)],
    ids=["progress-kept", "ten-minutes-lost", "loss-capped-at-all-progress"],
)
def test_resumable_work_keeps_progress_minus_checkpoint_loss(
    loss: float, finish_after: float
) -> None:
    engine = Engine("c", SchedulerConfig(), EngineOptions(checkpoint_loss=loss))
    records = list(engine.run(_setup(), _inputs(), T0))
    kinds = [(r.type, round(r.time - T0)) for r in records if r.type.startswith("workload.")]
    assert ("workload.preempted", 1800) in kinds  # drained when the host failed
    assert [k for k in kinds if k[0] == "workload.placed"] == [
        ("workload.placed", 0),
        ("workload.placed", 2400),
    ]
    finished = [r for r in records if r.type == "workload.finished"]
    assert [(round(r.time - T0), r.attempt) for r in finished] == [(finish_after, 2)]


def test_jumps_nobody_explains_are_journaled_as_ticks() -> None:
    engine = Engine("c", SchedulerConfig(), EngineOptions())
    big = ev.WorkloadSubmitted(
        id="s2",
        time=T0 + 60,
        cluster="c",
        workload="big",
        allocation="lab/a",
        gpus=8,
        min_runtime=900,
        resumable=True,
        runtime=3000,
    )
    filler = ev.WorkloadSubmitted(
        id="s1",
        time=T0,
        cluster="c",
        workload="f",
        allocation="lab/a",
        gpus=8,
        min_runtime=0,
        resumable=True,
        runtime=7200,
    )
    records = list(engine.run(_setup(), [filler, big], T0))
    # the allocated job preempts the unallocated filler at once; when it ends the
    # filler resumes; every record's time is explained by an input or a tick
    types = [r.type for r in records]
    assert "workload.preempted" in types
    ticks = [round(r.time - T0) for r in records if r.type == "clock.tick"]
    assert 960 in ticks  # the big job's protection end, while the filler waited
    times = [r.time for r in records]
    assert times == sorted(times)


def _protected(resumable: bool) -> list:
    """`_inputs` with the workload protected past the failure (drain waits for it)."""
    submitted, sick, well = _inputs()
    return [submitted.model_copy(update={"min_runtime": 7200, "resumable": resumable}), sick, well]


@pytest.mark.parametrize(
    ("resumable", "loss", "expected"),
    [
        (
            True,
            0.0,
            [("finished", 1800, 1, "lost", True), ("placed", 2400, 2), ("finished", 4200, 2)],
        ),
        (
            True,
            600.0,
            [("finished", 1800, 1, "lost", True), ("placed", 2400, 2), ("finished", 4800, 2)],
        ),
        (False, 0.0, [("finished", 1800, 1, "lost", None)]),
    ],
    ids=["resumable-keeps-progress", "resumable-minus-checkpoint-loss", "not-resumable-ends"],
)
def test_a_host_that_dies_with_its_work_reports_it_lost(
    resumable: bool, loss: float, expected: list
) -> None:
    options = EngineOptions(checkpoint_loss=loss, lose_work_at=frozenset({"sick"}))
    engine = Engine("c", SchedulerConfig(), options)
    records = list(engine.run(_setup(), _protected(resumable), T0))
    seen = []
    for r in records[1:]:
        if r.type == "workload.finished":
            outcome = () if r.outcome == "completed" else (r.outcome, r.requeued)
            seen.append(("finished", round(r.time - T0), r.attempt, *outcome))
        elif r.type == "workload.placed" and r.time > T0:
            seen.append(("placed", round(r.time - T0), r.attempt))
    assert seen == expected
    assert all(r.type != "workload.preempted" for r in records)  # lost, not drained
    lost = next(r for r in records if r.type == "workload.finished")
    assert lost.actor == "executor"
    # reported right after the host's failure, as the launcher contract asks
    assert records[records.index(lost) - 1].type == "host.health"


def test_a_failure_not_named_drains_the_host_as_before() -> None:
    engine = Engine("c", SchedulerConfig(), EngineOptions(lose_work_at=frozenset({"other"})))
    records = list(engine.run(_setup(), _protected(True), T0))
    assert not [r for r in records if r.type == "workload.finished" and r.outcome == "lost"]
    finished = [r for r in records if r.type == "workload.finished"]
    # protected until 7200 s, so it keeps running on the sick host until it is done
    assert [(round(r.time - T0), r.attempt) for r in finished] == [(3600, 1)]


# --- a run without a horizon whose waiting work can never start ---------------------

# far more records than any of these runs has: a run that ticks for ever passes it
RECORD_LIMIT = 5_000


def _two_teams(hosts: int) -> list:
    setup = [
        ev.HostRegistered(id=f"h{i}", time=T0, cluster="c", host=f"h{i}", gpus=8)
        for i in range(hosts)
    ]
    for path in ("lab", "lab/a", "lab/b"):
        setup.append(ev.BudgetSet(id=path, time=T0, cluster="c", allocation=path, weight=1))
    return setup


def _job(workload: str, at: float, allocation: str, gpus: int, **contract: object) -> object:
    fields: dict = {"min_runtime": 900, "resumable": False, "runtime": 3600.0, **contract}
    return ev.WorkloadSubmitted(
        id=f"s-{workload}",
        time=T0 + at,
        cluster="c",
        workload=workload,
        allocation=allocation,
        gpus=gpus,
        **fields,
    )


def _bounded_run(engine: Engine, setup: list, inputs: list) -> list:
    from itertools import islice

    records = list(islice(engine.run(setup, inputs, T0), RECORD_LIMIT))
    assert len(records) < RECORD_LIMIT, "the run did not stop: it ticks for ever"
    return records


def test_a_run_stops_when_waiting_work_needs_a_host_that_stays_unhealthy() -> None:
    # h1 fails at 10 min for good; the 16-GPU job submitted at 20 min can never start
    inputs = [
        _job("small", 0, "lab/a", 8),
        ev.HostHealth(id="sick", time=T0 + 600, cluster="c", host="h1", healthy=False),
        _job("whole", 1200, "lab/b", 16),
    ]
    engine = Engine("c", SchedulerConfig(), EngineOptions())
    records = _bounded_run(engine, _two_teams(2), inputs)
    # it ends where its last change was (the small job's end), without the ticks that
    # followed it to no effect, so its period and a replay of its journal end there too
    assert records[-1].type == "workload.finished" and records[-1].workload == "small"
    assert engine.stalled_at == engine.end_time == T0 + 3600
    assert "whole" in engine.state.workloads  # still waiting: unfinished, not dropped


@pytest.mark.parametrize("ordering", ["fairshare", "legacy-priority"])
def test_a_run_stops_when_waiting_work_is_behind_work_that_never_ends(ordering: str) -> None:
    # a trace's job that never ended (no runtime) holds half the host for ever; the
    # whole-host job of the same team can never start, nor can anything preempt for it
    inputs = [
        _job("forever", 0, "lab/a", 4, runtime=None),
        _job("whole", 60, "lab/a", 8),
    ]
    engine = Engine("c", SchedulerConfig(ordering=ordering), EngineOptions())
    records = _bounded_run(engine, _two_teams(1), inputs)
    assert engine.stalled_at == T0 + 60
    assert records[-1].time == T0 + 60


def test_ticks_before_a_late_decision_are_journaled_as_before() -> None:
    # nothing happens for two hours while the never-ending job is protected; then its
    # protection ends and the other team's waiting job preempts it: the ticks of those
    # two hours are part of the run (a replay needs them), and the run ends by itself
    inputs = [
        _job("forever", 0, "lab/a", 8, runtime=None, min_runtime=7200, resumable=True),
        _job("next", 60, "lab/b", 8),
    ]
    config = SchedulerConfig(window=3600, bucket=900, max_min_runtime=7200)
    engine = Engine("c", config, EngineOptions())
    records = _bounded_run(engine, _two_teams(1), inputs)
    ticks = [round(r.time - T0) for r in records if r.type == "clock.tick"]
    assert ticks[:8] == [900 * i for i in range(1, 9)]
    preempted = next(r for r in records if r.type == "workload.preempted")
    assert (preempted.workload, round(preempted.time - T0)) == ("forever", 7200)
    assert engine.stalled_at is None
    times = [r.time for r in records]
    assert times == sorted(times)

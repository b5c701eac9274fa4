"""`allot queue --start`'s forecast: with no new input it must foresee what happens.

A simulated run whose work is all submitted up front is cut before some input (the
executor's reports and ticks included); the forecast from the cut must name the very
starts and ends the rest of the run holds, since nothing it assumes away happens."""

from __future__ import annotations

import os
from itertools import chain, islice

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain import events as ev
from domain.config import SchedulerConfig
from domain.rederive import is_cause
from projections.engine import Engine, EngineOptions
from projections.forecast import annotate, forecast, sentences, timeline
from projections.views import fold, queue_rows
from tests.projections.runs import T0, cluster_setup, simulated_run, submissions

HOUR = 3600.0


def _future(records: list, cut: int) -> tuple[dict, dict]:
    """First placement and first end (finish or preemption) of each workload after `cut`."""
    starts: dict = {}
    ends: dict = {}
    for r in records[cut:]:
        if r.type == "workload.placed":
            starts.setdefault(r.workload, (r.time, dict(r.hosts)))
        elif r.type == "workload.finished":
            ends.setdefault(r.workload, (r.time, "finished"))
        elif r.type == "workload.preempted":
            ends.setdefault(r.workload, (r.time, "preempted"))
    return starts, ends


def _check_every_cut(records: list, copy: bool = False, speed: float = 1.0) -> tuple[int, int]:
    """Forecast from before every input after the last submission; (starts, ends) checked.
    `copy`: the view is told the last record's time as it folds (a journal file's end)
    and keeps the tail itself; else the forecast reads the journal again."""
    # (a run whose every submission was refused, e.g. 16 GPUs on one host: every cut)
    submitted_by = max(
        (i for i, r in enumerate(records) if r.type == "workload.submitted"), default=-1
    )
    cuts = [i for i, r in enumerate(records) if i > max(submitted_by, 0) and is_cause(r)]
    checked_starts = checked_ends = 0
    for cut in cuts:
        if copy:
            view = fold(records[:cut], last_time=records[cut - 1].time)
            assert view.tail_copy is not None and view.tail_copy_at == view.tail_start
            again = None
        else:
            view = fold(records[:cut])
            again = records[:cut]
        pending = {wid for wid, w in view.state.workloads.items() if w.state == "pending"}
        fc = forecast(view, horizon_s=30 * 24 * HOUR, journal=again, speed=speed)
        starts, ends = _future(records, cut)
        expected_starts = {wid: starts[wid] for wid in pending}
        assert {wid: (s.time, s.hosts) for wid, s in fc.starts.items()} == expected_starts
        live = set(view.state.workloads)
        assert {wid: (e.time, e.how) for wid, e in fc.ends.items()} == {
            wid: ends[wid] for wid in live
        }
        checked_starts += len(expected_starts)
        checked_ends += len(live)
    return checked_starts, checked_ends


@pytest.mark.parametrize(
    ("seed", "hosts", "count"),
    [(1, 2, 30), (2, 3, 40), (3, 2, 25), (4, 4, 60)],
    ids=["2-hosts", "3-hosts", "2-hosts-few", "4-hosts-many"],
)
def test_with_no_new_input_the_forecast_is_what_happens(seed: int, hosts: int, count: int) -> None:
    # 4-hosts-many needs the re-derived tail: a cold copy of the state would decide its
    # first cycle otherwise than the scheduler did at one of the cuts
    starts, ends = _check_every_cut(simulated_run(seed, hosts, count))
    assert starts > 20 and ends > 20  # the run went on long enough to be worth it


@pytest.mark.parametrize(
    ("seed", "hosts", "count"),
    [(2, 3, 40), (4, 4, 60)],
    ids=["3-hosts", "4-hosts-many"],
)
def test_a_view_told_the_journals_end_forecasts_without_reading_it_again(
    seed: int, hosts: int, count: int
) -> None:
    # (4-hosts-many: a cold copy would be wrong at one cut, so the kept tail is used)
    starts, ends = _check_every_cut(simulated_run(seed, hosts, count), copy=True)
    assert starts > 20 and ends > 20


def test_a_journal_that_grew_past_the_expected_end_keeps_no_tail() -> None:
    records = simulated_run(seed=2, hosts=3, count=40)
    later = records[0].time + 3 * HOUR  # some usage buckets on
    cut = next(i for i, r in enumerate(records) if r.time > later and is_cause(r))
    # told an end in an earlier bucket than the journal's: the copy made there is
    # dropped when a later bucket begins, and the forecast is the re-read one's
    early = fold(records[:cut], last_time=records[0].time)
    assert early.tail_copy is None and early.tail_records == []
    exact = forecast(fold(records[:cut]), journal=records[:cut])
    assert forecast(early, journal=records[:cut]).starts == exact.starts


@settings(
    max_examples=int(os.environ.get("ALLOT_HYPOTHESIS_EXAMPLES", "15")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(seed=st.integers(0, 2**32), hosts=st.integers(1, 5), count=st.integers(3, 50))
def test_the_forecast_is_exact_for_any_run_with_no_new_input(
    seed: int, hosts: int, count: int
) -> None:
    _check_every_cut(simulated_run(seed, hosts, count))


@settings(
    max_examples=int(os.environ.get("ALLOT_HYPOTHESIS_EXAMPLES", "15")),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    seed=st.integers(0, 2**32),
    hosts=st.integers(1, 5),
    count=st.integers(3, 50),
    tick=st.sampled_from([7.0, 10.0, 60.0, 333.3]),
)
def test_the_forecast_is_exact_for_any_ticked_run_with_no_new_input(
    seed: int, hosts: int, count: int, tick: float
) -> None:
    # a live scheduler acts on a protection end at its ticker's next tick: the forecast
    # of a journal whose ticks say their cadence foresees those ticks, not the moments
    _check_every_cut(simulated_run(seed, hosts, count, tick_every=tick))


def _runtimes_times(records: list, factor: float) -> list:
    return [
        r.model_copy(update={"runtime": r.runtime * factor})
        if r.type == "workload.submitted" and r.runtime is not None
        else r
        for r in records
    ]


@pytest.mark.parametrize("tick", [None, 10.0], ids=["moments", "ticked"])
def test_the_forecast_of_work_the_simulated_executor_runs_faster(tick: float | None) -> None:
    """Under `allot executor --simulate --speed 4` work ends after runtime/4 (the
    scheduler never reads runtime, so the journal is the run of runtime/4 with the
    submissions' own runtimes in it). Forecast with `speed=4` it is exact; without,
    the ends came four times late."""
    speed = 4.0  # a power of two: the runtimes scale back exactly
    engine = Engine("c", SchedulerConfig(), EngineOptions(tick_every=tick))
    fast = engine.run(cluster_setup(3), _runtimes_times(submissions(7, 40), 1 / speed), T0)
    journal = _runtimes_times(list(fast), speed)
    starts, ends = _check_every_cut(journal, speed=speed)
    assert starts > 20 and ends > 20
    cut = next(i for i, r in enumerate(journal) if i > 60 and is_cause(r))
    view = fold(journal[:cut])
    happened = _future(journal, cut)[1]
    wrong = forecast(view, horizon_s=30 * 24 * HOUR, journal=journal[:cut]).ends
    live = set(view.state.workloads)
    assert {w: (e.time, e.how) for w, e in wrong.items()} != {w: happened[w] for w in live}


def test_a_ticked_run_acts_at_its_ticks_and_decides_otherwise() -> None:
    # the case the ticked forecast is for: the same work, ticked every 5 minutes, is
    # placed at other times than at the moments protections end (so the test above
    # checks something the moment-exact forecast would get wrong)
    tick = 300.0
    ticked = simulated_run(seed=4, hosts=4, count=60, tick_every=tick)
    exact = simulated_run(seed=4, hosts=4, count=60)
    ticks = [r for r in ticked if r.type == "clock.tick" and r.every is not None]
    assert ticks and all((r.time - T0) % tick == 0 for r in ticks)

    def placed(records: list) -> list:
        return [(r.workload, r.time) for r in records if r.type == "workload.placed"]

    assert placed(ticked) != placed(exact)
    cut = next(i for i, r in enumerate(ticked) if i > 80 and is_cause(r))
    view = fold(ticked[:cut])
    fc = forecast(view, horizon_s=30 * 24 * HOUR, journal=ticked[:cut])
    assert fc.tick_every == tick
    # a start that waited for a protection end or bucket edge is on the ticker's grid
    # (others follow a completion, reported at its own moment)
    starts = [s.time for s in fc.starts.values()]
    assert any((t - T0) % tick == 0 for t in starts)


def test_the_view_is_left_as_it_was() -> None:
    records = simulated_run(seed=5, hosts=2, count=30)
    cut = next(i for i, r in enumerate(records) if i > 40 and is_cause(r))
    view = fold(records[:cut])
    before = (
        view.state.now,
        {wid: (w.state, dict(w.hosts)) for wid, w in view.state.workloads.items()},
    )
    forecast(view)
    after = (
        view.state.now,
        {wid: (w.state, dict(w.hosts)) for wid, w in view.state.workloads.items()},
    )
    assert after == before


def test_a_short_horizon_leaves_late_starts_unknown() -> None:
    records = simulated_run(seed=2, hosts=2, count=30)
    cut = next(i for i, r in enumerate(records) if i > 60 and is_cause(r))
    view = fold(records[:cut])
    far = forecast(view, horizon_s=30 * 24 * HOUR)
    near = forecast(view, horizon_s=HOUR)
    assert all(s.time <= near.horizon_end for s in near.starts.values())
    late = {wid for wid, s in far.starts.items() if s.time > near.horizon_end}
    assert late and not late & set(near.starts)
    rows = [r for r in queue_rows(view) if r["state"] == "PENDING"]
    annotate(rows, near)
    assert {r["id"] for r in rows if r["expected_start"] is None} >= late
    wid = sorted(late)[0]
    assert sentences(near, wid, view.state.now)[0] == "expected start: not within 1h"


@pytest.mark.parametrize(("seed", "hosts", "count"), [(2, 3, 40), (4, 4, 60)], ids=str)
def test_asking_about_one_workload_stops_once_it_is_answered(
    seed: int, hosts: int, count: int
) -> None:
    # `allot why` asks about one workload: the same answer, from a shorter future
    records = simulated_run(seed, hosts, count)
    cut = next(i for i, r in enumerate(records) if i > 60 and is_cause(r))
    view = fold(records[:cut])
    full = forecast(view, horizon_s=30 * 24 * HOUR, journal=records[:cut])
    shorter = 0
    for wid in sorted(view.state.workloads):
        one = forecast(view, horizon_s=30 * 24 * HOUR, journal=records[:cut], wanted=[wid])
        assert (one.starts.get(wid), one.ends.get(wid)) == (
            full.starts.get(wid),
            full.ends.get(wid),
        )
        assert one.played <= full.played
        shorter += one.played < full.played
    assert shorter >= 3


def test_asking_about_no_live_workload_plays_nothing() -> None:
    records = simulated_run(seed=2, hosts=3, count=40)
    cut = next(i for i, r in enumerate(records) if i > 60 and is_cause(r))
    fc = forecast(fold(records[:cut]), wanted=["no-such-workload"])
    assert fc.played == 0 and not fc.starts and not fc.ends


@pytest.mark.parametrize("horizon", [0.0, -1.0], ids=["zero", "negative"])
def test_a_horizon_must_be_positive(horizon: float) -> None:
    view = fold(simulated_run(seed=1, hosts=2, count=5)[:10])
    with pytest.raises(ValueError, match="horizon"):
        forecast(view, horizon)


def _probe(time: float, **fields: object) -> ev.WorkloadSubmitted:
    spec = {"allocation": "lab/b", "gpus": 4, "min_runtime": 900.0, "runtime": 2 * HOUR}
    spec.update(fields)
    return ev.WorkloadSubmitted(
        id="probe-request", time=time, cluster="c", actor="u1", workload="probe", **spec
    )


@pytest.mark.parametrize(
    ("seed", "hosts", "count", "probe"),
    [
        (1, 2, 30, {}),
        (2, 3, 40, {"gpus": 16, "resumable": True}),
        (4, 4, 60, {"gpus": 1, "min_runtime": 0.0}),
        (3, 2, 25, {"allocation": "lab/a", "gpus": 8}),
    ],
    ids=["4-gpus", "16-gpu-gang", "1-gpu-unallocated", "8-gpus-heavy-allocation"],
)
def test_a_test_only_submission_starts_where_and_when_a_real_one_would(
    seed: int, hosts: int, count: int, probe: dict
) -> None:
    """`allot submit --test-only`: the forecast with one more submission equals a run in
    which that submission really arrives at that moment (and nothing after it).

    A live submission lands after everything the journal holds; in the simulator an
    input at the same moment as a tick or another input can land before some of them,
    so only cuts where the real run journals the same records before it are compared."""
    records = simulated_run(seed, hosts, count)
    submitted_by = max(i for i, r in enumerate(records) if r.type == "workload.submitted")
    cuts = [i for i, r in enumerate(records) if i > max(submitted_by, 0) and is_cause(r)]
    compared = 0
    for cut in cuts:
        view = fold(records[:cut])
        arrival = _probe(view.state.now, **probe)
        engine = Engine("c", SchedulerConfig(), EngineOptions())
        # the real run is read only as far as needed (its first `cut` records, then up to
        # the probe's placement): the rest of 30 days was most of this test's time
        real = engine.run(cluster_setup(hosts), [*submissions(seed, count), arrival], T0)
        before = list(islice(real, cut))
        if before != records[:cut]:
            continue  # it would have arrived among records the journal already holds
        fc = forecast(view, 30 * 24 * HOUR, journal=records[:cut], arrivals=[arrival])
        placed = next(
            r for r in chain(before, real) if r.type == "workload.placed" and r.workload == "probe"
        )
        start = fc.starts["probe"]
        assert (start.time, start.hosts) == (placed.time, dict(placed.hosts))
        compared += 1
    assert compared >= 5


@pytest.mark.parametrize(
    ("probe", "error"),
    [
        ({"allocation": "lab/nope"}, "unknown allocation"),
        ({"gpus": 64}, "GPUs"),
    ],
    ids=["unknown-allocation", "more-gpus-than-the-cluster"],
)
def test_a_test_only_submission_the_scheduler_would_refuse_says_why(
    probe: dict, error: str
) -> None:
    records = simulated_run(seed=1, hosts=2, count=10)
    view = fold(records[:30])
    fc = forecast(view, journal=records[:30], arrivals=[_probe(view.state.now, **probe)])
    assert error in fc.rejected["probe"]
    assert "probe" not in fc.starts


def _intervals(g: object, w0: float, w1: float) -> set[tuple]:
    """A GanttCollector's run intervals clipped to [w0, w1]: (from, to, GPU rows, preempted)."""
    out = set()
    for i in range(len(g.start)):
        a, b = g.start[i], g.end[i]
        if b > w0 and a < w1 and b > a:
            rows = tuple(g.rows[g.row_off[i] : g.row_off[i] + g.row_len[i]])
            out.add((max(a, w0), min(b, w1), rows, g.preempted[i]))
    return out


@pytest.mark.parametrize(("seed", "hosts", "count"), [(2, 3, 40), (4, 4, 60)], ids=str)
def test_the_forecast_timeline_is_the_runs_own_from_the_cut_on(
    seed: int, hosts: int, count: int
) -> None:
    from projections.gantt import collect

    records = simulated_run(seed, hosts, count)
    submitted_by = max(i for i, r in enumerate(records) if r.type == "workload.submitted")
    cut = next(i for i, r in enumerate(records) if i > submitted_by + 20 and is_cause(r))
    view = fold(records[:cut])
    now, end = view.state.now, records[-1].time
    fc = forecast(view, end - now, journal=records[:cut], keep_records=True)
    expected = timeline(view, fc)
    assert expected.kind == "forecast" and expected.first_time == now
    actual = collect(records, end)
    shown = _intervals(expected, now, end)
    assert len(shown) > 10 and shown == _intervals(actual, now, end)

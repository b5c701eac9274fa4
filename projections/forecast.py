"""When will it start? The queue played forward from the journal (`squeue --start`).

The simulator goes on from the journal's latest moment with the same `domain` core and
a copy of the scheduler's state: running work ends after the work it has left (the
submission's `runtime` when it has one, as simulated executors do, else the user's
`expected_runtime`; with neither it runs until preempted), nothing new is submitted,
and budgets and hosts stay as they are. Time moves as it does for the live scheduler:
a completion is acted on when it is reported (at once, as launchers do), a protection
end or usage-bucket edge at the ticker's first tick at or after it (its cadence and
phase are the journal's last tick that gave `every`; a journal without one, e.g. a
simulation's, is acted on at the moment itself, as the simulator journals). A pending workload's expected start is its
first placement in that future; a live workload's expected end is the first time it
finishes or is preempted there. Anything that changes those assumptions (new work
from a higher-ranked allocation, a job ending early, a host failing) moves the answer,
as `squeue --start`'s does.
"""

from __future__ import annotations

import math
import pickle
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from domain import State, evolve
from domain.durations import format_duration
from domain.events import event_to_dict
from domain.rederive import is_decision, rederive
from domain.state import RUNNING, id_order
from projections.engine import Engine, EngineOptions
from projections.views import iso, nodelist

DEFAULT_HORIZON_S = 2 * 86400.0


@dataclass(frozen=True, slots=True)
class ExpectedStart:
    time: float
    hosts: dict[str, tuple[int, ...]]
    preempts: tuple[str, ...]  # workloads its placement preempts


@dataclass(frozen=True, slots=True)
class ExpectedEnd:
    time: float
    how: str  # "finished" or "preempted"
    by: str | None = None  # preempted: the workload it makes room for
    requeued: bool = False


@dataclass
class Forecast:
    now: float
    horizon_end: float
    starts: dict[str, ExpectedStart] = field(default_factory=dict)  # pending now
    ends: dict[str, ExpectedEnd] = field(default_factory=dict)  # live now
    unknown_runtime: int = 0  # live workloads with neither runtime nor expected_runtime
    pending: frozenset[str] = frozenset()  # the workloads pending at `now` (and arrivals)
    live: frozenset[str] = frozenset()
    rejected: dict[str, str] = field(default_factory=dict)  # arrival -> the scheduler's error
    unhealthy: tuple[str, ...] = ()  # hosts down now: assumed to stay down
    running: frozenset[str] = frozenset()  # the workloads running at `now`
    # the journal's ticker's cadence: protection ends and bucket edges are acted on at
    # its next tick (None: no ticker said one, they are acted on at their moment)
    tick_every: float | None = None
    # the future as journal records, up to the horizon or until every live workload's
    # start and end are known (all of it with `forecast(..., keep_records=True)`)
    records: list[Any] = field(default_factory=list)
    played: int = 0  # records the future ran to before every question asked was answered


def work_needed(view: Any, speed: float = 1.0) -> tuple[dict[str, float | None], dict[str, float]]:
    """Per live workload: the work it needs (runtime, else expected_runtime, else None)
    and the work kept from earlier attempts: resumable work keeps the progress of its
    requeued attempts (preempted, or lost with their node), as the simulated launcher
    keeps it; other work requeued (`allot requeue`) starts over. `speed`: a `runtime`
    takes runtime/speed seconds (`allot executor --simulate --speed`); both are in
    those seconds, so the time an attempt ran counts as it is."""
    state = view.require()
    work: dict[str, float | None] = {}
    done: dict[str, float] = {}
    for wid, w in state.workloads.items():
        h = view.histories.get(wid)
        submitted = h.submitted if h is not None else None
        runtime = submitted.runtime if submitted is not None else None
        work[wid] = runtime / speed if runtime is not None else w.expected_runtime
        if h is None or (submitted is not None and not submitted.resumable):
            continue
        began = {p.attempt: p.time for p in h.placements}
        stops = [(q.attempt, q.time) for q in h.preemptions if q.requeued]
        stops.extend((lost.attempt, lost.time) for lost in h.lost)
        kept = sum(t - began[attempt] for attempt, t in stops if attempt in began)
        if kept:
            done[wid] = kept
    return work, done


def scheduler_state(view: Any, journal: Iterable[Any] | None) -> State:
    """A copy of the view's state that decides as the live scheduler would from here.

    Folding facts rebuilds the state but not what the scheduling cycle remembers
    between inputs (the last full cycle's outcome, which quick and light cycles build
    on), so the first cycle of a cold copy may decide otherwise than the scheduler.
    The first input of the latest usage bucket that has one ran a full cycle, which
    rebuilds all of that: with `journal` (the same records the view folded, read
    again), or from the copy the view kept at that input (`JournalView.tail_copy`, when
    it knew the journal's last time ahead), the facts are folded up to that input and
    the rest re-derived (`domain.rederive`). Should a re-made decision differ from the journal's (a
    journal written by other code), or without `journal`, the cold copy is used."""
    state = view.require()
    start = view.tail_start
    copied = view.tail_copy is not None and view.tail_copy_at == start
    if (
        (journal is not None or copied)
        and start is not None
        and (state.charged.next_edge(state.now) == view.tail_edge)
    ):
        if copied:  # the view kept the state at `start` and the records after it
            warm = pickle.loads(view.tail_copy)
            tail = view.tail_records
        else:
            from projections.journal import gc_paused

            warm = State(state.cluster)
            records = iter(journal)
            with gc_paused():
                for record in islice(records, start):
                    evolve(warm, record)
            tail = list(records)
        made = [event_to_dict(d) for _, decisions in rederive(warm, tail) for d in decisions]
        if warm.now == state.now and made == [event_to_dict(r) for r in tail if is_decision(r)]:
            return warm
    # (no input since the last bucket edge: the next cycle is a full one anyway)
    return pickle.loads(pickle.dumps(state, pickle.HIGHEST_PROTOCOL))


def forecast(
    view: Any,
    horizon_s: float = DEFAULT_HORIZON_S,
    journal: Iterable[Any] | None = None,
    arrivals: Sequence[Any] = (),
    keep_records: bool = False,
    wanted: Collection[str] | None = None,
    speed: float = 1.0,
) -> Forecast:
    """Play the view's state forward for `horizon_s` seconds; the view is not changed.
    `journal`: the records the view folded, read again (see `scheduler_state`).
    `arrivals`: submissions to add at the view's `now` (`allot submit --test-only`);
    they go through admission like any request, so `rejected` says why one would be
    refused, and their work is their `runtime`, else their `expected_runtime`.
    `keep_records`: play on to the horizon and keep the records (for `timeline`).
    `wanted`: only these workloads' starts and ends are asked for (`allot why`, `submit
    --test-only`): the play stops once they are known, not once every live one's is.
    `speed`: the launcher runs work `speed` times faster than its `runtime` says (the
    simulated executor's `--speed`); a user's `expected_runtime` is taken as it is."""
    if not horizon_s > 0:
        raise ValueError(f"the forecast horizon must be > 0 seconds, got {horizon_s}")
    if not (speed > 0 and math.isfinite(speed)):
        raise ValueError(f"the work speed must be a number > 0, got {speed}")
    state = view.require()
    now = state.now
    result = Forecast(now=now, horizon_end=now + horizon_s)
    work, done = work_needed(view, speed)
    result.unknown_runtime = sum(1 for wid in state.workloads if work.get(wid) is None)
    arrivals = [
        a.model_copy(
            update={
                "time": now,
                "runtime": a.runtime / speed if a.runtime is not None else a.expected_runtime,
            }
        )
        for a in arrivals
    ]
    arriving = frozenset(a.workload for a in arrivals)
    pending = result.pending = (
        frozenset(wid for wid, w in state.workloads.items() if w.state != RUNNING) | arriving
    )
    live = result.live = frozenset(state.workloads) | arriving
    result.running = frozenset(state.workloads) - pending
    result.unhealthy = tuple(
        sorted((name for name, h in state.hosts.items() if not h.healthy), key=id_order)
    )
    if not live:
        return result
    # a copy: the view (e.g. the dashboard's, folded on as the journal grows) stays as is
    future = scheduler_state(view, journal)
    # ids the journal cannot hold already (its ids are deduplicated, so a repeated one
    # would be rejected): the simulator's are `sim-...`, and forecasts are not journaled
    options = EngineOptions(horizon_end=now + horizon_s, id_prefix=f"forecast-{now:.3f}")
    ticker = getattr(view, "ticker", None)
    if ticker is not None:  # the live scheduler acts at its ticks: so does its future
        options.tick_from, options.tick_every = ticker
        result.tick_every = options.tick_every
    engine = Engine(cluster=state.cluster, config=state.config, options=options)
    engine.resume(future, work, done)
    starts, ends, rejected = result.starts, result.ends, result.rejected
    asked = None if wanted is None else frozenset(wanted) & live
    if asked is not None and not asked:
        return result  # nothing live to ask about
    victims: dict[str, list[str]] = {}  # beneficiary -> victims preempted for it so far
    for record in engine.play(arrivals):
        result.played += 1
        if keep_records:
            result.records.append(record)
        kind = record.type
        wid = getattr(record, "workload", None)
        if kind == "workload.preempted":
            if record.beneficiary:
                victims.setdefault(record.beneficiary, []).append(record.workload)
            if wid in live and wid not in ends:
                ends[wid] = ExpectedEnd(
                    record.time, "preempted", record.beneficiary, bool(record.requeued)
                )
        elif kind == "workload.placed":
            if wid in pending and wid not in starts:
                starts[wid] = ExpectedStart(
                    record.time, dict(record.hosts), tuple(victims.pop(wid, ()))
                )
        elif kind == "workload.finished" and wid in live and wid not in ends:
            ends[wid] = ExpectedEnd(record.time, "finished")
        elif kind == "workload.rejected" and wid in arriving:
            rejected[wid] = record.error
        if keep_records:
            continue
        if asked is None:
            answered = len(starts) + len(rejected) == len(pending)
            if answered and len(ends) + len(rejected) == len(live):
                break  # every question answered
        elif wid in asked and all(_known(result, w) for w in asked):
            break  # every question asked answered
    return result


def _known(fc: Forecast, wid: str) -> bool:
    """Is all the forecast can say of `wid` known: rejected, or its start (when pending)
    and its end?"""
    if wid in fc.rejected:
        return True
    return (wid not in fc.pending or wid in fc.starts) and wid in fc.ends


def timeline(view: Any, fc: Forecast) -> Any:
    """The forecast (made with `keep_records`) as a closed `projections.gantt.
    GanttCollector` from `now` to the horizon: the hosts, the work running now, then
    the forecast's own records."""
    from projections.gantt import GanttCollector

    state = view.require()
    now = fc.now
    g = GanttCollector()
    g.kind = "forecast"
    for path in state.tree.nodes:  # colours as in the picture of the past
        g.apply({"type": "budget.set", "time": now, "allocation": path})
    for name, host in sorted(state.hosts.items(), key=lambda item: item[1].index):
        g.apply({"type": "host.registered", "time": now, "host": name, "gpus": host.gpus})
        if not host.healthy:
            g.apply({"type": "host.health", "time": now, "host": name, "healthy": False})
    for w in state.workloads.values():
        g.apply(
            {
                "type": "workload.submitted",
                "time": now,
                "workload": w.id,
                "allocation": w.allocation,
            }
        )
        if w.state == RUNNING:  # placed before `now`: drawn from the window's left edge
            g.apply(
                {
                    "type": "workload.placed",
                    "time": w.start,
                    "workload": w.id,
                    "hosts": {h: list(gpus) for h, gpus in w.hosts.items()},
                    "charged": w.charged,
                    "protected_until": w.protected_until if w.charged else None,
                }
            )
    for record in fc.records:
        g.apply(record)
    g.close(fc.horizon_end)
    return g


def annotate(rows: list[dict[str, Any]], fc: Forecast) -> None:
    """Add the forecast to `projections.views.queue_rows` rows: `expected_start`
    (pending; None past the horizon), `expected_nodes`, `expected_preempts`, and
    `expected_end` with `expected_end_how`/`expected_end_by` (every live row)."""
    for row in rows:
        expected = expectation(fc, row["id"])
        if row["state"] != "PENDING":
            for key in list(expected):
                if not key.startswith("expected_end"):
                    del expected[key]
        row.update(expected)


def header(fc: Forecast) -> dict[str, Any]:
    """The forecast's terms, for JSON answers."""
    return {
        "from": iso(fc.now),
        "from_time": fc.now,
        "horizon_end": iso(fc.horizon_end),
        "horizon_end_time": fc.horizon_end,
        "live_without_runtime": fc.unknown_runtime,
        "unhealthy_hosts": list(fc.unhealthy),
        "tick_every": fc.tick_every,
        "assumes": "running work ends after its runtime (else expected_runtime; with "
        "neither it runs until preempted); no new submissions, budget or host changes "
        "(unhealthy hosts stay down); "
        + (
            f"protection ends are acted on at the scheduler's next tick (every {fc.tick_every:g} s)"
            if fc.tick_every is not None
            else "protection ends are acted on at once (no ticker cadence in the journal)"
        ),
    }


def assumptions(fc: Forecast) -> list[str]:
    """What a reader must know to judge the forecast: work with no runtime, hosts down."""
    notes = []
    if fc.unknown_runtime:
        n = fc.unknown_runtime
        notes.append(
            f"{n} live workload{'s' if n != 1 else ''} gave neither --runtime nor "
            f"--expected-runtime and {'are' if n != 1 else 'is'} taken to run until preempted."
        )
    if fc.unhealthy:
        notes.append(
            f"Unhealthy host{'s' if len(fc.unhealthy) != 1 else ''} {nodelist(fc.unhealthy)} "
            "taken to stay down."
        )
    return notes


def footnote(fc: Forecast, label: str = "START_TIME") -> str:
    """One line under a table of expected starts (column `label`): what it assumes."""
    span = format_duration(fc.horizon_end - fc.now)
    text = (
        f"{label} is a forecast: it assumes no new work arrives, budgets and hosts stay as "
        f"they are and running work ends after its runtime; N/A = not within {span}."
    )
    return " ".join([text, *assumptions(fc)])


def expectation(fc: Forecast, wid: str) -> dict[str, Any]:
    """One workload's expected start and end, for JSON answers (None: not within the
    horizon, or it is running already for `start`)."""
    start = fc.starts.get(wid)
    end = fc.ends.get(wid)
    return {
        "expected_start": iso(start.time) if start else None,
        "expected_start_time": start.time if start else None,
        "expected_nodes": nodelist(start.hosts) if start else "",
        "expected_hosts": {h: list(g) for h, g in start.hosts.items()} if start else {},
        "expected_preempts": list(start.preempts) if start else [],
        "expected_end": iso(end.time) if end else None,
        "expected_end_time": end.time if end else None,
        "expected_end_how": end.how if end else None,
        "expected_end_by": end.by if end else None,
    }


def victims_text(fc: Forecast, start: ExpectedStart) -> str:
    """`a, b (b: pending now, running by then)`: whom a start would preempt."""
    later = [v for v in start.preempts if v not in fc.running]
    text = ", ".join(start.preempts)
    if later:
        text += f" ({', '.join(later)}: pending now, running by then)"
    return text


def add_expectations(answer: dict[str, Any], view: Any, make: Callable[[], Forecast]) -> None:
    """Add to `allot why`'s `answer` (projections.views.why) what the forecast expects of
    its live workload: `forecast` (JSON) and lines of `text`. `make` gives the forecast,
    only called when there is something to forecast (held work starts only once
    released)."""
    wid = answer.get("workload")
    if wid is None:
        return  # a rejected request's id
    live = view.state.workloads.get(wid)
    if live is not None and live.on_hold:
        answer["text"].append(
            f"expected start: none while held; `allot release {live.id}` queues it again"
        )
    elif answer["current"]["state"] in ("PENDING", "RUNNING"):
        fc = make()
        answer["forecast"] = {**header(fc), **expectation(fc, wid)}
        answer["text"].extend(sentences(fc, wid, view.now))


def sentences(fc: Forecast, wid: str, now: float) -> list[str]:
    """`allot why`'s lines about one workload's expected future."""
    lines = []
    start = fc.starts.get(wid)
    end = fc.ends.get(wid)
    span = format_duration(fc.horizon_end - fc.now)
    if start is not None:
        text = (
            f"expected start: {iso(start.time)} (in {format_duration(start.time - now)}) "
            f"on {nodelist(start.hosts)}"
        )
        if start.preempts:
            text += f", preempting {victims_text(fc, start)}"
        lines.append(text)
    elif wid in fc.pending:
        lines.append(f"expected start: not within {span}")
    if end is not None:
        if end.how == "finished":
            what = "expected to finish"
        else:
            what = (
                f"expected to be preempted for {end.by}" if end.by else "expected to be preempted"
            )
            if end.requeued:
                what += " (and requeued)"
        lines.append(f"{what}: {iso(end.time)} (in {format_duration(end.time - now)})")
    elif wid in fc.live and (start is not None or wid not in fc.pending):
        lines.append(f"expected end: not within {span}")
    if lines:
        lines.append(
            "  (a forecast: no new work, budgets and hosts as they are, running work ending "
            "after its runtime)"
        )
        lines.extend("  " + note for note in assumptions(fc))
    return lines


__all__ = [
    "DEFAULT_HORIZON_S",
    "ExpectedEnd",
    "ExpectedStart",
    "Forecast",
    "annotate",
    "assumptions",
    "expectation",
    "footnote",
    "forecast",
    "header",
    "sentences",
    "timeline",
    "victims_text",
]

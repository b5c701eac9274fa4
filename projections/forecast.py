"""When will it start? The queue played forward from the journal (`squeue --start`).

The simulator goes on from the journal's latest moment with the same `domain` core and
a copy of the scheduler's state: running work ends after the work it has left (the
submission's `runtime` when it has one, as simulated executors do, else the user's
`expected_runtime`; with neither it runs until preempted), nothing new is submitted,
and budgets and hosts stay as they are. A pending workload's expected start is its
first placement in that future; a live workload's expected end is the first time it
finishes or is preempted there. Anything that changes those assumptions (new work
from a higher-ranked allocation, a job ending early, a host failing) moves the answer,
as `squeue --start`'s does.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

from domain import State, evolve
from domain.durations import format_duration
from domain.events import event_to_dict
from domain.rederive import is_cause, rederive
from domain.state import RUNNING
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
    how: str  # "completes" or "preempted"
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


def work_needed(view: Any) -> tuple[dict[str, float | None], dict[str, float]]:
    """Per live workload: the work it needs (runtime, else expected_runtime, else None)
    and the work kept from earlier attempts (requeued preemptions keep progress)."""
    state = view.require()
    work: dict[str, float | None] = {}
    done: dict[str, float] = {}
    for wid, w in state.workloads.items():
        h = view.histories.get(wid)
        submitted = h.submitted if h is not None else None
        runtime = submitted.runtime if submitted is not None else None
        work[wid] = runtime if runtime is not None else w.expected_runtime
        if h is None:
            continue
        began = {p.attempt: p.time for p in h.placements}
        kept = sum(
            q.time - began[q.attempt] for q in h.preemptions if q.requeued and q.attempt in began
        )
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
    again) the facts are folded up to that input and the rest re-derived
    (`domain.rederive`). Should a re-made decision differ from the journal's (a
    journal written by other code), or without `journal`, the cold copy is used."""
    state = view.require()
    start = view.tail_start
    if (
        journal is not None
        and start is not None
        and (state.charged.next_edge(state.now) == view.tail_edge)
    ):
        warm = State(state.cluster)
        records = iter(journal)
        for record in islice(records, start):
            evolve(warm, record)
        tail = list(records)
        made = [event_to_dict(d) for _, decisions in rederive(warm, tail) for d in decisions]
        if warm.now == state.now and made == [event_to_dict(r) for r in tail if not is_cause(r)]:
            return warm
    # (no input since the last bucket edge: the next cycle is a full one anyway)
    return pickle.loads(pickle.dumps(state, pickle.HIGHEST_PROTOCOL))


def forecast(
    view: Any,
    horizon_s: float = DEFAULT_HORIZON_S,
    journal: Iterable[Any] | None = None,
    arrivals: Sequence[Any] = (),
) -> Forecast:
    """Play the view's state forward for `horizon_s` seconds; the view is not changed.
    `journal`: the records the view folded, read again (see `scheduler_state`).
    `arrivals`: submissions to add at the view's `now` (`allot submit --test-only`);
    they go through admission like any request, so `rejected` says why one would be
    refused, and their work is their `runtime`, else their `expected_runtime`."""
    if not horizon_s > 0:
        raise ValueError(f"the forecast horizon must be > 0 seconds, got {horizon_s}")
    state = view.require()
    now = state.now
    result = Forecast(now=now, horizon_end=now + horizon_s)
    work, done = work_needed(view)
    result.unknown_runtime = sum(1 for wid in state.workloads if work.get(wid) is None)
    arrivals = [
        a.model_copy(
            update={
                "time": now,
                "runtime": a.runtime if a.runtime is not None else a.expected_runtime,
            }
        )
        for a in arrivals
    ]
    arriving = frozenset(a.workload for a in arrivals)
    pending = result.pending = (
        frozenset(wid for wid, w in state.workloads.items() if w.state != RUNNING) | arriving
    )
    live = result.live = frozenset(state.workloads) | arriving
    if not live:
        return result
    # a copy: the view (e.g. the dashboard's, folded on as the journal grows) stays as is
    future = scheduler_state(view, journal)
    # ids the journal cannot hold already (its ids are deduplicated, so a repeated one
    # would be rejected): the simulator's are `sim-...`, and forecasts are not journaled
    options = EngineOptions(horizon_end=now + horizon_s, id_prefix=f"forecast-{now:.3f}")
    engine = Engine(cluster=state.cluster, config=state.config, options=options)
    engine.resume(future, work, done)
    starts, ends, rejected = result.starts, result.ends, result.rejected
    victims: dict[str, list[str]] = {}  # beneficiary -> victims preempted for it so far
    for record in engine.play(arrivals):
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
            ends[wid] = ExpectedEnd(record.time, "completes")
        elif kind == "workload.rejected" and wid in arriving:
            rejected[wid] = record.error
        if len(starts) + len(rejected) == len(pending) and len(ends) + len(rejected) == len(live):
            break  # every question answered
    return result


def annotate(rows: list[dict[str, Any]], fc: Forecast) -> None:
    """Add the forecast to `projections.views.queue_rows` rows: `expected_start`
    (pending; None past the horizon), `expected_nodes`, `expected_preempts`, and
    `expected_end` with `expected_end_how`/`expected_end_by` (every live row)."""
    for row in rows:
        expected = expectation(fc, row["id"])
        if row["state"] != "PENDING":
            for key in ("expected_start", "expected_nodes", "expected_preempts"):
                del expected[key]
        row.update(expected)


def header(fc: Forecast) -> dict[str, Any]:
    """The forecast's terms, for JSON answers."""
    return {
        "from": iso(fc.now),
        "horizon_end": iso(fc.horizon_end),
        "live_without_runtime": fc.unknown_runtime,
        "assumes": "running work ends after its runtime (else expected_runtime; with "
        "neither it runs until preempted); no new submissions, budget or host changes",
    }


def footnote(fc: Forecast, label: str = "START_TIME") -> str:
    """One line under a table of expected starts (column `label`): what it assumes."""
    span = format_duration(fc.horizon_end - fc.now)
    text = (
        f"{label}: expected, if no new work arrives, budgets and hosts stay as they are "
        f"and running work ends after its runtime; N/A = not within {span}."
    )
    if fc.unknown_runtime:
        n = fc.unknown_runtime
        text += (
            f" {n} workload{'s' if n != 1 else ''} gave no runtime (--expected-runtime) and "
            f"{'are' if n != 1 else 'is'} taken to run until preempted."
        )
    return text


def expectation(fc: Forecast, wid: str) -> dict[str, Any]:
    """One workload's expected start and end, for JSON answers (None: not within the
    horizon, or it is running already for `start`)."""
    start = fc.starts.get(wid)
    end = fc.ends.get(wid)
    return {
        "expected_start": iso(start.time) if start else None,
        "expected_nodes": nodelist(start.hosts) if start else "",
        "expected_preempts": list(start.preempts) if start else [],
        "expected_end": iso(end.time) if end else None,
        "expected_end_how": end.how if end else None,
        "expected_end_by": end.by if end else None,
    }


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
            text += f", preempting {', '.join(start.preempts)}"
        lines.append(text)
    elif wid in fc.pending:
        lines.append(f"expected start: not within {span}")
    if end is not None:
        if end.how == "completes":
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
    return lines


__all__ = [
    "DEFAULT_HORIZON_S",
    "ExpectedEnd",
    "ExpectedStart",
    "Forecast",
    "annotate",
    "expectation",
    "footnote",
    "forecast",
    "header",
    "sentences",
]

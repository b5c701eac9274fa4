"""Discrete-event simulation: drive the unchanged `domain` core with a virtual clock.

The clock jumps straight to the next moment anything can change: an input (arrival,
budget or health change), a completion, or a moment `domain.next_wakeup` names
(protection end, usage bucket edge). A jump no input explains is journaled as a
`clock.tick`, so the journal alone replays. The engine's own job is only to play
the executor: a placed workload finishes after its `runtime` of work; a resumable one
keeps its progress when preempted (minus `checkpoint_loss`). A host failure named in
`lose_work_at` also kills the work running there: the executor reports each attempt
`lost` right after the `host.health` input, as a launcher does when a node dies (a
resumable workload is requeued by the scheduler and keeps its progress, as when
preempted).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from domain import State, handle, next_wakeup
from domain import events as ev
from domain.config import SchedulerConfig
from domain.state import RUNNING

EXECUTOR = "executor"
SIMULATOR = "simulator"


@dataclass(slots=True)
class EngineOptions:
    checkpoint_loss: float = 0.0  # seconds of progress a preempted resumable workload loses
    horizon_end: float | None = None  # absolute time to stop at
    # prefix of the ids of the engine's own inputs (reports, ticks): a run that goes on
    # from a journal's state needs ids that journal has not used (they are deduplicated)
    id_prefix: str = "sim"
    # ids of `host.health` inputs (unhealthy) whose host dies with its work: each attempt
    # running there is then reported `lost`
    lose_work_at: frozenset[str] = frozenset()
    # a live scheduler's ticker: time moves only at inputs and at ticks every
    # `tick_every` seconds (on the grid through `tick_from`, else through the time play
    # starts), so a protection end or bucket edge is acted on at the first tick at or
    # after it, not at its moment (None: at its moment, as a simulation is journaled)
    tick_every: float | None = None
    tick_from: float | None = None


@dataclass(slots=True)
class _Run:
    runtime: float | None  # work needed; None = runs until the horizon
    resumable: bool = True  # keeps its progress when requeued (else starts over)
    done: float = 0.0  # work done in earlier attempts
    start: float = 0.0
    attempt: int = 0


@dataclass
class Engine:
    """Feeds inputs and its own executor reports through `handle`; yields journal records."""

    cluster: str
    config: SchedulerConfig
    options: EngineOptions = field(default_factory=EngineOptions)
    on_time: Callable[[float], None] | None = None  # progress callback (simulated time)

    def __post_init__(self) -> None:
        self.state = State(self.cluster, self.config)
        self.runs: dict[str, _Run] = {}
        self.completions: list[tuple[float, int, str, int]] = []  # (time, seq, workload, attempt)
        self._seq = 0
        self.end_time: float | None = None
        # without a horizon: the time after which nothing could change (see `_settled`)
        self.stalled_at: float | None = None

    def run(self, setup: Iterable[Any], inputs: Iterable[Any], start: float) -> Iterator[Any]:
        """Journal records, in order: the config at `start`, then `setup`, then `inputs`
        (time-sorted)."""
        config_event = ev.ConfigSet(
            id="sim-config",
            time=start,
            cluster=self.cluster,
            actor=SIMULATOR,
            config=self.config.model_dump(mode="json"),
        )
        yield from self._handle(config_event)
        for event in setup:
            yield from self._handle(event)
        if self.options.tick_every is not None:  # the ticker starts: its grid is journaled
            if self.options.tick_from is None:
                self.options.tick_from = start
            yield from self._handle(self._tick(start, "start"))
        yield from self.play(inputs)

    def play(self, inputs: Iterable[Any]) -> Iterator[Any]:
        """Go on from the current state: the time-sorted `inputs`, the executor's reports
        and the wakeups, up to the horizon (or until nothing can change)."""
        source = iter(inputs)
        pending_input = next(source, None)
        horizon = self.options.horizon_end
        prefix = self.options.id_prefix
        lose_work_at = self.options.lose_work_at
        ticks = 0
        # Without a horizon, ticks that changed nothing while no input or completion is
        # left are held back: if nothing ever changes again, they are dropped and the
        # run stops (see `_settled`); if a later tick decides something, they go out first.
        held: list[Any] = []
        last_change = self.state.now or 0.0
        if self.options.tick_every is not None and self.options.tick_from is None:
            self.options.tick_from = self.state.now
        while True:
            t_done = self._next_completion()
            t_input = pending_input.time if pending_input is not None else math.inf
            t_wake = next_wakeup(self.state)
            t_wake = math.inf if t_wake is None else self._next_tick(t_wake)
            t = min(t_done, t_input, t_wake)
            if math.isinf(t) or (horizon is not None and t > horizon):
                break
            if t_done <= t_input and t_done <= t_wake:
                _, _, wid, attempt = heapq.heappop(self.completions)
                event: Any = self._report(wid, attempt, "completed", t)
            elif t_input <= t_wake:
                event = pending_input
                pending_input = next(source, None)
            else:
                ticks += 1
                event = self._tick(t, ticks)
                if horizon is None and pending_input is None and math.isinf(t_done):
                    records = list(self._handle(event))
                    if all(r.type == "clock.tick" for r in records):
                        held.extend(records)
                        if self._settled(t, last_change):
                            self.stalled_at = last_change
                            break
                        continue
                    yield from held
                    held.clear()
                    yield from records
                    last_change = t
                    if self.on_time is not None:
                        self.on_time(t)
                    continue
            yield from self._handle(event)
            last_change = t
            if event.id in lose_work_at and event.type == "host.health" and not event.healthy:
                yield from self._lose_work(event.host, t)
            if self.on_time is not None:
                self.on_time(t)
        if self.stalled_at is None:
            yield from held  # the run ended by itself: they are part of it
            held.clear()
        if horizon is not None and self.state.now < horizon:
            # The run is measured up to its horizon (idle and waiting time after the
            # last event count): journal that moment, so the journal alone says where
            # the run ended and a replay of it measures the same period.
            ticks += 1
            yield from self._handle(
                ev.ClockTick(
                    id=f"{prefix}-tick-{ticks}", time=horizon, cluster=self.cluster, actor=SIMULATOR
                )
            )
            if self.on_time is not None:
                self.on_time(horizon)
        if horizon is not None:
            self.end_time = horizon
        else:
            self.end_time = self.stalled_at if self.stalled_at is not None else self.state.now

    def _tick(self, t: float, n: int | str) -> ev.ClockTick:
        """A wakeup's tick (a ticker's, saying its cadence, when the run is ticked)."""
        if self.options.tick_every is not None:
            # the grid is counted on from the last tick, as the forecast of a journal
            # cut here counts it: the same float arithmetic, so the same times
            self.options.tick_from = t
        return ev.ClockTick(
            id=f"{self.options.id_prefix}-tick-{n}",
            time=t,
            cluster=self.cluster,
            actor=SIMULATOR,
            every=self.options.tick_every,
        )

    def _next_tick(self, t: float) -> float:
        """When a moment `t` is acted on: then, or at the first tick at or after it."""
        every, origin = self.options.tick_every, self.options.tick_from
        if every is None or origin is None or not math.isfinite(t):
            return t
        tick = origin + math.ceil((t - origin) / every) * every
        # never before `t` (float rounding): a tick before a protection end does not end
        # it, and the same wakeup would come back for ever
        while tick < t:
            tick += every
        return tick

    def _settled(self, now: float, last_change: float) -> bool:
        """Whether nothing can change any more, with no input or completion to come: no
        decision for a whole window and two buckets (every allocation's usage in the
        window, and so every ratio and rank, now stays as it is), no protection left to
        end, no host held down for flapping, and no expected end ahead (reservations
        read both). Waiting work then waits
        for ever: behind work that never ends (a trace's job without a runtime) or for
        GPUs of hosts that stay unhealthy. Without this the run ticked at every bucket
        edge for ever, its journal growing by gigabytes."""
        state = self.state
        config = state.config
        if now - last_change < config.window + 2 * config.bucket:
            return False
        if math.isfinite(state.next_protection_end() or math.inf) or state.held_down:
            return False
        return all(
            w.start + w.expected_runtime <= now
            for w in state.workloads.values()
            if w.state == RUNNING and w.expected_runtime is not None
        )

    def resume(
        self, state: State, work: Mapping[str, float | None], done: Mapping[str, float]
    ) -> None:
        """Take over `state` (not copied: the caller gives it up) to play on from its
        `now`: each live workload needs `work[id]` seconds of work (None or missing: it
        runs until the horizon) less `done[id]`, kept from earlier attempts. Running
        work whose remaining time is already spent ends at once."""
        self.state = state
        for w in state.workloads.values():
            run = self.runs[w.id] = _Run(work.get(w.id), w.resumable, done.get(w.id, 0.0))
            if w.state != RUNNING:
                continue
            run.start = w.start
            run.attempt = w.attempt
            if run.runtime is not None:
                finish = max(state.now, w.start + max(0.0, run.runtime - run.done))
                self._seq += 1
                heapq.heappush(self.completions, (finish, self._seq, w.id, w.attempt))

    def _lose_work(self, host: str, t: float) -> Iterator[Any]:
        """Report every attempt running on `host` (which just turned unhealthy) `lost`,
        in the order it was placed there."""
        state = self.state
        on_host = state.hosts.get(host)
        if on_host is None:
            return
        for wid in list(on_host.workloads):
            w = state.workloads.get(wid)
            if w is None or w.state != RUNNING or wid not in on_host.workloads:
                continue  # stopped by an earlier report's cycle
            yield from self._handle(self._report(wid, w.attempt, "lost", t))

    def _report(self, wid: str, attempt: int, outcome: str, t: float) -> ev.WorkloadFinished:
        """The simulated launcher's `workload.finished` (ids `<prefix>-done-N` for
        completions, as before, and `<prefix>-lost-N`)."""
        self._seq += 1
        kind = "done" if outcome == "completed" else outcome
        return ev.WorkloadFinished(
            id=f"{self.options.id_prefix}-{kind}-{self._seq}",
            time=t,
            cluster=self.cluster,
            actor=EXECUTOR,
            workload=wid,
            outcome=outcome,
            attempt=attempt,
        )

    def _next_completion(self) -> float:
        heap = self.completions
        while heap:
            _, _, wid, attempt = heap[0]
            run = self.runs.get(wid)
            if run is None or run.attempt != attempt:
                heapq.heappop(heap)  # stale: preempted or cancelled since
                continue
            return heap[0][0]
        return math.inf

    def _handle(self, event: Any) -> Iterator[Any]:
        for record in handle(self.state, event):
            kind = record.type
            if kind == "workload.submitted":
                self.runs[record.workload] = _Run(record.runtime, record.resumable)
            elif kind == "workload.placed":
                self._started(record)
            elif kind == "workload.preempted" or (
                kind == "workload.finished" and record.requeued
            ):  # a requeued lost attempt keeps its progress, as a preempted one
                self._stopped(record)
            elif kind in ("workload.finished", "workload.cancelled"):
                self.runs.pop(record.workload, None)
            yield record

    def _started(self, record: ev.WorkloadPlaced) -> None:
        run = self.runs.get(record.workload)
        if run is None:
            return
        run.start = record.time
        run.attempt = record.attempt
        if run.runtime is not None:
            finish = record.time + max(0.0, run.runtime - run.done)
            self._seq += 1
            heapq.heappush(self.completions, (finish, self._seq, record.workload, record.attempt))

    def _stopped(self, record: ev.WorkloadPreempted | ev.WorkloadFinished) -> None:
        run = self.runs.get(record.workload)
        if run is None:
            return
        if not record.requeued:
            del self.runs[record.workload]
            return
        if not run.resumable:  # requeued all the same (`allot requeue`): it starts over
            run.done = 0.0
        else:
            ran = record.time - run.start
            run.done = max(0.0, run.done + ran - self.options.checkpoint_loss)
        run.attempt = -1  # no completion until placed again

"""`summary.json` of a run (issue 3 schema), folded from the journal in one pass.

Keys (exact, plus a few extras marked *):

- `policy`; *`period` {start, end, start_iso, end_iso, hours, horizon, ended}: the
  simulated period measured; `horizon` (set by `allot simulate`/`replay`) is true when
  its end was fixed before the run (a scenario's horizon, the recorded period a replay
  re-decides), false when the run ended with its work; `ended` says which:
  `horizon`, `recorded` (where the replayed journal ends: work may still be pending or
  running then, as it was in the recording), `work_ended`, or `stalled` (no horizon,
  and waiting work nothing could start any more);
- `workloads` {submitted, completed, rejected, preempted (workloads preempted at least
  once), unfinished (pending or running at the end), *unfinished_pending,
  *unfinished_running (the two parts of `unfinished`), *failed, *lost, *cancelled,
  *preempted_terminal (preempted and not requeued)};
- `preemptions` (count of `workload.preempted`), *`preemptions_by_reason`;
- *`lost_attempts` {all, requeued}: attempts reported `lost` (their node died), and of
  them those whose (resumable) workload was requeued rather than ended;
- *`rejected_by_reason` {error: count}: the most common reasons submissions were
  rejected (up to 10, most frequent first; `workloads.rejected` has the total);
- *`rejected_inputs` {input type: {count, first}}: other inputs the scheduler refused
  (budget, host and config changes, cancels), with the first one's error;
- `occupancy` (busy / healthy GPU-seconds), `occupancy_contended` (the same, only while
  some work with `min_runtime > 0` waits), `allocated_fraction`, `unallocated_fraction`
  (of busy GPU-seconds: charged vs not), *`gpu_hours` {healthy, busy (on healthy
  hosts: occupancy's numerator), charged and unallocated (wherever the work ran, a
  draining host too, so the two may add up to a little more than busy),
  contended_hours};
- *`contended_idle` {gpu_hours, headroom_gpu_hours, by_smallest_waiting_gpus: {GPUs:
  share}}: the idle GPU-hours that `occupancy_contended` leaves out (of them, those on
  the hosts kept for short jobs), by the GPUs of the smallest workload
  waiting at the time (idle GPUs beside waiting 1-GPU work is a scheduling loss; beside
  only whole-host work, fragmentation that work waits out);
- `delivered` {overall, min, by_allocation, hourly_strict, *hourly_strict_by_allocation,
  *owed_gpu_h, *received_gpu_h, *unrunnable_gpu_h}:
  DESIGN §2 period form over the hourly rows; leaves that were owed nothing are not in
  `by_allocation`; ratios are null when nothing was owed. Demand leaves out waiting work
  that the healthy hosts could not hold even empty (hosts removed, shrunk or unhealthy
  since it was accepted): no policy could run it, so it is owed nothing.
  `unrunnable_gpu_h` {leaf: GPU-hours} is that work's request, for the leaves that had
  any, so a reader sees what was left out;
- `wait_s` / `requeue_wait_s` {all, by_tag: {tag: ...}, *by_allocation: {leaf: ...}} each
  {p50, p90, p99, mean, count, *unplaced}: submit → first placement, and preemption →
  next placement after a requeue. Percentiles are nearest-rank; empty → null.
  *unplaced counts workloads still waiting at the end (not in the percentiles);
- *`config` (the scheduler config in force at the end) and *`weights` {path: weight}
  (the budget tree then): what `allot compare` shows when two runs differ in them;
- `engine` (passed through).

Counters and waits count events whose time lies in [start, end].
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from projections.usage import HOUR, UsageProjection, _Workload, iter_events

PERCENTILES = (50, 90, 99)


def percentile(sorted_values: Any, p: int) -> float:
    """Nearest-rank percentile of an ascending sequence (non-empty)."""
    n = len(sorted_values)
    rank = max(1, (p * n + 99) // 100)
    return float(sorted_values[rank - 1])


def wait_stats(values: Iterable[float], unplaced: int = 0) -> dict[str, Any]:
    data = sorted(values)
    out: dict[str, Any] = {f"p{p}": None for p in PERCENTILES}
    out["mean"] = None
    if data:
        for p in PERCENTILES:
            out[f"p{p}"] = round(percentile(data, p), 3)
        out["mean"] = round(math.fsum(data) / len(data), 3)
    out["count"] = len(data)
    out["unplaced"] = unplaced
    return out


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


_ENDS = {
    "horizon": "at its horizon",
    "recorded": "where the recorded journal ends",
    "work_ended": "when its work ended",
    "stalled": "when nothing more could start",
}


def how_it_ended(summary: dict[str, Any]) -> str:
    """How a run's period ended, in words, with the work still unfinished then:
    "where the recorded journal ends, 3 workloads still pending and 1 running". Empty
    for a summary that does not say (written before `period.ended`)."""
    period = summary.get("period") or {}
    how = _ENDS.get(str(period.get("ended")))
    if how is None:
        return ""
    counts = summary.get("workloads") or {}
    pending = counts.get("unfinished_pending")
    running = counts.get("unfinished_running")
    if not pending and not running:
        return how
    if pending is None or running is None:
        return how
    left = [f"{n:,} {what}" for n, what in ((pending, "pending"), (running, "running")) if n]
    noun = "workload" if pending + running == 1 else "workloads"
    return f"{how}, {pending + running:,} {noun} still unfinished ({' and '.join(left)})"


def _ratio(num: float, den: float) -> float | None:
    return round(num / den, 6) if den > 0 else None


class _Waits:
    """Wait samples overall, by tag and by allocation, as compact float arrays."""

    __slots__ = ("all", "by_allocation", "by_tag")

    def __init__(self) -> None:
        self.all = array("d")
        self.by_tag: dict[str, array] = {}
        self.by_allocation: dict[str, array] = {}

    def add(self, value: float, tags: tuple[str, ...], allocation: str) -> None:
        self.all.append(value)
        for tag in tags:
            bucket = self.by_tag.get(tag)
            if bucket is None:
                bucket = self.by_tag[tag] = array("d")
            bucket.append(value)
        bucket = self.by_allocation.get(allocation)
        if bucket is None:
            bucket = self.by_allocation[allocation] = array("d")
        bucket.append(value)


class _Unplaced:
    """Workloads still waiting at the end: how many, by tag and by allocation."""

    __slots__ = ("by_allocation", "by_tag", "count")

    def __init__(self) -> None:
        self.count = 0
        self.by_tag: dict[str, int] = {}
        self.by_allocation: dict[str, int] = {}

    def add(self, w: _Workload) -> None:
        self.count += 1
        for tag in w.tags:
            self.by_tag[tag] = self.by_tag.get(tag, 0) + 1
        self.by_allocation[w.allocation] = self.by_allocation.get(w.allocation, 0) + 1


class SummaryProjection(UsageProjection):
    """`UsageProjection` plus the counters, waits and preemption log of a summary."""

    def __init__(self, *, start: float | None = None, end: float | None = None, **kw: Any):
        super().__init__(start=start, end=end, **kw)
        self.counts = dict.fromkeys(
            (
                "submitted",
                "completed",
                "rejected",
                "preempted",
                "failed",
                "lost",
                "cancelled",
                "preempted_terminal",
                "lost_attempts",
                "lost_requeued",
            ),
            0,
        )
        self.preemptions = 0
        self.preemptions_by_reason: dict[str, int] = {}
        self.rejected_by_reason: dict[str, int] = {}  # first seen first, for ties
        # other inputs refused (budget, host, config changes, cancels): type -> count, first error
        self.rejected_inputs: dict[str, dict[str, Any]] = {}
        # (bin start, reason) -> count, for charts (bins of `bin_s`, an hour by default)
        self.preemptions_hourly: dict[tuple[float, str], int] = {}
        self.waits = _Waits()
        self.requeue_waits = _Waits()

    def _counts(self) -> bool:
        t = self.now
        if t is None:
            return False
        return (self.start is None or t >= self.start) and (self.end is None or t <= self.end)

    def on_submitted(self, wid: str, w: _Workload, d: dict[str, Any]) -> None:
        if self._counts():
            self.counts["submitted"] += 1

    def on_placed(
        self,
        wid: str,
        w: _Workload,
        d: dict[str, Any],
        first_wait: float | None,
        requeue_wait: float | None,
    ) -> None:
        if not self._counts():
            return
        if first_wait is not None:
            self.waits.add(first_wait, w.tags, w.allocation)
        if requeue_wait is not None:
            self.requeue_waits.add(requeue_wait, w.tags, w.allocation)

    def on_preempted(self, wid: str, w: _Workload, d: dict[str, Any], first: bool) -> None:
        if not self._counts():
            return
        self.preemptions += 1
        reason = str(d.get("reason") or "unknown")
        self.preemptions_by_reason[reason] = self.preemptions_by_reason.get(reason, 0) + 1
        width = self.bin_s
        key = (math.floor((self.now or 0.0) / width) * width, reason)
        self.preemptions_hourly[key] = self.preemptions_hourly.get(key, 0) + 1
        if first:
            self.counts["preempted"] += 1
        if not d.get("requeued"):
            self.counts["preempted_terminal"] += 1

    def on_ended(self, wid: str, w: _Workload, d: dict[str, Any], outcome: str) -> None:
        if self._counts() and outcome in self.counts:
            self.counts[outcome] += 1
            if outcome == "lost":
                self.counts["lost_attempts"] += 1

    def on_lost_requeued(self, wid: str, w: _Workload, d: dict[str, Any]) -> None:
        if self._counts():
            self.counts["lost_attempts"] += 1
            self.counts["lost_requeued"] += 1

    def on_rejected(self, d: dict[str, Any]) -> None:
        if not self._counts():
            return
        kind = d.get("input_type")
        reason = str(d.get("error") or "unknown")
        submission = kind == "workload.submitted" or (
            kind is None
            and d.get("type") == "workload.rejected"
            and d.get("workload") not in self.live
        )
        if submission:
            self.counts["rejected"] += 1
            self.rejected_by_reason[reason] = self.rejected_by_reason.get(reason, 0) + 1
        else:
            kind = kind or str(d.get("type", "")).replace(".rejected", ".?")
            seen = self.rejected_inputs.setdefault(kind, {"count": 0, "first": reason})
            seen["count"] += 1

    # ------------------------------------------------------------------ output
    def _top_rejections(self, n: int = 10) -> dict[str, int]:
        """The `n` most common rejection reasons, most frequent first (ties: first seen)."""
        ranked = sorted(self.rejected_by_reason.items(), key=lambda item: -item[1])
        return dict(ranked[:n])

    def _unplaced(self) -> tuple[_Unplaced, _Unplaced]:
        """Workloads waiting at the end: for their first placement, and after a requeue."""
        first, again = _Unplaced(), _Unplaced()
        for w in self.live.values():
            if not w.running and w.submitted is not None:
                (again if w.placed_once else first).add(w)
        return first, again

    @staticmethod
    def _wait_block(waits: _Waits, unplaced: _Unplaced) -> dict[str, Any]:
        def by(samples: dict[str, array], left: dict[str, int]) -> dict[str, Any]:
            return {
                k: wait_stats(samples.get(k, ()), left.get(k, 0)) for k in sorted({*samples, *left})
            }

        return {
            "all": wait_stats(waits.all, unplaced.count),
            "by_tag": by(waits.by_tag, unplaced.by_tag),
            "by_allocation": by(waits.by_allocation, unplaced.by_allocation),
        }

    def delivered(self, rows: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        rows = self.hourly_rows() if rows is None else rows
        owed: dict[str, float] = {}
        received: dict[str, float] = {}
        met_hourly: dict[str, float] = {}  # Σ_h min(received_h, owed_h), per allocation
        unrunnable: dict[str, float] = {}
        for r in rows:
            if r.get("unrunnable_gpu_s"):
                unrunnable[r["allocation"]] = (
                    unrunnable.get(r["allocation"], 0.0) + r["unrunnable_gpu_s"]
                )
            a = r["allocation"]
            owed[a] = owed.get(a, 0.0) + r["owed_gpu_s"]
            received[a] = received.get(a, 0.0) + r["received_gpu_s"]
            met_hourly[a] = met_hourly.get(a, 0.0) + min(r["received_gpu_s"], r["owed_gpu_s"])
        strict = math.fsum(met_hourly.values())
        total_owed = math.fsum(owed.values())
        by_alloc = {
            a: round(min(1.0, received[a] / owed[a]), 6) for a in sorted(owed) if owed[a] > 0
        }
        met = math.fsum(min(received[a], owed[a]) for a in owed)
        return {
            "overall": _ratio(met, total_owed),
            "min": min(by_alloc.values()) if by_alloc else None,
            "by_allocation": by_alloc,
            "hourly_strict": _ratio(strict, total_owed),
            # the same per allocation: a surplus in one hour pays no shortfall in another
            "hourly_strict_by_allocation": {
                a: round(met_hourly[a] / owed[a], 6) for a in sorted(owed) if owed[a] > 0
            },
            "owed_gpu_h": {a: round(owed[a] / HOUR, 3) for a in sorted(owed)},
            "received_gpu_h": {a: round(received[a] / HOUR, 3) for a in sorted(received)},
            # requested by waiting work no policy could place (not owed, so not above)
            "unrunnable_gpu_h": {a: round(unrunnable[a] / HOUR, 3) for a in sorted(unrunnable)},
        }

    def _contended_idle(self) -> dict[str, Any]:
        """Idle GPU-hours while allocated work waited, and their shares by the GPUs of
        the smallest workload waiting then (1 - occupancy_contended, explained)."""
        idle = self.contended_idle
        total = sum(idle.values())
        return {
            "gpu_hours": round(total / HOUR, 3),
            # the part that lay on the hosts kept for short, small jobs (headroom_hosts):
            # the price of short jobs never waiting, which no other rule could use
            "headroom_gpu_hours": round(self.headroom_idle / HOUR, 3),
            "by_smallest_waiting_gpus": {
                str(gpus): round(idle[gpus] / total, 4) for gpus in sorted(idle)
            }
            if total
            else {},
        }

    def summary(self, *, policy: str, engine: dict[str, Any] | None = None) -> dict[str, Any]:
        tot = self.totals()
        busy_all = tot["charged_gpu_s"] + tot["unallocated_gpu_s"]
        start, end = self.period()
        unplaced, unplaced_again = self._unplaced()
        unfinished_pending = sum(1 for w in self.live.values() if not w.running)
        workloads = {
            "submitted": self.counts["submitted"],
            "completed": self.counts["completed"],
            "rejected": self.counts["rejected"],
            "preempted": self.counts["preempted"],
            "unfinished": len(self.live),
            "unfinished_pending": unfinished_pending,
            "unfinished_running": len(self.live) - unfinished_pending,
            "failed": self.counts["failed"],
            "lost": self.counts["lost"],
            "cancelled": self.counts["cancelled"],
            "preempted_terminal": self.counts["preempted_terminal"],
        }
        return {
            "policy": policy,
            "period": {
                "start": start,
                "end": end,
                "start_iso": iso(start),
                "end_iso": iso(end),
                "hours": None if start is None or end is None else round((end - start) / HOUR, 3),
            },
            "workloads": workloads,
            "preemptions": self.preemptions,
            "lost_attempts": {
                "all": self.counts["lost_attempts"],
                "requeued": self.counts["lost_requeued"],
            },
            "preemptions_by_reason": dict(sorted(self.preemptions_by_reason.items())),
            "rejected_by_reason": self._top_rejections(),
            "rejected_inputs": dict(sorted(self.rejected_inputs.items())),
            "occupancy": _ratio(tot["busy_gpu_s"], tot["healthy_gpu_s"]),
            "occupancy_contended": _ratio(
                tot["contended_busy_gpu_s"], tot["contended_healthy_gpu_s"]
            ),
            "contended_idle": self._contended_idle(),
            "allocated_fraction": _ratio(tot["charged_gpu_s"], busy_all),
            "unallocated_fraction": _ratio(tot["unallocated_gpu_s"], busy_all),
            "gpu_hours": {
                "healthy": round(tot["healthy_gpu_s"] / HOUR, 3),
                "busy": round(tot["busy_gpu_s"] / HOUR, 3),
                "charged": round(tot["charged_gpu_s"] / HOUR, 3),
                "unallocated": round(tot["unallocated_gpu_s"] / HOUR, 3),
                "contended_hours": round(tot["contended_s"] / HOUR, 3),
            },
            "delivered": self.delivered(),
            "wait_s": self._wait_block(self.waits, unplaced),
            "requeue_wait_s": self._wait_block(self.requeue_waits, unplaced_again),
            # what the run decided under, as it stood at the end (compare shows differences)
            "config": self.config,
            "weights": {path: node.weight for path, node in sorted(self.tree.nodes.items())},
            "engine": dict(engine)
            if engine is not None
            else {"wall_s": None, "workloads_per_s": None, "peak_rss_mb": None},
        }


def fold(
    events: Iterable[Any] | str | Path,
    *,
    start: float | None = None,
    end: float | None = None,
    sinks: Iterable[Any] = (),
    bin_s: float = HOUR,
) -> SummaryProjection:
    """One pass over `events` (or a journal path) into a closed `SummaryProjection`
    (rows in bins of `bin_s`); each of `sinks` (objects with `.apply(event)`) sees the
    same events."""
    proj = SummaryProjection(start=start, end=end, bin_s=bin_s)
    sinks = list(sinks)
    for e in iter_events(events):
        t = e["time"] if type(e) is dict else e.time
        if end is not None and t > end:
            continue  # keep consuming: the caller's generator may be writing the journal
        proj.apply(e)
        for sink in sinks:
            sink.apply(e)
    proj.close(end)
    return proj


def summarize(
    events: Iterable[Any] | str | Path,
    *,
    policy: str,
    engine: dict[str, Any] | None = None,
    start: float | None = None,
    end: float | None = None,
) -> dict[str, Any]:
    """The `summary.json` dict of a run; `end` defaults to the last event's time (pass
    the simulation horizon to count idle/waiting time after the last event)."""
    return fold(events, start=start, end=end).summary(policy=policy, engine=engine)


__all__ = [
    "SummaryProjection",
    "fold",
    "how_it_ended",
    "iso",
    "percentile",
    "summarize",
    "wait_stats",
]

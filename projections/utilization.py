"""Launcher readings of GPU utilization (`workload.utilization`), as views read them.

The scheduler never folds these reports (they change no decision); `allot queue`,
`allot why`, `allot idle` and the metrics keep each running attempt's last reading and
since when its readings have stayed below the config's `idle_threshold`: held GPUs
that do no work (squatting). An attempt is *idle* once that has lasted `idle_after`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from domain.state import RUNNING

# a reading older than this many of its intervals is stale: the launcher stopped
# reporting (or cannot read the GPUs any more), so it says nothing about idleness now
STALE_INTERVALS = 3


@dataclass(slots=True)
class Utilization:
    """A running attempt's last reading, and since when its readings have stayed below
    the idle threshold (None: the last one was not below it)."""

    time: float
    attempt: int
    utilization: float
    memory: float | None
    interval: float
    idle_since: float | None


def next_reading(last: Utilization | None, event: Any, threshold: float) -> Utilization:
    """The new reading. An attempt idle in it has been idle since the start of the
    interval it measured, or earlier if the same attempt's previous reading was idle."""
    idle_since = None
    if event.utilization < threshold:
        idle_since = event.time - event.interval
        if last is not None and last.attempt == event.attempt and last.idle_since is not None:
            idle_since = min(idle_since, last.idle_since)
    return Utilization(
        event.time, event.attempt, event.utilization, event.memory, event.interval, idle_since
    )


def current(u: Utilization | None, w: Any) -> Utilization | None:
    """`u` if it is a reading of the attempt `w` runs now (None: pending, another one)."""
    if u is None or w.state != RUNNING or u.attempt != w.attempt:
        return None
    return u


def is_stale(u: Utilization, now: float) -> bool:
    return now - u.time > STALE_INTERVALS * u.interval


def idle_since(u: Utilization, w: Any, now: float) -> float | None:
    """Since when the running attempt has been below the threshold (never before it
    started), or None: busy, or its last reading is stale."""
    if u.idle_since is None or is_stale(u, now):
        return None
    return max(u.idle_since, w.start)


def is_idle(u: Utilization, w: Any, now: float, idle_after: float) -> bool:
    since = idle_since(u, w, now)
    return since is not None and now - since >= idle_after

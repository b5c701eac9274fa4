"""Simulate several policies at once: one forked process per policy (`--jobs`).

Each policy's run is independent and deterministic, so running them side by side
changes nothing in their outputs, only the wall time. The children are forked after
the scenario is loaded, so they share it instead of receiving a copy; they report
their simulated time through a queue for the progress bars (a few times a second).
"""

from __future__ import annotations

import multiprocessing
import os
import queue as queues
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

# what the forked children run: set just before the pool forks them, cleared after
_JOB: tuple[Any, ...] | None = None
_REPORT_EVERY_S = 0.1


def can_run_in_parallel() -> bool:
    return hasattr(os, "fork")


def run_policies_in_parallel(
    spec: Any,
    policies: list[str],
    out: Path,
    *,
    jobs: int,
    reports: bool,
    gantt_window: tuple[float, float] | None,
    on_time: Callable[[str, float], None] | None = None,
) -> dict[str, dict[str, Any]]:
    """`run_policy` for every policy, `jobs` at a time; summaries in `policies` order.
    An error in a child is raised here, as it would have been in a sequential run."""
    global _JOB
    context = multiprocessing.get_context("fork")
    times = context.Queue() if on_time is not None else None
    _JOB = (spec, out, reports, gantt_window, times)
    try:
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            futures = [pool.submit(_run_one, policy) for policy in policies]
            while not all(f.done() for f in futures):
                if times is None or on_time is None:
                    time.sleep(_REPORT_EVERY_S)
                    continue
                try:
                    policy, t = times.get(timeout=_REPORT_EVERY_S)
                except queues.Empty:
                    continue
                on_time(policy, t)
            while times is not None:  # the last reports: their children are done
                try:
                    times.get_nowait()
                except queues.Empty:
                    break
            return {policy: f.result() for policy, f in zip(policies, futures, strict=True)}
    finally:
        _JOB = None


def _run_one(policy: str) -> dict[str, Any]:
    from projections.simulate import run_policy

    assert _JOB is not None, "run in a child forked by run_policies_in_parallel"
    spec, out, reports, gantt_window, times = _JOB
    last = [0.0]

    def report(t: float) -> None:
        now = time.monotonic()
        if now - last[0] >= _REPORT_EVERY_S:
            last[0] = now
            times.put((policy, t))

    return run_policy(
        spec,
        policy,
        out,
        progress=report if times is not None else None,
        reports=reports,
        gantt_window=gantt_window,
    )

"""Simulate several policies at once: one forked process per policy (`--jobs`).

Each policy's run is independent and deterministic, so running them side by side
changes nothing in their outputs, only the wall time. The children are forked after
the scenario is loaded, so they share it instead of receiving a copy; they report
their simulated time through a queue for the progress bars (a few times a second).

Ctrl-C is the parent's to handle: the children ignore SIGINT, and the parent stops
them with SIGTERM, which a running child turns into KeyboardInterrupt so that its
journal is closed whole before it exits.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import queue as queues
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# what the forked children run: set just before the pool forks them, cleared after
_JOB: tuple[Any, ...] | None = None
_REPORT_EVERY_S = 0.1


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during the runs: `finished` lists the policies whose runs had completed."""

    def __init__(self, finished: list[str]) -> None:
        super().__init__()
        self.finished = finished


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
    swap: bool = True,
) -> dict[str, dict[str, Any]]:
    """`run_policy` for every policy, `jobs` at a time; summaries in `policies` order.
    An error in a child is raised here, as it would have been in a sequential run (the
    other runs are stopped); Ctrl-C stops them all and raises `Interrupted`."""
    global _JOB
    context = multiprocessing.get_context("fork")
    times = context.Queue() if on_time is not None else None
    _JOB = (spec, out, reports, gantt_window, times, swap)
    # SIGINT held while forking: a child must not see Ctrl-C before it ignores it
    held = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        pool = context.Pool(processes=jobs, initializer=_ignore_ctrl_c)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
    try:
        results = [pool.apply_async(_run_one, (policy,)) for policy in policies]
        try:
            while not all(r.ready() for r in results):
                if any(r.ready() and not r.successful() for r in results):
                    break  # an error: raised below, the other runs stopped
                if times is None or on_time is None:
                    time.sleep(_REPORT_EVERY_S)
                    continue
                try:
                    policy, t = times.get(timeout=_REPORT_EVERY_S)
                except queues.Empty:
                    continue
                on_time(policy, t)
        except KeyboardInterrupt:
            pool.terminate()  # the running children close their journals and exit
            finished = [p for p, r in zip(policies, results, strict=True) if _succeeded(r)]
            raise Interrupted(finished) from None
        while times is not None:  # the last reports: their children are done
            try:
                times.get_nowait()
            except queues.Empty:
                break
        summaries = {policy: r.get() for policy, r in zip(policies, results, strict=True)}
        pool.close()
        pool.join()
        return summaries
    finally:
        pool.terminate()
        pool.join()
        _JOB = None


def _succeeded(result: Any) -> bool:
    return result.ready() and result.successful()


def _ignore_ctrl_c() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _run_one(policy: str) -> dict[str, Any]:
    from projections.simulate import run_policy

    assert _JOB is not None, "run in a child forked by run_policies_in_parallel"
    spec, out, reports, gantt_window, times, swap = _JOB
    last = [0.0]

    def report(t: float) -> None:
        now = time.monotonic()
        if now - last[0] >= _REPORT_EVERY_S:
            last[0] = now
            times.put((policy, t))

    signal.signal(signal.SIGTERM, _stop)  # stopped by the parent: unwind, closing files
    try:
        summary = run_policy(
            spec,
            policy,
            out,
            progress=report if times is not None else None,
            reports=reports,
            gantt_window=gantt_window,
            swap=swap,
        )
        if times is not None:
            times.put((policy, math.inf))  # done: its bar fills now
        return summary
    except KeyboardInterrupt:
        os._exit(130)  # the journal is closed; the parent says what was left where
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)

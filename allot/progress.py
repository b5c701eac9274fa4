"""Rich progress bars for long work, silent when quiet or when stdout is not a terminal:
over simulated time (`sim_progress`) and over journal records read (`record_progress`)."""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

from domain.durations import format_duration
from projections.journal import reporting


def _sim_columns() -> list:
    return [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("sim {task.fields[sim]}"),
        TextColumn("[dim]{task.fields[speed]}"),
        TimeElapsedColumn(),
    ]


@contextmanager
def sim_progress(
    label: str, start: float, end: float | None, *, quiet: bool, console: Console
) -> Iterator[Callable[[float], None] | None]:
    """Yields a callback taking the simulated time, or None when nothing is shown."""
    with sims_progress([label], start, end, quiet=quiet, console=console) as update:
        yield None if update is None else (lambda t: update(label, t))


@contextmanager
def sims_progress(
    labels: list[str], start: float, end: float | None, *, quiet: bool, console: Console
) -> Iterator[Callable[[str, float], None] | None]:
    """One bar per label (runs side by side); yields `update(label, simulated time)`,
    or None when nothing is shown."""
    if quiet or not sys.stdout.isatty():
        yield None
        return
    total = (end - start) if end is not None and end > start else None
    with Progress(*_sim_columns(), console=console, transient=False) as bar:
        tasks = {label: bar.add_task(label, total=total, sim="0s", speed="") for label in labels}
        began = time.perf_counter()
        last = dict.fromkeys(labels, 0.0)

        def update(label: str, t: float) -> None:
            if t == math.inf:  # this run is done: full bar now, not when the last one ends
                bar.update(tasks[label], completed=total or 1.0, sim="done", speed="")
                return
            wall = time.perf_counter()
            if wall - last[label] < 0.1:
                return
            last[label] = wall
            done = max(0.0, t - start)
            speed = done / max(1e-9, wall - began)
            bar.update(
                tasks[label],
                completed=done,
                sim=format_duration(done),
                speed=f"{speed:,.0f}x real time",
            )

        yield update
        for task in tasks.values():
            bar.update(task, completed=total or 1.0, sim="done", speed="")


@contextmanager
def steps_progress(
    label: str, total: int, *, quiet: bool, console: Console
) -> Iterator[Callable[[str], None] | None]:
    """A bar over `total` steps of long work (drawing each run's report); yields
    `step(what)`, called as each step starts, or None when nothing is shown."""
    if quiet or not sys.stdout.isatty():
        yield None
        return
    columns = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TextColumn("[dim]{task.fields[what]}"),
        TimeElapsedColumn(),
    ]
    with Progress(*columns, console=console, transient=True) as bar:
        task = bar.add_task(label, total=total, what="")
        begun = [False]

        def step(what: str) -> None:
            if begun[0]:
                bar.advance(task)
            begun[0] = True
            bar.update(task, what=what)

        yield step


@contextmanager
def record_progress(
    label: str, total_bytes: int | None, *, quiet: bool, console: Console
) -> Iterator[Callable[[int, int], None] | None]:
    """Yields `update(records, bytes_read)`, or None when nothing is shown. With a
    known size (a journal file) the bar runs over bytes; else it counts records."""
    if quiet or not sys.stdout.isatty():
        yield None
        return
    columns: list = [TextColumn("[bold]{task.description}"), BarColumn()]
    if total_bytes:
        columns.append(DownloadColumn())
    columns += [TextColumn("{task.fields[records]}"), TimeElapsedColumn()]
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(label, total=total_bytes or None, records="0 records")

        def update(records: int, done_bytes: int) -> None:
            shown = f"{records:,} record{'' if records == 1 else 's'}"
            bar.update(task, completed=done_bytes, records=shown)

        yield update
        if total_bytes:
            bar.update(task, completed=total_bytes)


def counted(lines: Iterable[bytes], update: Callable[[int, int], None] | None) -> Iterator[bytes]:
    """`lines`, reporting (records, bytes) to `update` now and then (None: as they are)."""
    if update is None:
        return iter(lines)
    return reporting(lines, update, size=_line_size)


def _line_size(line: bytes) -> int:
    return len(line) + 1  # and its newline

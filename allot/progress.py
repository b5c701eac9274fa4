"""A rich progress bar over simulated time (silent when quiet or not a terminal)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

from domain.durations import format_duration


@contextmanager
def sim_progress(
    label: str, start: float, end: float | None, *, quiet: bool, console: Console
) -> Iterator[Callable[[float], None] | None]:
    """Yields a callback taking the simulated time, or None when nothing is shown."""
    if quiet or not sys.stdout.isatty():
        yield None
        return
    total = (end - start) if end is not None and end > start else None
    columns = [
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("sim {task.fields[sim]}"),
        TextColumn("[dim]{task.fields[speed]}"),
        TimeElapsedColumn(),
    ]
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task(label, total=total, sim="0s", speed="")
        began = time.perf_counter()
        last = [0.0]

        def update(t: float) -> None:
            wall = time.perf_counter()
            if wall - last[0] < 0.1:
                return
            last[0] = wall
            done = max(0.0, t - start)
            speed = done / max(1e-9, wall - began)
            bar.update(
                task, completed=done, sim=format_duration(done), speed=f"{speed:,.0f}x real time"
            )

        yield update
        if total is not None:
            bar.update(task, completed=total)

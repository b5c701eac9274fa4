"""Small simulated runs for projection tests: hosts of 8 GPUs, three weighted leaf
allocations, `count` workloads of random shape all submitted in the first seconds."""

from __future__ import annotations

import random

from domain import events as ev
from domain.config import SchedulerConfig
from projections.engine import Engine, EngineOptions

T0 = 1_767_225_600.0


def cluster_setup(hosts: int) -> list:
    events: list = [
        ev.HostRegistered(id=f"h{i}", time=T0, cluster="c", host=f"h{i}", gpus=8)
        for i in range(hosts)
    ]
    for path, weight in (("lab", 1), ("lab/a", 3), ("lab/b", 1), ("lab/c", 1)):
        events.append(ev.BudgetSet(id=path, time=T0, cluster="c", allocation=path, weight=weight))
    return events


def submissions(seed: int, count: int) -> list:
    rng = random.Random(seed)
    out = []
    for i in range(count):
        out.append(
            ev.WorkloadSubmitted(
                id=f"s{i}",
                time=T0 + i,
                cluster="c",
                actor=f"u{i % 3}",
                workload=f"w{i:02d}",
                allocation=rng.choice(["lab/a", "lab/b", "lab/c"]),
                gpus=rng.choice([1, 1, 2, 4, 8, 16]),
                min_runtime=rng.choice([0.0, 900.0, 1800.0]),
                resumable=rng.random() < 0.5,
                runtime=rng.uniform(0.2, 5.0) * 3600.0,
            )
        )
    return out


def simulated_run(seed: int, hosts: int, count: int, tick_every: float | None = None) -> list:
    """`tick_every`: a live scheduler's run, acting at its ticker's ticks (journaled with
    their cadence) rather than at the moment a protection ends."""
    engine = Engine("c", SchedulerConfig(), EngineOptions(tick_every=tick_every))
    return list(engine.run(cluster_setup(hosts), submissions(seed, count), T0))

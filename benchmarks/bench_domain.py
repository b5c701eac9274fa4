"""Benchmark the pure core: evolve+decide throughput and decide latency vs queue depth.

    python benchmarks/bench_domain.py [--quick] [--json OUT]

1. Throughput: input events/s through `handle` (admit + evolve + decide) on a
   1024-GPU cluster (128 hosts x 8) under a steady mixed load that keeps the queue
   non-empty (submissions, completions, ticks).
2. Latency: with 1k, 10k and 100k pending workloads on a full cluster, the time of one
   `handle` call (a completion that frees GPUs, a submission, or a tick — each runs a
   full scheduling cycle), p50 and p99. The target is p99 < 5 ms at 10k and the 100k
   figure within ~2x of the 10k one (the cycle's cost must not grow with the queue).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from pathlib import Path

from domain import State, handle
from domain import events as ev
from domain.config import SchedulerConfig

HOSTS, GPUS = 128, 8
PROGRAMS = {"olmo": 5, "tulu": 3, "molmo": 2}
LEAVES_PER_PROGRAM = 5


class Driver:
    def __init__(self, seed: int = 7) -> None:
        self.state = State("bench", SchedulerConfig(admins=()))
        self.rng = random.Random(seed)
        self.t = 1_767_225_600.0
        self.n = 0
        self.leaves: list[str] = []
        self.running: list[tuple[str, int]] = []
        self.records = 0

    def send(self, event_cls: type, **fields: object) -> list:
        self.n += 1
        out = handle(self.state, event_cls(id=f"b{self.n}", time=self.t, cluster="bench", **fields))
        self.records += len(out)
        for r in out:
            if r.type == "workload.placed":
                self.running.append((r.workload, r.attempt))
        return out

    def setup(self) -> None:
        for h in range(HOSTS):
            self.send(ev.HostRegistered, host=f"h{h}", gpus=GPUS)
        self.send(ev.BudgetSet, allocation="lab", weight=1)
        for program, weight in PROGRAMS.items():
            self.send(ev.BudgetSet, allocation=f"lab/{program}", weight=weight)
            for i in range(LEAVES_PER_PROGRAM):
                leaf = f"lab/{program}/p{i}"
                self.send(ev.BudgetSet, allocation=leaf, weight=1 + i)
                self.leaves.append(leaf)

    def submit(self) -> list:
        rng = self.rng
        gpus = rng.choices([1, 2, 4, 8, 16, 32], weights=[40, 20, 10, 15, 10, 5])[0]
        return self.send(
            ev.WorkloadSubmitted,
            workload=f"w{self.n}",
            allocation=rng.choice(self.leaves),
            gpus=gpus,
            min_runtime=rng.choice([0, 900, 3600]),
            resumable=rng.random() < 0.7,
            priority=rng.randint(0, 3),
        )

    def finish_one(self) -> list:
        live = self.state.workloads
        while self.running:
            wid, attempt = self.running.pop(self.rng.randrange(len(self.running)))
            w = live.get(wid)
            if w is not None and w.state == "running" and w.attempt == attempt:
                return self.send(ev.WorkloadFinished, workload=wid, attempt=attempt)
        return self.send(ev.ClockTick)


def throughput(events: int) -> dict:
    d = Driver()
    d.setup()
    for _ in range(3000):  # fill the cluster and build a queue
        d.submit()
    start = time.perf_counter()
    d.records = 0
    for i in range(events):
        d.t += 2.0
        r = i % 10
        if r < 5:
            d.submit()
        elif r < 9:
            d.finish_one()
        else:
            d.send(ev.ClockTick)
    wall = time.perf_counter() - start
    return {
        "events": events,
        "wall_s": round(wall, 3),
        "events_per_s": round(events / wall),
        "journal_records_per_s": round(d.records / wall),
        "pending_at_end": d.state.pending_count,
    }


def latency(pending: int, samples: int) -> dict:
    d = Driver(seed=pending)
    d.setup()
    while d.state.pending_count < pending:
        d.submit()
    times = []
    for i in range(samples):
        d.t += 1.0
        r = i % 3
        start = time.perf_counter()
        if r == 0:
            d.finish_one()
        elif r == 1:
            d.submit()
        else:
            d.send(ev.ClockTick)
        times.append((time.perf_counter() - start) * 1000.0)
    times.sort()
    return {
        "pending": pending,
        "samples": samples,
        "p50_ms": round(statistics.median(times), 3),
        "p99_ms": round(times[int(0.99 * (len(times) - 1))], 3),
        "max_ms": round(times[-1], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller runs (smoke test)")
    parser.add_argument("--json", type=Path, help="write results as JSON here")
    args = parser.parse_args()
    events = 5_000 if args.quick else 50_000
    samples = 300 if args.quick else 3_000
    depths = [1_000, 10_000] if args.quick else [1_000, 10_000, 100_000]
    result = {
        "machine": f"{platform.machine()} {platform.processor() or ''} python {platform.python_version()}",
        "throughput": throughput(events),
        "latency": [latency(n, samples) for n in depths],
    }
    by_depth = {row["pending"]: row for row in result["latency"]}
    if 10_000 in by_depth and 100_000 in by_depth:
        result["p99_ratio_100k_over_10k"] = round(
            by_depth[100_000]["p99_ms"] / by_depth[10_000]["p99_ms"], 2
        )
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()

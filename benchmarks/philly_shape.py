"""A generated trace with the shape of Microsoft's Philly trace, as a real `philly` CSV.

    python benchmarks/philly_shape.py --jobs 80000 --out benchmarks/out/philly-80000

writes `trace.csv` (header `timestamp,duration,num_gpus,gpu_time,cluster`, the format
`allot trace import --format philly` and scenario `trace:` entries read) and
`scenario.yaml` that reads it. `benchmarks/bench_sim.py` uses it for the simulator
benchmark.

The shape (the base size; DESIGN §6, issue 3):

- 80k jobs over 108 days, arriving as a Poisson process whose rate follows a
  week profile (afternoon peak, quieter nights and weekends; mean rate 80k/108 d).
- 15 virtual clusters, leaves of one top-level allocation `philly`, with Zipf-like
  weights 120/(i+1) (120, 60, 40, ... 8). Each VC's share of the jobs is its weight
  times a seeded lognormal factor, so some VCs ask for several times their share
  and some for less than it.
- GPUs per job: 93% one GPU, then a tail of 2/4/8/16/32/64/128.
- Run times lognormal, median 20 min x gpus^0.25 (bigger jobs run longer), sigma 2.4,
  clipped to [1 min, 30 days]: most jobs take minutes, a few take days or weeks.
- The cluster (8-GPU hosts) is sized from the base trace so that demand is about
  2x capacity: sum(gpus x duration) / (capacity x period) ~= 2.
- Scenario: `min_runtime: 15m`, `resumable: true`, default scheduler config, no
  horizon (the run ends when all work has ended, so every job runs to completion).

For another size N the arrival process, the VCs and the cluster stay those of the
base size and the period grows to N/80k x 108 days, so the work per simulated day is
the same and the cost should grow linearly with N. Each attribute is drawn from its
own seeded stream, so the first 10k jobs of the 80k trace are the 10k trace.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

DAY = 86_400.0
WEEK = 7 * DAY
TRACE_START = np.datetime64("2017-10-02T00:00:00")  # a Monday, when Philly's trace starts


@dataclass(frozen=True)
class Shape:
    base_jobs: int = 80_000
    base_days: float = 108.0
    vcs: int = 15
    top: str = "philly"
    weight_scale: float = 120.0  # VC i (0-based) has weight round(weight_scale / (i + 1))
    demand_sigma: float = 0.5  # lognormal spread of each VC's demand around its weight
    gpu_sizes: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64, 128)
    gpu_probs: tuple[float, ...] = (0.93, 0.025, 0.02, 0.013, 0.007, 0.0035, 0.0012, 0.0003)
    median_s: float = 20 * 60.0
    gpu_exponent: float = 0.25  # median run time grows as gpus ** gpu_exponent
    sigma: float = 2.4
    min_s: float = 60.0
    max_s: float = 30 * DAY
    oversubscription: float = 2.0
    gpus_per_host: int = 8
    min_runtime: str = "15m"
    vc_names: tuple[str, ...] = field(default=())

    def names(self) -> list[str]:
        return list(self.vc_names) or [f"vc{i + 1:02d}" for i in range(self.vcs)]

    def weights(self) -> list[int]:
        return [max(1, round(self.weight_scale / (i + 1))) for i in range(self.vcs)]

    @property
    def rate_per_s(self) -> float:
        return self.base_jobs / (self.base_days * DAY)


@dataclass
class Trace:
    """Jobs in arrival order (seconds from the trace start)."""

    time: np.ndarray  # float seconds, sorted
    vc: np.ndarray  # index into Shape.names()
    gpus: np.ndarray
    duration: np.ndarray  # whole seconds

    def __len__(self) -> int:
        return len(self.time)

    def gpu_seconds(self) -> float:
        return float((self.gpus * self.duration).sum())

    def period_s(self, shape: Shape) -> float:
        """The arrival period: N / rate (what the demand ratio is taken over)."""
        return len(self) / shape.rate_per_s


def _week_profile() -> np.ndarray:
    """Relative arrival intensity for each hour of the week, mean 1."""
    hours = np.arange(168)
    hour_of_day = hours % 24
    day = hours // 24
    diurnal = 1.0 + 0.5 * np.cos(2 * math.pi * (hour_of_day - 15) / 24)  # peak 15:00
    weekday = np.where(day >= 5, 0.6, 1.0)
    profile = diurnal * weekday
    return profile / profile.mean()


def _arrivals(n: int, rate: float, rng: np.random.Generator) -> np.ndarray:
    """`n` arrival times of a Poisson process with mean rate `rate` following the week
    profile: a homogeneous process in "operational time", mapped through the inverse
    of the cumulative intensity."""
    operational = np.cumsum(rng.exponential(1.0, n)) / rate  # seconds at mean rate
    profile = _week_profile()
    edges = np.arange(169) * 3600.0  # hour boundaries within a week
    cumulative = np.concatenate([[0.0], np.cumsum(profile * 3600.0)])  # ends at WEEK
    weeks = np.floor(operational / WEEK)
    within = operational - weeks * WEEK
    return weeks * WEEK + np.interp(within, cumulative, edges)


def generate(n: int, shape: Shape = Shape(), seed: int = 1) -> Trace:
    """`n` jobs of the Philly shape; deterministic in (n, shape, seed), prefix-stable in n."""
    streams = [np.random.default_rng(s) for s in np.random.SeedSequence(seed).spawn(5)]
    arrivals_rng, demand_rng, vc_rng, gpu_rng, runtime_rng = streams
    time = _arrivals(n, shape.rate_per_s, arrivals_rng)
    weights = np.array(shape.weights(), dtype=float)
    demand = weights * np.exp(demand_rng.normal(0.0, shape.demand_sigma, shape.vcs))
    vc = vc_rng.choice(shape.vcs, size=n, p=demand / demand.sum())
    probs = np.array(shape.gpu_probs)
    gpus = gpu_rng.choice(np.array(shape.gpu_sizes), size=n, p=probs / probs.sum())
    median = shape.median_s * gpus.astype(float) ** shape.gpu_exponent
    duration = median * np.exp(runtime_rng.normal(0.0, shape.sigma, n))
    duration = np.rint(np.clip(duration, shape.min_s, shape.max_s)).astype(np.int64)
    return Trace(time=time, vc=vc, gpus=gpus.astype(np.int64), duration=duration)


def cluster_hosts(shape: Shape = Shape(), seed: int = 1) -> int:
    """Hosts for ~`oversubscription`x demand on the base trace (at least the biggest job)."""
    base = generate(shape.base_jobs, shape, seed)
    capacity = base.gpu_seconds() / (shape.oversubscription * base.period_s(shape))
    hosts = round(capacity / shape.gpus_per_host)
    return max(hosts, math.ceil(max(shape.gpu_sizes) / shape.gpus_per_host))


def write_csv(trace: Trace, path: Path, shape: Shape = Shape()) -> None:
    """A `philly` CSV, rows grouped by virtual cluster (like the published per-cluster
    dumps: not sorted by time overall; readers sort)."""
    names = np.array(shape.names())
    seconds = np.floor(trace.time).astype(np.int64)
    stamps = (TRACE_START + seconds.astype("timedelta64[s]")).astype(str)
    order = np.lexsort((seconds, trace.vc))
    with path.open("w", encoding="ascii", newline="\n") as out:
        out.write("timestamp,duration,num_gpus,gpu_time,cluster\n")
        rows = zip(
            np.char.replace(stamps[order], "T", " ").tolist(),
            trace.duration[order].tolist(),
            trace.gpus[order].tolist(),
            names[trace.vc[order]].tolist(),
            strict=True,
        )
        out.writelines(f"{ts},{d},{g},{d * g},{c}\n" for ts, d, g, c in rows)


def scenario_yaml(shape: Shape, hosts: int, jobs: int, trace_file: str = "trace.csv") -> str:
    allocations = "\n".join(
        f"  - {{path: {shape.top}/{name}, weight: {weight}}}"
        for name, weight in zip(shape.names(), shape.weights(), strict=True)
    )
    days = jobs / shape.rate_per_s / DAY
    return f"""\
# Generated by benchmarks/philly_shape.py: {jobs} jobs of the Philly shape over
# {days:.1f} days on {hosts} hosts x {shape.gpus_per_host} GPUs (demand ~{shape.oversubscription:g}x).
name: philly-shape-{jobs}
cluster: {{name: {shape.top}, hosts: {hosts}, gpus_per_host: {shape.gpus_per_host}}}
start: 2017-10-02T00:00:00Z
allocations:
{allocations}
workloads:
  - trace: {{file: {trace_file}, format: philly, min_runtime: {shape.min_runtime}, resumable: true,
            allocation_prefix: {shape.top}/}}
"""


def describe(trace: Trace, shape: Shape, hosts: int) -> dict[str, float | int]:
    """Facts about a generated trace (for the benchmark's report)."""
    period = trace.period_s(shape)
    capacity = hosts * shape.gpus_per_host
    return {
        "jobs": len(trace),
        "period_days": round(period / DAY, 2),
        "hosts": hosts,
        "gpus": capacity,
        "demand_ratio": round(trace.gpu_seconds() / (capacity * period), 3),
        "single_gpu_fraction": round(float((trace.gpus == 1).mean()), 4),
        "max_gpus": int(trace.gpus.max()),
        "duration_median_min": round(float(np.median(trace.duration)) / 60, 1),
        "duration_mean_h": round(float(trace.duration.mean()) / 3600, 2),
        "duration_p99_h": round(float(np.percentile(trace.duration, 99)) / 3600, 1),
    }


def write_scenario(
    jobs: int, out_dir: Path, shape: Shape = Shape(), seed: int = 1, hosts: int | None = None
) -> tuple[Path, dict[str, float | int]]:
    """Write out_dir/{trace.csv,scenario.yaml}; return the scenario path and trace facts."""
    hosts = cluster_hosts(shape, seed) if hosts is None else hosts
    trace = generate(jobs, shape, seed)
    out_dir.mkdir(parents=True, exist_ok=True)
    write_csv(trace, out_dir / "trace.csv", shape)
    scenario = out_dir / "scenario.yaml"
    scenario.write_text(scenario_yaml(shape, hosts, jobs), encoding="utf-8")
    return scenario, describe(trace, shape, hosts)


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Write a Philly-shaped trace (philly CSV) and a scenario that reads it.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__,
    )
    parser.add_argument("--jobs", type=int, default=Shape.base_jobs, help="number of jobs")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True, help="folder to write into")
    args = parser.parse_args()
    shape = Shape()
    scenario, facts = write_scenario(args.jobs, args.out, shape, args.seed)
    print(scenario)
    for key, value in {**facts, **{"shape": asdict(shape)}}.items():
        print(f"  {key}: {value}")


if __name__ == "__main__":
    main()

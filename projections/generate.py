"""Synthetic workloads for scenarios: the `generate:` entries of a scenario file.

A generator entry describes a stream of submissions to one leaf allocation: how
many, when they arrive (`poisson`, `uniform` or `burst`), how many GPUs each asks
for and how much work each needs. Sampling is deterministic: every entry draws
from its own `random.Random` streams derived from its `seed` alone, so the same
scenario gives byte-identical events and changing one entry never moves another.
Separate streams are used for arrivals, GPU counts and runtimes, so changing the
runtime distribution of an entry keeps its arrival times.

Only `random.Random.random()` is used (its sequence is guaranteed across Python
versions); the distributions are computed from it here by inverse transform.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections.abc import Iterator
from itertools import accumulate
from random import Random
from statistics import NormalDist
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PositiveInt,
    model_validator,
)

from domain.durations import parse_duration
from domain.events import MAX_PRIORITY
from domain.text import plural

# ---------------------------------------------------------------- schema


def _duration(value: Any) -> float:
    if value is None or isinstance(value, dict | list):
        raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 15m, 8h, 7d or seconds)")
    return parse_duration(value)


Duration = Annotated[float, BeforeValidator(_duration)]
"""Seconds; accepts `30s`, `15m`, `8h`, `7d`, `1h30m` or a plain number of seconds."""

PositiveDuration = Annotated[float, BeforeValidator(_duration), Field(gt=0)]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Lognormal(_Strict):
    """Runtime whose logarithm is normal: half the jobs are shorter than `median`."""

    median: PositiveDuration
    sigma: float = Field(ge=0)
    min: Duration | None = None
    max: PositiveDuration | None = None


class Exponential(_Strict):
    mean: PositiveDuration
    min: Duration | None = None
    max: PositiveDuration | None = None


class UniformRange(_Strict):
    min: Duration
    max: PositiveDuration

    @model_validator(mode="after")
    def _ordered(self) -> UniformRange:
        if self.max < self.min:
            raise ValueError("max must be >= min")
        return self


class RuntimeSpec(_Strict):
    """Work each workload needs: a fixed duration or one distribution.

    YAML: `runtime: 2h`, `runtime: {lognormal: {median: 10m, sigma: 1, max: 4h}}`,
    `runtime: {exponential: {mean: 30m}}`, `runtime: {uniform: {min: 1h, max: 3h}}`.
    """

    fixed: PositiveDuration | None = None
    lognormal: Lognormal | None = None
    exponential: Exponential | None = None
    uniform: UniformRange | None = None

    @model_validator(mode="before")
    @classmethod
    def _scalar(cls, value: Any) -> Any:
        if isinstance(value, str | int | float) and not isinstance(value, bool):
            return {"fixed": value}
        return value

    @model_validator(mode="after")
    def _one(self) -> RuntimeSpec:
        given = [k for k in ("fixed", "lognormal", "exponential", "uniform") if getattr(self, k)]
        if len(given) != 1:
            raise ValueError(
                "give a duration or exactly one of lognormal, exponential, uniform"
                + (f" (got {', '.join(given)})" if given else "")
            )
        return self


class GpuSpec(_Strict):
    """GPUs per workload: `gpus: 8`, `gpus: [1, 2]` (uniform choice) or
    `gpus: {choices: [8, 16, 64], weights: [6, 3, 1]}`."""

    choices: list[PositiveInt] = Field(min_length=1)
    weights: list[Annotated[float, Field(ge=0)]] | None = None

    @model_validator(mode="before")
    @classmethod
    def _short(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            return {"choices": [value]}
        if isinstance(value, list):
            return {"choices": value}
        return value

    @model_validator(mode="after")
    def _weights(self) -> GpuSpec:
        if self.weights is not None:
            if len(self.weights) != len(self.choices):
                raise ValueError(
                    f"weights has {plural(len(self.weights), 'entry', 'entries')} but choices has {len(self.choices)}"
                )
            if sum(self.weights) <= 0:
                raise ValueError("weights must not all be 0")
        return self


class Burst(_Strict):
    at: Duration
    count: PositiveInt


class GenerateSpec(_Strict):
    """One `generate:` entry of a scenario."""

    seed: int
    allocation: str = Field(min_length=1)
    count: PositiveInt | None = None
    start: Duration = 0.0
    arrival: Literal["poisson", "uniform", "burst"] = "poisson"
    rate_per_h: float | None = Field(None, gt=0)
    bursts: list[Burst] | None = Field(None, min_length=1)
    # burst arrivals spread uniformly at random over [at, at + spread] (a sweep script)
    spread: Duration = 0.0
    gpus: GpuSpec
    runtime: RuntimeSpec
    min_runtime: Duration = 900.0
    resumable: bool = False
    # the domain's bound: beyond it every submission failed to build, a traceback
    priority: int = Field(0, ge=-MAX_PRIORITY, le=MAX_PRIORITY)
    tags: list[str] = Field(default_factory=list)
    user: str | None = Field(None, min_length=1)
    expected_runtime: bool = False
    name: str | None = Field(None, min_length=1)
    one_host: bool = False  # all of each workload's GPUs on one host (NVLink)

    @model_validator(mode="after")
    def _arrival(self) -> GenerateSpec:
        if self.arrival in ("poisson", "uniform"):
            if self.rate_per_h is None:
                raise ValueError(f"arrival {self.arrival} needs rate_per_h (workloads per hour)")
            if self.count is None:
                raise ValueError(f"arrival {self.arrival} needs count")
            if self.bursts is not None:
                raise ValueError("bursts only go with arrival: burst")
        else:
            if self.rate_per_h is not None:
                raise ValueError("rate_per_h does not go with arrival: burst (use bursts or count)")
            if self.bursts is None and self.count is None:
                raise ValueError(
                    "arrival burst needs count (all at start) or bursts: [{at, count}]"
                )
            if self.bursts is not None and self.count is not None:
                total = sum(b.count for b in self.bursts)
                if total != self.count:
                    raise ValueError(f"count {self.count} != sum of bursts' counts {total}")
        return self

    @property
    def total(self) -> int:
        """How many workloads this entry submits."""
        if self.count is not None:
            return self.count
        return sum(b.count for b in self.bursts or ())

    def mean_gpus(self) -> float:
        return _mean_choice(self.gpus)


# ---------------------------------------------------------------- sampling

_NORMAL = NormalDist()


def _unit(rng: Random) -> float:
    """Uniform on the open interval (0, 1)."""
    u = rng.random()
    while u <= 0.0:
        u = rng.random()
    return u


def iter_arrivals(spec: GenerateSpec) -> Iterator[float]:
    """Submit times (seconds since the scenario start), non-decreasing, `spec.total` of them.

    Poisson and uniform arrivals are produced one at a time (a million-workload entry
    holds no list); bursts are few and small, so they are sorted in memory.
    """
    rng = Random(f"{spec.seed}/arrival")
    start = spec.start
    if spec.arrival == "poisson":
        assert spec.rate_per_h is not None and spec.count is not None
        mean_gap = 3600.0 / spec.rate_per_h
        t = start
        for _ in range(spec.count):
            t += -mean_gap * math.log(_unit(rng))
            yield t
        return
    if spec.arrival == "uniform":
        assert spec.rate_per_h is not None and spec.count is not None
        gap = 3600.0 / spec.rate_per_h
        for i in range(spec.count):
            yield start + i * gap
        return
    bursts = spec.bursts or [Burst(at=0.0, count=spec.total)]
    out: list[float] = []
    for burst in bursts:
        at = start + burst.at
        if spec.spread > 0:
            out.extend(at + spec.spread * rng.random() for _ in range(burst.count))
        else:
            out.extend([at] * burst.count)
    out.sort()
    yield from out


def arrival_offsets(spec: GenerateSpec) -> list[float]:
    """`iter_arrivals` as a list."""
    return list(iter_arrivals(spec))


def _mean_choice(gpus: GpuSpec) -> float:
    weights = gpus.weights or [1.0] * len(gpus.choices)
    return sum(c * w for c, w in zip(gpus.choices, weights, strict=True)) / sum(weights)


def gpu_sampler(spec: GenerateSpec) -> Iterator[int]:
    """Endless GPU counts for `spec`."""
    rng = Random(f"{spec.seed}/gpus")
    choices = spec.gpus.choices
    if len(choices) == 1:
        while True:
            yield choices[0]
    if spec.gpus.weights is None:
        n = len(choices)
        while True:
            yield choices[min(int(rng.random() * n), n - 1)]
    cumulative = list(accumulate(spec.gpus.weights))
    total = cumulative[-1]
    last = len(choices) - 1
    while True:
        yield choices[min(bisect_right(cumulative, rng.random() * total), last)]


def runtime_sampler(spec: RuntimeSpec, seed: int) -> Iterator[float]:
    """Endless runtimes (seconds, at least 1 s, rounded to the millisecond)."""
    rng = Random(f"{seed}/runtime")
    low, high = 1.0, math.inf
    if spec.fixed is not None:
        value = max(low, spec.fixed)
        while True:
            yield value
    if spec.uniform is not None:
        lo, hi = spec.uniform.min, spec.uniform.max
        while True:
            yield round(max(low, lo + (hi - lo) * rng.random()), 3)
    dist = spec.lognormal or spec.exponential
    assert dist is not None
    if dist.min is not None:
        low = max(low, dist.min)
    if dist.max is not None:
        high = dist.max
    if spec.lognormal is not None:
        median, sigma = spec.lognormal.median, spec.lognormal.sigma
        while True:
            value = median * math.exp(sigma * _NORMAL.inv_cdf(_unit(rng)))
            yield round(min(high, max(low, value)), 3)
    assert spec.exponential is not None
    mean = spec.exponential.mean
    while True:
        value = -mean * math.log(_unit(rng))
        yield round(min(high, max(low, value)), 3)


def samples(spec: GenerateSpec) -> Iterator[tuple[float, int, float]]:
    """(offset seconds, gpus, runtime seconds) for each workload of `spec`, in time order."""
    gpus = gpu_sampler(spec)
    runtimes = runtime_sampler(spec.runtime, spec.seed)
    for offset in iter_arrivals(spec):
        yield offset, next(gpus), next(runtimes)


def expected_runtime(spec: RuntimeSpec, draws: int = 20000) -> float:
    """Mean runtime (seconds), by sampling with a fixed seed when caps make it awkward."""
    if spec.fixed is not None:
        return spec.fixed
    if spec.uniform is not None:
        return (spec.uniform.min + spec.uniform.max) / 2
    sampler = runtime_sampler(spec, 0)
    return sum(next(sampler) for _ in range(draws)) / draws

"""The scheduler's config. It is journaled (`config.set`) so a journal replays without flags."""

from __future__ import annotations

from typing import Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_serializer,
    model_validator,
)

from domain.durations import format_duration, parse_duration
from domain.headroom import DEFAULT_HEADROOM_HOSTS

MAX_WINDOW = 36500 * 86400.0  # 100 years
DURATION_KEYS = (
    "window",
    "max_min_runtime",
    "short_job_max_min_runtime",
    "bucket",
    "preempt_grace",
    "health_holddown",
    "idle_after",
)
# keys added with a default that changes nothing: left out of the journaled config while
# at it, so configs (and journals) recorded before the key existed keep their bytes
OMITTED_AT_DEFAULT = {"health_holddown": 0.0, "idle_threshold": 0.05, "idle_after": 1800.0}


class SchedulerConfig(BaseModel):
    """Every knob of `decide`. Durations accept `7d`, `15m` or seconds."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    window: float = Field(7 * 86400.0, description="fair-share lookback window (seconds)")
    bucket: float = Field(
        900.0,
        description=(
            "usage bucket width: the window slides by buckets, and fair-share ratios are "
            "read as of the last bucket edge (recomputed once per bucket, like Slurm's "
            "PriorityCalcPeriod)"
        ),
    )
    max_min_runtime: float = Field(8 * 3600.0, description="cap on a workload's min_runtime")
    ordering: str = Field("fairshare", description="ordering policy name or module:attr")
    placement: str = Field("pack", description="placement policy name or module:attr")
    hysteresis: float = Field(
        0.05,
        ge=0,
        description="relative fair-share margin a beneficiary must lead a victim by to preempt it",
    )
    headroom_hosts: int = Field(
        DEFAULT_HEADROOM_HOSTS,
        ge=0,
        description="whole hosts kept for short, small jobs (at most one healthy host in eight)",
    )
    short_job_max_gpus: int = Field(2, ge=0)
    short_job_max_min_runtime: float = Field(900.0)
    legacy_caps: dict[str, int] = Field(
        default_factory=dict,
        description="legacy-priority: non-preemptible GPU cap per top-level allocation",
    )
    admins: tuple[str, ...] = Field(
        (), description="may create top-level allocations, register hosts and set config"
    )
    preempt_grace: float = Field(0.0, description="advisory checkpoint grace for launchers")
    max_lost_requeues: int = Field(
        5,
        ge=0,
        description=(
            "times resumable work is requeued after a lost node; the next lost report "
            "ends it (Slurm's MaxBatchRequeue): a launcher that keeps losing it stops"
        ),
    )

    health_holddown: float = Field(
        0.0,
        ge=0,
        description=(
            "flap damping (0: off): a host reported unhealthy within this long of its "
            "return to service stays cordoned after its next healthy report until it has "
            "stayed healthy this long (Slurm's ReturnToService=0 for flapping nodes); "
            "`allot host health H --healthy --force` returns it at once"
        ),
    )

    # views only (`allot queue`, `allot idle`, metrics): decide never reads these
    idle_threshold: float = Field(
        0.05,
        ge=0,
        le=1,
        description=(
            "a running attempt whose launcher reports mean GPU utilization below this "
            "(0..1) is idle"
        ),
    )
    idle_after: float = Field(
        1800.0,
        ge=0,
        description="how long an attempt must stay idle before views and alerts call it idle",
    )

    @model_serializer(mode="wrap")
    def _omit_defaults_added_later(self, handler: SerializerFunctionWrapHandler) -> Any:
        dumped = handler(self)
        for key, default in OMITTED_AT_DEFAULT.items():
            if dumped.get(key) == default:
                del dumped[key]
        return dumped

    @field_validator(*DURATION_KEYS, mode="before")
    @classmethod
    def _duration(cls, value: Any) -> float:
        return parse_duration(value)

    @field_validator("window", "bucket")
    @classmethod
    def _positive(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be > 0")
        if value > MAX_WINDOW:  # the ledger counts integer GPU-milliseconds
            raise ValueError("must be at most 36500d")
        return value

    @field_validator("legacy_caps")
    @classmethod
    def _top_level(cls, value: dict[str, int], info: ValidationInfo) -> dict[str, int]:
        # caps are per top-level allocation: a deeper path would be silently ignored
        # (a journal recorded before this check is folded as it was)
        if not (info.context or {}).get("recorded"):
            deeper = sorted(k for k in value if "/" in k.strip("/"))
            if deeper:
                raise ValueError(
                    f"caps are per top-level allocation; {', '.join(map(repr, deeper[:3]))} "
                    f"{'is' if len(deeper) == 1 else 'are'} not one (use e.g. "
                    f"{deeper[0].strip('/').split('/')[0]!r})"
                )
        return value

    @field_validator("bucket")
    @classmethod
    def _whole_seconds(cls, value: float) -> float:
        if value < 1:  # the ledger writes one bucket per width crossed
            raise ValueError("must be at least 1s")
        return value

    @model_validator(mode="after")
    def _bucket_within_window(self, info: ValidationInfo) -> SchedulerConfig:
        # a window shorter than one bucket is one bucket long: `--set window=1s` silently
        # meant 15 minutes (a journal's config is folded as it was accepted)
        if not (info.context or {}).get("recorded") and self.bucket > self.window:
            raise ValueError(
                f"bucket ({format_duration(self.bucket)}) is longer than the window "
                f"({format_duration(self.window)}); usage is counted in buckets inside it"
            )
        return self

    def is_short_small(self, gpus: int, min_runtime: float) -> bool:
        """Short and small work (rule 11): may use the headroom hosts."""
        return 0 < min_runtime <= self.short_job_max_min_runtime and gpus <= self.short_job_max_gpus

    def with_overrides(self, overrides: dict[str, Any]) -> SchedulerConfig:
        """A copy with `overrides` validated; raises ConfigError naming the key."""
        # (the caps are judged only when given: a recorded config is kept as it was)
        merged = {**self.model_dump(), **overrides}
        return parse_config(merged, recorded="legacy_caps" not in overrides)


class ConfigError(ValueError):
    pass


def parse_config(raw: dict[str, Any], recorded: bool = False) -> SchedulerConfig:
    """`raw` validated; `recorded`: a journal's config, folded as it was accepted even
    where today's checks are stricter."""
    try:
        return SchedulerConfig.model_validate(raw, context={"recorded": recorded})
    except ValidationError as exc:
        problems = []
        for item in exc.errors():
            key = ".".join(str(p) for p in item["loc"]) or "config"
            if item["type"] == "extra_forbidden":
                known = ", ".join(SchedulerConfig.model_fields)
                problems.append(f"unknown config key {key!r} (known: {known})")
            else:
                # a validator's own words, without pydantic's "Value error, " in front
                msg = str(item["msg"]).removeprefix("Value error, ")
                # a check of several keys at once names them itself
                problems.append(f"config key {key!r}: {msg}" if item["loc"] else msg)
        raise ConfigError("; ".join(problems)) from None

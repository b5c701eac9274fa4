"""`philly`: the public Philly-derived job CSV.

Header `timestamp,duration,num_gpus,gpu_time,cluster`: submit time
`YYYY-MM-DD HH:MM:SS` in UTC (ISO forms with `T`, a zone or fractions, and plain
epoch seconds are accepted too), `duration` seconds of run time (empty or NaN: the
job never ended), `num_gpus`, `gpu_time` (ignored: it is duration x GPUs), and
`cluster`, the virtual cluster, which becomes the allocation. Rows are not sorted
in the published files; submissions are, and times become relative to the earliest
timestamp.
"""

from __future__ import annotations

import math
from pathlib import Path

from domain.admission import MAX_TIME as MAX_EPOCH_S
from domain.durations import parse_utc
from projections.traces.common import (
    Allocations,
    BadValue,
    Row,
    Submission,
    TraceResult,
    finish,
    optional_seconds,
    parse_int,
    read_csv,
    require,
    submission,
)

REQUIRED = ("timestamp", "duration", "num_gpus", "cluster")
OPTIONAL = ("gpu_time",)


def parse_timestamp(text: str, column: str) -> float:
    """Seconds since the epoch, from 1970 to 9999; naive timestamps are UTC."""
    require(text, column)
    try:
        seconds = parse_utc(text)
    except ValueError:
        try:
            seconds = float(text)  # epoch seconds, as some exports write it
        except ValueError:
            seconds = math.nan
        if not _in_range(seconds):
            raise BadValue(
                column, f"{text!r} is not a timestamp (expected YYYY-MM-DD HH:MM:SS)"
            ) from None
        return seconds
    if not _in_range(seconds):
        # a placeholder like 0001-01-01 rebased the other rows two thousand years
        # later: a 3-job trace simulated for ever, its memory growing
        raise BadValue(column, f"{text!r} is out of range (a time from 1970 to 9999)")
    return seconds


def _in_range(seconds: float) -> bool:
    return math.isfinite(seconds) and 0 <= seconds <= MAX_EPOCH_S


def read(path: Path, allocations: Allocations, *, skip_bad: bool) -> TraceResult:
    def parse_row(row: Row) -> Submission | None:
        time = parse_timestamp(row["timestamp"], "timestamp")
        runtime = optional_seconds(row["duration"], "duration")
        gpus = parse_int(row["num_gpus"], "num_gpus")
        tenant = require(row["cluster"], "cluster")
        if gpus == 0:
            return None
        return submission(
            time=time,
            allocation=allocations(tenant, "cluster"),
            gpus=gpus,
            runtime=runtime,
            runtime_column="duration",
        )

    return finish(
        read_csv(path, required=REQUIRED, parse_row=parse_row, skip_bad=skip_bad), rebase=True
    )

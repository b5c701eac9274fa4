"""`philly`: the public Philly-derived job CSV.

Header `timestamp,duration,num_gpus,gpu_time,cluster`: submit time
`YYYY-MM-DD HH:MM:SS`, read as UTC unless a time zone is given (ISO forms with `T`,
an offset or fractions, a trailing PST/PDT/UTC/GMT, and plain epoch seconds are
accepted too), `duration` seconds of run time (empty, NaN or None: the job never
ended), `num_gpus`, `gpu_time` (ignored: it is duration x GPUs), and
`cluster`, the virtual cluster, which becomes the allocation. Rows are not sorted
in the published files; submissions are, and times become relative to the earliest
timestamp.

The public Philly trace writes the cluster's local time (US Pacific) without a zone:
read as UTC, rows on either side of a daylight-saving change are an hour off against
each other. `zone` (`--timezone America/Los_Angeles`, a scenario trace's `timezone`)
reads naive timestamps in that zone instead; UTC stays the default so existing
results do not move. A time the clocks skipped (02:30 on the spring-forward night)
is read with the offset before the change, and one they repeat (01:30 in the autumn)
as its first occurrence (daylight time), as Python's `zoneinfo` does.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta, timezone, tzinfo
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


# Zone names the Philly trace writes after its times (`2017-10-03 00:08:00 PDT` in its
# utilization files), each a fixed offset: a derived CSV keeping them was refused row
# by row. Only unambiguous ones: `CST` is US Central or China Standard Time.
_NAMED_ZONES = {
    "PST": timezone(timedelta(hours=-8)),
    "PDT": timezone(timedelta(hours=-7)),
    "UTC": UTC,
    "GMT": UTC,
}
_NAMED_ZONE = re.compile(r"(.*\d)\s+(" + "|".join(_NAMED_ZONES) + r")", re.IGNORECASE)


def parse_timestamp(text: str, column: str, zone: tzinfo | None = None) -> float:
    """Seconds since the epoch, from 1970 to 9999; naive timestamps are in `zone`
    (None: UTC), or in the zone a trailing PST, PDT, UTC or GMT names."""
    require(text, column)
    named = _NAMED_ZONE.fullmatch(text.strip())
    if named is not None:
        text, zone = named.group(1), _NAMED_ZONES[named.group(2).upper()]
    try:
        seconds = parse_utc(text) if zone is None else _parse_local(text, zone)
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


def _parse_local(text: str, zone: tzinfo) -> float:
    """An ISO date and time in `zone` unless it names its own (ValueError if not one)."""
    text = text.strip()
    if text.endswith(("Z", "z")):
        return parse_utc(text)
    moment = datetime.fromisoformat(text)
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=zone)
    return moment.timestamp()


def _in_range(seconds: float) -> bool:
    return math.isfinite(seconds) and 0 <= seconds <= MAX_EPOCH_S


def read(
    path: Path, allocations: Allocations, *, skip_bad: bool, zone: tzinfo | None = None
) -> TraceResult:
    def parse_row(row: Row) -> Submission | None:
        time = parse_timestamp(row["timestamp"], "timestamp", zone)
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

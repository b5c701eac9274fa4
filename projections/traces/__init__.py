"""Trace importers: public cluster traces -> allot submissions.

    from projections.traces import read_trace
    result = read_trace(Path("philly.csv"), "philly", allocation_prefix="vc/")

`result.submissions` is a list of dicts sorted by (time, row order), each with the
keys `time` (seconds since the trace start), `workload`, `actor`, `allocation`,
`gpus`, `runtime`, `min_runtime`, `resumable`, `priority`, `tags`, `name`; None
means the trace does not say and the scenario decides. Rows asking for no GPU are
skipped and counted (`skipped_no_gpu`), as are pods the trace says never ran
(`skipped_unscheduled`, alibaba-openb); jobs that never ended have runtime None
(`unfinished`); malformed rows raise `TraceError` naming file, line and column, or
with `skip_bad=True` are skipped and counted (`skipped_bad`).

Formats (one module each): `allot-csv` (`allot_csv`), `philly` (`philly`),
`alibaba-openb` (`alibaba_openb`), `allot-jsonl` (`allot_jsonl`, what
`allot trace import` writes). A source tenant (virtual cluster, qos, ...) becomes
the allocation `allocation_map[tenant]` if mapped, else `<allocation_prefix><tenant>`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from projections.traces import alibaba_openb, allot_csv, allot_jsonl, philly
from projections.traces.allot_jsonl import to_record, write_submissions
from projections.traces.common import (
    CLI_OPTIONS,
    SCENARIO_KEYS,
    Allocations,
    OptionNames,
    Submission,
    TraceError,
    TraceResult,
    first_line,
    header_names,
    load_allocation_map,
    load_zone,
)

FORMATS = ("allot-csv", "philly", "alibaba-openb", "allot-jsonl")

_READERS: dict[str, Callable[..., TraceResult]] = {
    "allot-csv": allot_csv.read,
    "philly": philly.read,
    "alibaba-openb": alibaba_openb.read,
    "allot-jsonl": allot_jsonl.read,
}


# the columns that tell each CSV format's header from the others'
_CSV_HEADERS = {
    "allot-csv": allot_csv.REQUIRED,
    "philly": philly.REQUIRED,
    "alibaba-openb": alibaba_openb.REQUIRED,
}


def _every_row(rows: int) -> str:
    return "its one row is" if rows == 1 else f"all {rows:,} rows are"


def looks_like(path: Path, fmt: str) -> str | None:
    """The format other than `fmt` whose shape the file's first line has (a JSON object:
    allot-jsonl; a CSV header: the format whose required columns it names), or None."""
    line = first_line(path)
    if not line:
        return None
    if line.startswith("{"):
        found = "allot-jsonl"
    else:
        names = header_names(line)
        found = next((f for f, cols in _CSV_HEADERS.items() if names.issuperset(cols)), None)
    return found if found != fmt else None


def read_trace(
    path: Path | str,
    fmt: str,
    *,
    allocation_map: dict[str, str] | None = None,
    allocation_prefix: str = "",
    skip_bad: bool = False,
    names: OptionNames = CLI_OPTIONS,
    timezone: str | None = None,
) -> TraceResult:
    """Read a trace file of format `fmt` (one of FORMATS); raises TraceError. `names`:
    how errors call the options (the command's flags or a scenario's keys). `timezone`
    (philly only): the IANA zone its naive timestamps are in (default UTC)."""
    reader = _READERS.get(fmt)
    if reader is None:
        raise TraceError(f"unknown trace format {fmt!r}; use one of: {', '.join(FORMATS)}")
    options: dict[str, Any] = {}
    if timezone is not None:
        if fmt != "philly":
            raise TraceError(
                f"{names.timezone} is for {names.format}philly, whose timestamps are dates; "
                f"{fmt} gives its times in seconds"
            )
        options["zone"] = load_zone(timezone, names)
    allocations = Allocations(allocation_map, allocation_prefix, names)
    try:
        result = reader(Path(path), allocations, skip_bad=skip_bad, **options)
    except TraceError as exc:
        other = looks_like(Path(path), fmt)
        if other is None:
            raise
        # not a malformed row to skip: the whole file is read in the wrong format
        raise TraceError(f"{exc}; the file looks like {names.format}{other}") from None
    if skip_bad and not result.submissions and result.skipped_bad:
        other = looks_like(Path(path), fmt)
        if other is not None:  # every row skipped as bad: read in the wrong format
            raise TraceError(
                f"{path}: {_every_row(result.skipped_bad)} bad as {names.format}{fmt}; "
                f"the file looks like {names.format}{other}"
            )
    result.unmapped = dict(sorted(allocations.unmapped.items(), key=lambda kv: (-kv[1], kv[0])))
    return result


__all__ = [
    "CLI_OPTIONS",
    "FORMATS",
    "SCENARIO_KEYS",
    "OptionNames",
    "Submission",
    "TraceError",
    "TraceResult",
    "load_allocation_map",
    "read_trace",
    "to_record",
    "write_submissions",
]

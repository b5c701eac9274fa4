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
    load_allocation_map,
)

FORMATS = ("allot-csv", "philly", "alibaba-openb", "allot-jsonl")

_READERS: dict[str, Callable[..., TraceResult]] = {
    "allot-csv": allot_csv.read,
    "philly": philly.read,
    "alibaba-openb": alibaba_openb.read,
    "allot-jsonl": allot_jsonl.read,
}


def read_trace(
    path: Path | str,
    fmt: str,
    *,
    allocation_map: dict[str, str] | None = None,
    allocation_prefix: str = "",
    skip_bad: bool = False,
    names: OptionNames = CLI_OPTIONS,
) -> TraceResult:
    """Read a trace file of format `fmt` (one of FORMATS); raises TraceError. `names`:
    how errors call the allocation options (the command's flags or a scenario's keys)."""
    reader = _READERS.get(fmt)
    if reader is None:
        raise TraceError(f"unknown trace format {fmt!r}; use one of: {', '.join(FORMATS)}")
    allocations = Allocations(allocation_map, allocation_prefix, names)
    result = reader(Path(path), allocations, skip_bad=skip_bad)
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

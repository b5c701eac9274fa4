"""`allot-csv`: the hand-written trace format.

Header `submit_time,runtime,gpus,allocation`, then any of
`workload,user,min_runtime,resumable,priority,tags,name,one_host` (`tags` separated by
`;`; `one_host` true: all the job's GPUs on one host, never a gang).
Times and durations are seconds or `15m`/`8h`/`7d`; `submit_time` is already
relative to the trace start and is kept as written. An empty `runtime` means the
job never ended (it runs until the horizon); other empty cells leave the value to
the scenario. A cell reading `nan`, `none`, `null`, `na`, `n/a` or `-` is empty,
in `tags` too; a tag named twice is kept once.
"""

from __future__ import annotations

from pathlib import Path

from projections.traces.common import (
    Allocations,
    Row,
    Submission,
    TraceResult,
    checked_id,
    checked_name,
    checked_tags,
    finish,
    is_missing,
    optional_seconds,
    optional_text,
    parse_bool,
    parse_int,
    parse_seconds,
    read_csv,
    require,
    submission,
)

REQUIRED = ("submit_time", "runtime", "gpus", "allocation")
OPTIONAL = (
    "workload",
    "user",
    "min_runtime",
    "resumable",
    "priority",
    "tags",
    "name",
    "one_host",
)


def read(path: Path, allocations: Allocations, *, skip_bad: bool) -> TraceResult:
    def parse_row(row: Row) -> Submission | None:
        time = parse_seconds(row["submit_time"], "submit_time")
        runtime = optional_seconds(row["runtime"], "runtime")
        gpus = parse_int(row["gpus"], "gpus")
        tenant = require(row["allocation"], "allocation")
        min_runtime = optional_seconds(row["min_runtime"], "min_runtime")
        resumable = parse_bool(row["resumable"], "resumable")
        priority_text = row["priority"]
        priority = (
            None
            if optional_text(priority_text) is None
            else parse_int(priority_text, "priority", minimum=None)
        )
        if gpus == 0:
            return None
        tags_text = row["tags"]
        # `nan`, `-`, ... are an empty cell here as in every other column (a pandas
        # export's NaN was imported as the tag `nan`)
        tags = [] if is_missing(tags_text) else [t.strip() for t in tags_text.split(";")]
        return submission(
            time=time,
            allocation=allocations(tenant, "allocation"),
            gpus=gpus,
            workload=checked_id(optional_text(row["workload"]), "workload"),
            actor=checked_id(optional_text(row["user"]), "user"),
            runtime=runtime,
            min_runtime=min_runtime,
            resumable=resumable,
            priority=priority,
            tags=checked_tags(tags, "tags"),
            name=checked_name(optional_text(row["name"]), "name"),
            one_host=parse_bool(row["one_host"], "one_host"),
        )

    return finish(
        read_csv(path, required=REQUIRED, parse_row=parse_row, skip_bad=skip_bad), rebase=False
    )

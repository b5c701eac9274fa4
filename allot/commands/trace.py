"""`allot trace ...`: turn public cluster traces into allot submissions.

Mounted by the main CLI as `app.add_typer(trace.app, name="trace")`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from allot.commands.common import plural

# the formats `projections.traces.FORMATS` reads, named here so that `allot` starts
# without importing the importers (checked by tests/e2e/test_audit.py)
FORMAT_NAMES = ("allot-csv", "philly", "alibaba-openb", "allot-jsonl")

app = typer.Typer(
    help="Import cluster traces (allot-csv, Philly, Alibaba openb) as submissions JSONL.",
    no_args_is_help=True,
)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code=2)


def _and_more(total: int, shown: int) -> str:
    """` and N more` after a list that shows `shown` of `total` items, else nothing."""
    return f" and {total - shown} more" if total > shown else ""


def _same_file(a: Path, b: Path) -> bool:
    """Whether `b` is `a` under another name (a link, `./`, a symlink); False if `b` is new."""
    import os

    try:
        return os.path.samefile(a, b)
    except OSError:  # b does not exist (yet), or cannot be looked at: not the input then
        return False


@app.command("import")
def import_trace(
    file: Annotated[
        Path, typer.Argument(help="Trace file to read (.gz is fine).", show_default=False)
    ],
    out: Annotated[
        Path,
        typer.Option("--out", "-o", help="Submissions JSONL to write.", show_default=False),
    ],
    fmt: Annotated[
        str,
        typer.Option(
            "--format",
            "-f",
            help=f"Trace format: {', '.join(FORMAT_NAMES)} (a file given the wrong one is "
            "told which its header looks like).",
            show_default=False,
        ),
    ],
    allocation_map: Annotated[
        Path | None,
        typer.Option(
            "--allocation-map",
            help="YAML mapping a source tenant (VC, app, qos) to an allocation path.",
            show_default=False,
        ),
    ] = None,
    allocation_prefix: Annotated[
        str,
        typer.Option("--allocation-prefix", help="Prefix for tenants not in the map, e.g. vc/."),
    ] = "",
    skip_bad: Annotated[
        bool, typer.Option("--skip-bad", help="Skip malformed rows and count them.")
    ] = False,
    timezone: Annotated[
        str | None,
        typer.Option(
            "--timezone",
            metavar="ZONE",
            help="philly: the IANA time zone its timestamps are in (default UTC). The public "
            "Philly trace writes US Pacific local time: give America/Los_Angeles so rows on "
            "either side of a daylight-saving change are not an hour off.",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Read FILE and write one `workload.submitted` record per GPU job to --out.

    Times are seconds from the trace start; jobs that never ended get no `runtime`
    (they run until the scenario's horizon, or to the end of a run without one); rows
    asking for no GPU are skipped, and so are alibaba-openb pods never scheduled.
    Traces carry no min_runtime: a scenario's `trace:` entry gives it (e.g.
    `min_runtime: 30m`; default 15m).

    Columns (CSV with a header; other columns are ignored):

    allot-csv: submit_time, runtime, gpus, allocation; optional workload, user,
    min_runtime, resumable, priority, tags (split by ;), name. Seconds or 15m/8h/7d.

    philly: timestamp (YYYY-MM-DD HH:MM:SS, or epoch seconds; a trailing PST, PDT,
    UTC or GMT, as the Philly trace writes, is honoured), duration (seconds; empty:
    never ended), num_gpus, cluster (the tenant); gpu_time is ignored.

    alibaba-openb: name, num_gpu, qos (the tenant, also a tag), creation_time,
    deletion_time (seconds; 0 or empty: never ended; the published files give pods
    still running the cut, the file's latest deletion_time: they never end either,
    unless pod_phase says Succeeded or Failed); optional scheduled_time (empty: never
    scheduled), pod_phase, gpu_milli. The multigpu*.csv siblings have
    no times and are refused.

    allot-jsonl: the file this command writes, one submission per line.
    """
    from rich.console import Console
    from rich.markup import escape

    from projections.traces import (
        FORMATS,
        TraceError,
        load_allocation_map,
        read_trace,
        write_submissions,
    )

    if fmt not in FORMATS:
        raise _fail(f"unknown --format {fmt!r}; use one of: {', '.join(FORMATS)}")
    if not file.exists():
        raise _fail(f"{file}: no such file")
    if file.is_dir():
        raise _fail(f"{file}: is a directory, not a trace file")
    if _same_file(file, out):
        raise _fail(f"--out {out} is the input file {file}; write the submissions to another file")
    try:
        mapping = load_allocation_map(allocation_map) if allocation_map is not None else None
        result = read_trace(
            file,
            fmt,
            allocation_map=mapping,
            allocation_prefix=allocation_prefix,
            skip_bad=skip_bad,
            timezone=timezone,
        )
    except TraceError as exc:
        hint = " (--skip-bad skips malformed rows)" if exc.row_error and not skip_bad else ""
        raise _fail(f"{exc}{hint}") from None
    if out.is_dir():  # `-o ""` reads as the current folder
        raise _fail(f"--out {str(out)!r} is a folder; give the submissions file's name")
    try:
        if out.parent != Path():
            out.parent.mkdir(parents=True, exist_ok=True)
        written = write_submissions(result.submissions, out)
    except OSError as exc:
        raise _fail(f"{out}: cannot write: {exc.strerror or exc}") from None
    # only openb says a pod never ran; other formats have nothing to count here
    unscheduled = (
        f", {result.skipped_unscheduled} never scheduled" if result.skipped_unscheduled else ""
    )
    at_cut = (
        f" ({result.running_at_cut} still running when the trace was cut)"
        if result.running_at_cut
        else ""
    )
    Console(soft_wrap=True).print(
        f"[bold]{plural(result.rows, 'row')}[/] read from {escape(str(file))}: "
        f"[bold green]{plural(written, 'submission')}[/] written to {escape(str(out))}; "
        f"skipped {result.skipped_bad} bad, {result.skipped_no_gpu} without GPUs"
        f"{unscheduled}; {result.unfinished} unfinished{at_cut}"
    )
    for example in result.bad_examples:
        typer.echo(f"  skipped {example}", err=True)
    # only the first few are kept: say that the count is not the list's
    if more := _and_more(result.skipped_bad, len(result.bad_examples)):
        typer.echo(f"  …{more}", err=True)
    if result.unmapped:
        tenants = list(result.unmapped.items())
        shown = ", ".join(f"{t} ({plural(n, 'row')})" for t, n in tenants[:5])
        more = _and_more(len(tenants), 5)
        typer.echo(
            f"warning: {plural(len(tenants), 'tenant')} not in {allocation_map}, kept as "
            f"'{allocation_prefix}<tenant>': {shown}{more}",
            err=True,
        )

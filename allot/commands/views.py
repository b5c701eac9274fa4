"""`allot queue`, `allot shares`, `allot why`: the journal as people read it.

Each reads the journal from Kafka (`--kafka`, default `$ALLOT_KAFKA`), the embedded
folder (`--data DIR`) or a file (`--journal FILE`, e.g. a simulation's journal.jsonl),
folds it with the scheduler's own code (`projections.views`) and answers as of the
journal's latest event time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from allot.commands.common import (
    HORIZON_DEFAULT,
    DataOpt,
    HorizonOpt,
    JournalOpt,
    KafkaOpt,
    ReadClusterOpt,
    TargetError,
    WorkSpeedOpt,
    check_speed,
    horizon_seconds,
    pipe_console,
    plural,
    quiet_on_closed_pipe,
    terminal_safe,
    visible,
    whoami,
)

if TYPE_CHECKING:
    from rich.table import Table

# rich and orjson are imported where they are used (start-up time, issue 5)

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
UserOpt = Annotated[
    str | None,
    typer.Option("--user", "-u", metavar="USER[,USER...]", help="Only these users' workloads."),
]
MeOpt = Annotated[
    bool,
    typer.Option(
        "--me", help="Only your own workloads ($USER), as squeue --me; with -u, theirs too."
    ),
]


def _with_me(user: str | None, me: bool, as_: str | None = None) -> str | None:
    """-u's list with the caller added by --me: `as_` (a request's --as) when given,
    else $USER."""
    if not me:
        return user
    return ",".join(u for u in (user, whoami(as_)) if u)


# what Slurm's bare -a means to each command's user, and why allot needs no flag for it
_SLURMS_DASH_A = {
    "queue": "squeue's -a (all partitions) and sacct's -a (all users) need no flag here: "
    "every user's work is included unless -u or --me narrows it",
    "acct": "sacct's -a (all users) needs no flag here: every user's work is included "
    "unless -u or --me narrows it",
    "shares": "sshare's -a (all users) needs no flag here: every allocation is listed "
    "unless -u USER (those USER is named on) or -A PATH narrows it",
    # scancel, scontrol hold/release/requeue have no -a: acting on everyone's work is
    # never a default, so say what selects work rather than "everything is included"
    "cancel": "scancel has no -a: give ids, or filters that select the work to cancel "
    "(-u USER, --me, -t STATE, -n NAME, -w HOSTS; `allot queue` takes the same)",
}
_SLURMS_DASH_A["usage"] = (
    "`allot usage` (sreport) counts every allocation unless -a PATH narrows it; "
    "`allot history -a PATH` splits one by user"
)
for _verb in ("hold", "release", "requeue"):
    _SLURMS_DASH_A[_verb] = (
        _SLURMS_DASH_A["cancel"]
        .replace("scancel has no -a", f"scontrol {_verb} has no -a")
        .replace("to cancel", f"to {_verb}")
    )


def _allocation_given(ctx: typer.Context, value: str | None) -> str | None:
    """-a's value, refused when it is the next flag: Slurm's `sacct -a -u bob` (all
    users) and `squeue -a` (all partitions) take no value, and read as allot's -a PATH
    they took `-u` for a path and left `bob` an "unexpected extra argument"."""
    if value is not None and value.startswith("-"):
        meant = _SLURMS_DASH_A.get(ctx.info_name or "", _SLURMS_DASH_A["queue"])
        raise typer.BadParameter(
            f"{value!r} is no allocation path. allot's -a/-A name allocations (Slurm's -A "
            f"ACCOUNT); {meant}"
        )
    return value


AllocationsOpt = Annotated[
    str | None,
    typer.Option(
        "--allocation",
        "-a",
        "--account",
        "-A",
        metavar="PATH[,PATH...]",
        help="Only these allocations and the allocations under them (Slurm's -A/--account).",
        callback=_allocation_given,
    ),
]
JobsOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--jobs",
        "-j",
        metavar="ID[,ID...]",
        help="Only these workloads; a job array's base id matches all its tasks.",
    ),
]


def _job_ids(jobs: list[str] | None) -> set[str] | None:
    """--jobs a,b --jobs 'BASE_[0-3,7]': the ids (array tasks expanded, as `allot
    cancel` reads them); None when not given."""
    if jobs is None:
        return None
    import re

    from allot.commands.requests import RequestError, expand_ids

    given = [i.strip() for j in jobs for i in re.split(r",(?![^\[]*\])", j) if i.strip()]
    if not given:
        raise TargetError("--jobs: give workload ids (ID[,ID...], or BASE_[SPEC] for tasks)")
    try:
        return set(expand_ids(given))
    except RequestError as why:
        raise TargetError(f"--jobs: {why}") from None


FORMAT_HELP = (
    "Columns, squeue-like: letters such as '%i %a %u %T %b %M %r' or names such as "
    "'id,user,state,gpus,reason' (comma-separated). Fields: %i id, %j name, %a allocation, "
    "%u user, %T state, %t st (PD/R), %M time (pending: waited; running: run "
    "time), %r reason, %N nodelist, %R reason_or_nodes (nodelist, or (reason) while "
    "pending), %D nodes (hosts it runs on; pending: the hosts it will take, 1 when it "
    "fits on one host, else whole hosts; blank for such a gang on a cluster of mixed "
    "host sizes), %P partition (the cluster's name: allot schedules each cluster on "
    "its own, its nearest analog of a partition), %Q priority (allot's --priority, "
    "which orders work inside its allocation only), %p priority (the same: squeue's "
    "0-1 number has no other allot equivalent), %V submitted, %l min_runtime, %L "
    "protected_left (what is left of its protection: allot has no time limit, so "
    "squeue's time left is the time until it turns preemptible; pending: its min "
    "runtime), %b gres (as squeue's tres-per-node: gres/gpu:N, the GPUs on each of its "
    "hosts, so %b times %D is what it holds: a 16-GPU gang on 8-GPU hosts is gres/gpu:8 "
    "on 2 nodes; blank when its hosts give it different counts), %A id (as squeue's: "
    "unique per task of an array), %F array_job_id (BASE of an array's task BASE_N, else "
    "its id), %K array_task_id (N of BASE_N, else N/A), %w tags (%K before 2026-12; "
    "squeue's %w is the wckey), "
    "%S start and %Y schednodes (for pending work expected, as with --start; for "
    "running work when it started). allot's own columns have names only: gpus (the "
    "job's total), tres_per_job (gres/gpu:N of the total), position, rank, ratio, "
    "one_host (yes: asked for all its GPUs on one host, submit --one-host), "
    "util (the launcher's last GPU utilization reading of running work) and idle (how "
    "long its readings stayed under idle_threshold; see allot idle), "
    "detail (%g, %p, %k, %f and %d until 2026-12). Refused, as allot has no "
    "equivalent: %g (Slurm's group), %k (comment), %f (features); %C, %c, %m and %d "
    "(CPUs, memory, temporary disk): allot schedules GPUs only. "
    "Prints plain aligned text (no table borders) for scripts; with other text between "
    "the fields ('%i|%u|%T') or widths ('%.18i %9u'), squeue's literal form: the text is "
    "kept and %[.]W pads (right-aligned with the dot) or cuts a field to W characters; "
    "an id is never cut (a cut id names nothing): its column widens to the longest. "
    "For squeue's long form (-O JobID:30,Name,State) see --Format. Without -o, -O, "
    "--long or --start, $SQUEUE_FORMAT is read as -o, else $SQUEUE_FORMAT2 as -O, as "
    "squeue does."
)

# squeue's: used when none of -o, -O, -l, --start is given (-o's before -O's)
QUEUE_FORMAT_ENV = "SQUEUE_FORMAT"
QUEUE_LONG_FORMAT_ENV = "SQUEUE_FORMAT2"
ACCT_FORMAT_ENV = "SACCT_FORMAT"  # sacct's, when --format is not given


def _slurm_variable(name: str) -> str | None:
    """$NAME as Slurm's commands read their defaults: None when unset or blank."""
    import os

    value = os.environ.get(name, "")
    return value if value.strip() else None


def _from_variable(variable: str, value: object) -> str:
    """The start of an error in a value read from $VARIABLE, naming where it came from
    (the user typed no flag)."""
    return f"${variable} ({variable}={value!r}): "


def format_from_environment(
    format_: str | None, format_long: str | None, overridden: bool
) -> tuple[str | None, str | None, str | None]:
    """(-o, -O, the variable they came from) as squeue settles them: the flags when given;
    with none of -o, -O, --long, --start (`overridden`), $SQUEUE_FORMAT as -o, else
    $SQUEUE_FORMAT2 as -O. An empty variable counts as unset."""
    if format_ or format_long or overridden:
        return format_, format_long, None
    for name in (QUEUE_FORMAT_ENV, QUEUE_LONG_FORMAT_ENV):
        value = _slurm_variable(name)
        if value is not None:
            return (value, None, name) if name == QUEUE_FORMAT_ENV else (None, value, name)
    return None, None, None


# squeue's defaults for -u, -t, -A and -n when the flag is not given (--me sets -u aside)
QUEUE_FILTER_ENV = {
    "user": "SQUEUE_USERS",
    "states": "SQUEUE_STATES",
    "allocation": "SQUEUE_ACCOUNT",
    "name": "SQUEUE_NAMES",
}


def filters_from_environment(**given: str | None) -> dict[str, tuple[str, str]]:
    """{filter: (value, variable)} for each of `given`'s filters that is None and has
    its squeue variable set (QUEUE_FILTER_ENV), as squeue reads them; an empty variable
    counts as unset."""
    taken = {}
    for flag, value in given.items():
        variable = QUEUE_FILTER_ENV[flag]
        text = _slurm_variable(variable)
        if value is None and text is not None:
            taken[flag] = (text.strip(), variable)
    return taken


def _naming_variable(why: TargetError, taken: dict[str, tuple[str, str]]) -> TargetError:
    """A filter's error, with the squeue variable it came from named."""
    prefixes = {"states": "--states", "allocation": "-a "}
    for flag, prefix in prefixes.items():
        if flag in taken and str(why).startswith(prefix):
            value, variable = taken[flag]
            return TargetError(f"{_from_variable(variable, value)}{why}")
    return why


QUEUE_SORT_ENV = "SQUEUE_SORT"  # squeue's, when -S is not given


def _sort_keys(sort: str | None) -> list[tuple[str, bool]] | None:
    """-S's keys, else $SQUEUE_SORT's (named in its error); None: the queue's order."""
    from projections.views import ViewError, parse_sort

    spec = sort if sort is not None else (_slurm_variable(QUEUE_SORT_ENV) or "").strip() or None
    if spec is None:
        return None
    try:
        return parse_sort(spec)
    except ViewError as why:
        if sort is not None:
            raise
        raise ViewError(f"{_from_variable(QUEUE_SORT_ENV, spec)}{why}") from None


def _queue_columns(
    format_: str | None, format_long: str | None, variable: str | None
) -> tuple[list[str] | None, Any]:
    """(columns, squeue literal template or None) of -o or -O; None columns: the default.
    A format read from the environment names its variable when it is wrong."""
    from projections.views import ViewError, format_template, parse_format, parse_long_format

    try:
        if format_long:
            return parse_long_format(format_long)
        if format_:
            return parse_format(format_), format_template(format_)
    except ViewError as why:
        if variable is None:
            raise
        raise ViewError(f"{_from_variable(variable, format_ or format_long)}{why}") from None
    return None, None


def _fail(message: str) -> typer.Exit:
    # an error may quote journal data (an ambiguous id's candidates): shown, not obeyed
    typer.echo(f"error: {visible(' '.join(message.split()))}", err=True)
    return typer.Exit(2)


def print_table(title: str, table: Table) -> None:
    """Print at the table's natural width: cells are never cut (ids must stay whole).
    On a terminal too narrow for it, columns are one space apart instead of two, as
    sshare's are, when that makes it fit (lab's `allot shares` was 81 columns wide:
    every row wrapped one character onto a line of its own); else long rows wrap, as
    squeue's do."""
    from rich.console import Console
    from rich.text import Text

    console = pipe_console()
    natural = Console(width=10_000).measure(table).maximum
    if console.is_terminal and natural > console.width:
        natural = _tightened(table, console.width)
    if not console.is_terminal or natural > console.width:
        console = pipe_console(width=max(natural, len(title), 20))
    console.print(Text(wrapped(title), style="bold"), soft_wrap=True)
    console.print(table)


def _tightened(table: Table, width: int) -> int:
    """`table`'s natural width with one space between columns, which it then keeps if
    that fits in `width` (otherwise its padding is left as it was)."""
    from rich.console import Console

    padding = table.padding
    table.padding = (0, 1, 0, 0)  # pad_edge=False: no space before the first column
    natural = Console(width=10_000).measure(table).maximum
    if natural > width:
        table.padding = padding
        return Console(width=10_000).measure(table).maximum
    return natural


def aligned_lines(
    headers: list[str],
    cells: list[list[str]],
    right: frozenset[str] = frozenset(),
    gap: int = 2,
) -> list[str]:
    """The header and rows padded to their columns' widths (terminal cells, so wide
    characters line up), `gap` spaces apart; columns named in `right` right-aligned."""
    from rich.cells import cell_len

    # a cell is journal data: its control characters are shown, not obeyed (an ESC
    # colour code in a workload id would otherwise colour the table)
    cells = [[visible(c) for c in row] for row in cells]
    widths = [cell_len(h) for h in headers]
    for row in cells:
        widths = [max(w, cell_len(c)) for w, c in zip(widths, row, strict=True)]
    aligned = [h in right for h in headers]

    def line(row: list[str]) -> str:
        return (
            (" " * gap)
            .join(
                " " * (w - cell_len(c)) + c if r else c + " " * (w - cell_len(c))
                for c, w, r in zip(row, widths, aligned, strict=True)
            )
            .rstrip()
        )

    return [line(row) for row in [headers, *cells]]


def sized_columns(
    headers: list[str],
    cells: list[list[str]],
    widths: list[int | None],
    whole: frozenset[int] | set[int] = frozenset(),
) -> tuple[list[str], list[list[str]]]:
    """sacct's `field%N`: column i with a width is exactly |N| terminal cells,
    right-justified when N > 0 and left-justified when N < 0; a longer value is cut
    to N - 1 cells and ends in '+', as sacct marks it (its header is cut plain). Columns
    in `whole` (numbers and durations, which sacct never cuts; ids) stay whole and only
    pad.
    Columns without a width are left to `aligned_lines`."""
    from rich.cells import cell_len, set_cell_size

    def fit(text: str, width: int, i: int, marked: bool) -> str:
        n = abs(width)
        text = visible(text)
        if cell_len(text) > n and i not in whole:
            text = set_cell_size(text, n - 1) + "+" if marked else set_cell_size(text, n)
        pad = " " * max(0, n - cell_len(text))
        return pad + text if width > 0 else text + pad

    def line(row: list[str], marked: bool) -> list[str]:
        return [
            c if w is None else fit(c, w, i, marked)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]

    return line(headers, marked=False), [line(row, marked=True) for row in cells]


def shortened_path(path: str, width: int) -> str:
    """An allocation path with as few of its middle parts left out as bring it within
    `width` (`lab/…/long-context-experiments`); its first and last parts always stay,
    so a path of two parts is never shortened."""
    parts = path.split("/")
    shorter = path
    for dropped in range(1, len(parts) - 1):
        if len(shorter) <= width:
            break
        shorter = "/".join([parts[0], "…", *parts[1 + dropped :]])
    return shorter


def _pieces(text: str, width: int, after: str) -> list[str]:
    """`text` on lines of at most `width` characters, broken only after `after` (spaces
    for a reason, commas for a nodelist); a piece longer than `width` stays whole."""
    import re

    lines: list[str] = []
    for token in re.findall(rf"[^{after}]+{after}*", text):
        if lines and len(lines[-1] + token.rstrip()) <= width:
            lines[-1] += token
        else:
            lines.append(token)
    return [line.rstrip() for line in lines] or [""]


def queue_fitted(
    headers: list[str], cells: list[list[str]], right: frozenset[str], width: int
) -> list[str] | None:
    """The default queue fitted to a terminal `width` columns wide, or None when it
    cannot be: columns one space apart; long allocation paths shortened in the middle;
    then, if need be, a row's NODELIST below its REASON in one column (as the header's
    names are), each broken at spaces and commas. Nothing else is cut: ids, users and
    reasons stay whole, and pipes, --json and `allot why` keep every path whole.
    Header and rows, a row's lines joined by newlines."""
    from rich.cells import cell_len

    cells = [[visible(c) for c in row] for row in cells]

    def widths() -> list[int]:
        return [max([cell_len(h)] + [cell_len(r[i]) for r in cells]) for i, h in enumerate(headers)]

    def wide() -> int:
        return sum(widths()) + len(headers) - 1

    if "ALLOCATION" in headers and wide() > width:
        at = headers.index("ALLOCATION")
        target = max(len("ALLOCATION"), widths()[at] - (wide() - width))
        for row in cells:
            row[at] = shortened_path(row[at], target)
    if wide() <= width:
        return aligned_lines(headers, cells, right, gap=1)
    if headers[-2:] != ["REASON", "NODELIST"]:
        return None
    head = aligned_lines([*headers[:-2], ""], [[*r[:-2], ""] for r in cells], right, gap=1)
    start = max(map(cell_len, head)) + 1  # where the stacked column starts
    room = width - start
    reasons = [r[-2] for r in cells]
    longest = max([len("NODELIST")] + [len(w) for r in reasons for w in r.split()])
    if room < longest:
        return None
    head = [line + " " * (start - cell_len(line)) for line in head]
    lines = [f"{head[0]}REASON\n{' ' * start}NODELIST"]
    for line, row in zip(head[1:], cells, strict=True):
        stacked = _pieces(row[-2], room, " ") if row[-2] else []
        stacked += _pieces(row[-1], room, ",") if row[-1] else []
        stacked = stacked or [""]
        lines.append(
            "\n".join([(line + stacked[0]).rstrip(), *(" " * start + more for more in stacked[1:])])
        )
    return lines


def terminal_width() -> int | None:
    """The terminal's width when stdout is one ($COLUMNS first), else None: pipes get
    lines whole, as scripts and `grep` read them."""
    import shutil
    import sys

    return shutil.get_terminal_size().columns if sys.stdout.isatty() else None


def wrapped(line: str, hanging: int | None = None) -> str:
    """A line of prose as a terminal shows it best: wrapped at spaces to its width, the
    continuation lines indented `hanging` columns (default: the line's own indent plus
    four); unchanged in a pipe. The terminal would cut words anywhere (lab's `allot why`
    printed 220-column lines) and start the rest at the margin."""
    import textwrap

    width = terminal_width()
    if width is None or len(line) <= width:
        return line
    indent = len(line) - len(line.lstrip(" "))
    hanging = indent + 4 if hanging is None else hanging
    return textwrap.fill(
        line,
        width=width,
        subsequent_indent=" " * min(hanging, width // 2),
        break_long_words=False,
        break_on_hyphens=False,
    )


def print_rows(
    title: str,
    headers: list[str],
    cells: list[list[str]],
    *,
    right: frozenset[str] = frozenset(),
    dim: list[bool] | None = None,
    strong: list[bool] | None = None,
    header: bool = True,
    fit: Callable[..., list[str] | None] | None = None,
) -> None:
    """A table at its natural width, as `print_table` prints it, for tables of
    thousands of rows (a queue): rich measures every cell several times, which took
    longer than reading the journal; this pads each cell once. Bold header and
    `strong` rows, dim `dim` rows, only on a terminal (and not with NO_COLOR).
    `header=False`: the rows alone, without the title and the column names. On a
    terminal too narrow for the table, `fit(headers, cells, right, width)` may give
    lines that fit it instead (None: the table as it is, which the terminal wraps)."""
    import os
    import sys

    styled = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    bold = (lambda t: f"\x1b[1m{t}\x1b[0m") if styled else (lambda t: t)
    faint = (lambda t: f"\x1b[2m{t}\x1b[0m") if styled else (lambda t: t)
    names, *lines = aligned_lines(headers, cells, right)
    width = terminal_width()
    if fit is not None and width is not None and max(map(len, [names, *lines])) > width:
        names, *lines = fit(headers, cells, right, width) or [names, *lines]
    out = [bold(wrapped(title)), bold(names)] if header else []
    out += [
        bold(text) if strong and strong[i] else faint(text) if dim and dim[i] else text
        for i, text in enumerate(lines)
    ]
    if out:
        typer.echo("\n".join(out))


def _as_of(moment: str, now: str) -> str:
    """`moment` (an ISO time) as short as it reads unambiguously beside `now`: the time of
    day on the same date, the whole of it otherwise."""
    return moment[11:] if moment[:10] == now[:10] else moment


def _ratio(value: float | None) -> str:
    """A fair-share ratio: four decimals, or two significant digits below 0.001, where
    four decimals would print 0.0000 for ratios that rank differently (a young cluster)."""
    if value is None:
        return "inf"
    return f"{value:.4f}" if value == 0 or value >= 0.001 else f"{value:.2e}"


def _members(row: dict[str, Any]) -> str:
    """An allocation's MEMBERS cell: marked inactive where they may not submit."""
    names = ",".join(row["members"])
    return names if row["members_active"] or not names else f"{names} (inactive: not a leaf)"


def _roles(row: dict[str, Any], several: bool) -> str:
    """`shares -u`'s ROLE cell: how the users are named here ('' above them, for
    context); each user's name too when several were asked for."""
    cells = []
    for who, roles in row["user_roles"].items():
        named = "+".join(
            "member (inactive: not a leaf)"
            if role == "member" and not row["members_active"]
            else role
            for role in roles
        )
        cells.append(f"{who}: {named}" if several else named)
    return ", ".join(cells)


def _share_style(row: dict[str, Any], by_user: bool) -> str | None:
    """Parents bold; with -u, the allocations shown only as context dimmed."""
    if by_user and not row["user_roles"]:
        return "dim" if row["leaf"] else "bold dim"
    return None if row["leaf"] else "bold"


def _workload_list(ids: list[str], shown: int = 3) -> str:
    """A host's workloads, the first few and how many more."""
    if len(ids) <= shown:
        return ",".join(ids)
    return ",".join(ids[:shown]) + f" +{len(ids) - shown}"


def _table() -> Table:
    from rich.table import Table

    return Table(box=None, header_style="bold", pad_edge=False)


def _column(table: Table, header: str, justify: str = "left") -> None:
    wraps = header in ("DETAIL", "NODELIST", "NODELIST(REASON)")
    table.add_column(
        header,
        justify=justify,  # type: ignore[arg-type]
        no_wrap=not wraps,
        overflow="fold" if wraps else "ellipsis",
        min_width=len(header),
    )


def journal_reader(
    kafka: str | None, data: Path | None, journal: Path | None, cluster: str | None
) -> Callable[[], Iterator[Any]]:
    """The journal named by the options, as a function that reads its records (models)
    from the start each time it is called.

    Files are filtered by `cluster` only when one is given (a simulation's journal holds
    one cluster); Kafka and the embedded journal default to cluster `default`. A file
    read to its end that ends in the middle of a line gets a warning on stderr, as
    `allot replay` gives: the answer leaves that line out."""
    from allot.commands.common import read_target, say_if_cut
    from projections.views import decode_lines
    from streams.sources import journal_lines

    target = read_target(kafka, data, journal)
    if target.kafka and cluster is None:
        cluster = "default"

    def read() -> Iterator[Any]:
        lines = journal_lines(
            kafka=target.kafka, data=target.data, journal=target.journal, cluster=cluster
        )
        yield from decode_lines(lines)
        say_if_cut(lines)  # only a read to the end: a forecast's partial read stays quiet

    return read


def fold_for_forecast(
    read: Callable[[], Iterator[Any]],
    kafka: str | None,
    data: Path | None,
    journal: Path | None,
    cluster: str | None,
    live_only: bool = False,
) -> Any:
    """`fold(read())` for a view that will be forecast: told the journal's last time
    ahead, it keeps what the forecast would otherwise read and fold the journal again for."""
    from allot.commands.common import resolve_target
    from projections.views import fold
    from streams.sources import last_record_time

    target = resolve_target(kafka, data, journal, writable=False)
    if target.kafka and cluster is None:
        cluster = "default"  # as `journal_reader` reads it
    last = last_record_time(
        kafka=target.kafka, data=target.data, journal=target.journal, cluster=cluster
    )
    return fold(read(), live_only=live_only, last_time=last)


def load_view(
    kafka: str | None,
    data: Path | None,
    journal: Path | None,
    cluster: str | None,
    live_only: bool = False,
) -> Any:
    """Fold the journal named by the options into a `projections.views.JournalView`
    (`live_only`: without the history of ended workloads, for views of what is live)."""
    from projections.views import fold

    return fold(journal_reader(kafka, data, journal, cluster)(), live_only=live_only)


def forecast_view(
    view: Any,
    read: Callable[[], Iterator[Any]],
    horizon_s: float,
    arrivals: Any = (),
    wanted: Any = None,
    speed: float = 1.0,
) -> Any:
    """`projections.forecast.forecast` of `view`, re-reading only the records it folded
    (a live journal may have grown since); `wanted`: the workloads asked about; `speed`:
    the simulated executor's `--speed`."""
    from itertools import islice

    from projections.forecast import forecast

    return forecast(
        view,
        horizon_s,
        journal=islice(read(), view.records),
        arrivals=arrivals,
        wanted=wanted,
        speed=speed,
    )


def _allocations(view: Any, text: str | None) -> list[str] | None:
    """-a's paths: one path (a name may hold a comma) or a comma-separated list."""
    return allocation_paths(
        text, lambda path: path in view.state.tree or path in view.removed_allocations
    )


def allocation_paths(text: str | None, known: Callable[[str], bool]) -> list[str] | None:
    """-a/-A's paths: the path itself when `known` (a name may hold a comma), else a
    comma-separated list; None when not given."""
    from projections.views import split_names

    if text is None:
        return None
    return [text] if known(text.rstrip("/")) else split_names(text)


def unknown_allocation(paths: list[str] | None, known: Iterable[str]) -> str | None:
    """The first of -a/-A's `paths` that is no allocation of `known` nor above one."""
    from projections.views import matches_allocation

    names = list(known)
    for path in paths or ():
        if not any(matches_allocation(name, path) for name in names):
            return path
    return None


_QUEUE_STATES = {"PD": "PENDING", "PENDING": "PENDING", "R": "RUNNING", "RUNNING": "RUNNING"}


def _queue_states(text: str) -> set[str]:
    """`-t pd,r` (or `all`, as squeue takes it): the queue states asked for;
    TargetError for any other."""
    asked = [x.strip().upper() for x in text.split(",") if x.strip()]
    if "ALL" in asked:  # squeue -t all: every state the queue holds
        asked = [x for x in asked if x != "ALL"] + ["PD", "R"]
    unknown = [x.lower() for x in asked if x not in _QUEUE_STATES]
    if unknown or not asked:
        raise TargetError(
            f"--states {text!r}: the queue holds pending (pd) and running (r) work; "
            "`allot acct -s` has the ended states"
        )
    return {_QUEUE_STATES[x] for x in asked}


StatesOpt = Annotated[
    str | None,
    typer.Option(
        "--states",
        "--state",
        "-t",
        metavar="STATE[,STATE...]",
        help="Only pending or running work: pending/pd, running/r, or all (as squeue -t); "
        "held work is pending.",
    ),
]
NodelistOpt = Annotated[
    str | None,
    typer.Option(
        "--nodelist",
        "-w",
        metavar="HOSTS",
        help="Only work running on these hosts, as squeue -w: names or Slurm host "
        "lists (h3,h[8-11]), e.g. to requeue what runs on a host: `allot requeue -w h3`.",
    ),
]
NameOpt = Annotated[
    str | None,
    typer.Option(
        "--name",
        "-n",
        metavar="NAME[,NAME...]",
        help="Only workloads with one of these names (`allot submit --name`), as squeue -n.",
    ),
]


def select_rows(
    view: Any,
    *,
    ids: set[str] | None = None,
    user: str | None = None,
    allocation: str | None = None,
    states: str | None = None,
    nodelist: str | None = None,
    name: str | None = None,
) -> list[Any]:
    """The queue's rows (`projections.views.queue_rows`) that the flags select, as `allot
    queue` shows them and `allot cancel` (hold, release, requeue) with filters acts on
    them: -u/--me USERS, -a PATHS, -t STATES, -w HOSTS, -n NAMES, and `ids` (already
    resolved, `resolve_jobs`). TargetError for a state, host or allocation that cannot
    be (squeue refuses them too, rather than answer nothing)."""
    from projections.views import queue_rows, split_names

    paths = _allocations(view, allocation)
    shown = None if states is None else _queue_states(states)
    on = None if nodelist is None else _known_hosts(view, nodelist)
    rows = queue_rows(
        view,
        user=split_names(user),
        allocation=paths,
        ids=ids,
        states=shown,
        hosts=on,
        names=None if name is None else split_names(name) or [name],
    )
    _refuse_unknown_allocation(view, paths)
    return rows


def _ended_note(view: Any, ids: set[str], jobs: list[str], **filters: Any) -> str:
    """For `queue -j` that shows nothing: how the named workloads (of the -u/-a
    `filters`) ended, as squeue -j still shows a job that just completed (CD) where
    allot's queue holds live work only."""
    import shlex
    from collections import Counter

    from projections.acct import acct_rows

    rows = acct_rows(view, ids=ids, **filters)
    ended = Counter(r["state"].lower() for r in rows if r["state"] not in ("PENDING", "RUNNING"))
    if not ended:
        return ""
    how = ", ".join(f"{count} {state}" for state, count in sorted(ended.items()))
    return f"; ended: {how} (`allot acct -j {shlex.quote(','.join(jobs))}` has the records)"


def _known_hosts(view: Any, text: str) -> set[str]:
    """-w's hosts; TargetError for a list that cannot be read or names an unknown host."""
    from projections.views import expand_nodelist

    try:
        hosts = expand_nodelist(text)
    except ValueError as why:
        raise TargetError(f"--nodelist {why}") from None
    if not hosts:
        raise TargetError("--nodelist names no host; e.g. -w h3 or -w 'h[0-3]'")
    known = view.require().hosts
    unknown = [h for h in hosts if h not in known]
    if unknown:
        raise TargetError(
            f"--nodelist: unknown host {unknown[0]!r}"
            + (f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else "")
            + "; `allot host list` lists them"
        )
    return set(hosts)


def _refuse_unknown_allocation(
    view: Any, allocations: list[str] | None, removed_too: bool = False
) -> None:
    """-a naming nothing in the budget tree is a typo, not an empty answer (squeue
    refuses an unknown partition). `removed_too`: an allocation `budget.removed` took
    out of the tree counts (its past work is in the journal: `allot acct`)."""
    from projections.views import iso, matches_allocation

    removed = view.removed_allocations
    for allocation in allocations or ():
        if any(matches_allocation(path, allocation) for path in view.state.tree.nodes):
            continue
        gone = [p for p in removed if matches_allocation(p, allocation)]
        if gone and removed_too:
            continue
        if gone:
            raise TargetError(
                f"-a {allocation}: removed from cluster {view.cluster}'s budget tree at "
                f"{iso(max(removed[p] for p in gone))} UTC, so nothing of it is live; "
                f"`allot acct -a {allocation}` lists its past work"
            )
        raise TargetError(
            f"-a {allocation}: no such allocation in cluster {view.cluster}'s budget tree "
            "(`allot shares` lists them)"
        )


def _answer(fn: Any) -> Any:
    """Run `fn`, turning every expected failure into one line on stderr and exit 2."""
    try:
        with terminal_safe(), quiet_on_closed_pipe():
            return fn()
    except OSError as why:
        raise _fail(f"cannot read the journal: {why}") from None
    except Exception as why:
        message = _expected(why)
        if message is None:
            raise
        raise _fail(message) from None


def _every(seconds: int, report: Any) -> None:
    """`report` now and every `seconds` after it finished, as squeue -i: each one after a
    blank line and the wall-clock time (the report's own "as of" is the journal's time);
    Ctrl-C ends it with exit 0."""
    import time
    from datetime import UTC, datetime

    try:
        while True:
            typer.echo(datetime.now(UTC).strftime("%a %b %d %H:%M:%S %Y UTC"))
            _answer(report)
            time.sleep(seconds)
            typer.echo("")
    except KeyboardInterrupt:
        raise typer.Exit(0) from None


# errors meant for the user, by module: only modules already imported can have raised them
_USER_ERRORS = (
    ("allot.commands.common", "TargetError"),
    ("streams.sources", "SourceError"),
    ("projections.views", "ViewError"),
    ("projections.journal", "JournalError"),
    ("projections.audit", "AuditError"),
)


def _expected(error: Exception) -> str | None:
    """The one line to print for an expected failure, None for a bug."""
    import sys

    for module, name in _USER_ERRORS:
        kind = getattr(sys.modules.get(module), name, None)
        if kind is not None and isinstance(error, kind):
            return str(error)
    duckdb = sys.modules.get("duckdb")
    if duckdb is not None and isinstance(error, duckdb.Error):
        text = str(error).strip().splitlines()
        return f"audit database: {text[0] if text else type(error).__name__}"
    return None


def _emit_json(payload: Any) -> None:
    import orjson

    typer.echo(orjson.dumps(payload, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))


def register(app: typer.Typer) -> None:
    """Add `queue`, `acct`, `shares` and `why` to the `allot` app."""

    @app.command("queue")
    def queue(
        format_: Annotated[
            str | None, typer.Option("--format", "-o", help=FORMAT_HELP, show_default=False)
        ] = None,
        format_long: Annotated[
            str | None,
            typer.Option(
                "--Format",
                "-O",
                metavar="FIELD[:[.]SIZE[SUFFIX]][,...]",
                help="Columns, as squeue -O: 'JobID:30,Name:.20,State,Reason'; squeue's "
                "field names (jobid, name, username, account, state, statecompact, "
                "partition, timeused, numnodes, reasonlist, reason, nodelist, submittime, "
                "starttime, priority, timelimit (min runtime), timeleft (its protection's), "
                "arrayjobid, arraytaskid, tres-per-node or tres-per-job (gres/gpu:N, the "
                "job's total), wckey (tags)) or those of --format, in any case. As "
                "squeue, a field without a size is 20 characters wide, size 0 prints it "
                "whole, '.' right-justifies it, a suffix is printed after it, and no "
                "space is added between fields. Ids are never cut: their column widens.",
                show_default=False,
            ),
        ] = None,
        json_: JsonOpt = False,
        user: UserOpt = None,
        me: MeOpt = False,
        allocation: AllocationsOpt = None,
        jobs: JobsOpt = None,
        noheader: Annotated[
            bool,
            typer.Option(
                "--noheader",
                "-h",
                help="No title or header line, as squeue -h: one line per workload (and "
                "nothing when none), without the footnotes.",
            ),
        ] = False,
        states: StatesOpt = None,
        nodelist: NodelistOpt = None,
        name: NameOpt = None,
        long: Annotated[
            bool,
            typer.Option(
                "--long",
                "-l",
                help="Also the sort keys (position, rank, ratio, priority, submit time) and details.",
            ),
        ] = False,
        start: Annotated[
            bool,
            typer.Option(
                "--start",
                help="Expected start times of pending work, like squeue --start: the "
                "scheduler's own core plays the queue forward (see below).",
            ),
        ] = False,
        sort: Annotated[
            str | None,
            typer.Option(
                "--sort",
                "-S",
                metavar="[+|-]FIELD[,...]",
                help="Order the rows as squeue -S: '-t,i' (state descending, then id), "
                "'u', '+a,-Q'; -o's letters (without '%'), -O's field names or allot's "
                "column names, '-' for descending. Times, "
                "counts and durations compare as numbers, array tasks by index; ties keep "
                "the queue's own order (the scheduler's, when -S is not given). Without "
                "-S, $SQUEUE_SORT is read, as squeue does.",
                show_default=False,
            ),
        ] = None,
        horizon: HorizonOpt = "2d",
        speed: WorkSpeedOpt = 1.0,
        iterate: Annotated[
            int | None,
            typer.Option(
                "--iterate",
                "-i",
                metavar="SECONDS",
                min=1,
                help="Read the journal again and print the queue every SECONDS seconds, "
                "as squeue -i, until Ctrl-C (each report headed by the wall-clock time).",
                show_default=False,
            ),
        ] = None,
        kafka: KafkaOpt = None,
        data: DataOpt = None,
        journal: JournalOpt = None,
        cluster: ReadClusterOpt = None,
    ) -> None:
        """Pending and running workloads, like squeue.

        Pending work comes first, in the order the scheduler considers it (allocated
        before unallocated, then allocation rank from fair share, priority, submit
        time), then running work by start time. NAME (`submit --name`) comes after
        ID when a workload shown has one, cut to 20 characters (--long: whole).
        WAIT/TIME: how long a pending workload
        has waited since it last became pending, or how long a running one has run.
        REASON for pending work: Priority (higher-ranked work comes first: it would
        fit now, or higher-ranked work waits for GPUs ahead of it and takes them first
        as they free up, as Slurm's Priority), Resources (no room even by preemption,
        and no higher-ranked work waits for GPUs ahead of it; or only unhealthy hosts
        could hold it: it waits for their repair), PartitionConfig (it needs more GPUs
        than the cluster has registered, after hosts were removed or shrunk: it waits
        until hosts are registered or grow), QOSMaxGRESPerUser (its user's allocated
        work under an allocation with --max-gpus-per-user would pass it: it waits for
        that user's own work to end), Reserved (hosts are being kept free for it), Headroom (only the hosts kept for short jobs have room), Held
        (`allot hold`: it waits until `allot release`); for
        running work: 'protected until HH:MM' (UTC) or 'preemptible'. Times are the
        journal's: 'now' is its latest event.

        --start lists pending work with START_TIME, when it is expected to start, and
        SCHEDNODES, where (N/A: not within --horizon), soonest first. The scheduler's
        core plays the queue forward from now on a copy of its state: running work
        ends after its runtime (--runtime, else --expected-runtime; with neither it
        runs until preempted), nothing new is submitted, budgets and hosts stay as
        they are (unhealthy hosts stay down). New work from a higher-ranked allocation
        or a job ending early moves the answer, as with squeue --start. With --start
        (or the %S/%Y fields), --json adds expected_start (and _time, epoch seconds),
        expected_nodes, expected_hosts, expected_preempts and expected_end to each row.

        On a terminal too narrow for the default table, its columns are one space
        apart, long allocation paths lose middle parts (lab/…/long-context-experiments)
        and, if need be, each row's NODELIST goes below its REASON; no other value is
        cut, and pipes, --json, --long and `allot why` show whole paths.

        As squeue, $SQUEUE_USERS, $SQUEUE_STATES, $SQUEUE_ACCOUNT and $SQUEUE_NAMES are
        read as -u, -t, -A and -n when that flag is not given (--me sets $SQUEUE_USERS
        aside); a wrong one is named in the error.
        """

        from projections.views import (
            FORECAST_COLUMNS,
            LONG_COLUMNS,
            START_COLUMNS,
            default_columns,
            fold,
            iso,
            queue_cells,
            render_template,
            resolve_jobs,
            short_name,
            sort_rows,
            split_names,
            whole_ids,
        )

        user = _with_me(user, me)

        def run() -> None:
            if format_ and format_long:
                raise TargetError(
                    "-o (--format) and -O (--Format) exclude each other, as in squeue"
                )
            if (format_ or format_long) and long:
                flag = "-o (--format)" if format_ else "-O (--Format)"
                raise TargetError(f"{flag} and -l (--long) exclude each other, as in squeue")
            columns, template = _queue_columns(
                *format_from_environment(format_, format_long, long or start)
            )
            sort_keys = _sort_keys(sort)
            wants_forecast = start or (columns is not None and FORECAST_COLUMNS & set(columns))
            if horizon != HORIZON_DEFAULT and not wants_forecast:
                raise TargetError("--horizon is for --start (how far ahead it looks)")
            if speed != 1.0 and not wants_forecast:
                raise TargetError("--speed is for --start (how fast work runs in its forecast)")
            horizon_s = horizon_seconds(horizon)
            check_speed(speed)
            # `user` already holds --me's name: --me sets $SQUEUE_USERS aside, as squeue
            taken = filters_from_environment(
                user=user, states=states, allocation=allocation, name=name
            )
            users, wanted_states, paths_text, names = (
                taken[f][0] if f in taken else value
                for f, value in (
                    ("user", user),
                    ("states", states),
                    ("allocation", allocation),
                    ("name", name),
                )
            )
            read = journal_reader(kafka, data, journal, cluster)
            # the queue is what is live; -j resolves ids against every workload the
            # journal knows (an ended id names nothing in the queue, not another job)
            if wants_forecast:
                view = fold_for_forecast(read, kafka, data, journal, cluster, jobs is None)
            else:
                view = fold(read(), live_only=jobs is None)
            ids = resolve_jobs(view, _job_ids(jobs))
            paths = _allocations(view, paths_text)
            try:
                rows = select_rows(
                    view,
                    ids=ids,
                    user=users,
                    allocation=paths_text,
                    states=wanted_states,
                    nodelist=nodelist,
                    name=names,
                )
            except TargetError as why:
                raise _naming_variable(why, taken) from None
            fc = None
            if wants_forecast and rows:
                from projections.forecast import annotate

                # reads the journal again rather than keep it: it is kept forever
                fc = forecast_view(view, read, horizon_s, speed=speed)
                annotate(rows, fc)
            if start:
                # as squeue --start: pending work by expected start, N/A last
                rows = sorted(
                    (r for r in rows if r["state"] == "PENDING"),
                    key=lambda r: (r["expected_start_time"] is None, r["expected_start_time"] or 0),
                )
            if sort_keys:
                rows = sort_rows(rows, sort_keys)
            if json_:
                payload = {
                    "cluster": view.cluster,
                    "now": iso(view.now),
                    "time": view.now,
                    "policy": view.state.ordering.name,
                    # RATIO and RANK: the usage window as of the last bucket edge
                    "ratios_as_of": iso(view.state.charged.last_edge(view.now)),
                }
                if fc is not None:
                    from projections.forecast import header

                    payload["forecast"] = header(fc)
                _emit_json({**payload, "workloads": rows})
                return
            if columns is not None:
                headers, cells = queue_cells(rows, columns)
                if template is not None:  # squeue's literal form: separators kept
                    template = whole_ids(template, [headers, *cells])
                    lines = [render_template(template, line) for line in [headers, *cells]]
                else:
                    lines = aligned_lines(headers, cells)
                lines = lines[1:] if noheader else lines
                if lines:  # squeue -h of an empty queue prints nothing, not an empty line
                    typer.echo("\n".join(lines))
                return
            if start:
                columns = default_columns(rows, START_COLUMNS)
                columns += [c for c in LONG_COLUMNS if c not in columns] if long else []
            else:
                columns = LONG_COLUMNS if long else default_columns(rows)
            headers, cells = queue_cells(rows, columns)
            if not long and "name" in columns:  # as squeue's, cut: --long has it whole
                at = columns.index("name")
                for line in cells:
                    line[at] = short_name(line[at])
            pending = sum(1 for r in rows if r["state"] == "PENDING")
            counts = f"{pending} pending" + ("" if start else f", {len(rows) - pending} running")
            title = (
                f"cluster {view.cluster} · as of {iso(view.now)} UTC · policy "
                f"{view.state.ordering.name} · {counts}"
            )
            print_rows(
                title,
                headers,
                cells,
                right=frozenset({"GPUS", "WAIT/TIME", "POS", "RANK", "RATIO", "PRIO"}),
                dim=[row["state"] == "RUNNING" for row in rows],
                header=not noheader,
                # -h is for scripts, --long and --start ask for the wide table
                fit=queue_fitted if not (noheader or long or start) else None,
            )
            if noheader:  # squeue -h: the rows alone, for scripts
                return
            if not rows:
                typer.echo(
                    ("no workloads pending" if start else "no workloads pending or running")
                    + (
                        " for that filter"
                        if users or paths_text or jobs or wanted_states or nodelist or names
                        else ""
                    )
                    + (
                        _ended_note(view, ids, jobs, user=split_names(users), allocation=paths)
                        if ids and jobs
                        else ""
                    )
                )
            elif fc is not None:
                from projections.forecast import footnote

                typer.echo(footnote(fc))

        if iterate is None:
            _answer(run)
            return
        if json_:
            raise _fail("--iterate prints tables; for JSON, run `allot queue --json` each time")
        _every(iterate, run)

    @app.command("acct")
    def acct(
        format_: Annotated[
            str | None,
            typer.Option(
                "--format",
                "-o",
                metavar="FIELD[,FIELD...]",
                help="Columns, as sacct --format (any case; as sacct's, NAME%N is N "
                "characters wide, right-justified, NAME%-N left-justified, and a longer "
                "value is cut and ends in '+'; ids, numbers and durations are never cut; "
                "-p ignores widths; sacct's CPU and memory fields, AllocCPUS, NCPUS, ReqMem, "
                "MaxRSS and the like, are refused: allot schedules GPUs only; without "
                "--format, $SACCT_FORMAT is read, as sacct does): id, name, allocation, user, state, gpus "
                "(asked for), alloc_gpus (held: whole hosts for a gang), submitted, start, "
                "end, wait, run, gpu_hours (held: charged + unallocated), charged_gpu_hours "
                "(what shares, usage and rollup count), unallocated_gpu_hours (free), "
                "window_gpu_hours, window_charged_gpu_hours, window_unallocated_gpu_hours, "
                "attempts, preemptions, tags, reason, exit_code (the launcher's), "
                "partition (the cluster), nodelist (the hosts of its last placement), "
                "req_tres (gres/gpu=N asked for), alloc_tres (gres/gpu=N,node=M held: "
                "allot knows no billing, CPUs or memory); sacct's jobid, jobname, account, "
                "submit, elapsed, exitcode, cluster, reqtres, alloctres, planned, reserved "
                "(both: wait) work too.",
                show_default=False,
            ),
        ] = None,
        parsable: Annotated[
            bool,
            typer.Option(
                "--parsable",
                "-p",
                "--parsable2",
                "-P",
                help="For scripts, as sacct -P (--parsable2): fields split by |, a header "
                "line, no totals; no '|' ends a line, with -p too (sacct -p adds one).",
            ),
        ] = False,
        allocations_only: Annotated[
            bool,
            typer.Option(
                "--allocations",
                "-X",
                help="Accepted for sacct's habit and changes nothing: allot has no job "
                "steps, each row already is the job's allocation.",
            ),
        ] = False,
        noheader: Annotated[
            bool,
            typer.Option(
                "--noheader",
                "-n",
                help="No title or header line, as sacct -n: one line per workload (and "
                "nothing when none), without the totals line.",
            ),
        ] = False,
        long: Annotated[
            bool,
            typer.Option(
                "--long",
                "-l",
                help="Every default field, as sacct -l shows more: also ALLOC, SUBMITTED, "
                "START, END, N and REASON (the table without it fits 80 columns for "
                "lab-sized ids and paths; -p and --json always have them).",
            ),
        ] = False,
        json_: JsonOpt = False,
        user: UserOpt = None,
        me: MeOpt = False,
        allocation: AllocationsOpt = None,
        jobs: JobsOpt = None,
        state: Annotated[
            list[str] | None,
            typer.Option(
                "--state",
                "-s",
                metavar="STATE[,STATE...]",
                help="Only workloads in these states: pending, running, completed, failed, "
                "lost, cancelled, preempted (ended by it), node_fail, rejected, or sacct's "
                "codes pd, r, cd, f, ca, pr, nf. Now, or with -S/-E (as sacct) at some "
                "moment of the window: pending or running then, or ended that way inside it.",
            ),
        ] = None,
        since: Annotated[
            str | None,
            typer.Option(
                "--since",
                "-S",
                "--starttime",
                help="Workloads alive at or after then (submitted before it and ended after "
                "it count): an ISO date/time (UTC), e.g. 2026-01-01, sacct's MMDD, MM/DD or "
                "MM/DD/YY (optionally -HH:MM; without a year the journal's latest event's, "
                "the year before for a later month, as sacct), a time of day (07:13), today, "
                "now-1hour, or a duration before the journal's latest event, e.g. 1d. The "
                "totals line then counts only the GPU-hours run inside the window.",
                show_default=False,
            ),
        ] = None,
        until: Annotated[
            str | None,
            typer.Option(
                "--until",
                "-E",
                "--endtime",
                help="Workloads submitted until then (same forms as --since).",
                show_default=False,
            ),
        ] = None,
        kafka: KafkaOpt = None,
        data: DataOpt = None,
        journal: JournalOpt = None,
        cluster: ReadClusterOpt = None,
    ) -> None:
        """Every workload's record, finished or not, like sacct.

        One row per workload (and per refused submission), by submit time: STATE
        (PENDING, RUNNING, COMPLETED, FAILED, LOST, CANCELLED, PREEMPTED: ended by a
        preemption, not resumable; NODE_FAIL: ended by the drain of an unhealthy
        host; REJECTED: the submission was refused), the GPUs asked for, how long it
        waited before its first start (WAIT) and ran over all attempts (RUN), the
        GPU-hours it held GPUs (GPU_H: charged and unallocated time alike); NAME after
        the ID when a workload shown has one (sacct's default format has JobName).
        --long (as sacct -l) adds the GPUs held (ALLOC), when it was SUBMITTED, first
        STARTed and ENDed (UTC), how many times it was placed (N) and why it ended;
        -p (without --format) and --json always give every one of them. A last line
        adds them up and splits the GPU-hours into charged (what
        `allot shares`, `usage` and `rollup` count) and unallocated (free, charged to
        no one); -o charged_gpu_hours,unallocated_gpu_hours and --json give the split
        per workload.
        """
        from projections.acct import (
            RIGHT_ALIGNED,
            STATE_CODES,
            STATES,
            acct_cells,
            acct_rows,
            default_acct_columns,
            parse_acct_fields,
            split_hours,
            totals,
        )
        from projections.audit import parse_time
        from projections.views import iso, resolve_jobs, split_names

        user = _with_me(user, me)

        def run() -> None:
            if format_ is not None and long:
                raise TargetError("--format and -l (--long) exclude each other")
            wanted = None
            if state is not None:
                wanted = {
                    STATE_CODES.get(x.strip().upper(), x.strip().upper())
                    for s in state
                    for x in s.split(",")
                    if x.strip()
                }
                if not wanted:
                    raise TargetError(f"--state: give states ({', '.join(STATES).lower()})")
                unknown = sorted(wanted - set(STATES))
                if unknown:
                    raise TargetError(
                        f"--state {', '.join(unknown).lower()}: unknown; use "
                        f"{', '.join(s.lower() for s in STATES)}"
                    )
            # --long is asked for on this command line: it wins over $SACCT_FORMAT
            spec = format_ if format_ is not None or long else _slurm_variable(ACCT_FORMAT_ENV)
            variable = ACCT_FORMAT_ENV if format_ is None and spec is not None else None
            try:
                fields = parse_acct_fields(spec) if spec is not None else None
            except ValueError as why:
                where = _from_variable(variable, spec) if variable and spec else ""
                raise TargetError(f"{where}{why}") from None
            view = load_view(kafka, data, journal, cluster)
            lo = parse_time(since, view.now) if since is not None else None
            hi = parse_time(until, view.now, end=True) if until is not None else None
            if lo is not None and hi is not None and hi < lo:
                raise TargetError(f"--until ({iso(hi)}) is before --since ({iso(lo)})")
            ids = resolve_jobs(view, _job_ids(jobs))
            paths = _allocations(view, allocation)
            rows = acct_rows(
                view,
                user=split_names(user),
                allocation=paths,
                ids=ids,
                states=wanted,
                since=lo,
                until=hi,
            )
            _refuse_unknown_allocation(view, paths, removed_too=True)
            total = totals(rows)
            if json_:
                _emit_json(
                    {
                        "cluster": view.cluster,
                        "now": iso(view.now),
                        "time": view.now,
                        "policy": view.state.ordering.name,
                        "since": iso(lo),
                        "until": iso(hi),
                        "totals": total,
                        "workloads": rows,
                    }
                )
                return
            if not rows and not parsable and not noheader:
                typer.echo(
                    "no workloads"
                    + (" for that filter" if user or allocation or jobs or state else "")
                    + (" in that window" if lo is not None or hi is not None else "")
                )
                return
            if fields is None:  # sacct's default has JobName: NAME when one has a name
                # -p is for scripts, which read every field as they always did
                every = long or parsable
                fields = [(c, None) for c in default_acct_columns(rows, long=every)]
            columns = [name for name, _ in fields]
            headers, cells = acct_cells(rows, columns)
            if parsable:  # sacct -p: one line each, fields split by |, no padding
                lines = cells if noheader else [headers, *cells]
                if lines:
                    typer.echo("\n".join("|".join(line) for line in lines))
                return
            widths = [width for _, width in fields]
            if any(width is not None for width in widths):
                headers, cells = sized_columns(
                    headers,
                    cells,
                    widths,
                    # an id cut to sacct's jobid%20 would name nothing (ours are ULIDs)
                    whole={
                        i
                        for i, (c, h) in enumerate(zip(columns, headers, strict=True))
                        if h in RIGHT_ALIGNED or c == "id"
                    },
                )
            print_rows(
                f"cluster {view.cluster} · as of {iso(view.now)} UTC · "
                f"{plural(len(rows), 'workload')}",
                headers,
                cells,
                right=RIGHT_ALIGNED,
                header=not noheader,
            )
            if noheader:  # sacct -n: the rows alone, for scripts
                return
            states = ", ".join(f"{n:,} {s.lower()}" for s, n in total["by_state"].items())
            windowed = lo is not None or hi is not None
            pre = "window_" if windowed else ""
            # the parts add up to the total as shown (more decimals when one would not)
            held, charged, free = split_hours(
                total[pre + "gpu_hours"],
                total[pre + "charged_gpu_hours"],
                total[pre + "unallocated_gpu_hours"],
            )
            digits = len(held.rpartition(".")[2])
            ran = (
                f"{held} GPU-hours run{' in the window' if windowed else ''} "
                f"({charged} charged, {free} unallocated"
                + (
                    f"; {total['gpu_hours']:,.{digits}f} over their whole lives)"
                    if windowed
                    else ")"
                )
            )
            typer.echo(
                wrapped(
                    f"{plural(total['workloads'], 'workload')}, {ran}"
                    + (f"; now {states}" if states else ""),
                    hanging=0,
                )
            )

        _answer(run)

    @app.command("shares")
    def shares(
        json_: JsonOpt = False,
        long: Annotated[
            bool,
            typer.Option(
                "--long", "-l", help="Also who manages each allocation and who may submit to it."
            ),
        ] = False,
        kafka: KafkaOpt = None,
        data: DataOpt = None,
        journal: JournalOpt = None,
        cluster: ReadClusterOpt = None,
        allocation: AllocationsOpt = None,
        user: Annotated[
            str | None,
            typer.Option(
                "--user",
                "-u",
                metavar="USER[,USER...]",
                help="Only the allocations these users are named on, as manager or member, "
                "and those above them for context (dimmed), as sshare -u; a ROLE column "
                "says how each is named. A leaf open to anyone names nobody: not listed.",
            ),
        ] = None,
    ) -> None:
        """The budget tree with fair-share numbers, like sshare.

        Siblings are listed in Fair-Tree order (lower fair-share ratio first), so leaf
        ranks read top down. WEIGHT: among siblings; SHARE: of the cluster (product of
        weight/sum of sibling weights along the path); USAGE: charged GPU-hours in the
        lookback window as of the last usage bucket edge (like sshare's usage, it is
        recomputed once per bucket, config key `bucket`, 15 minutes by default);
        RATIO: usage / (share x capacity x window), lower is served first ('inf' for
        a zero share); RUN/ENT: GPUs running charged now vs entitled
        (share x healthy capacity); UNALLOC: GPUs running unallocated; PEND: GPUs
        requested by pending work. --long adds MANAGERS (may change the budgets
        under it, and submit to it) and MEMBERS (may submit to it); a leaf with no
        members and no managers above it is open to anyone. Members of an allocation
        that has children (it was a leaf when they were named) may submit neither to
        it nor below it: they are shown '(inactive: not a leaf)', kept for when it is
        a leaf again (--json: members_active false). PER-USER (shown once any
        allocation has one): the per-user limits set on it with `allot budget set
        --max-gpus-per-user/--max-pending-per-user`, over everything under it (--json:
        max_gpus_per_user, max_pending_per_user; null: no limit).

        --json: running, entitled (also as entitled_gpus), unallocated and pending
        are GPUs now; usage_gpu_h is GPU-hours over the window [usage_since,
        ratios_as_of] (`allot usage` gives GPU-hours over a period: its entitled_gpu_h
        is share x healthy capacity summed over the hours).
        """
        from rich.text import Text

        from domain.durations import format_duration
        from projections.views import (
            matches_allocation,
            rows_of_users,
            share_rows,
            shares_header,
            split_names,
        )

        def run() -> None:
            users = None if user is None else split_names(user)
            if users is not None and not users:
                raise TargetError("--user names nobody; e.g. -u alice or -u alice,bob")
            view = load_view(kafka, data, journal, cluster, live_only=True)
            paths = _allocations(view, allocation)
            _refuse_unknown_allocation(view, paths)
            rows = [r for r in share_rows(view) if matches_allocation(r["path"], paths)]
            if users is not None:
                rows = rows_of_users(rows, users)
            header = shares_header(view)
            if json_:
                _emit_json({**header, "allocations": rows})
                return
            title = (
                f"cluster {header['cluster']} · as of {header['now']} UTC · usage and "
                f"ratios over the {format_duration(header['window_s'])} window to "
                f"{_as_of(header['ratios_as_of'], header['now'])} (last bucket edge) · "
                f"{header['healthy_capacity']} of "
                f"{plural(header['capacity'], 'GPU')} healthy · policy {header['policy']}"
            )
            table = _table()
            for h, justify in (
                ("ALLOCATION", "left"),
                ("WEIGHT", "right"),
                ("SHARE", "right"),
                ("USAGE GPU-h", "right"),
                ("RATIO", "right"),
                ("RANK", "right"),
                ("RUN/ENT", "right"),
                ("UNALLOC", "right"),
                ("PEND", "right"),
                *((("MANAGERS", "left"), ("MEMBERS", "left")) if long else ()),
                *((("ROLE", "left"),) if users is not None else ()),
            ):
                _column(table, h, justify)
            limits = any(_user_limits(r) for r in rows)
            if limits:
                _column(table, "PER-USER", "left")
            base = min((r["depth"] for r in rows), default=0)  # -A: its subtree's top
            for r in rows:
                indent = r["depth"] - base
                table.add_row(
                    Text("  " * indent + (r["name"] if indent else r["path"])),
                    f"{r['weight']:g}",
                    f"{r['share']:.4f}" if r["share"] is not None else "-",
                    f"{r['usage_gpu_h']:.1f}",
                    _ratio(r["ratio"]),
                    "" if r["rank"] is None else str(r["rank"]),
                    f"{r['running']}/{r['entitled']:g}",
                    str(r["unallocated"]),
                    str(r["pending"]),
                    *((",".join(r["managers"]), _members(r)) if long else ()),
                    *((_roles(r, len(users) > 1),) if users is not None else ()),
                    *((_user_limits(r),) if limits else ()),
                    style=_share_style(r, users is not None),
                )
            print_table(title, table)
            if not rows and users is not None:
                typer.echo(
                    f"no allocation{' under ' + ', '.join(paths) if paths else ''} names "
                    f"{' or '.join(users)} as manager or member (`allot shares --long` "
                    "lists who is named where)"
                )
            elif not rows:
                typer.echo("no allocations yet: `allot budget set PATH WEIGHT` creates them")

        _answer(run)

    def _user_limits(row: dict[str, Any]) -> str:
        """`gpus 8, pending 20`: the per-user limits set on a share row."""
        parts = [
            f"{label} {row[key]}"
            for label, key in (("gpus", "max_gpus_per_user"), ("pending", "max_pending_per_user"))
            if row.get(key) is not None
        ]
        return ", ".join(parts)

    from allot.commands.requests import host_app

    @host_app.command("list")
    def host_list(
        reasons: Annotated[
            bool,
            typer.Option(
                "--reasons",
                "-R",
                help="Only the hosts that take no work, and why (sinfo -R): unhealthy "
                "(draining, drained), with who said so and when.",
            ),
        ] = False,
        removed: Annotated[
            bool,
            typer.Option(
                "--removed",
                help="With the -R list, also the hosts removed from the cluster (`allot "
                "host remove`): who removed them, when and why. sinfo forgets them; "
                "implies -R.",
            ),
        ] = False,
        noheader: Annotated[
            bool,
            typer.Option(
                "--noheader",
                "-h",
                help="No title or header line, as sinfo -h: one line per host.",
            ),
        ] = False,
        node_oriented: Annotated[
            bool,
            typer.Option(
                "--Node",
                "-N",
                help="Accepted for sinfo -N's habit and changes nothing: the list is "
                "already one line per host.",
            ),
        ] = False,
        json_: JsonOpt = False,
        kafka: KafkaOpt = None,
        data: DataOpt = None,
        journal: JournalOpt = None,
        cluster: ReadClusterOpt = None,
    ) -> None:
        """Every host and its state, like sinfo -N (and sinfo -R's reasons).

        STATE: idle, mixed (some GPUs held), allocated (all held); draining (reported
        unhealthy, work still on it: it takes nothing new and its work leaves as its
        protection ends) or drained (unhealthy and empty). GPUS, HELD, FREE (an
        unhealthy host's free GPUs are cordoned: 0); WORKLOADS on it; SINCE and REASON
        for an unhealthy host (who reported it, why; a draining host's ends `empty by
        TIME`, UTC: when the protection of its last work ends, so when it should be
        drained; --json: drains_by). A healthy host kept free for short jobs says so.
        With -R, the hosts taking no work: REASON, USER (who reported it), TIMESTAMP
        (since when, UTC), HOST, STATE (draining, drained), DRAINED (when it emptied;
        `by TIME?` while draining). --removed adds the hosts removed from the cluster
        (STATE removed; USER who removed it), which sinfo -R, like -R, leaves out."""
        from domain.durations import format_duration
        from projections.views import host_rows, shares_header

        def run() -> None:
            view = load_view(kafka, data, journal, cluster, live_only=True)
            if reasons or removed:
                _host_reasons(view, json_, removed, noheader)
                return
            rows = host_rows(view)
            header = shares_header(view)
            if json_:
                _emit_json({"cluster": header["cluster"], "now": header["now"], "hosts": rows})
                return
            if not rows:
                if not noheader:  # sinfo -h of nothing prints nothing
                    typer.echo(f"no hosts registered in cluster {header['cluster']}")
                return
            counts: dict[str, int] = {}
            for r in rows:
                counts[r["state"]] = counts.get(r["state"], 0) + 1
            title = f"cluster {header['cluster']} · as of {header['now']} UTC · " + ", ".join(
                f"{n} {state}" for state, n in counts.items()
            )
            cells = [
                [
                    r["host"],
                    r["state"],
                    str(r["gpus"]),
                    str(r["held"]),
                    str(r["free"]),
                    _workload_list(r["workloads"]),
                    "" if r["since_s"] is None else f"{format_duration(r['since_s'])} ago",
                    r["reason"] + (f"; empty by {r['drains_by']}" if r["drains_by"] else ""),
                ]
                for r in rows
            ]
            print_rows(
                title,
                ["HOST", "STATE", "GPUS", "HELD", "FREE", "WORKLOADS", "SINCE", "REASON"],
                cells,
                right=frozenset({"GPUS", "HELD", "FREE"}),
                dim=[r["state"] in ("draining", "drained", "held") for r in rows],
                header=not noheader,
            )

        _answer(run)

    def _host_reasons(view: Any, json_: bool, removed: bool, noheader: bool) -> None:
        from projections.views import host_reason_rows, shares_header

        rows = host_reason_rows(view, removed=removed)
        header = shares_header(view)
        if json_:
            _emit_json({"cluster": header["cluster"], "now": header["now"], "hosts": rows})
            return
        if not rows:
            if not noheader:
                none = "; none removed" if removed else ""
                typer.echo(f"every host of cluster {header['cluster']} is healthy{none}")
            return
        print_rows(
            f"cluster {header['cluster']} · as of {header['now']} UTC · hosts taking no work",
            ["REASON", "USER", "TIMESTAMP", "HOST", "STATE", "GPUS", "DRAINED"],
            [
                [
                    r["reason"],
                    r["by"],
                    r["since"] or "",
                    r["host"],
                    r["state"],
                    str(r["gpus"]),
                    r["drained_at"] or (f"by {r['drains_by']}?" if r["drains_by"] else ""),
                ]
                for r in rows
            ],
            right=frozenset({"GPUS"}),
            header=not noheader,
        )

    @app.command("why")
    def why(
        ctx: typer.Context,
        workload: Annotated[
            str,
            typer.Argument(
                help="Workload id (a unique prefix is enough), a job array's task "
                "(BASE_<n>) or base (BASE), or the id of a rejected request."
            ),
        ],
        audit: Annotated[
            Path | None,
            typer.Option(
                "--audit",
                envvar=["ALLOT_AUDIT_DB", "ALLOT_AUDIT"],
                help="Read the history from this audit database (`allot audit load` keeps "
                "it; default $ALLOT_AUDIT_DB, as for the audit commands). Alone (no --data/--journal/--kafka on the "
                "command line) it answers from the database only: no journal is read.",
                show_default=False,
            ),
        ] = None,
        horizon: HorizonOpt = "2d",
        speed: WorkSpeedOpt = 1.0,
        json_: JsonOpt = False,
        kafka: KafkaOpt = None,
        data: DataOpt = None,
        journal: JournalOpt = None,
        cluster: ReadClusterOpt = None,
    ) -> None:
        """Why a workload is where it is, and its whole history.

        First the answer from the journal: when and by whom it was submitted and with
        which contract; each placement (hosts, charged or not, protected until when,
        its allocation's rank, fair-share ratio and share, whom it preempted); each
        preemption (reason, beneficiary, the numbers compared: ratios and hysteresis
        for rule 'ratio', running vs entitled GPUs for rule 'reclaim'); rejected
        requests about it; and now: running, ended, or pending with its position and
        reason (as `allot queue` gives it), its allocation's rank, fair-share ratio
        and share, and those of the work ahead that the reason names; for live work, when it is expected to start and end (the forecast of
        `allot queue --start`, within --horizon). Then its history, one line per
        event: submitted, placed (hosts, GPUs, protected until), preempted (by whom,
        reason and numbers), requeued, finished or cancelled, rejected requests.

        The history comes from the journal the command reads, or with --audit DB
        from the audit database (the same lines for the same journal). With --audit
        and no journal option on the command line ($ALLOT_KAFKA alone does not count),
        only the database is read: the history and the last state it records.

        A job array's task is named as in Slurm, BASE_<n> (PREFIX_<n> will do: task
        n of the one array whose base PREFIX starts). Its base id (BASE) gives the
        array: its tasks by state, then each task's state and reason (the first 20;
        `allot acct -j BASE` lists them all; with --audit alone, each task's last
        recorded state). Its --json is an object with
        `array`, `cluster`, `now`, `by_state` (state: count) and `tasks`, every
        task in index order (`id`, `index`, `state`, `reason`, `nodelist`).
        """

        def run() -> None:
            journal_given = (
                data is not None or journal is not None or _from_command_line(ctx, "kafka")
            )
            if audit is not None and not journal_given:
                answer = _why_from_audit(audit, workload)
            else:
                answer = _why_from_journal(
                    kafka,
                    data,
                    journal,
                    cluster,
                    workload,
                    audit,
                    horizon_seconds(horizon),
                    check_speed(speed),
                )
            if json_:
                _emit_json(answer)
                return
            # every line quotes journal data (ids, tags, reasons): escapes shown, none
            # obeyed, colours included (the tables' own styling is not in these lines)
            # on a terminal each line wraps at its words, under its own text
            for line in answer["text"]:
                typer.echo(wrapped(visible(line)))
            if "history" in answer:
                typer.echo(wrapped(visible(_history_title(answer))))
                for line in _history_lines(answer["history"]):
                    typer.echo(wrapped(visible(line), hanging=HISTORY_DETAIL_COLUMN))

        _answer(run)

    @app.command("idle")
    def idle(
        every: Annotated[
            bool,
            typer.Option(
                "--all",
                help="Also work below the idle threshold for less than idle_after so far.",
            ),
        ] = False,
        json_: JsonOpt = False,
        user: UserOpt = None,
        allocation: AllocationsOpt = None,
        kafka: KafkaOpt = None,
        data: DataOpt = None,
        journal: JournalOpt = None,
        cluster: ReadClusterOpt = None,
    ) -> None:
        """Who holds GPUs that do no work (squatting), for managers and operators.

        Running work whose launcher reports GPU utilization (workload.utilization;
        `allot executor --simulate --idle-fraction`, examples/launcher) below the
        config's idle_threshold (default 5%) for idle_after (default 30m) or longer,
        the longest idle first: who holds how many GPUs, since when, and whether it is
        still protected (its minimum runtime has not passed: fair share cannot preempt
        it yet; ask its user, or `allot requeue`/`cancel` as its manager). Then the
        idle GPUs per user. Work whose launcher reports nothing, or stopped reporting
        (its last reading is over three intervals old), is never listed: a launcher
        that cannot read its GPUs sends nothing. Observability only: the scheduler
        decides the same with or without these readings.
        """
        from domain.durations import format_duration
        from projections.views import idle_rows, iso, matches_allocation, split_names

        def run() -> None:
            users = None if user is None else split_names(user)
            view = load_view(kafka, data, journal, cluster, live_only=True)
            paths = _allocations(view, allocation)
            _refuse_unknown_allocation(view, paths)
            rows = idle_rows(view, user=users, allocation=paths, every=every)
            rows = [r for r in rows if matches_allocation(r["allocation"], paths)]
            config = view.require().config
            totals: dict[str, dict[str, Any]] = {}
            for r in rows:
                if not r["idle"]:
                    continue
                t = totals.setdefault(r["user"], {"user": r["user"], "gpus": 0, "workloads": 0})
                t["gpus"] += r["gpus"]
                t["workloads"] += 1
                t["protected_gpus"] = t.get("protected_gpus", 0) + (
                    r["gpus"] if r["protected"] else 0
                )
            by_user = sorted(totals.values(), key=lambda t: (-t["gpus"], t["user"]))
            if json_:
                _emit_json(
                    {
                        "cluster": view.cluster,
                        "now": iso(view.now),
                        "idle_threshold": config.idle_threshold,
                        "idle_after_s": config.idle_after,
                        "workloads": rows,
                        "by_user": by_user,
                    }
                )
                return
            idle_gpus = sum(t["gpus"] for t in by_user)
            title = (
                f"cluster {view.cluster} · as of {iso(view.now)} UTC · "
                f"{plural(idle_gpus, 'GPU')} idle (utilization below "
                f"{config.idle_threshold:.0%} for {format_duration(config.idle_after)} or longer)"
            )
            if not rows:
                typer.echo(title)
                typer.echo("no running work reported idle")
                return
            table = _table()
            for h, justify in (
                ("ID", "left"),
                ("USER", "left"),
                ("ALLOCATION", "left"),
                ("GPUS", "right"),
                ("UTIL", "right"),
                ("IDLE", "right"),
                ("IDLE SINCE", "left"),
                ("PROTECTED", "left"),
                ("NODELIST", "left"),
            ):
                _column(table, h, justify)
            for r in rows:
                table.add_row(
                    r["id"],
                    r["user"],
                    r["allocation"],
                    str(r["gpus"]),
                    f"{r['utilization']:.0%}",
                    format_duration(r["idle_s"]) + ("" if r["idle"] else " (not yet)"),
                    r["idle_since"] or "",
                    f"until {r['protected_until']}"
                    if r["protected_until"]
                    else ("yes" if r["protected"] else "no"),
                    r["nodelist"],
                )
            print_table(title, table)
            if by_user:
                typer.echo("")
                for t in by_user:
                    protected = t.get("protected_gpus", 0)
                    typer.echo(
                        visible(
                            f"{t['user']}: {plural(t['gpus'], 'idle GPU')} in "
                            f"{plural(t['workloads'], 'workload')}"
                            + (f" ({protected} protected)" if protected else "")
                        )
                    )

        _answer(run)


def _from_command_line(ctx: typer.Context, name: str) -> bool:
    """True when option `name` was given on the command line (not from its env var)."""
    source = ctx.get_parameter_source(name)
    return source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP", "ENVIRONMENT")


def _history_title(answer: dict[str, Any]) -> str:
    src = answer.get("history_source") or {}
    n = len(answer["history"])
    where = (
        f"the audit database {src['db']}, loaded up to {src['loaded_up_to']} UTC"
        if src.get("kind") == "audit"
        else "the journal"
    )
    return f"history, {n} event{'s' if n != 1 else ''} from {where}:"


# where a history line's details start: `  TIME(19)  EVENT(15)`, as timeline_text pads
HISTORY_DETAIL_COLUMN = 38


def _history_lines(entries: list[dict[str, Any]]) -> list[str]:
    from projections.timeline import timeline_text

    return timeline_text(entries) or ["  (nothing recorded about it)"]


def _audit_source(con: Any, db: Path) -> dict[str, Any]:
    from projections.audit import latest_time
    from projections.timeline import iso

    return {"kind": "audit", "db": str(db), "loaded_up_to": iso(latest_time(con))}


def _why_from_audit(db: Path, workload: str) -> dict[str, Any]:
    """The history and last recorded state, from the audit database alone."""
    from projections.audit import (
        AuditError,
        array_tasks,
        connect,
        find_workload,
        rejected_request,
        workload_records,
    )
    from projections.timeline import last_state, timeline

    con = connect(db, read_only=True)
    try:
        source = _audit_source(con, db)
        tasks = array_tasks(con, workload)
        if tasks:  # a job array's base id, as `allot why BASE` reads the journal
            lasts = [last_state(timeline(workload_records(con, t))) for t in tasks]
            return _array_from_audit(db, workload.strip(), tasks, lasts)
        try:
            wid = find_workload(con, workload)
        except AuditError:
            rejected = rejected_request(con, workload.strip())
            if rejected is None:
                raise
            return _rejection_answer(rejected)
        entries = timeline(workload_records(con, wid))
    finally:
        con.close()
    first = next((e for e in entries if e["event"] == "submitted"), None)
    title = f"workload {wid}" + (f" ({first['name']})" if first and first.get("name") else "")
    last = last_state(entries)
    text = [
        f"{title}: from the audit database {db} (no journal read)",
        f"last recorded: {last['text']}",
    ]
    return {
        "workload": wid,
        "current": last,
        "history": entries,
        "history_source": source,
        "text": text,
    }


def _array_from_audit(
    db: Path, base: str, tasks: list[str], lasts: list[dict[str, Any]]
) -> dict[str, Any]:
    """`allot why BASE --audit DB` alone: each task's last recorded state (the keys of
    the journal's answer that the database holds: `array`, `by_state`, `tasks`)."""
    from collections import Counter

    from projections.acct import ARRAY_TASKS_SHOWN

    counts = Counter(last["state"].lower() for last in lasts)
    text = [
        f"array {base}: {plural(len(tasks), 'task')} — "
        + ", ".join(f"{n:,} {state}" for state, n in counts.items())
        + f" (last recorded in the audit database {db}; no journal read)"
    ]
    width = max(len(t) for t in tasks[:ARRAY_TASKS_SHOWN])
    text += [
        f"  {t:<{width}}  {last['text']}"
        for t, last in zip(tasks[:ARRAY_TASKS_SHOWN], lasts, strict=False)
    ]
    if len(tasks) > ARRAY_TASKS_SHOWN:
        text.append(f"  … {len(tasks) - ARRAY_TASKS_SHOWN:,} more")
    text.append(f"`allot why {tasks[0]} --audit {db}` gives one task's history")
    return {
        "array": base,
        "by_state": dict(counts),
        "tasks": [
            {
                "id": t,
                "index": int(t.rpartition("_")[2]),
                "state": last["state"],
                "text": last["text"],
            }
            for t, last in zip(tasks, lasts, strict=True)
        ],
        "text": text,
    }


def _rejection_answer(r: dict[str, Any]) -> dict[str, Any]:
    """`allot why REQUEST-ID` for a rejected request, from its `*.rejected` record."""
    from projections.timeline import iso

    what = r.get("input_type") or str(r.get("type", "")).replace(".rejected", "")
    return {
        "request": r.get("ref"),
        "rejection": {
            "time": iso(r.get("time")),
            "type": r.get("type"),
            "ref": r.get("ref"),
            "actor": r.get("actor"),
            "error": r.get("error"),
            "input_type": r.get("input_type"),
        },
        "text": [
            f"request {r.get('ref')} ({what}) from {r.get('actor')} was rejected at "
            f"{iso(r.get('time'))}: {r.get('error')}"
        ],
    }


def _why_from_journal(
    kafka: str | None,
    data: Path | None,
    journal: Path | None,
    cluster: str | None,
    workload: str,
    db: Path | None,
    horizon_s: float,
    speed: float = 1.0,
) -> dict[str, Any]:
    """The answer from the journal; the history from it, or from `db` when given."""
    from projections.acct import array_summary
    from projections.views import why as explain

    read = journal_reader(kafka, data, journal, cluster)
    view = fold_for_forecast(read, kafka, data, journal, cluster)
    summary = array_summary(view, workload.strip())
    if summary is not None:  # a job array's base id: its tasks, not one workload
        return summary
    answer = explain(view, workload)
    if "workload" not in answer:
        return answer  # a rejected request's id
    answer["history_source"] = {"kind": "journal"}
    from projections.forecast import add_expectations

    wanted = (answer["workload"],)
    add_expectations(
        answer, view, lambda: forecast_view(view, read, horizon_s, wanted=wanted, speed=speed)
    )
    if db is None:
        return answer
    from projections.audit import AuditError, connect, workload_records
    from projections.timeline import timeline

    con = connect(db, read_only=True)
    try:
        source = _audit_source(con, db)
        records = workload_records(con, answer["workload"])
    finally:
        con.close()
    if not records:
        raise AuditError(
            f"workload {answer['workload']} is in the journal but not in the audit database "
            f"{db}: load the new records with `allot audit load --db {db}` (or drop --audit)"
        )
    answer["history"] = timeline(records)
    answer["history_source"] = source
    return answer

"""`allot audit load|sql`, `allot history`, `allot budget log`, `allot preemptions`.

The journal (from `--kafka`, `--data DIR` or `--journal FILE`) is copied into an
embedded DuckDB database (`--db`, default `allot-audit.duckdb` or `$ALLOT_AUDIT_DB`) by
`allot audit load` (again: only the new records); the other commands read that
database (see `projections.audit` for its tables and views), except `budget log`,
`history` and `preemptions`, which read the journal itself when one is named and --db is
not given (the same rows: `projections.budget_log` and `projections.history` make them
from either). Times are UTC; relative
times (`7d`, `12h`) count back from the journal's latest event.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated, Any

import typer

from allot.commands.common import (
    DataOpt,
    JournalOpt,
    KafkaOpt,
    ReadClusterOpt,
    TargetError,
    UntilOpt,
    ends_mid_line,
    plural,
    quiet_on_closed_pipe,
    terminal_safe,
    visible,
)

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]
DbOpt = Annotated[
    Path | None,
    typer.Option(
        "--db",
        help="The audit database (default $ALLOT_AUDIT_DB, else allot-audit.duckdb).",
        show_default=False,
    ),
]
# --db of the commands that read the journal when one is named
SourceDbOpt = Annotated[
    Path | None,
    typer.Option(
        "--db",
        help="Read the audit database instead of the journal (default, when no journal "
        "is named: $ALLOT_AUDIT_DB, else allot-audit.duckdb).",
        show_default=False,
    ),
]
SinceOpt = Annotated[
    str | None,
    typer.Option(
        "--since",
        "-S",
        help="From: an ISO date/time (UTC), e.g. 2026-01-01, or a duration before the "
        "journal's latest event, e.g. 7d.",
        show_default=False,
    ),
]

# rich, orjson, duckdb and the projections are imported where they are used: the presets
# must answer in well under a second, start-up included (issue 5)

audit_app = typer.Typer(
    help="Keep the journal in a DuckDB database and ask it questions in SQL.",
    no_args_is_help=True,
)


def _fail(message: str) -> typer.Exit:
    # an error may quote journal data (an ambiguous id's candidates): shown, not obeyed
    typer.echo(f"error: {visible(' '.join(message.split()))}", err=True)
    return typer.Exit(2)


def _answer(fn: Any) -> Any:
    """Run `fn`, turning every expected failure into one line on stderr and exit 2.

    Only modules already imported can have raised their errors, so none is imported
    here just to be caught."""
    import sys

    try:
        with terminal_safe(), quiet_on_closed_pipe():
            return fn()
    except OSError as why:
        raise _fail(f"cannot read: {why}") from None
    except Exception as why:
        kinds: list[type] = [TargetError]
        for module, name in (
            ("streams.sources", "SourceError"),
            ("projections.audit", "AuditError"),
            ("projections.budget_log", "BudgetLogError"),
            ("projections.history", "HistoryError"),
        ):
            kind = getattr(sys.modules.get(module), name, None)
            if kind is not None:
                kinds.append(kind)
        if isinstance(why, tuple(kinds)):
            raise _fail(str(why)) from None
        duckdb = sys.modules.get("duckdb")
        if duckdb is not None and isinstance(why, duckdb.Error):
            text = str(why).strip().splitlines()
            raise _fail(f"audit database: {text[0] if text else type(why).__name__}") from None
        raise


def _db(db: Path | None) -> Path:
    from projections.audit import default_db

    return db if db is not None else default_db()


def _open(db: Path | None) -> Any:
    from projections.audit import connect

    return connect(_db(db), read_only=True)


def _emit_json(payload: Any) -> None:
    import orjson

    typer.echo(
        orjson.dumps(
            payload,
            option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS | orjson.OPT_PASSTHROUGH_DATETIME,
            default=str,
        )
    )


class _Rows:
    """A borderless table: a title line, a header and aligned rows (`print_rows`, as
    `allot queue` prints: rich measured each cell, 54 s for 40,000 rows)."""

    def __init__(self, title: str, headers: list[tuple[str, str]]) -> None:
        self.heading = title
        self.headers = [h for h, _ in headers]
        self.right = frozenset(h for h, justify in headers if justify == "right")
        self.rows: list[list[str]] = []
        self.strong: list[bool] = []

    def add_row(self, *cells: str, style: str | None = None) -> None:
        self.rows.append(list(cells))
        self.strong.append(style == "bold")


def _table(title: str, headers: list[tuple[str, str]]) -> _Rows:
    return _Rows(title, headers)


def _print(table: _Rows) -> None:
    """Print at the table's natural width (cells are never cut), the title above it."""
    from allot.commands.views import print_rows

    print_rows(table.heading, table.headers, table.rows, right=table.right, strong=table.strong)


def _cell(value: Any) -> str:
    """A value as SQL gave it: a float in full (the shortest text that reads back the
    same; `.4g` showed 10486.6 as 1.049e+04)."""
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) and abs(value) < 1e15 else f"{value:g}"
    return str(value)


@audit_app.command("load")
def audit_load(
    db: DbOpt = None,
    kafka: KafkaOpt = None,
    data: DataOpt = None,
    journal: JournalOpt = None,
    cluster: ReadClusterOpt = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Copy the journal's new records into the audit database (creating it).

    Loading again adds only the records loaded since; the database holds one journal.
    A last line without its newline (a write in progress) is left for the next load.
    A progress bar shows the records read (on a terminal; --quiet hides it).
    """
    from rich.console import Console

    from allot.commands.common import read_target
    from allot.progress import counted, record_progress
    from projections.audit import load
    from streams.sources import FileLines, journal_lines

    def run() -> None:
        target = read_target(kafka, data, journal)
        wanted = cluster if cluster is not None or not target.kafka else "default"
        lines = journal_lines(
            kafka=target.kafka, data=target.data, journal=target.journal, cluster=wanted
        )
        source = target.label + (f" cluster {wanted}" if wanted else "")
        if not target.kafka:
            source = str(Path(target.label).resolve()) + (f" cluster {wanted}" if wanted else "")
        path = target.journal or (target.data / "journal.jsonl" if target.data else None)
        size = path.stat().st_size if path is not None and path.is_file() else None
        database = _db(db)
        fresh = not database.exists()
        try:
            with record_progress(
                "loading", size, quiet=quiet, console=Console(stderr=True)
            ) as update:
                # a file's records know their line: a damaged one is named FILE:LINE
                where = (lambda: lines.place) if isinstance(lines, FileLines) else None
                result = load(database, counted(lines, update), source=source, where=where)
        except BaseException:
            if fresh:  # a first load that failed (say, Kafka unreachable) leaves nothing
                for leftover in (database, database.with_name(database.name + ".wal")):
                    leftover.unlink(missing_ok=True)
            raise
        typer.echo(
            f"loaded {plural(result['added'], 'new record')} into {_db(db)} "
            f"({result['records']:,} in all)"
        )
        if ends_mid_line(path):
            typer.echo(
                f"note: the last line of {path} is incomplete (a write in progress or cut "
                "short); it was not loaded",
                err=True,
            )

    _answer(run)


@audit_app.command("sql")
def audit_sql(
    query: Annotated[
        str, typer.Argument(help='SQL, e.g. "SELECT type, count(*) FROM journal GROUP BY ALL".')
    ],
    db: DbOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Ask the audit database anything in SQL (read-only).

    Tables and views: journal, records, submissions, placements, preemptions,
    budget_changes, rejections, runs."""
    from projections.audit import sql

    def run() -> None:
        con = _open(db)
        try:
            columns, rows = sql(con, query)
        finally:
            con.close()
        if json_:
            _emit_json([dict(zip(columns, row, strict=True)) for row in rows])
            return
        table = _table(plural(len(rows), "row"), [(c, "left") for c in columns])
        for row in rows:
            table.add_row(*(_cell(v) for v in row))
        _print(table)

    _answer(run)


def _shown_time(iso: str) -> str:
    """A time as the other tables show it (`acct`, `queue`, `why`: 2026-01-01 06:00:00);
    the JSON keeps ISO's T."""
    return iso.replace("T", " ", 1)


Source = tuple[str | None, Path | None, Path | None]


def _journal_named(source: Source, db: Path | None) -> bool:
    """Read the journal itself: one is named (flag or variable) and --db is not given."""
    if db is None and any(s is not None for s in source):
        return True
    if db is None and not _db(None).exists():
        from streams.sources import NO_JOURNAL_GIVEN

        raise TargetError(f"{NO_JOURNAL_GIVEN} (or an audit database: --db)")
    return False


def _journal_where(source: Source, cluster: str | None) -> tuple[dict[str, Any], str | None, str]:
    """The named journal as `streams.sources` takes it, the cluster read (Kafka's
    `default` unless one is named, as `audit load`) and its label."""
    from allot.commands.common import read_target
    from streams.sources import SourceError

    target = read_target(*source)
    wanted = cluster if cluster is not None or not target.kafka else "default"
    if target.journal is not None and not target.journal.is_file():
        raise SourceError(f"{target.journal}: no such journal file")
    if target.data is not None and not target.data.is_dir():
        raise SourceError(
            f"{target.data}: no such folder; start the embedded scheduler with "
            f"`allot serve --data {target.data}` or point --data at its folder"
        )
    where = {"kafka": target.kafka, "data": target.data, "journal": target.journal}
    label = f"{target.label} cluster {wanted}" if wanted else target.label
    return where, wanted, label


def _journal_latest(where: dict[str, Any], cluster: str | None, label: str) -> float:
    """The journal's latest record time (relative --since, --until and runs still going
    count from it), and a warning when its file ends mid-line."""
    from allot.commands.common import cut_line_warning
    from streams.sources import EmptyJournal, last_record_time

    # searched back: other clusters' records after this one's are not an empty journal
    latest = last_record_time(**where, cluster=cluster, search_back=True)
    if latest is None:
        raise EmptyJournal(f"{label}: no records yet")
    path = where["journal"] or (where["data"] / "journal.jsonl" if where["data"] else None)
    if ends_mid_line(path):
        typer.echo(visible(cut_line_warning(path)), err=True)
    return latest


def _history_answer(
    allocation: str,
    since: str | None,
    until: str | None,
    source: Source,
    cluster: str | None,
    db: Path | None,
) -> dict[str, Any]:
    if not _journal_named(source, db):
        from projections.audit import history

        con = _open(db)
        try:
            return history(con, allocation, since, until, cluster)
        finally:
            con.close()
    from projections.history import HISTORY_TYPES, history
    from streams.sources import iter_records_of_type

    where, wanted, label = _journal_where(source, cluster)
    latest = _journal_latest(where, wanted, label)
    records = iter_records_of_type(HISTORY_TYPES, **where, cluster=wanted)
    return history(records, allocation, since, until, latest)


def _history(
    allocation: str,
    since: str | None,
    until: str | None,
    source: Source,
    cluster: str | None,
    db: Path | None,
    json_: bool,
) -> None:
    def run() -> None:
        answer = _history_answer(allocation, since, until, source, cluster, db)
        if json_:
            _emit_json(answer)
            return
        first = _shown_time(answer["since"]) if answer["since"] else "start"
        title = (
            f"{answer['allocation']} · {first} → {_shown_time(answer['until'])} UTC · "
            "GPU-hours by user"
        )
        table = _table(
            title,
            [
                ("USER", "left"),
                ("CHARGED GPU-h", "right"),
                ("UNALLOCATED GPU-h", "right"),
                ("RUNS", "right"),
            ],
        )
        for u in answer["users"]:
            table.add_row(
                u["user"] or "?",
                f"{u['charged_gpu_h']:.2f}",
                f"{u['unallocated_gpu_h']:.2f}",
                str(u["runs"]),
            )
        table.add_row(
            "total",
            f"{answer['charged_gpu_h']:.2f}",
            f"{answer['unallocated_gpu_h']:.2f}",
            str(sum(u["runs"] for u in answer["users"])),
            style="bold",
        )
        _print(table)

    _answer(run)


def _budget_log(
    allocation: str | None,
    since: str | None,
    source: tuple[str | None, Path | None, Path | None],
    cluster: str | None,
    db: Path | None,
    json_: bool,
) -> None:
    """From the journal when one is named (--kafka, --data, --journal or their
    variables) and --db is not given; else from the audit database."""

    def run() -> None:
        from projections.budget_log import budget_undo, rows_since

        if db is None and any(s is not None for s in source):
            rows, latest, title = _budget_rows_from_journal(allocation, source, cluster)
        elif db is None and not _db(None).exists():
            from streams.sources import NO_JOURNAL_GIVEN

            raise TargetError(f"{NO_JOURNAL_GIVEN} (or an audit database: --db)")
        elif json_:
            typer.echo(_budget_json_from_db(allocation, since, cluster, db))
            return
        else:
            rows, latest, title = _budget_rows_from_db(allocation, cluster, db)
        since_t = _since(since, latest)
        shown = rows_since(rows, since_t)
        if json_:
            import orjson

            typer.echo(orjson.dumps(shown))
            return
        _print_budget_log(shown, title)
        _say_undo(budget_undo(rows, since_t))

    _answer(run)


def _since(since: str | None, latest: float | None) -> float | None:
    from projections.budget_log import BudgetLogError, since_time

    if since is None:
        return None
    if latest is None:  # no budget record and no last record: nothing to count back from
        raise BudgetLogError(f"--since {since!r}: the journal has no records to count back from")
    return since_time(since, latest)


def _budget_rows_from_journal(
    allocation: str | None,
    source: tuple[str | None, Path | None, Path | None],
    cluster: str | None,
) -> tuple[list[dict[str, Any]], float | None, str]:
    """The rows of the journal's budget records (a byte search, no `audit load`), the
    journal's latest record time (for --since) and the title's note."""
    from allot.commands.common import cut_line_warning, read_target
    from projections.budget_log import RECORD_TYPES, budget_log
    from streams.sources import SourceError, last_record_time, records_of_type

    target = read_target(*source)
    # Kafka holds every cluster's records: its `default` unless one is named, as `audit load`
    wanted = cluster if cluster is not None or not target.kafka else "default"
    if target.journal is not None and not target.journal.is_file():
        raise SourceError(f"{target.journal}: no such journal file")
    where = {"kafka": target.kafka, "data": target.data, "journal": target.journal}
    records = records_of_type(RECORD_TYPES, **where, cluster=wanted)
    rows = budget_log(records, allocation)
    latest = last_record_time(**where, cluster=wanted, search_back=True)
    if latest is None and records:
        latest = max(float(r["time"]) for r in records)
    path = target.journal or (target.data / "journal.jsonl" if target.data else None)
    if ends_mid_line(path):
        typer.echo(visible(cut_line_warning(path)), err=True)  # type: ignore[arg-type]
    label = f"{target.label} cluster {wanted}" if wanted else target.label
    return rows, latest, f"from the journal ({label})"


def _budget_json_from_db(
    allocation: str | None, since: str | None, cluster: str | None, db: Path | None
) -> bytes:
    """--json from the audit database: the rows' JSON, written by DuckDB."""
    from projections.audit import budget_log_json

    con = _open(db)
    try:
        return budget_log_json(con, allocation, cluster, since)
    finally:
        con.close()


def _budget_rows_from_db(
    allocation: str | None, cluster: str | None, db: Path | None
) -> tuple[list[dict[str, Any]], float, str]:
    from datetime import UTC, datetime

    from projections.audit import budget_log, latest_time

    con = _open(db)
    try:
        rows = budget_log(con, allocation, cluster)
        latest = latest_time(con)
    finally:
        con.close()
    loaded_up_to = datetime.fromtimestamp(latest, UTC)
    # the database is only as new as its last load: a change made since is not in it,
    # and a manager checking one just made would read that it never happened
    return (
        rows,
        latest,
        f"{_db(db)} loaded up to {loaded_up_to:%Y-%m-%d %H:%M:%S} UTC "
        "(`allot audit load` adds what is newer)",
    )


def _print_budget_log(rows: list[dict[str, Any]], source: str) -> None:
    refused = sum(1 for r in rows if r["error"] is not None)
    limits = any(_limits_shown(r) for r in rows)
    title = f"{len(rows) - refused:,} budget changes"
    if refused:
        title += f", {refused:,} refused"
    table = _table(
        f"{title} · {source}",
        [
            ("TIME (UTC)", "left"),
            ("ACTOR", "left"),
            ("ALLOCATION", "left"),
            ("CHANGE", "left"),
            ("WEIGHT", "right"),
            ("MANAGERS", "left"),
            ("MEMBERS", "left"),
            *((("PER-USER", "left"),) if limits else ()),
            *((("REFUSED BECAUSE", "left"),) if refused else ()),
        ],
    )
    for r in rows:
        table.add_row(
            _shown_time(r["time"]),
            r["actor"] or "",
            r["allocation"] or "",
            r["change"],
            _weight_change(r["weight"], r["previous_weight"]),
            _list_shown(r, "managers"),
            _list_shown(r, "members"),
            *((_limits_shown(r),) if limits else ()),
            *((r["error"] or "",) if refused else ()),
        )
    _print(table)


def _limits_shown(row: dict[str, Any]) -> str:
    """`gpus 8, pending none`: the per-user limits a change set (none: removed)."""
    parts = []
    for label, key in (("gpus", "max_gpus_per_user"), ("pending", "max_pending_per_user")):
        value = row.get(key)
        if value is not None:
            parts.append(f"{label} {'none' if value < 1 else value}")
    return ", ".join(parts)


# an undo line for each of the few latest changes: at 3 a.m. the wrong one is recent,
# and a line per allocation of a big tree would bury it
_UNDO_SHOWN = 5


def _say_undo(undo: list[dict[str, Any]]) -> None:
    """On stderr (the table stays parsable): for the latest changes, what each replaced
    and the command that puts it back."""
    import sys

    sys.stdout.flush()  # after the table, not inside it
    for u in undo[:_UNDO_SHOWN]:
        was = [f"weight {u['weight']:g}"] if u["weight"] is not None else []
        was += [
            f"{which} {_principals_shown(u[which])}"
            for which in ("managers", "members")
            if u[which] is not None
        ]
        limits = _limits_shown(u)
        if limits:
            was.append(f"per-user {limits}")
        typer.echo(
            f"undo {u['actor']}'s change of {u['allocation']} at {_shown_time(u['time'])} "
            f"(it was {', '.join(was)}): {_restore_command(u)}",
            err=True,
        )
    if len(undo) > _UNDO_SHOWN:
        typer.echo(
            f"({len(undo) - _UNDO_SHOWN} older changes can be undone too: `allot budget log "
            "-a PATH` gives PATH's)",
            err=True,
        )


def _restore_command(u: dict[str, Any]) -> str:
    """`allot budget set PATH [WEIGHT] [--manager a,b | --no-managers] [...]
    [--max-gpus-per-user N|none] [--max-pending-per-user M|none]`."""
    import shlex

    from projections.budget_log import USER_LIMITS

    words = ["allot", "budget", "set", u["allocation"]]
    if u["weight"] is not None:
        words.append(f"{u['weight']:g}")
    for which, flag in (("managers", "manager"), ("members", "member")):
        names = u[which]
        if names is not None:
            words += [f"--{flag}", ",".join(names)] if names else [f"--no-{which}"]
    for key in USER_LIMITS:
        value = u[key]
        if value is not None:  # (a limit that was not there is put back as none)
            words += [f"--{key.replace('_', '-')}", "none" if value < 1 else str(value)]
    if u["cluster"] and u["cluster"] != "default":
        words += ["--cluster", u["cluster"]]
    return shlex.join(words)


def _weight_change(weight: float | None, previous: float | None) -> str:
    """`2 → 5` for a changed weight, `5` for a new one, blank where it was kept."""
    if weight is None:
        return ""
    if previous is None or previous == weight:
        return f"{weight:g}"
    return f"{previous:g} → {weight:g}"


def _principals_shown(names: list[str] | None) -> str:
    """A cleared list reads `(none)`, not blank as a list the change kept."""
    if names is None:
        return ""
    return ",".join(names) if names else "(none)"


def _list_shown(row: dict[str, Any], which: str) -> str:
    """A list as the change left it; a change by names says them first, with those that
    changed nothing: `+erin -zed (not there) → alice,bob,erin`."""
    added, removed = row.get(f"add_{which}") or [], row.get(f"remove_{which}") or []
    if not added and not removed:
        return _principals_shown(row[which])
    already, absent = set(row.get(f"already_{which}") or ()), set(row.get(f"absent_{which}") or ())
    said = [f"+{n}" + (" (already)" if n in already else "") for n in added]
    said += [f"-{n}" + (" (not there)" if n in absent else "") for n in removed]
    return f"{' '.join(said)} → {_principals_shown(row[which])}"


def _preemption_rows(
    since: str | None, until: str | None, source: Source, cluster: str | None, db: Path | None
) -> list[dict[str, Any]]:
    if not _journal_named(source, db):
        from projections.audit import preemptions

        con = _open(db)
        try:
            return preemptions(con, since, until, cluster)
        finally:
            con.close()
    from projections.history import PREEMPTED, PREEMPTION_CONTEXT, preemptions
    from streams.sources import records_naming, records_of_type

    where, wanted, label = _journal_where(source, cluster)
    latest = _journal_latest(where, wanted, label)
    # two byte searches: the rare preemptions, then only their workloads' records
    preempted = records_of_type([PREEMPTED], **where, cluster=wanted)
    ids = {r["workload"] for r in preempted if isinstance(r.get("workload"), str)}
    context = [
        r
        for r in records_naming(ids, **where, cluster=wanted)
        if r.get("type") in PREEMPTION_CONTEXT and r.get("workload") in ids
    ]
    # the search gives each its journal order; merged by time, a placement before its
    # preemption (a record's time never runs back)
    records = sorted(context + preempted, key=lambda r: (float(r["time"]), r["type"] == PREEMPTED))
    return preemptions(records, since, until, latest)


def _preemptions(
    since: str | None,
    until: str | None,
    source: Source,
    cluster: str | None,
    db: Path | None,
    json_: bool,
) -> None:
    def run() -> None:
        rows = _preemption_rows(since, until, source, cluster, db)
        if json_:
            _emit_json(rows)
            return
        table = _table(
            plural(len(rows), "preemption"),
            [
                ("TIME (UTC)", "left"),
                ("WORKLOAD", "left"),
                ("ATTEMPT", "right"),
                ("ALLOCATION", "left"),
                ("USER", "left"),
                ("GPUS", "right"),
                ("REASON", "left"),
                ("BENEFICIARY", "left"),
                ("REQUEUED", "left"),
                ("RAN", "right"),
            ],
        )
        from projections.timeline import domain_module

        format_duration = domain_module("durations").format_duration

        for r in rows:
            table.add_row(
                _shown_time(r["time"]),
                r["workload"] or "",
                _cell(r["attempt"]),
                r["allocation"] or "",
                r["user"] or "",
                _cell(r["gpus"]),
                r["reason"] or "",
                r["beneficiary"] or "",
                "yes" if r["requeued"] else "no",
                "" if r["ran_s"] is None else format_duration(r["ran_s"]),
            )
        _print(table)

    _answer(run)


def _budget_typer(app: typer.Typer) -> typer.Typer | None:
    for group in app.registered_groups:
        if group.name == "budget" and group.typer_instance is not None:
            return group.typer_instance
    return None


def register(app: typer.Typer) -> None:
    """Add `audit load|sql`, `history`, `preemptions` and `budget log` to the `allot` app
    (after `allot.commands.requests`, whose `budget` group gets `log`)."""
    app.add_typer(audit_app, name="audit")

    @app.command("history")
    def history_cmd(
        allocation: Annotated[
            str,
            typer.Option(
                "--allocation",
                "-a",
                "--account",
                "-A",
                help="Allocation path (and those under it; Slurm's -A/--account).",
            ),
        ],
        since: SinceOpt = None,
        until: UntilOpt = None,
        kafka: KafkaOpt = None,
        data: DataOpt = None,
        journal: JournalOpt = None,
        cluster: ReadClusterOpt = None,
        db: SourceDbOpt = None,
        json_: JsonOpt = False,
    ) -> None:
        """GPU-hours charged and unallocated by user for an allocation (and those under it).

        Reads the journal itself (--kafka, --data DIR, --journal FILE, or $ALLOT_KAFKA,
        $ALLOT_DATA): no `allot audit load` needed, and always up to date. With --db, or
        when no journal is named, reads the audit database instead (as `allot audit
        load` left it): the same answer. Runs are clipped to [--since, --until]; a run
        still going counts up to the journal's latest record."""
        _history(allocation, since, until, (kafka, data, journal), cluster, db, json_)

    @app.command("preemptions")
    def preemptions_cmd(
        since: SinceOpt = None,
        until: UntilOpt = None,
        kafka: KafkaOpt = None,
        data: DataOpt = None,
        journal: JournalOpt = None,
        cluster: ReadClusterOpt = None,
        db: SourceDbOpt = None,
        json_: JsonOpt = False,
    ) -> None:
        """Every preemption: victim, its allocation and user, reason, beneficiary.

        Reads the journal itself (--kafka, --data DIR, --journal FILE, or $ALLOT_KAFKA,
        $ALLOT_DATA): no `allot audit load` needed, and always up to date. With --db, or
        when no journal is named, reads the audit database instead (as `allot audit
        load` left it): the same rows."""
        _preemptions(since, until, (kafka, data, journal), cluster, db, json_)

    def budget_log_cmd(
        allocation: Annotated[
            str | None,
            typer.Option(
                "--allocation",
                "-a",
                "--account",
                "-A",
                help="Only this allocation and those under it (Slurm's -A/--account).",
            ),
        ] = None,
        since: Annotated[
            str | None,
            typer.Option(
                "--since",
                "-S",
                help="Only changes from then on: an ISO date/time (UTC), e.g. 2026-01-01, "
                "sacct's MMDD or MM/DD, a time of day (07:13), today, now-1hour, or a "
                "duration before the journal's latest record, e.g. 7d.",
                show_default=False,
            ),
        ] = None,
        kafka: KafkaOpt = None,
        data: DataOpt = None,
        journal: JournalOpt = None,
        cluster: ReadClusterOpt = None,
        db: Annotated[
            Path | None,
            typer.Option(
                "--db",
                help="Read the audit database instead of the journal (default, when no "
                "journal is named: $ALLOT_AUDIT_DB, else allot-audit.duckdb).",
                show_default=False,
            ),
        ] = None,
        json_: JsonOpt = False,
    ) -> None:
        """Every budget change (weights, managers, members, removals) with actor and time.

        Reads the journal itself (--kafka, --data DIR, --journal FILE, or $ALLOT_KAFKA,
        $ALLOT_DATA): no `allot audit load` needed, and always up to date. With --db, or
        when no journal is named, reads the audit database instead (as loaded by
        `allot audit load`; the title says up to when): the same rows. WEIGHT: `2 → 5`
        where the change replaced a weight, blank where it kept it; MANAGERS, MEMBERS:
        the new list, blank where kept, `(none)` where cleared. A change by names
        (`budget set --add-member`, --remove-member, ...) reads `+erin -zed (not there)
        → bob,erin`: the names, those that changed nothing ('already' there, 'not
        there' to remove) and the list it left. --json: previous_weight, null where
        kept; add_members, remove_members, add_managers, remove_managers, and the names
        that changed nothing: already_members, absent_members, already_managers,
        absent_managers. PER-USER (shown once a change set one): the per-user limits
        set (`gpus 8, pending none`: none removes one; --json: max_gpus_per_user,
        max_pending_per_user, -1 removed, null kept).

        Changes the scheduler refused (not a manager, an unknown parent, ...) are listed
        too, as `set refused` or `remove refused` with the reason (REFUSED BECAUSE;
        --json: error, null for the changes made); the title counts them apart.

        On stderr, for the allocations of the 5 latest changes, what each change replaced
        and the command that puts it back: `undo pm's change of lab/big at ... (it was
        weight 10): allot budget set lab/big 10`, per-user limits too
        (`--max-gpus-per-user none` where there was none). A change that created an
        allocation has none. `-a PATH` gives them for PATH and those under it; --since, for the
        changes from then on."""
        _budget_log(allocation, since, (kafka, data, journal), cluster, db, json_)

    budget = _budget_typer(app)
    if budget is not None:
        budget.command("log")(budget_log_cmd)
    else:  # the requests module is not registered: stand alone
        app.command("budget-log")(budget_log_cmd)

"""`allot queue`, `allot shares`, `allot why`: the journal as people read it.

Each reads the journal from Kafka (`--kafka`, default `$ALLOT_KAFKA`), the embedded
folder (`--data DIR`) or a file (`--journal FILE`, e.g. a simulation's journal.jsonl),
folds it with the scheduler's own code (`projections.views`) and answers as of the
journal's latest event time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import orjson
import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from allot.commands.common import ClusterOpt, DataOpt, JournalOpt, KafkaOpt, TargetError

JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")]

FORMAT_HELP = (
    "Columns, squeue-like: letters such as '%i %a %u %T %g %M %r' or names such as "
    "'id,allocation,user,state,gpus,time,reason'. Fields: %i id, %j name, %a allocation, "
    "%u user, %T state, %t st (PD/R), %g gpus, %M time (pending: waited; running: run "
    "time), %r reason, %N nodelist, %R nodelist or (reason), %p position, %k rank, "
    "%f ratio, %Q priority, %V submitted, %l min_runtime, %K tags, %d detail. "
    "Prints plain aligned text (no table borders) for scripts."
)


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    return typer.Exit(2)


def _print(title: str, table: Table) -> None:
    """Print at the table's natural width: cells are never cut (ids must stay whole);
    on a narrow terminal long rows wrap, as squeue's do."""
    console = Console()
    natural = Console(width=10_000).measure(table).maximum
    if not console.is_terminal or natural > console.width:
        console = Console(width=max(natural, len(title), 20))
    console.print(Text(title, style="bold"), soft_wrap=True)
    console.print(table)


def _table() -> Table:
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


def load_view(
    kafka: str | None, data: Path | None, journal: Path | None, cluster: str | None
) -> Any:
    """Fold the journal named by the options into a `projections.views.JournalView`.

    Files are filtered by `cluster` only when one is given (a simulation's journal holds
    one cluster); Kafka and the embedded journal default to cluster `default`."""
    from allot.commands.common import resolve_target
    from projections.views import decode_lines, fold
    from streams.sources import journal_lines

    if kafka is None and data is None and journal is None:
        raise TargetError(
            "say where the journal is: --kafka HOST:PORT (or $ALLOT_KAFKA), --data DIR "
            "or --journal FILE"
        )
    target = resolve_target(kafka, data, journal, writable=False)
    if target.kafka and cluster is None:
        cluster = "default"
    lines = journal_lines(
        kafka=target.kafka, data=target.data, journal=target.journal, cluster=cluster
    )
    return fold(decode_lines(lines))


def _answer(fn: Any) -> Any:
    """Run `fn`, turning every expected failure into one line on stderr and exit 2."""
    from projections.journal import JournalError
    from projections.views import ViewError
    from streams.sources import SourceError

    try:
        return fn()
    except (TargetError, SourceError, ViewError, JournalError) as why:
        raise _fail(str(why)) from None
    except OSError as why:
        raise _fail(f"cannot read the journal: {why}") from None


def _emit_json(payload: Any) -> None:
    typer.echo(orjson.dumps(payload, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))


def _plain(headers: list[str], cells: list[list[str]]) -> str:
    widths = [len(h) for h in headers]
    for row in cells:
        widths = [max(w, len(c)) for w, c in zip(widths, row, strict=True)]
    lines = []
    for row in [headers, *cells]:
        lines.append("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())
    return "\n".join(lines)


def register(app: typer.Typer) -> None:
    """Add `queue`, `shares` and `why` to the `allot` app."""

    @app.command("queue")
    def queue(
        format_: Annotated[
            str | None, typer.Option("--format", "-o", help=FORMAT_HELP, show_default=False)
        ] = None,
        json_: JsonOpt = False,
        user: Annotated[
            str | None, typer.Option("--user", "-u", help="Only this user's workloads.")
        ] = None,
        allocation: Annotated[
            str | None,
            typer.Option(
                "--allocation", "-a", help="Only this allocation and the allocations under it."
            ),
        ] = None,
        long: Annotated[
            bool,
            typer.Option(
                "--long",
                "-l",
                help="Also the sort keys (position, rank, ratio, priority, submit time) and details.",
            ),
        ] = False,
        kafka: KafkaOpt = None,
        data: DataOpt = None,
        journal: JournalOpt = None,
        cluster: ClusterOpt = None,  # type: ignore[assignment]
    ) -> None:
        """Pending and running workloads, like squeue.

        Pending work comes first, in the order the scheduler considers it (allocated
        before unallocated, then allocation rank from fair share, priority, submit
        time), then running work by start time. WAIT/TIME: how long a pending workload
        has waited since it last became pending, or how long a running one has run.
        REASON for pending work: Priority (it would fit, but higher-ranked work comes
        first), Resources (no room even by preemption), Reserved (hosts are being kept
        free for it), Headroom (only the hosts kept for short jobs have room); for
        running work: 'protected until HH:MM' (UTC) or 'preemptible'. Times are the
        journal's: 'now' is its latest event.
        """
        from projections.views import (
            DEFAULT_COLUMNS,
            LONG_COLUMNS,
            iso,
            parse_format,
            queue_cells,
            queue_rows,
        )

        def run() -> None:
            columns = parse_format(format_) if format_ else None
            view = load_view(kafka, data, journal, cluster)
            rows = queue_rows(view, user=user, allocation=allocation)
            if json_:
                _emit_json(
                    {
                        "cluster": view.cluster,
                        "now": iso(view.now),
                        "time": view.now,
                        "policy": view.state.ordering.name,
                        "workloads": rows,
                    }
                )
                return
            if columns is not None:
                typer.echo(_plain(*queue_cells(rows, columns)))
                return
            columns = LONG_COLUMNS if long else DEFAULT_COLUMNS
            headers, cells = queue_cells(rows, columns)
            pending = sum(1 for r in rows if r["state"] == "PENDING")
            title = (
                f"cluster {view.cluster} · as of {iso(view.now)} UTC · policy "
                f"{view.state.ordering.name} · {pending} pending, {len(rows) - pending} running"
            )
            table = _table()
            for h in headers:
                right = h in ("GPUS", "WAIT/TIME", "POS", "RANK", "RATIO", "PRIO")
                _column(table, h, "right" if right else "left")
            for row, cell in zip(rows, cells, strict=True):
                style = "dim" if row["state"] == "RUNNING" else None
                table.add_row(*(Text(c) for c in cell), style=style)
            _print(title, table)
            if not rows:
                typer.echo(
                    "no workloads pending or running"
                    + (" for that filter" if user or allocation else "")
                )

        _answer(run)

    @app.command("shares")
    def shares(
        json_: JsonOpt = False,
        kafka: KafkaOpt = None,
        data: DataOpt = None,
        journal: JournalOpt = None,
        cluster: ClusterOpt = None,  # type: ignore[assignment]
    ) -> None:
        """The budget tree with fair-share numbers, like sshare.

        Siblings are listed in Fair-Tree order (lower fair-share ratio first), so leaf
        ranks read top down. WEIGHT: among siblings; SHARE: of the cluster (product of
        weight/sum of sibling weights along the path); USAGE: charged GPU-hours in the
        lookback window; RATIO: usage / (share x capacity x window), lower is served
        first ('inf' for a zero share); RUN/ENT: GPUs running charged now vs entitled
        (share x healthy capacity); UNALLOC: GPUs running unallocated; PEND: GPUs
        requested by pending work.
        """
        from domain.durations import format_duration
        from projections.views import share_rows, shares_header

        def run() -> None:
            view = load_view(kafka, data, journal, cluster)
            rows = share_rows(view)
            header = shares_header(view)
            if json_:
                _emit_json({**header, "allocations": rows})
                return
            title = (
                f"cluster {header['cluster']} · as of {header['now']} UTC · window "
                f"{format_duration(header['window_s'])} · {header['healthy_capacity']} of "
                f"{header['capacity']} GPUs healthy · policy {header['policy']}"
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
            ):
                _column(table, h, justify)
            for r in rows:
                table.add_row(
                    Text("  " * r["depth"] + (r["name"] if r["depth"] else r["path"])),
                    f"{r['weight']:g}",
                    f"{r['share']:.4f}" if r["share"] is not None else "-",
                    f"{r['usage_gpu_h']:.1f}",
                    "inf" if r["ratio"] is None else f"{r['ratio']:.4f}",
                    "" if r["rank"] is None else str(r["rank"]),
                    f"{r['running']}/{r['entitled']:g}",
                    str(r["unallocated"]),
                    str(r["pending"]),
                    style=None if r["leaf"] else "bold",
                )
            _print(title, table)
            if not rows:
                typer.echo("no allocations yet: `allot budget set PATH WEIGHT` creates them")

        _answer(run)

    @app.command("why")
    def why(
        workload: Annotated[
            str,
            typer.Argument(
                help="Workload id (a unique prefix is enough), or the id of a rejected request."
            ),
        ],
        json_: JsonOpt = False,
        kafka: KafkaOpt = None,
        data: DataOpt = None,
        journal: JournalOpt = None,
        cluster: ClusterOpt = None,  # type: ignore[assignment]
    ) -> None:
        """Why a workload is where it is, from the journal alone.

        When and by whom it was submitted and with which contract; each placement
        (hosts, charged or not, protected until when, its allocation's rank, fair-share
        ratio and share, whom it preempted); each preemption (reason, beneficiary, the
        numbers compared: ratios and hysteresis for rule 'ratio', running vs entitled
        GPUs for rule 'reclaim'); rejected requests about it; and now: running, ended,
        or pending with its position and reason.
        """
        from projections.views import why as explain

        def run() -> None:
            view = load_view(kafka, data, journal, cluster)
            answer = explain(view, workload)
            if json_:
                _emit_json(answer)
                return
            for line in answer["text"]:
                typer.echo(line)

        _answer(run)

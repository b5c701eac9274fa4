"""`allot rollup`: usage, owed and delivered up the budget tree, across clusters.

Reads the journal of every cluster (`--kafka`, `--data DIR` or `--journal FILE`; unlike
the other read-side commands, all clusters by default, `--cluster` to pick some) and
prints `projections.rollup` as a tree with the lab total on top.
"""

from __future__ import annotations

from typing import Annotated

import typer

from allot.commands.common import DataOpt, JournalOpt, KafkaOpt, SubtreeOpt, TargetError, UntilOpt
from allot.commands.views import print_table

# rich, orjson and the projection are imported where they are used (start-up time)

CLUSTER_NAMES_SHOWN = 4  # more clusters than this: the CLUSTERS column shows a count


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    return typer.Exit(2)


def _gpu_h(seconds: float) -> str:
    return f"{seconds / 3600.0:,.1f}"


def _ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def rollup(
    kafka: KafkaOpt = None,
    data: DataOpt = None,
    journal: JournalOpt = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            "-S",
            help="From: an ISO date/time (UTC), e.g. 2026-01-01, or a duration before the "
            "latest record, e.g. 7d (default: the usage window before --until).",
            show_default=False,
        ),
    ] = None,
    until: UntilOpt = None,
    cluster: Annotated[
        list[str] | None,
        typer.Option(
            "--cluster",
            help="Only this cluster; repeat for several (default: every cluster in the journal).",
            show_default=False,
        ),
    ] = None,
    allocation: SubtreeOpt = None,
    depth: Annotated[
        int | None,
        typer.Option(
            "--depth",
            min=0,
            help="Show this many levels below the top shown: the roots, or the -a "
            "allocation (0: that top only; `-a lab --depth 1`: lab and its children).",
        ),
    ] = None,
    by_cluster: Annotated[
        bool, typer.Option("--by-cluster", help="Under each allocation, a line per cluster.")
    ] = False,
    json_: Annotated[bool, typer.Option("--json", help="Machine-readable JSON on stdout.")] = False,
) -> None:
    """The budget tree rolled up across clusters: one number for the whole lab.

    For every allocation (leaves and every ancestor) and for the lab as a whole, over
    the range (default: the usage window ending at the latest record, not at the last
    usage bucket edge as `allot shares` counts it for ratios): CHARGED GPU-hours
    (allocated time; = received), OWED GPU-hours (per cluster and hour min(share x
    healthy capacity, demand), summed), DELIVERED and DEMAND GPU-hours (pending + running
    allocated work). Every GPU-hour column is a sum over clusters and over children;
    DELIVERED is computed from sums, never averaged: met / owed, with met = min(received,
    owed) per cluster and leaf (so a surplus on one cluster does not pay what another
    owes; for a leaf on one cluster it is min(1, received / owed)). CLUSTERS: where the allocation has a budget or work.
    """
    from projections.rollup import Rollup, RollupError
    from streams.sources import SourceError, journal_lines

    try:
        from allot.commands.common import read_target, say_if_cut

        target = read_target(kafka, data, journal)
        wanted = sorted(set(cluster)) if cluster else None
        folder = Rollup(wanted)
        lines = journal_lines(
            kafka=target.kafka,
            data=target.data,
            journal=target.journal,
            # one cluster: let the source filter (Kafka by key); else read them all
            cluster=wanted[0] if wanted and len(wanted) == 1 else None,
        )
        folder.apply_lines(lines)
        say_if_cut(lines)
        result = folder.result(since=since, until=until)
        rows = result.rows(depth=depth, allocation=allocation)
    except (TargetError, SourceError, RollupError) as why:
        raise _fail(str(why)) from None
    except OSError as why:
        raise _fail(f"cannot read the journal: {why}") from None

    import orjson

    if json_:
        payload = result.as_json(depth=depth, allocation=allocation)
        typer.echo(orjson.dumps(payload, option=orjson.OPT_INDENT_2).decode())
        return

    from rich.table import Table
    from rich.text import Text

    names = sorted(result.clusters)

    def clusters_cell(present: set[str]) -> str:
        if not present:
            return ""
        if len(names) > CLUSTER_NAMES_SHOWN:
            return f"{len(present)}/{len(names)}"
        return ",".join(sorted(present))

    from projections.rollup import iso

    def when(t: float) -> str:
        return (iso(t) or "?").replace("T", " ").removesuffix("Z")

    span = f"{when(result.since)} → {when(result.until)} UTC"
    if result.window is not None:
        from domain.durations import format_duration

        span += f" (window {format_duration(result.window)})"
    title = f"lab roll-up · {len(names)} cluster{'s' if len(names) != 1 else ''} · {span}"
    table = Table(box=None, header_style="bold", pad_edge=False)
    for header, justify in (
        ("ALLOCATION", "left"),
        ("CLUSTERS", "left"),
        ("CHARGED GPU-h", "right"),
        ("OWED GPU-h", "right"),
        ("DELIVERED", "right"),
        ("DEMAND GPU-h", "right"),
    ):
        table.add_column(header, justify=justify, no_wrap=True, min_width=len(header))  # type: ignore[arg-type]

    def add(label: str, present: set[str], a, style: str | None) -> None:
        table.add_row(
            Text(label),
            clusters_cell(present),
            _gpu_h(a.charged),
            _gpu_h(a.owed),
            _ratio(a.delivered),
            _gpu_h(a.demand),
            style=style,
        )

    def per_cluster(indent: int, amounts: dict) -> None:
        if not by_cluster:
            return
        for name in sorted(amounts):
            add("  " * indent + f"@ {name}", set(), amounts[name], "dim")

    if allocation is None:
        add("TOTAL", set(names), result.total, "bold")
        per_cluster(1, {c: info.amounts for c, info in result.clusters.items()})
    base = rows[0].depth if rows else 0
    for node in rows:
        indent = node.depth - base
        label = "  " * indent + (node.name if indent else node.path)
        add(label, node.clusters, node.amounts, None if node.leaf else "bold")
        per_cluster(indent + 1, node.by_cluster)

    print_table(title, table)
    if not rows:
        typer.echo("no allocations in the journal: `allot budget set PATH WEIGHT` creates them")


def register(app: typer.Typer) -> None:
    app.command("rollup")(rollup)

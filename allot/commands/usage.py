"""`allot usage`: the per-allocation usage and entitlement table, resumable.

Over the whole journal by default: from a journal file (`--journal`, `--data`) the saved
table remembers its byte offset; from Kafka (`--kafka`) it remembers, per partition of
the journal topic, the offset of the last record read. Either way the next run folds
only what is new. With `--since`/`--until` it reads the journal through and folds that
range alone, split exactly at its edges, as `allot rollup` does (no table is kept).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from allot.commands.common import (
    DataOpt,
    JournalOpt,
    KafkaOpt,
    ReadClusterOpt,
    UntilOpt,
    plural,
)
from allot.commands.views import AllocationsOpt


def usage(
    data: DataOpt = None,
    journal: JournalOpt = None,
    kafka: KafkaOpt = None,
    cluster: ReadClusterOpt = None,
    state: Annotated[
        Path | None,
        typer.Option(
            help="Keep the table here between runs (default: next to the journal file; "
            "for Kafka ./allot-usage.CLUSTER[$ALLOT_TOPIC_SUFFIX].kafka-state)."
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            "-S",
            help="From: an ISO date/time (UTC), e.g. 2026-01-01, or a duration before the "
            "latest record, e.g. 7d for the usage window `allot shares` counts (default: "
            "the journal's first record).",
            show_default=False,
        ),
    ] = None,
    until: UntilOpt = None,
    allocation: AllocationsOpt = None,
    hourly: Annotated[
        bool, typer.Option("--hourly", help="One row per allocation and hour.")
    ] = False,
    as_json: Annotated[
        bool,
        typer.Option(
            "--json",
            help="Machine-readable output: GPU-hours in *_gpu_h fields (the hourly rows "
            "too), times as ISO UTC (`hour`, `since`, `until`) and epoch seconds "
            "(`hour_time`).",
        ),
    ] = False,
) -> None:
    """Usage, demand, owed and delivered per allocation, over the whole journal or a
    range (like sreport: the period is said in the title).

    GPU-hours charged and unallocated, demand, owed, received and delivered per
    allocation (owed per hour = min(share x healthy capacity, demand); delivered =
    received / owed). The period is the whole journal unless --since/--until say
    otherwise, so on a journal longer than the usage window it is more than `allot
    shares` counts: `--since 7d` (the window's length) gives `allot rollup`'s default
    range and its numbers. The whole-journal table is folded incrementally: it is
    saved with where it stopped in the journal (a file's offset, or each Kafka
    partition's), so the next run reads only what was appended. A range is read
    afresh and split exactly at its edges."""
    if since is not None or until is not None:
        _usage_in_range(data, journal, kafka, cluster, since, until, allocation, hourly, as_json)
        return
    from allot.commands.common import say_if_cut
    from projections.usage_store import (
        KafkaResumableUsage,
        ResumableUsage,
        UsageStoreError,
    )
    from streams.sources import NO_JOURNAL_GIVEN, JournalChanged, SourceError

    store: ResumableUsage | KafkaResumableUsage
    try:
        if data is not None or journal is not None:
            path = journal if journal is not None else data / "journal.jsonl"  # type: ignore[operator]
            # a file is read whole unless --cluster picks one of its clusters (as the
            # views do); a table per cluster, each kept in its own state file
            suffix = f".{cluster}.usage" if cluster else ".usage"
            state_path = state or path.with_name(path.name + suffix)
            store = ResumableUsage.open(state_path, path, cluster)
            new = store.update()
            label = f"{path} cluster {cluster}" if cluster else str(path)
        elif kafka:
            from streams.sources import kafka_batches

            wanted = cluster or "default"
            from streams import topics

            # another ALLOT_TOPIC_SUFFIX is another journal: its own table
            state_path = state or Path(f"allot-usage.{wanted}{topics.SUFFIX}.kafka-state")
            store = KafkaResumableUsage.open(state_path, wanted)
            new = store.update(kafka_batches(kafka, wanted, store.positions))
            label = f"kafka {kafka} cluster {wanted}"
        else:
            typer.echo(f"error: {NO_JOURNAL_GIVEN}", err=True)
            raise typer.Exit(2)
        store.save(state_path)
        say_if_cut(store)
    except (UsageStoreError, SourceError) as why:
        hint = ""
        if isinstance(why, JournalChanged):  # the table is another journal's
            hint = f"; the table in {state_path} is kept: give this journal another --state FILE"
        typer.echo(f"error: {why}{hint}", err=True)
        raise typer.Exit(2) from None
    except OSError as why:
        typer.echo(f"error: cannot keep the usage table: {why}", err=True)
        raise typer.Exit(2) from None
    lo, hi = store.projection.period()
    _report(
        _selected(store.rows(), allocation, store.projection.tree.nodes),
        hourly,
        as_json,
        lo,
        hi,
        "the whole journal" + (f", {_span(lo, hi)}" if lo is not None else ""),
        f"from {label} ({plural(store.records, 'record')}, {new:,} new)",
        _window(store.projection.config),
    )


def _usage_in_range(
    data: Path | None,
    journal: Path | None,
    kafka: str | None,
    cluster: str | None,
    since: str | None,
    until: str | None,
    allocation: str | None,
    hourly: bool,
    as_json: bool,
) -> None:
    """The table of [since, until] alone: the journal read through and folded as `allot
    rollup` folds a cluster, so over the same range the two give the same numbers."""
    from allot.commands.common import TargetError, read_target, say_if_cut
    from projections.rollup import Rollup, RollupError
    from streams.sources import SourceError, journal_lines

    try:
        target = read_target(kafka, data, journal)
        folder = Rollup([cluster] if cluster else None)
        lines = journal_lines(
            kafka=target.kafka, data=target.data, journal=target.journal, cluster=cluster
        )
        folder.apply_lines(lines)
        say_if_cut(lines)
        folder.require_wanted()
        names = folder.cluster_names
        if len(names) > 1:
            raise RollupError(
                f"the journal holds records of clusters {', '.join(map(repr, names))}; "
                "pick one with --cluster"
            )
        name = names[0] if names else None
        first = folder.first(name) if name is not None else None
        lo, hi, _ = folder.bounds(since=since, until=until, default_since=first)
        proj = folder.projection(name, lo, hi)  # type: ignore[arg-type]
    except (TargetError, SourceError, RollupError) as why:
        typer.echo(f"error: {' '.join(str(why).split())}", err=True)
        raise typer.Exit(2) from None
    except OSError as why:
        typer.echo(f"error: cannot read the journal: {why}", err=True)
        raise typer.Exit(2) from None
    if target.kafka:
        where = f"kafka {target.kafka}"
    else:
        where = str(target.journal or target.data / "journal.jsonl")  # type: ignore[operator]
    where += f" cluster {cluster}" if cluster else ""
    _report(
        _selected(proj.hourly_rows(), allocation, proj.tree.nodes),
        hourly,
        as_json,
        lo,
        hi,
        _span(lo, hi),
        f"from {where} ({plural(folder.records, 'record')} read)",
        None,
    )


def _selected(rows: list[dict[str, Any]], text: str | None, tree: Any) -> list[dict[str, Any]]:
    """The rows of -A's allocations and those under them (as `allot queue -A` selects);
    an allocation neither in the budget tree nor in any row is a typo: exit 2."""
    if text is None:
        return rows
    from allot.commands.views import allocation_paths, unknown_allocation
    from projections.views import matches_allocation

    known = {*tree, *(row["allocation"] for row in rows)}
    paths = allocation_paths(text, known.__contains__)
    unknown = unknown_allocation(paths, known)
    if unknown is not None:
        typer.echo(
            f"error: -A {unknown}: no such allocation in the journal (`allot shares` lists them)",
            err=True,
        )
        raise typer.Exit(2)
    return [row for row in rows if matches_allocation(row["allocation"], paths)]


def _report(
    hourly_rows: list[dict[str, Any]],
    hourly: bool,
    as_json: bool,
    lo: float | None,
    hi: float | None,
    period: str,
    source: str,
    window: float | None,
) -> None:
    """Print (or --json) the hourly rows, or their sums over the period; `window`: say
    how to get the usage window's range instead (of a period the user did not pick)."""
    from projections.rollup import iso

    if hourly:
        rows = [_in_hours(row) for row in hourly_rows]
    else:
        totals: dict[str, dict[str, float]] = {}
        for row in hourly_rows:
            acc = totals.setdefault(row["allocation"], {})
            for key, value in row.items():
                if key.endswith("_gpu_s"):
                    acc[key] = acc.get(key, 0.0) + value
        rows = [
            {
                "allocation": name,
                **{k.replace("_gpu_s", "_gpu_h"): round(v / 3600, 3) for k, v in acc.items()},
                "delivered": (
                    round(min(1.0, acc.get("received_gpu_s", 0) / acc["owed_gpu_s"]), 4)
                    if acc.get("owed_gpu_s")
                    else None
                ),
                "since": iso(lo),
                "until": iso(hi),
            }
            for name, acc in sorted(totals.items())
        ]
    import orjson

    if as_json:
        typer.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return
    if not rows:
        typer.echo(f"no usage in {period} {source}")
        return
    _print_usage(rows, hourly, f"over {period} {source}", window)


def _in_hours(row: dict[str, Any]) -> dict[str, Any]:
    """An hourly row as --json gives it: GPU-hours (`*_gpu_h`, as the period rows), the
    hour as ISO UTC (`hour`) and epoch seconds (`hour_time`)."""
    from projections.rollup import iso

    out: dict[str, Any] = {"allocation": row["allocation"], "hour": iso(row["hour"])}
    out["hour_time"] = row["hour"]
    for key, value in row.items():
        if key.endswith("_gpu_s"):
            out[key.replace("_gpu_s", "_gpu_h")] = round(value / 3600, 3)
    return out


def _span(lo: float, hi: float | None) -> str:
    """`2026-01-10 00:00 → 2026-01-12 00:00 UTC (2d)`."""
    from domain.durations import format_duration

    hi = lo if hi is None else hi
    return f"{_hour(lo)} → {_hour(hi)} UTC ({format_duration(max(0.0, hi - lo))})"


def _window(config: dict[str, Any]) -> float:
    """The usage window of a journaled config (the default if none or unreadable)."""
    from domain.durations import parse_duration
    from projections.rollup import DEFAULT_WINDOW

    try:
        return parse_duration(config.get("window", DEFAULT_WINDOW))
    except ValueError:
        return DEFAULT_WINDOW


# (header, key in a row; GPU-hours, `{key}_gpu_h`)
_COLUMNS = (
    ("CHARGED", "charged"),
    ("UNALLOC", "unallocated"),
    ("DEMAND", "demand"),
    ("OWED", "owed"),
    ("ENTITLED", "entitled"),
)
LEGEND = (
    "UNALLOC: ran unallocated, not charged · ENTITLED: share × healthy capacity, over "
    "the hours it had work (an hour without any owes nothing) · OWED: min(ENTITLED, "
    "DEMAND of work with min_runtime > 0), hour by hour{delivered} · --json has every field"
)


def gpu_hours(value: float | None) -> str:
    """One decimal with thousands separators; below 0.1 (but not zero) three decimals:
    a few GPU-minutes read `0.0` beside a DELIVERED of 0.729 computed from them."""
    if value is None:
        return "—"
    if 0 < abs(value) < 0.1:
        return f"{value:.3f}"
    return f"{value:,.1f}"


def _print_usage(
    rows: list[dict[str, Any]], hourly: bool, source: str, window: float | None
) -> None:
    """The table at its natural width, as the views print theirs (allocation paths and
    numbers are never cut): GPU-hours with one decimal and thousands separators,
    fractions with three decimals. RECEIVED, always equal to CHARGED, is left to --json."""
    from rich.console import Console
    from rich.table import Table

    from allot.commands.views import print_table

    table = Table(box=None, header_style="bold", pad_edge=False)
    headers = ["ALLOCATION", *(["HOUR (UTC)"] if hourly else [])]
    headers += [h for h, _ in _COLUMNS] + ([] if hourly else ["DELIVERED"])
    for header in headers:
        left = header in ("ALLOCATION", "HOUR (UTC)")
        table.add_column(
            header, justify="left" if left else "right", no_wrap=True, min_width=len(header)
        )
    for row in rows:
        cells = [row["allocation"]]
        if hourly:
            cells.append(_hour(row["hour_time"]))
        cells += [gpu_hours(row.get(f"{key}_gpu_h")) for _, key in _COLUMNS]
        if not hourly:
            delivered = row.get("delivered")
            cells.append("—" if delivered is None else f"{delivered:.3f}")
        table.add_row(*cells)
    what = "usage per hour" if hourly else "usage"
    print_table(f"{what} in GPU-hours {source}", table)
    delivered = "" if hourly else " · DELIVERED: CHARGED / OWED, at most 1"
    Console(highlight=False).print(LEGEND.format(delivered=delivered), style="dim")
    if window is None:
        return
    from domain.durations import format_duration

    length = format_duration(window)
    Console(highlight=False).print(
        f"`allot shares` counts the {length} usage window and `allot rollup` defaults to "
        f"it: --since {length} for the same range",
        style="dim",
    )


def _hour(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")


def register(app: typer.Typer) -> None:
    app.command("usage")(usage)

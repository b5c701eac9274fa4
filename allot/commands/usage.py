"""`allot usage`: the per-allocation usage and entitlement table, resumable.

From a journal file (`--journal`, `--data`) the saved table remembers its byte offset;
from Kafka (`--kafka`) it remembers, per partition of the journal topic, the offset
of the last record read. Either way the next run folds only what is new.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from allot.commands.common import DataOpt, JournalOpt, KafkaOpt, ReadClusterOpt


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
    hourly: Annotated[
        bool, typer.Option("--hourly", help="One row per allocation and hour.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Usage, demand, owed and delivered per allocation; each run reads only what was
    appended since the last.

    GPU-hours charged and unallocated, demand, owed, received and delivered per
    allocation (owed per hour = min(share x healthy capacity, demand); delivered =
    received / owed), folded incrementally: the table is saved with where it
    stopped in the journal (a file's offset, or each Kafka partition's), so the next
    run reads only what was appended."""
    from allot.commands.common import say_if_cut
    from projections.usage_store import (
        KafkaResumableUsage,
        ResumableUsage,
        UsageStoreError,
    )
    from streams.sources import JournalChanged, SourceError

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
            typer.echo(
                "error: say where the journal is: --kafka HOST:PORT (or $ALLOT_KAFKA), "
                "--data DIR or --journal FILE",
                err=True,
            )
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
    rows = store.rows()
    if not hourly:
        totals: dict[str, dict[str, float]] = {}
        for row in rows:
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
            }
            for name, acc in sorted(totals.items())
        ]
    import orjson

    if as_json:
        typer.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return
    if not rows:
        typer.echo(f"no usage yet in {label} ({store.records:,} records, {new:,} new)")
        return
    _print_usage(rows, hourly, f"from {label} ({store.records:,} records, {new:,} new)")


# (header, key in a row; the hourly rows' keys end in _gpu_s, the period rows' in _gpu_h)
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


def _print_usage(rows: list[dict[str, Any]], hourly: bool, source: str) -> None:
    """The table at its natural width, as the views print theirs (allocation paths and
    numbers are never cut): GPU-hours with one decimal and thousands separators,
    fractions with three decimals. RECEIVED, always equal to CHARGED, is left to --json."""
    from rich.console import Console
    from rich.table import Table

    from allot.commands.views import print_table

    def gpu_h(value: float | None) -> str:
        return "—" if value is None else f"{value:,.1f}"

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
            cells.append(_hour(row["hour"]))
            cells += [gpu_h(row[f"{key}_gpu_s"] / 3600.0) for _, key in _COLUMNS]
        else:
            cells += [gpu_h(row.get(f"{key}_gpu_h")) for _, key in _COLUMNS]
            delivered = row.get("delivered")
            cells.append("—" if delivered is None else f"{delivered:.3f}")
        table.add_row(*cells)
    what = "usage per hour" if hourly else "usage"
    print_table(f"{what} in GPU-hours {source}", table)
    delivered = "" if hourly else " · DELIVERED: CHARGED / OWED, at most 1"
    Console(highlight=False).print(LEGEND.format(delivered=delivered), style="dim")


def _hour(t: float) -> str:
    from datetime import UTC, datetime

    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")


def register(app: typer.Typer) -> None:
    app.command("usage")(usage)

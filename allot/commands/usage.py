"""`allot usage`: the per-allocation usage and entitlement table, resumable."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import orjson
import typer
from rich.console import Console
from rich.table import Table

from allot.commands.common import DataOpt, JournalOpt


def usage(
    data: DataOpt = None,
    journal: JournalOpt = None,
    state: Annotated[
        Path | None,
        typer.Option(help="Keep the table here between runs (default: next to the journal)."),
    ] = None,
    hourly: Annotated[
        bool, typer.Option("--hourly", help="One row per allocation and hour.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """GPU-hours charged and unallocated, demand, owed, received and delivered per
    allocation (DESIGN §2), folded incrementally: the table is saved with its journal
    offset, so the next run reads only what was appended."""
    from projections.usage_store import ResumableUsage, UsageStoreError

    if (data is None) == (journal is None):
        typer.echo("error: give exactly one of --data DIR or --journal FILE", err=True)
        raise typer.Exit(2)
    path = journal if journal is not None else data / "journal.jsonl"  # type: ignore[operator]
    state_path = state or path.with_name(path.name + ".usage")
    try:
        store = ResumableUsage.open(state_path, path)
        new = store.update()
        store.save(state_path)
    except UsageStoreError as why:
        typer.echo(f"error: {why}", err=True)
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
    if as_json:
        typer.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return
    console = Console()
    if not rows:
        console.print(f"no usage yet in {path}")
        return
    unit = "GPU-seconds" if hourly else "GPU-hours"
    table = Table(title=f"usage in {unit} from {path} ({store.records:,} records, {new:,} new)")
    for column in rows[0]:
        label = column.replace("_gpu_h", "").replace("_gpu_s", "")
        table.add_column(label, justify="left" if column == "allocation" else "right")
    for row in rows:
        table.add_row(*("—" if v is None else str(v) for v in row.values()))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("usage")(usage)

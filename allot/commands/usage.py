"""`allot usage`: the per-allocation usage and entitlement table, resumable.

From a journal file (`--journal`, `--data`) the saved table remembers its byte offset;
from Kafka (`--kafka`) it remembers, per partition of the journal topic, the offset
of the last record read. Either way the next run folds only what is new.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from allot.commands.common import ClusterOpt, DataOpt, JournalOpt, KafkaOpt


def usage(
    data: DataOpt = None,
    journal: JournalOpt = None,
    kafka: KafkaOpt = None,
    cluster: ClusterOpt = None,  # type: ignore[assignment]
    state: Annotated[
        Path | None,
        typer.Option(
            help="Keep the table here between runs (default: next to the journal file; "
            "for Kafka ./allot-usage.CLUSTER.kafka-state)."
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
    allocation (DESIGN §2), folded incrementally: the table is saved with where it
    stopped in the journal (a file's offset, or each Kafka partition's), so the next
    run reads only what was appended."""
    from projections.usage_store import (
        KafkaResumableUsage,
        ResumableUsage,
        UsageStoreError,
    )
    from streams.sources import SourceError

    if data is not None and journal is not None:
        typer.echo("error: give one of --data DIR, --journal FILE or --kafka HOST:PORT", err=True)
        raise typer.Exit(2)
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
            state_path = state or Path(f"allot-usage.{wanted}.kafka-state")
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
    except (UsageStoreError, SourceError) as why:
        typer.echo(f"error: {why}", err=True)
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
    from rich.console import Console
    from rich.table import Table

    if as_json:
        typer.echo(orjson.dumps(rows, option=orjson.OPT_INDENT_2).decode())
        return
    console = Console()
    if not rows:
        console.print(f"no usage yet in {label} ({store.records:,} records, {new:,} new)")
        return
    unit = "GPU-seconds" if hourly else "GPU-hours"
    table = Table(title=f"usage in {unit} from {label} ({store.records:,} records, {new:,} new)")
    for column in rows[0]:
        label = column.replace("_gpu_h", "").replace("_gpu_s", "")
        table.add_column(label, justify="left" if column == "allocation" else "right")
    for row in rows:
        table.add_row(*("—" if v is None else str(v) for v in row.values()))
    console.print(table)


def register(app: typer.Typer) -> None:
    app.command("usage")(usage)

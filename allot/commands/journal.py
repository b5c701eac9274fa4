"""allot journal commands: `allot journal export`, the journal copied to a file (a backup).

The file has the format of a simulation's `journal.jsonl` and of the embedded
`DIR/journal.jsonl`: one record a line, each record's bytes as the journal holds them.
So every reader takes it (`--journal FILE`, `allot replay FILE --verify`), and an
embedded folder can be restored from it (README, "Backing up the journal").
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, BinaryIO

import typer

from allot.commands.common import DataOpt, KafkaOpt, TargetError, plural

journal_app = typer.Typer(
    name="journal",
    help="Copy the journal out of Kafka or a --data folder (a backup you can replay).",
    no_args_is_help=True,
)


@journal_app.command("export")
def export(
    out: Annotated[
        Path,
        typer.Option(
            "--out",
            "-o",
            help="File to write (replaced only once the copy is complete; '-': stdout).",
        ),
    ],
    kafka: KafkaOpt = None,
    data: DataOpt = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            help="Only this cluster's records (default $ALLOT_CLUSTER, as every command's; "
            "unset or empty: every cluster in the journal).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Copy the journal, as it is now, to a file: a backup, or a journal to replay elsewhere.

    Every committed record up to the journal's end as of the start of the copy, oldest
    first, one a line, byte for byte (the format of `allot simulate`'s journal.jsonl and
    of a --data folder's journal.jsonl). Read it back with any read command's --journal
    FILE, check it with `allot replay FILE --verify`, or restore an embedded scheduler
    from it: copy it to DIR/journal.jsonl and `allot serve --data DIR`. A copy that
    cannot reach the end (the broker stopped answering) is an error, and FILE is left as
    it was.
    """
    from allot.commands.common import read_target
    from streams import topics
    from streams.sources import SourceError, journal_lines

    # $ALLOT_CLUSTER as every command reads it (README), said on the last line when it
    # narrowed the copy: a backup meant to hold every cluster should not shrink unseen
    from_env = cluster is None and bool(os.environ.get("ALLOT_CLUSTER"))
    if cluster is None:
        cluster = os.environ.get("ALLOT_CLUSTER") or None
    try:
        target = read_target(kafka, data, None)
        lines = journal_lines(kafka=target.kafka, data=target.data, cluster=cluster, whole=True)
        if str(out) == "-":
            count = _write(lines, sys.stdout.buffer)
        else:
            count = _write_replacing(lines, out)
    except (TargetError, SourceError) as why:
        print(f"error: {why}; nothing exported", file=sys.stderr)
        raise typer.Exit(2) from None
    except OSError as why:
        print(f"error: cannot write {out}: {why}", file=sys.stderr)
        raise typer.Exit(2) from None
    source = (
        f"{topics.JOURNAL} at {target.kafka}" if target.kafka else f"{target.data}/journal.jsonl"
    )
    which = f" of cluster {cluster}" if cluster else ""
    if from_env:
        which += " ($ALLOT_CLUSTER; unset it for every cluster)"
    where = "stdout" if str(out) == "-" else str(out)
    print(f"exported {plural(count, 'record')}{which} from {source} to {where}", file=sys.stderr)


def _write(lines: Iterable[bytes], stream: BinaryIO) -> int:
    count = 0
    for line in lines:
        stream.write(line)
        stream.write(b"\n")
        count += 1
    stream.flush()
    return count


def _write_replacing(lines: Iterable[bytes], out: Path) -> int:
    """Write to OUT.partial, then rename it over OUT: a failed copy leaves OUT as it was."""
    partial = out.with_name(out.name + ".partial")
    try:
        with partial.open("wb") as f:
            count = _write(lines, f)
            os.fsync(f.fileno())
        partial.replace(out)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return count


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `allot` app."""
    app.add_typer(journal_app, name="journal")

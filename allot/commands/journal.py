"""allot journal commands: `allot journal export`, the journal copied to a file (a backup),
and `allot journal restore`, such a file written into a new Kafka topic set.

The file has the format of a simulation's `journal.jsonl` and of the embedded
`DIR/journal.jsonl`: one record a line, each record's bytes as the journal holds them.
So every reader takes it (`--journal FILE`, `allot replay FILE --verify`), and an
embedded folder or a new Kafka deployment can be restored from it (README, "Backing up
the journal").
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, BinaryIO

import typer

from allot.commands.common import (
    AsOpt,
    DataOpt,
    KafkaOpt,
    TargetError,
    ends_mid_line,
    plural,
    resolve_target,
    whoami,
)

journal_app = typer.Typer(
    name="journal",
    help="Copy the journal out of Kafka or a --data folder (a backup you can replay), "
    "or restore such a copy into new Kafka topics.",
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
    FILE, check it with `allot replay FILE --verify`, restore it into new Kafka topics
    with `allot journal restore FILE --kafka HOST:PORT`, or restore an embedded scheduler
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


@journal_app.command("restore")
def restore(
    file: Annotated[
        Path,
        typer.Argument(help="A journal file (`allot journal export`'s copy).", show_default=False),
    ],
    kafka: KafkaOpt = None,
    actor: AsOpt = None,
) -> None:
    """Write an exported journal into a new Kafka topic set, for `allot serve --kafka` to
    go on from (after the broker's data was lost, or to move to another broker).

    Run it on new topics (`allot topics create`, with the new deployment's
    ALLOT_TOPIC_SUFFIX) with no scheduler running on them; then start `allot serve
    --kafka` (or `faust -A streams.app worker`) there. The records are copied byte for
    byte, each cluster's followed by a `journal.restored` record: the scheduler reads
    the new inbox from its start, so requests sent there (even before the restore) are
    decided once each, after the copy, as the old scheduler would have. Requests sent to
    the old deployment after the export are not in the copy: send them again.

    Refused, writing nothing, when the journal, snapshot or dead-letter topic already
    holds records, the inbox is the old one the journal was read from (its requests
    would all be taken again), or a scheduler runs on the topics. One transaction: a restore that
    fails half way leaves the journal empty, to be run again.
    """
    import asyncio  # here, not at the top: every other command starts without it

    from aiokafka.errors import KafkaError

    from projections.journal import JournalError, decode_record, iter_lines, journal_file
    from streams import kafka_auth, topics
    from streams.codec import load_object
    from streams.restore import RestoreError, group_by_cluster, restore_to_kafka
    from streams.topic_admin import Topics
    from streams.worker_errors import BrokerUnavailable

    try:
        if not kafka:
            raise TargetError(
                "say where the new topics are: --kafka HOST:PORT (or $ALLOT_KAFKA); a --data "
                "folder is restored by copying FILE to DIR/journal.jsonl"
            )
        target = resolve_target(kafka, None)
        path = journal_file(file)
        if ends_mid_line(path):
            raise JournalError(
                f"{path} ends in the middle of a line: not a complete export; export again"
            )
        copies = group_by_cluster(
            (line, decode_record(path, number, line), load_object(line).get("inbox"))
            for number, line in iter_lines(path)
        )
        assert target.kafka is not None
        done = asyncio.run(
            restore_to_kafka(
                target.kafka,
                copies,
                topics=Topics(),
                restored_at=time.time(),
                actor=whoami(actor),
                source=path.name,
                kafka_options=kafka_auth.client_options(),
            )
        )
    except (
        TargetError,
        JournalError,
        RestoreError,
        BrokerUnavailable,
        kafka_auth.KafkaAuthError,
    ) as why:
        print(f"error: {why}", file=sys.stderr)
        raise typer.Exit(2) from None
    except KafkaError as why:  # e.g. an ACL refusal, or the broker gone mid-way
        reason = kafka_auth.describe_error(why) or str(why) or type(why).__name__
        print(
            f"error: Kafka at {target.kafka}: {reason}; nothing was restored (the "
            "transaction was not committed: run it again)",
            file=sys.stderr,
        )
        raise typer.Exit(2) from None
    which = ", ".join(done.clusters)
    waiting = (
        f"; {plural(done.waiting, 'request')} already in {topics.INBOX} will be decided after it"
        if done.waiting
        else ""
    )
    print(
        f"restored {plural(done.records, 'record')} of {plural(len(done.clusters), 'cluster')} "
        f"({which}) from {path} into {topics.JOURNAL} at {target.kafka}{waiting}; start the "
        f"scheduler there ({serve_hint(target.kafka, done.clusters)}): it reads "
        f"{topics.INBOX} from its start",
        file=sys.stderr,
    )


def serve_hint(kafka: str, clusters: Sequence[str]) -> str:
    """The `allot serve` that goes on from a restore of `clusters`. Without --cluster,
    serve serves $ALLOT_CLUSTER, else 'default': named otherwise, the hint said a
    command that left the restored cluster unserved."""
    serve = f"allot serve --kafka {kafka}"
    served = os.environ.get("ALLOT_CLUSTER") or "default"
    if list(clusters) in ([], [served]):
        return f"`{serve}`"
    if len(clusters) == 1:
        return f"`{serve} --cluster {clusters[0]}`"
    return f"`{serve} --group allot-scheduler`: a group's workers serve every cluster"


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

"""`allot dashboard`: the journal's projections as a small offline web app.

Reads the journal from Kafka (`--kafka`, default `$ALLOT_KAFKA`), the embedded folder
(`--data DIR`) or a file (`--journal FILE`), like `allot queue`; pages and their
behaviour are described in `projections.dashboard`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer

from allot.commands.common import (
    HORIZON_DEFAULT,
    DataOpt,
    HorizonOpt,
    JournalOpt,
    KafkaOpt,
    TargetError,
    horizon_seconds,
)


def _fail(message: str) -> NoReturn:
    """One line on stderr (never wrapped), exit code 2."""
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    raise typer.Exit(2)


def register(app: typer.Typer) -> None:
    """Add `dashboard` to the `allot` app."""

    @app.command()
    def dashboard(
        port: Annotated[int, typer.Option("--port", help="TCP port to listen on.")] = 8080,
        host: Annotated[
            str, typer.Option("--host", help="Address to bind (default: this machine only).")
        ] = "127.0.0.1",
        kafka: KafkaOpt = None,
        data: DataOpt = None,
        journal: JournalOpt = None,
        cluster: Annotated[
            str | None,
            typer.Option(
                "--cluster",
                envvar="ALLOT_CLUSTER",
                help="Cluster name (files and --data: all records unless given; Kafka: 'default').",
                show_default=False,
            ),
        ] = None,
        refresh: Annotated[
            float,
            typer.Option(
                "--refresh",
                help="Kafka only: re-read the journal at most every this many seconds.",
            ),
        ] = 5.0,
        horizon: HorizonOpt = HORIZON_DEFAULT,
        quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No request log.")] = False,
    ) -> None:
        """Serve the allocations, queue, GPU timeline and workload pages (/workload/ID:
        `allot why` in a browser; a job array's base id lists its tasks) over HTTP,
        offline: no scripts or assets from the network.

        Pages fold what the journal gained when it changes (a refresh costs what was
        appended, not the whole history). The queue page filters by ?allocation= and
        ?user= and shows ?limit= rows (500 by default, or all). Any page with
        ?refresh=N (5 to 3600) reloads itself every N seconds, for a wall display (a
        number outside is brought into the range; the page says so)."""
        from allot.commands.common import resolve_target
        from projections.dashboard import Dashboard, file_stamp, make_server
        from streams.sources import NO_JOURNAL_GIVEN, journal_lines, journal_tail

        if not 0 < port < 65536:
            _fail(f"--port {port}: use a TCP port between 1 and 65535")
        if journal is not None and journal.is_dir():
            _fail(f"--journal {journal}: a folder; give its journal.jsonl (or use --data)")
        if kafka is None and data is None and journal is None:
            _fail(NO_JOURNAL_GIVEN)
        try:
            target = resolve_target(kafka, data, journal, writable=False)
            horizon_s = horizon_seconds(horizon)
        except TargetError as why:
            _fail(str(why))
        if target.data is not None and not target.data.is_dir():  # a typo: as `allot metrics`
            _fail(
                f"{target.data}: no such folder; start the embedded scheduler with "
                f"`allot serve --data {target.data}` or point --data at its folder"
            )
        wanted = cluster
        if target.kafka and wanted is None:
            wanted = "default"
        path: Path | None = None
        if target.journal is not None:
            path = target.journal
        elif target.data is not None:
            path = target.data / "journal.jsonl"

        def lines():  # type: ignore[no-untyped-def]
            return journal_lines(
                kafka=target.kafka, data=target.data, journal=target.journal, cluster=wanted
            )

        def tail():  # type: ignore[no-untyped-def]
            return journal_tail(
                kafka=target.kafka, data=target.data, journal=target.journal, cluster=wanted
            )

        board = Dashboard(
            lines,
            tail=tail,
            label=target.label + (f" · cluster {wanted}" if wanted else ""),
            stamp=file_stamp(path) if path is not None else None,
            ttl=refresh,
            horizon_s=horizon_s,
        )

        def log(line: str) -> None:
            if not quiet:
                typer.echo(line, err=True)

        try:
            server = make_server(board, host, port, log=log)
        except OSError as why:
            _fail(f"cannot listen on {host}:{port}: {why.strerror or why}")
        bound_host, bound_port = server.server_address[:2]
        typer.echo(f"allot dashboard: http://{bound_host}:{bound_port}/ ({board.label})")
        try:
            server.serve_forever(poll_interval=0.2)
        except KeyboardInterrupt:
            pass
        finally:
            server.server_close()
            board.close()

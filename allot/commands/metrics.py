"""`allot metrics`: serve Prometheus metrics folded from the journal.

    allot metrics --port 9108 --kafka HOST:PORT          # follows the journal topic
    allot metrics --port 9108 --journal out/fairshare/journal.jsonl --no-follow

Reads the journal like `allot queue` does (Kafka, the embedded folder or a file), folds
every record into `projections.metrics.MetricsCollector`, then serves /metrics with
prometheus_client's HTTP server. With --follow (the default) it keeps reading records
as they are appended. The first pass is folded before the server starts, so the first
scrape already sees the whole journal.
"""

from __future__ import annotations

import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from allot.commands.common import (
    DataOpt,
    JournalOpt,
    KafkaOpt,
    ReadClusterOpt,
    TargetError,
    plural,
)

DEFAULT_PORT = 9108


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {' '.join(message.split())}", err=True)
    return typer.Exit(2)


def _decode(lines: Iterator[bytes], skip: int = 0, on_bad: Any = None) -> Iterator[tuple[int, Any]]:
    """(record number, event) for known record types; a corrupt record raises
    ViewError naming it, or with `on_bad` is passed to it and skipped (the first `skip`
    records are not decoded)."""
    from pydantic import ValidationError

    from domain import events as ev
    from domain.upcasting import upcast
    from projections.metrics import KNOWN_TYPES
    from projections.views import ViewError, record_place
    from streams.codec import Undecodable, load_object

    for number, line in enumerate(lines, start=1):
        if number <= skip:
            continue
        try:
            try:
                raw = upcast(load_object(line))
            except Undecodable as why:
                raise ViewError(f"{record_place(lines, number)}: {why}") from None
            if raw.get("type") not in KNOWN_TYPES:
                yield number, None  # a newer writer's record: counted, not folded
                continue
            try:
                event = ev.parse_event(raw)
            except ValidationError as why:
                raise ViewError(
                    f"{record_place(lines, number)}: not a valid {raw.get('type')} record: "
                    f"{ev.describe_validation_error(why)}"
                ) from None
        except ViewError as why:
            if on_bad is None:
                raise
            on_bad(why)
            yield number, None
            continue
        yield number, event


def fold_journal(
    collector: Any,
    *,
    kafka: str | None,
    data: Path | None,
    journal: Path | None,
    cluster: str | None,
    follow: bool,
    skip: int = 0,
    on_bad: Any = None,
) -> int:
    """Fold the journal's records (after the first `skip`) into `collector`; returns
    the number of records read. Following never returns. `on_bad`: see `_decode`."""
    from projections.views import UnintroducedError, record_place
    from streams.sources import journal_lines

    count = skip
    lines = journal_lines(kafka=kafka, data=data, journal=journal, cluster=cluster, follow=follow)
    for number, event in _decode(lines, skip, on_bad):
        count = number
        if event is not None:
            try:
                collector.apply(event)
            except UnintroducedError as why:  # named as a corrupt record is (`_decode`)
                raise why.at(record_place(lines, number)) from None
    return count


def _stop_on_sigterm() -> None:
    """SIGTERM (systemd's and Docker's stop) ends the exporter as Ctrl-C does: the
    server closed, a Kafka reader stopped, exit 0; it was killed by the signal (exit
    143 in `docker compose ps`, no word in the log)."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)


def register(app: typer.Typer) -> None:
    """Add `metrics` to the `allot` app."""

    @app.command("metrics")
    def metrics(
        port: Annotated[
            int, typer.Option("--port", help="Serve /metrics on this TCP port.")
        ] = DEFAULT_PORT,
        bind: Annotated[
            str, typer.Option("--bind", help="Address to listen on (0.0.0.0: every interface).")
        ] = "127.0.0.1",
        follow: Annotated[
            bool,
            typer.Option(
                "--follow/--no-follow",
                help="Keep reading records as the journal grows (default) or serve a fixed fold.",
            ),
        ] = True,
        kafka: KafkaOpt = None,
        data: DataOpt = None,
        journal: JournalOpt = None,
        cluster: ReadClusterOpt = None,
    ) -> None:
        """Serve Prometheus metrics (allot_*) computed from the journal on /metrics.

        GPUs and workloads by state, queue wait by class, preemptions by reason,
        fair-share and delivered ratios per allocation, decisions, decision latency,
        rejected inputs and journal lag. Scrape it with deploy/prometheus/prometheus.yml.
        """
        from prometheus_client import start_http_server

        from allot.commands.common import resolve_target
        from projections.journal import JournalError
        from projections.metrics import MetricsCollector
        from projections.views import ViewError
        from streams.sources import NO_JOURNAL_GIVEN, EmptyJournal, SourceError

        if kafka is None and data is None and journal is None:
            raise _fail(NO_JOURNAL_GIVEN)
        if not 0 < port < 65536:
            raise _fail(f"--port {port}: use a TCP port between 1 and 65535")
        try:
            target = resolve_target(kafka, data, journal, writable=False)
        except TargetError as why:
            raise _fail(str(why)) from None
        if target.kafka and cluster is None:
            cluster = "default"
        where = {"kafka": target.kafka, "data": target.data, "journal": target.journal}
        collector = MetricsCollector()
        collector.data_dir = target.data
        try:
            read = fold_journal(collector, **where, cluster=cluster, follow=False)
        except EmptyJournal as why:
            if not follow:
                raise _fail(str(why)) from None
            read = 0  # nothing yet: serve, and fold records as they come
            typer.echo(f"allot metrics: {why}; serving, and following for them", err=True)
        except (SourceError, ViewError, JournalError) as why:
            raise _fail(str(why)) from None
        except OSError as why:
            raise _fail(f"cannot read the journal: {why}") from None
        try:
            server, _thread = start_http_server(port, addr=bind, registry=collector.registry())
        except OSError as why:
            raise _fail(f"cannot listen on {bind}:{port}: {why}") from None
        typer.echo(
            f"serving metrics of {plural(read, 'journal record')} ({target.label}) on "
            f"http://{bind}:{port}/metrics" + (", following the journal" if follow else ""),
            err=True,
        )
        sys.stderr.flush()
        stop = threading.Event()
        _stop_on_sigterm()
        try:
            if follow:
                # a bad record appended later is skipped, said, and counted: monitoring
                # must not go down with it (the first read refuses one, above)
                def unreadable(why: Exception) -> None:
                    collector.unreadable += 1
                    typer.echo(f"allot metrics: skipped {why}", err=True)

                fold_journal(
                    collector, **where, cluster=cluster, follow=True, skip=read, on_bad=unreadable
                )
            else:
                stop.wait()
        except (SourceError, ViewError, JournalError) as why:
            raise _fail(str(why)) from None
        except KeyboardInterrupt:
            pass
        finally:
            server.shutdown()
            server.server_close()

"""`allot serve`: run the scheduler for one cluster.

`--data DIR`: the embedded loop (no broker) over DIR/inbox.jsonl -> DIR/journal.jsonl,
resuming after the last inbox offset the journal records. `--kafka HOST:PORT`: the
streaming worker (`streams.worker.run_worker`).

Config: without `--config`, `--set`, `--policy` or admins, the scheduler keeps the config
its journal records (defaults when none). With any of them, the config is the defaults
plus those settings, journaled as `config.set` if it differs from the recorded one.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import signal
import time
from pathlib import Path
from typing import Annotated, Any

import typer

from allot.commands.common import ClusterOpt, DataOpt, KafkaOpt, TargetError, resolve_target
from allot.commands.requests import RequestError, one_line_errors
from allot.journald import error_line

IDLE_POLL_S = 0.02  # how often an idle embedded scheduler looks at the inbox
TICKER_ACTOR = "allot-ticker"


class ServeError(RequestError):
    """`allot serve` cannot start: one line for the user, exit 2."""


def _admins(flags: list[str] | None) -> list[str] | None:
    if flags:
        names = [a.strip() for flag in flags for a in flag.split(",")]
    else:
        names = [a.strip() for a in os.environ.get("ALLOT_ADMINS", "").split(",")]
    names = [n for n in names if n]
    return names or None


def _config_file(path: Path) -> dict[str, Any]:
    """--config's keys. Every problem of the file is one line naming it: unreadable, not
    YAML (`FILE:LINE:COL`, as `allot simulate` says it for a scenario), not a mapping, or
    a key or value the config does not take (checked alone, so that the error is the
    file's and not --set's)."""
    from domain.config import ConfigError, SchedulerConfig, parse_config
    from projections.scenario import ScenarioError, load_yaml

    try:
        loaded = load_yaml(path.read_text(encoding="utf-8-sig"), str(path))
    except OSError as why:
        raise ServeError(f"--config {path}: {why.strerror or why}") from None
    except UnicodeDecodeError as why:
        raise ServeError(f"--config {path}: not UTF-8 text ({why.reason})") from None
    except ScenarioError as why:
        raise ServeError(f"--config {why}") from None
    if loaded is None:
        loaded = {}
    if isinstance(loaded, dict) and isinstance(loaded.get("config"), dict):
        loaded = loaded["config"]  # a scenario-style file: its `config:` section
    if not isinstance(loaded, dict):
        raise ServeError(
            f"--config {path}: expected a mapping of config keys "
            f"({', '.join(SchedulerConfig.model_fields)})"
        )
    try:
        parse_config(loaded)
    except ConfigError as why:
        raise ServeError(f"--config {path}: {why}") from None
    return loaded


def build_config(
    config_file: Path | None,
    sets: list[str] | None,
    policy: str | None,
    admins: list[str] | None,
) -> Any:
    """The wanted SchedulerConfig, or None when nothing was asked (keep the journal's)."""
    from allot.plugins import prepare
    from domain.config import ConfigError, parse_config
    from domain.policies import UnknownPolicy, resolve_ordering, resolve_placement
    from projections.simulate import ENGINE_KEYS, SimulationError, split_overrides

    if config_file is None and not sets and policy is None and admins is None:
        return None
    raw: dict[str, Any] = {}
    if config_file is not None:
        raw.update(_config_file(config_file))
    try:
        overrides, engine = split_overrides(sets or [])
    except SimulationError as why:
        raise ServeError(str(why)) from None
    if engine:
        raise ServeError(
            f"--set {', '.join(sorted(engine))}: only the simulator reads "
            f"{', '.join(sorted(ENGINE_KEYS))}"
        )
    raw.update(overrides)
    if policy is not None:
        raw["ordering"] = policy
    if admins is not None:
        raw["admins"] = admins
    try:
        prepare(raw)
        config = parse_config(raw)
        resolve_ordering(config.ordering)
        resolve_placement(config.placement)
    except (ConfigError, UnknownPolicy) as why:
        raise ServeError(str(why)) from None
    return config


def serve(
    kafka: KafkaOpt = None,
    data: DataOpt = None,
    cluster: ClusterOpt = "default",
    admin: Annotated[
        list[str] | None,
        typer.Option(
            "--admin",
            help="May create top-level allocations, register hosts and report their health, set config "
            "(repeatable; default $ALLOT_ADMINS, comma-separated).",
        ),
    ] = None,
    config_file: Annotated[
        Path | None,
        typer.Option(
            "--config",
            metavar="FILE.yaml",
            help="Scheduler config keys (YAML); keys it leaves out keep the journal's values.",
        ),
    ] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            metavar="KEY=VALUE",
            help="Change a config key, e.g. window=3d or health_holddown=30m (hosts that "
            "flap stay cordoned that long after their healthy report; 0, the default: "
            "off); the others keep the journal's values.",
        ),
    ] = None,
    policy: Annotated[
        str | None, typer.Option("--policy", help="Ordering policy (sets `ordering`).")
    ] = None,
    tick: Annotated[
        str,
        typer.Option("--tick", help="Write a clock.tick this often so time moves (0 = never)."),
    ] = "10s",
    once: Annotated[
        bool,
        typer.Option("--once", help="Process what the inbox holds now, then exit (--data)."),
    ] = False,
    batch: Annotated[
        int,
        typer.Option("--batch", min=1, help="Inbox records folded per journal write (--data)."),
    ] = 2000,
    snapshot_every: Annotated[
        str,
        typer.Option(
            "--snapshot-every",
            help="Snapshot the scheduler's state this often while work arrives, so a "
            "restart re-derives only the journal after it (0 = never; --data: "
            "DIR/snapshot.pickle, --kafka: the allot.snapshots topic).",
        ),
    ] = "60s",
    metrics_port: Annotated[
        int | None,
        typer.Option(
            "--metrics-port",
            metavar="PORT",
            help="Serve Prometheus metrics (allot_*) of what the scheduler journals on "
            "http://BIND:PORT/metrics (the faust worker, `faust -A streams.app worker`: "
            "$ALLOT_METRICS_PORT and $ALLOT_METRICS_BIND).",
        ),
    ] = None,
    metrics_bind: Annotated[
        str,
        typer.Option(
            "--metrics-bind", help="Address for --metrics-port (0.0.0.0: every interface)."
        ),
    ] = "127.0.0.1",
    group: Annotated[
        str | None,
        typer.Option(
            "--group",
            metavar="NAME",
            help="Scale out (--kafka): join consumer group NAME; the workers of a group "
            "share the inbox partitions with every cluster on them (not just --cluster), "
            "and a survivor takes a dead worker's partitions over.",
        ),
    ] = None,
) -> None:
    """Run the scheduler: fold the inbox through the domain core into the journal.

    With --kafka it creates no topics: a missing inbox or journal topic (a mistyped
    or forgotten $ALLOT_TOPIC_SUFFIX, or a new deployment) stops it with one line;
    `allot topics create` makes them, once per deployment.

    The config is in the journal: --admin, --policy, --set and --config change the
    keys they name (the others keep the journal's values, or the defaults on a new
    journal), journaled as `config.set` at the first input if that changes anything.
    An admin's later config.set through the inbox stands until the next start.

    SIGTERM or Ctrl-C stops it cleanly: the batch being written is finished (given 10 s
    when the broker is gone), exit 0. Under systemd
    (deploy/systemd/allot-serve.service) its stderr lines carry journald's priorities
    (errors at err, a crash's traceback at crit), for `journalctl -p warning`."""
    from domain.durations import parse_duration

    with one_line_errors():
        try:
            tick_s = parse_duration(tick)
        except ValueError as why:
            raise ServeError(f"--tick {tick!r}: {why}") from None
        try:
            snapshot_s = parse_duration(snapshot_every)
        except ValueError as why:
            raise ServeError(f"--snapshot-every {snapshot_every!r}: {why}") from None
        target = resolve_target(kafka, data)
        config = build_config(config_file, set_, policy, _admins(admin))
        if metrics_port is not None and not 0 < metrics_port < 65536:
            raise ServeError(f"--metrics-port {metrics_port}: use a TCP port between 1 and 65535")
        metrics = (
            JournalMetrics(metrics_port, metrics_bind, target.data)
            if metrics_port is not None
            else None
        )
        if target.data is not None:
            _serve_embedded(
                target.data, cluster, config, tick_s, once, batch, metrics, snapshot_s or None
            )
            return
        if once:
            raise ServeError("--once works with --data DIR (the embedded journal) only")
        if group is not None and not group.strip():
            raise ServeError("--group: give the consumer group a name")
        from streams.inbox import InboxError, parse_bootstrap

        try:
            bootstrap = parse_bootstrap(target.kafka or "")
        except InboxError as why:
            raise ServeError(str(why)) from None
    _serve_kafka(bootstrap, cluster, config, tick_s, metrics, group, snapshot_s)


class JournalMetrics:
    """`--metrics-port`: `projections.metrics.LiveMetrics`, its troubles told as serve's
    one-line errors and warnings."""

    def __init__(self, port: int, bind: str, data: Path | None = None) -> None:
        from projections.metrics import LiveMetrics

        self.port = port
        self.bind = bind
        self.live = LiveMetrics(
            port,
            bind,
            on_bad=lambda why: typer.echo(f"allot serve: warning: {why}", err=True),
            data_dir=data,
        )

    def feed(self, lines: list[bytes], *, recovered: bool = False) -> None:
        self.live.feed(lines, recovered=recovered)

    def ready(self) -> None:
        self.live.ready()

    def start(self) -> None:
        if self.live.server is not None:
            return
        try:
            self.live.start()
        except OSError as why:
            raise ServeError(
                f"--metrics-port {self.port}: cannot listen on {self.bind}:{self.port}: {why}"
            ) from None
        typer.echo(f"allot serve: metrics on http://{self.bind}:{self.port}/metrics", err=True)

    def stop(self) -> None:
        self.live.stop()


def _log_to_stderr() -> None:
    """The worker logs readiness, recovery, take-overs, snapshots and broker trouble;
    without a handler Python drops all of it (aiokafka's chatter only from warnings)."""
    import logging

    from allot.journald import log_to_journal, stream_is_journal

    if not logging.getLogger().handlers:
        logging.basicConfig(
            level=logging.INFO, format="%(asctime)s allot serve %(levelname)s %(name)s: %(message)s"
        )
        if stream_is_journal():  # under systemd: journald's priorities, its own timestamps
            log_to_journal()
        logging.getLogger("aiokafka").setLevel(logging.WARNING)
    from streams.log_repeats import quiet_repeats

    quiet_repeats()  # a broker outage: the same aiokafka error ~60 times a second


def _serve_kafka(
    bootstrap: str,
    cluster: str,
    config: Any,
    tick_s: float,
    metrics: JournalMetrics | None = None,
    group: str | None = None,
    snapshot_s: float = 60.0,
) -> None:
    from aiokafka.errors import KafkaError

    _log_to_stderr()
    try:
        from streams import worker
    except ImportError as why:
        typer.echo(error_line(f"error: the Kafka worker is not available: {why}"), err=True)
        raise typer.Exit(2) from None
    # the worker's own one-line errors (e.g. BrokerUnavailable), if it defines them
    known = tuple(
        cls
        for name in ("BrokerUnavailable", "WorkerError", "KafkaAuthError")
        if isinstance(cls := getattr(worker, name, None), type) and issubclass(cls, Exception)
    )
    options: dict[str, Any] = {}
    if metrics is not None:
        options["on_journal"] = lambda _cluster, lines, **kw: metrics.feed(lines, **kw)
        options["on_ready"] = lambda _worker: metrics.ready()
    try:
        if metrics is not None:
            metrics.start()  # listening now: a port in use fails before any Kafka work
        # one cluster, or (with a group) every cluster on the partitions it is given
        clusters = None if group else [cluster]
        result = worker.run_worker(
            bootstrap,
            config=config,
            clusters=clusters,
            tick_every=tick_s,
            group=group,
            snapshot_every=snapshot_s,  # 0 = no periodic snapshots
            **options,
        )
        if inspect.isawaitable(result):
            import asyncio

            asyncio.run(result)  # type: ignore[arg-type]
    except ServeError as why:
        typer.echo(error_line(f"error: {why}"), err=True)
        raise typer.Exit(2) from None
    except known as why:
        typer.echo(error_line(f"error: {why}"), err=True)
        raise typer.Exit(2) from None
    except (KafkaError, OSError) as why:
        from streams.kafka_clients import unreachable

        typer.echo(error_line(f"error: {unreachable(bootstrap, why)}"), err=True)
        raise typer.Exit(2) from None
    finally:
        if metrics is not None:
            metrics.stop()


def _serve_embedded(
    folder: Path,
    cluster: str,
    config: Any,
    tick_s: float,
    once: bool,
    batch: int,
    metrics: JournalMetrics | None = None,
    snapshot_s: float | None = None,
) -> None:
    from allot.commands.common import plural
    from streams.embedded import DLQ_FILE, EmbeddedError, EmbeddedScheduler, append_requests
    from streams.inbox import make_request

    scheduler = EmbeddedScheduler(
        folder,
        cluster,
        config,
        batch=batch,
        on_journal=metrics.feed if metrics else None,
        snapshot_every=snapshot_s,
    )
    # a folder another serve holds is refused before the metrics URL is said
    scheduler.take_serve_lock()
    try:
        if metrics is not None:
            metrics.start()  # answering while it recovers (a long recovery looked dead)
        recovery = _recover_unless_stopped(scheduler)
    except BaseException:
        scheduler.close()
        if metrics is not None:
            metrics.stop()
        raise
    if recovery is None:
        if metrics is not None:
            metrics.stop()
        typer.echo(
            f"allot serve: stopped while recovering {folder}, before deciding anything; "
            "the next start recovers again (nothing is lost)"
        )
        return
    stop = _StopFlag()
    _install_stop_handlers(stop)  # --once too: SIGTERM's default ended it without a word
    try:
        if metrics is not None:
            metrics.ready()
        repaired = (
            f", {plural(recovery.repaired, 'record')} of a cut-short input re-derived"
            if recovery.repaired
            else ""
        )
        from_snapshot = (
            f" after a snapshot of {recovery.from_snapshot}" if recovery.from_snapshot else ""
        )
        typer.echo(
            f"allot serve: cluster {cluster}, folder {folder}, resumed at inbox offset "
            f"{recovery.resumed_at}, {plural(recovery.folded, 'journal record')} folded"
            f"{from_snapshot}{repaired}"
            + ("" if once else f"; ticking every {tick_s:g} s" if tick_s else "; no ticker")
        )
        from streams.core import old_bucket_note

        note = old_bucket_note(scheduler.core.state.config, config)
        if note is not None:
            typer.echo(f"allot serve: note: {note}", err=True)
        if once:
            _drain_unless_stopped(scheduler, stop, batch)
        else:
            tick_failures = _AtMostEvery(60.0)
            next_tick = time.monotonic() + tick_s
            while not stop.is_set():
                n = scheduler.step()
                if tick_s and time.monotonic() >= next_tick:
                    ticked = make_request(
                        "clock.tick", cluster=cluster, actor=TICKER_ACTOR, every=tick_s
                    )
                    try:
                        append_requests(folder, [ticked])
                    except EmbeddedError as why:
                        # a missed tick is harmless (the next one moves the clock): a
                        # full disk stopped the whole scheduler here, for good; a
                        # journal write that fails still stops it (step() raises)
                        tick_failures.say(f"allot serve: no clock tick written: {why}")
                    next_tick = time.monotonic() + tick_s
                if not n and not stop.is_set():
                    time.sleep(IDLE_POLL_S)
    finally:
        scheduler.close()
        if metrics is not None:
            metrics.stop()
    # inputs that were not JSON are in neither count's output: say where they went
    dead = scheduler.dead_lettered
    typer.echo(
        f"allot serve: stopped at inbox offset {scheduler.offset} "
        f"({plural(scheduler.processed, 'input')}, "
        f"{plural(scheduler.journaled, 'journal record')} this run"
        + (f"; {plural(dead, 'input')} to the dead-letter file {folder / DLQ_FILE}" if dead else "")
        + ")"
    )


def _drain_unless_stopped(scheduler: Any, stop: _StopFlag, batch: int) -> None:
    """`--once`: fold what the inbox holds now (as `scheduler.drain()`), batch by batch
    until a stop is asked for."""
    while not stop.is_set() and scheduler.step() >= batch:
        pass


class _AtMostEvery:
    """Says a repeated warning once per `every_s` seconds, with how many it held back."""

    def __init__(self, every_s: float) -> None:
        self.every_s = every_s
        self.last = -math.inf
        self.held = 0

    def say(self, text: str) -> None:
        now = time.monotonic()
        if now - self.last < self.every_s:
            self.held += 1
            return
        more = f" ({self.held} more like it since)" if self.held else ""
        typer.echo(text + more, err=True)
        self.last, self.held = now, 0


class _StopFlag:
    """Set by a signal handler, read by the loop. Not a threading.Event: its set() takes
    the lock the main thread holds inside Event.wait(), so a Ctrl-C that arrived there
    deadlocked the server for good (it ignored every later signal)."""

    def __init__(self) -> None:
        self._set = False

    def set(self) -> None:
        self._set = True

    def is_set(self) -> bool:
        return self._set


def _recover_unless_stopped(scheduler: Any) -> Any:
    """`scheduler.start()`, which Ctrl-C or SIGTERM cut short (None then): SIGTERM's
    default ended a recovery without a word, and a flag would make the stop wait for
    the whole recovery. Cutting it is safe: it writes only whole appends, as a crash
    may leave them, and the next start recovers again."""

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.getsignal(signal.SIGTERM)
    with contextlib.suppress(ValueError):  # not the main thread
        signal.signal(signal.SIGTERM, interrupt)
    try:
        return scheduler.start()
    except KeyboardInterrupt:
        return None
    finally:
        with contextlib.suppress(ValueError):
            signal.signal(signal.SIGTERM, previous)


def _install_stop_handlers(stop: _StopFlag) -> None:
    """Ctrl-C / SIGTERM finish the current batch, then stop (no half-written batch)."""

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(ValueError):  # not the main thread
            signal.signal(sig, handler)


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `allot` app."""
    app.command("serve")(serve)


__all__ = ["ServeError", "TargetError", "build_config", "register", "serve"]

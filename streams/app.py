"""The faust-streaming entry point: `faust -A streams.app worker -l info`.

    ALLOT_KAFKA=127.0.0.1:9092 ALLOT_ADMINS=root faust -A streams.app worker -l info

`app` is a plain `faust.App`; the scheduler runs inside it as a faust *service*
(`@app.service`) that drives `streams.worker.serve` — the very loop `allot serve
--kafka` and `python -m streams.worker` run — so every shell decides identically.

Why a service and not a faust agent + table:

- Exactly once needs the worker to choose where it reads: on start it rebuilds each
  cluster's `SchedulerCore` from its snapshot plus the journal and then *seeks* the
  inbox to one past the last offset the journal (or the DLQ) records. Faust agents
  read from consumer-group offsets, which are committed separately from the journal
  and so could skip or repeat inputs after a crash; a faust consumer group therefore
  stays out of the correctness path (the service's consumer uses no group at all).
- Throughput needs whole batches end to end (`getmany`, one Kafka transaction of
  `send_batch` record batches per batch) — agents hand over one event at a time, and
  a changelog-backed table written per event manages ~4k events/s here.
- Faust tables expire windowed entries by wall clock and may lose windows on
  rebalance; usage is event-time state inside `domain`. The "changelog-backed table
  of snapshots" of DESIGN is the compacted `allot.snapshots` topic the worker writes
  periodically (key = cluster) — the same structure a faust table's changelog has,
  without a changelog record per event.

Scale out with `ALLOT_GROUP=NAME`: the workers of one consumer group share the inbox
partitions (and every cluster on them) and take over a dead member's. Without a group
run one worker per cluster set: workers with the same topics and `ALLOT_CLUSTERS` share
transactional ids, so a second one fences the first (which exits; that is the
single-writer guarantee). Split clusters between workers with `ALLOT_CLUSTERS`.

Faust still provides what it is good at here: the worker process (logging, signals,
`-l`, its web server). Environment:

- `ALLOT_KAFKA` bootstrap HOST:PORT (default 127.0.0.1:9092)
- `ALLOT_ADMINS` comma-separated admin principals; `ALLOT_CLUSTERS` only these clusters
- `ALLOT_GROUP` consumer group to share the inbox partitions with (default: none)
- `ALLOT_TICK_EVERY` (10 s), `ALLOT_SNAPSHOT_EVERY` (60 s), `ALLOT_TOPIC_SUFFIX`
- `ALLOT_CONFIG` extra scheduler config as JSON, e.g. `{"window": "3d"}`
- `ALLOT_FAUST_DATADIR` (default `allot-data`)
- `ALLOT_KAFKA_USER` + `ALLOT_KAFKA_PASSWORD_FILE` (SASL/SCRAM login, see
  `streams.kafka_auth`): both faust's connection and the scheduler's use them
- `ALLOT_METRICS_PORT` serve Prometheus metrics (allot_*) of what the scheduler
  journals on http://BIND:PORT/metrics, as `allot serve --metrics-port` does (for
  deploy/prometheus's scrape and alerts); `ALLOT_METRICS_BIND` (default 127.0.0.1)

faust's own flags apply: `--web-port N` (default 6066) or `--without-web`. faust's web
server has none of allot's metrics; ALLOT_METRICS_PORT is a port of its own.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any

import faust
import mode
import orjson

from domain.config import SchedulerConfig, parse_config
from streams.kafka_auth import KafkaAuthError, client_options
from streams.topic_admin import Topics
from streams.worker import serve
from streams.worker_helpers import plural

log = logging.getLogger("allot.app")

BOOTSTRAP = os.environ.get("ALLOT_KAFKA", "").strip().removeprefix("kafka://") or "127.0.0.1:9092"
STOP_TIMEOUT_S = 30.0


def _float_env(name: str, default: float) -> float:
    """Seconds from the environment, written as the CLI takes them (`20s`, `1m`, `60`)."""
    from domain.durations import parse_duration

    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return parse_duration(raw)
    except ValueError as why:
        raise ValueError(f"${name}: {why}") from None


def scheduler_config() -> SchedulerConfig | None:
    """The scheduler config from the environment (journaled as `config.set` when it
    differs from the recorded one); None when nothing is set: keep the journal's."""
    extra: dict[str, Any] = {}
    raw = os.environ.get("ALLOT_CONFIG", "").strip()
    if raw:
        extra = orjson.loads(raw)
    admins = [a.strip() for a in os.environ.get("ALLOT_ADMINS", "").split(",") if a.strip()]
    if admins:
        extra["admins"] = tuple(admins)
    return parse_config(extra) if extra else None


def live_metrics() -> Any:
    """$ALLOT_METRICS_PORT's `projections.metrics.LiveMetrics`, listening (a port in use
    or a bad value stops the worker with one line); None when it is not set."""
    raw = os.environ.get("ALLOT_METRICS_PORT", "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 0 < int(raw) < 65536:
        raise SystemExit(f"allot: $ALLOT_METRICS_PORT {raw!r}: use a TCP port between 1 and 65535")
    # the one import of projections in streams: this module is the faust process's entry
    # point and wires the read model in, as `allot serve` does; the scheduler itself
    # (streams.worker) knows only its `on_journal` hook
    from projections.metrics import LiveMetrics

    bind = os.environ.get("ALLOT_METRICS_BIND", "").strip() or "127.0.0.1"
    metrics = LiveMetrics(int(raw), bind, on_bad=log.warning)
    try:
        metrics.start()
    except OSError as why:
        raise SystemExit(
            f"allot: $ALLOT_METRICS_PORT {raw}: cannot listen on {bind}:{raw}: {why}"
        ) from None
    log.info("allot metrics on http://%s:%s/metrics", bind, raw)
    return metrics


def _clusters() -> list[str] | None:
    names = [c.strip() for c in os.environ.get("ALLOT_CLUSTERS", "").split(",") if c.strip()]
    return names or None


def _credentials() -> faust.SASLCredentials | None:
    """faust's own broker connection logs in as the worker does ($ALLOT_KAFKA_USER,
    `streams.kafka_auth`); None for a plaintext broker."""
    try:
        options = client_options()
    except KafkaAuthError as why:
        raise SystemExit(f"allot: {why}") from None
    if not options:
        return None
    return faust.SASLCredentials(
        username=options["sasl_plain_username"],
        password=options["sasl_plain_password"],
        mechanism=options["sasl_mechanism"],
        ssl_context=options.get("ssl_context"),
    )


# The app id names faust's own consumer group and topics (`allot-scheduler-faust-
# __assignor-__leader`). Not `allot-scheduler` itself: that is the usual ALLOT_GROUP, and
# faust's members (its own assignor) cannot share a group with the scheduler's. Under
# `deploy/kafka/start --secure` the allot-scheduler principal's ACLs cover the prefix.
app = faust.App(
    "allot-scheduler-faust",
    broker=f"kafka://{BOOTSTRAP}",
    broker_credentials=_credentials(),
    store="memory://",
    datadir=os.environ.get("ALLOT_FAUST_DATADIR", "allot-data"),
    topic_partitions=1,
    producer_acks=-1,
)


@app.service
class Scheduler(mode.Service):
    """Runs `streams.worker.serve` for the app's lifetime; a clean stop snapshots."""

    def __post_init__(self) -> None:
        self._stop_event: asyncio.Event | None = None
        self._done: asyncio.Event | None = None

    @mode.Service.task
    async def _run(self) -> None:
        self._stop_event = asyncio.Event()
        self._done = asyncio.Event()
        metrics = None
        try:
            metrics = live_metrics()
            await serve(
                BOOTSTRAP,
                config=scheduler_config(),
                clusters=_clusters(),
                tick_every=_float_env("ALLOT_TICK_EVERY", 10.0),
                snapshot_every=_float_env("ALLOT_SNAPSHOT_EVERY", 60.0),
                topics=Topics(),  # $ALLOT_TOPIC_SUFFIX applies (streams.topics)
                group=os.environ.get("ALLOT_GROUP") or None,
                stop=self._stop_event,
                on_ready=lambda w: self._ready(w, metrics),
                on_journal=(
                    (lambda _cluster, lines, **kw: metrics.feed(lines, **kw)) if metrics else None
                ),
            )
        except asyncio.CancelledError:
            raise
        except BaseException as why:
            # The journal is the state: crashing is safe, a restart resumes exactly.
            # Exit the whole process so a supervisor restarts it (faust would otherwise
            # keep an idle worker alive).
            log.error("allot scheduler stopped: %s", why)
            logging.shutdown()
            os._exit(1)
        finally:
            if metrics is not None:
                metrics.stop()
            self._done.set()

    @staticmethod
    def _ready(worker: Any, metrics: Any) -> None:
        if metrics is not None:
            metrics.ready()
        log.info(
            "allot scheduler consuming %s (%s recovered)",
            worker.topics.inbox,
            plural(len(worker.cores), "cluster"),
        )

    async def on_stop(self) -> None:
        if self._stop_event is not None:
            self._stop_event.set()
        if self._done is not None:
            try:
                await asyncio.wait_for(self._done.wait(), STOP_TIMEOUT_S)
            except TimeoutError:
                log.warning("allot scheduler did not stop within %.0fs", STOP_TIMEOUT_S)

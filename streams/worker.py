"""The live scheduler on Kafka: inbox -> `SchedulerCore` per cluster -> journal.

    run_worker("127.0.0.1:9092", config=SchedulerConfig(admins=("root",)))
    python -m streams.worker --kafka 127.0.0.1:9092 --admin root

Ownership. Inbox records are keyed by cluster, so each cluster lives on one inbox
partition (its *home*, the producers' default partitioner over the key); a record that
arrives anywhere else is dead-lettered. The unit a worker owns is an inbox partition
with every cluster homed on it: one `streams.core.SchedulerCore` per cluster, and one
transactional producer per partition. Without a consumer group a worker owns every
partition; with `group=...` (`--group`) the workers of the group share them through
Kafka's own rebalancing and a survivor takes a dead member's partitions over
(scale-out and failover, DESIGN §7). `clusters=[...]` narrows a worker to some
clusters on top of that.

The loop, per batch:

1. `getmany` a batch of inbox records; per owned partition, route each record to its
   cluster's core by the record key (keyless records: by the JSON `cluster` field,
   else `default`);
2. `SchedulerCore.process` folds them (decode, stamp with the broker timestamp,
   admit -> evolve -> decide) and returns the journal records and dead letters;
3. one Kafka transaction per partition writes them: journal records go out as whole
   record batches (`send_batch`, nothing awaited per record), dead letters go to the
   DLQ with the error and the inbox position in headers; the partitions' transactions
   run side by side. A failed write leaves the cores ahead of the journal: the
   partition is dropped and taken over again (below), which redoes the batch.

Exactly once (DESIGN §7). The journal is the state. Each journal record carries
`inbox: [partition, offset]` of the input that caused it, and each dead letter
carries the same in its headers. A batch is one transaction, so after a crash the
log holds whole batches only (readers use `isolation_level="read_committed"`). Taking
a partition over (at start, after a rebalance, or after a failed write), the worker

1. starts the partition's transactional producer first: its `transactional_id`
   (`<identity>/p<partition>`) is stable, so initializing it fences the previous
   owner (a worker that was killed, or is merely slow and will find its next commit
   refused) and aborts the transaction that owner left open;
2. loads the partition's latest snapshot round from the compacted `allot.snapshots`
   topic (one record per cluster, key = cluster: the pickled `SchedulerCore` — domain
   state plus inbox positions; a manifest per partition names the round and the
   journal offsets it corresponds to), or starts empty when there is none;
3. re-decides each of its clusters' committed journal after the snapshot's offsets
   (all of it without one), exactly as the live core did, checking every decision
   against the journal (`SchedulerCore.fold_journal`: folding facts alone would leave
   `decide`'s own caches cold and later decisions would differ from a worker that
   never stopped);
4. seeks the inbox partition to one past the last offset the journal or the DLQ
   records — consumer-group offsets play no part (nothing is committed to the group).

So an input is either in a committed batch (and is skipped on restart) or not (and is
folded again, producing the same decisions: decision ids are `cluster/seq`, and `decide`
is deterministic). Snapshots are written every `snapshot_every` seconds, when a
rebalance may move a partition away, and on a clean stop, never per batch. The
periodic one is pickled in a forked child (`streams.offloop`): the loop stops only for
the fork (tens of ms), not for the pickling (seconds with a week of dedup ids). Usage stays
in `domain` (event time): no faust windowed table. Group callbacks only mark what
changed: recovery runs in the worker's loop, where heartbeats keep going.

A ticker task writes a `clock.tick` per cluster to the inbox every `tick_every`
seconds (actor `allot-ticker`), so time moves in the log when nothing else arrives.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from domain.config import SchedulerConfig
from streams import topics as names
from streams.kafka_auth import KafkaAuthError
from streams.log_repeats import quiet_repeats
from streams.topic_admin import Topics
from streams.worker_errors import BrokerUnavailable, WorkerError
from streams.worker_loop import MAX_CLUSTERS, STOP_GRACE_S, Worker

# ------------------------------------------------------------------ entry points


async def serve(
    bootstrap: str,
    *,
    config: SchedulerConfig | None,
    clusters: list[str] | None = None,
    tick_every: float = 10.0,
    snapshot_every: float = 60.0,
    stop: asyncio.Event | None = None,
    topics: Topics | None = None,
    inbox: str | None = None,
    journal: str | None = None,
    dlq: str | None = None,
    snapshots: str | None = None,
    max_batch: int = 5000,
    create_topics: bool = False,
    partitions: int = 1,
    on_ready: Any = None,
    on_journal: Callable[..., None] | None = None,
    group: str | None = None,
    kafka_options: dict[str, Any] | None = None,
    session_timeout_ms: int = 10_000,
    max_clusters: int = MAX_CLUSTERS,
    stop_grace: float = STOP_GRACE_S,
) -> Worker:
    """Run the scheduler until `stop` is set (then snapshot and return the worker).

    Topic names default to `streams.topics`; pass `topics=` or single names. A missing
    inbox or journal is MissingTopics (`allot topics create` makes them; a mistyped
    suffix would else start an empty deployment), unless `create_topics`: then missing
    topics are created with `partitions` partitions. With a
    consumer `group`, the workers of that group share the inbox partitions (see
    `Worker`); without one this worker takes them all."""
    chosen = topics or Topics()
    overrides = {
        k: v
        for k, v in {"inbox": inbox, "journal": journal, "dlq": dlq, "snapshots": snapshots}.items()
        if v is not None
    }
    chosen = replace(chosen, **overrides)
    worker = Worker(
        bootstrap,
        config=config,
        clusters=clusters,
        tick_every=tick_every,
        snapshot_every=snapshot_every,
        topics=chosen,
        max_batch=max_batch,
        create=create_topics,
        partitions=partitions,
        on_journal=on_journal,
        group=group,
        kafka_options=kafka_options,
        session_timeout_ms=session_timeout_ms,
        max_clusters=max_clusters,
        stop_grace=stop_grace,
    )
    if on_ready is not None:

        async def _notify() -> None:
            await worker.ready.wait()
            on_ready(worker)

        notifier = asyncio.create_task(_notify())
    try:
        await worker.run(stop)
    finally:
        if on_ready is not None:
            notifier.cancel()
    return worker


def run_worker(
    bootstrap: str,
    *,
    config: SchedulerConfig | None,
    clusters: list[str] | None = None,
    tick_every: float = 10.0,
    snapshot_every: float = 60.0,
    stop: asyncio.Event | None = None,
    **options: Any,
) -> None:
    """Blocking `serve`: SIGINT/SIGTERM stop it cleanly (a last snapshot is written)."""

    async def main() -> None:
        event = stop or asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, event.set)
        await serve(
            bootstrap,
            config=config,
            clusters=clusters,
            tick_every=tick_every,
            snapshot_every=snapshot_every,
            stop=event,
            **options,
        )

    asyncio.run(main())


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m streams.worker", description="Run the allot scheduler on Kafka."
    )
    parser.add_argument(
        "--kafka",
        default=os.environ.get("ALLOT_KAFKA"),
        help="bootstrap HOST:PORT (default $ALLOT_KAFKA)",
    )
    parser.add_argument(
        "--cluster",
        action="append",
        dest="clusters",
        help="only this cluster (repeat; default: every cluster on the inbox partitions)",
    )
    parser.add_argument(
        "--admin",
        action="append",
        dest="admins",
        help="admin principal (repeat; default $ALLOT_ADMINS, comma-separated)",
    )
    parser.add_argument(
        "--tick-every",
        type=float,
        default=10.0,
        help="seconds between clock.tick records, so time moves (0 = never; default %(default)s)",
    )
    parser.add_argument(
        "--snapshot-every",
        type=float,
        default=60.0,
        help="seconds between periodic snapshots (0 = none; hand-overs and a clean stop "
        "still snapshot; default %(default)s)",
    )
    parser.add_argument(
        "--topic-suffix",
        default=names.SUFFIX,
        help="suffix for every topic name (default $ALLOT_TOPIC_SUFFIX)",
    )
    parser.add_argument(
        "--create-topics",
        action="store_true",
        help="create missing topics (default: a missing inbox or journal stops the worker; "
        "`allot topics create` makes them)",
    )
    parser.add_argument(
        "--partitions", type=int, default=1, help="for topics --create-topics creates"
    )
    parser.add_argument(
        "--max-batch",
        type=int,
        default=5000,
        help="inbox records read per poll (default %(default)s)",
    )
    parser.add_argument(
        "--group",
        help="consumer group: workers of one group share the inbox partitions and take "
        "over a dead member's (default: none, this worker takes every partition)",
    )
    parser.add_argument(
        "--session-timeout",
        type=float,
        default=10.0,
        help="seconds without a heartbeat before the group hands a worker's partitions on "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--set", action="append", default=[],
        help="change config key=value (the others keep the journal's values)",
    )  # fmt: skip
    parser.add_argument(
        "-l", "--log-level", default="info", help="debug, info, warning or error (default info)"
    )
    return parser


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    return _parser().parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if args.log_level.lower() != "debug":
        logging.getLogger("aiokafka").setLevel(logging.WARNING)
        quiet_repeats()  # a broker outage: the same aiokafka error ~60 times a second
    if not args.kafka:
        print("error: say where Kafka is: --kafka HOST:PORT (or $ALLOT_KAFKA)", file=sys.stderr)
        return 2
    admins = args.admins or [a for a in os.environ.get("ALLOT_ADMINS", "").split(",") if a]
    overrides: dict[str, Any] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep:
            print(f"error: --set {item!r}: use KEY=VALUE", file=sys.stderr)
            return 2
        overrides[key] = value
    from domain.config import ConfigError, parse_config

    config = None  # nothing asked: keep the config each cluster's journal records
    if overrides or admins:
        try:
            # only the keys given: the others keep each cluster's recorded config
            config = parse_config({**overrides, **({"admins": tuple(admins)} if admins else {})})
        except ConfigError as why:
            print(f"error: {why}", file=sys.stderr)
            return 2
    try:
        run_worker(
            args.kafka,
            config=config,
            clusters=args.clusters,
            tick_every=args.tick_every,
            snapshot_every=args.snapshot_every,
            topics=Topics.suffixed(args.topic_suffix),
            max_batch=args.max_batch,
            create_topics=args.create_topics,
            partitions=args.partitions,
            group=args.group,
            session_timeout_ms=int(args.session_timeout * 1000),
        )
    except (BrokerUnavailable, WorkerError, KafkaAuthError) as why:
        print(f"error: {why}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

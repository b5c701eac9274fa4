"""allot ops commands: `allot topics create`."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from allot.commands.common import KafkaOpt

topics_app = typer.Typer(
    name="topics",
    help="Kafka topics the scheduler uses (inbox, journal, dead letters, snapshots).",
    no_args_is_help=True,
)


@topics_app.command("create")
def create(
    kafka: KafkaOpt = None,
    partitions: Annotated[
        int,
        typer.Option(
            "--partitions",
            min=1,
            help="Partitions per topic (records are keyed by cluster; without --group one "
            "worker reads them all, with `allot serve --group` the group's workers share them).",
        ),
    ] = 1,
    replication_factor: Annotated[
        int, typer.Option("--replication-factor", min=1, help="Replicas per partition.")
    ] = 1,
) -> None:
    import asyncio
    import logging

    from streams.topic_admin import Topics, create_topics, topic_configs
    from streams.worker_errors import BrokerUnavailable

    if not kafka:
        print("error: say where Kafka is: --kafka HOST:PORT (or $ALLOT_KAFKA)", file=sys.stderr)
        raise typer.Exit(2)
    bootstrap = kafka.removeprefix("kafka://")
    logging.getLogger("aiokafka").setLevel(logging.CRITICAL)  # one line, not a log dump
    topics = Topics()
    try:
        report = asyncio.run(
            create_topics(
                bootstrap,
                partitions=partitions,
                topics=topics,
                replication_factor=replication_factor,
            )
        )
    except BrokerUnavailable as why:
        print(f"error: {why}", file=sys.stderr)
        raise typer.Exit(2) from None
    except Exception as why:  # an authorization or policy error from the broker
        print(f"error: creating topics on {bootstrap} failed: {why}", file=sys.stderr)
        raise typer.Exit(2) from None
    configs = topic_configs(topics)
    for name in report.created:
        settings = ", ".join(f"{k}={v}" for k, v in configs[name].items())
        print(
            f"created {name} ({partitions} partition{'s' if partitions != 1 else ''}; {settings})"
        )
    for name in report.existing:
        have = report.partitions.get(name)
        other = (
            f"; it has {have} partition{'s' if have != 1 else ''}, not {partitions} (adding "
            "partitions moves clusters between them: stop every worker, let nothing be "
            "sent, kafka-topics.sh --alter --partitions each topic, then start the workers "
            "again; running workers do not notice new partitions)"
            if have and have != partitions
            else ""
        )
        print(f"exists  {name} (left unchanged{other})")
    for line in report.drift_lines():
        print(f"warning: {line}", file=sys.stderr)


def _create_doc() -> str:
    from streams import topics

    named = (
        f" (${topics.SUFFIX_ENV} is {topics.SUFFIX!r}; without it they are allot.inbox, ...)"
        if topics.SUFFIX
        else f" (${topics.SUFFIX_ENV} appends a suffix to every name)"
    )
    return (
        f"Create {topics.INBOX}, {topics.JOURNAL} (kept forever, not compacted), "
        f"{topics.DLQ} and {topics.SNAPSHOTS} (compacted){named}; existing topics are left "
        "alone and reported.\n\n"
        "Run it once for a new deployment, before `allot serve` (which creates no "
        "topics), with the environment the scheduler will have: the same suffix, and a "
        "principal allowed to create topics."
    )


create.__doc__ = _create_doc()


def register(app: typer.Typer) -> None:
    """Add this module's commands to the `allot` app."""
    app.add_typer(topics_app, name="topics")

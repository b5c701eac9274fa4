"""The worker's topics on a broker: their names (`Topics`), the settings allot needs on
them, and creating them (`create_topics`, `allot topics create`) with a report of
existing ones set otherwise."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from dataclasses import dataclass, field
from typing import Any

from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import KafkaConnectionError, KafkaError

from streams import topics as names
from streams.kafka_auth import client_options, diagnose
from streams.kafka_clients import unreachable
from streams.worker_errors import BrokerUnavailable, MissingTopics

MAX_SNAPSHOT_BYTES = 64 * 1024 * 1024
MAX_RECORD_BYTES = 8 * 1024 * 1024  # journal and DLQ records (an inbox record is <= 1 MiB)


# ------------------------------------------------------------------ topics


@dataclass(frozen=True)
class Topics:
    inbox: str = names.INBOX
    journal: str = names.JOURNAL
    dlq: str = names.DLQ
    snapshots: str = names.SNAPSHOTS

    @classmethod
    def suffixed(cls, suffix: str) -> Topics:
        """The base names plus `suffix` (instead of `$ALLOT_TOPIC_SUFFIX`): tests and
        benchmarks use their own topics."""
        bases = (names.BASE_INBOX, names.BASE_JOURNAL, names.BASE_DLQ, names.BASE_SNAPSHOTS)
        return cls(*(f"{name}{suffix}" for name in bases))

    def all(self) -> list[str]:
        return [self.inbox, self.journal, self.dlq, self.snapshots]

    def group(self, name: str) -> str:
        """The consumer group `name` of this deployment: with the topics' suffix, so a
        second deployment on the same broker (`ALLOT_TOPIC_SUFFIX`) and the same
        `--group` does not join the first one's group (its workers rebalanced)."""
        return name + self.inbox.removeprefix(names.BASE_INBOX)


def topic_configs(topics: Topics) -> dict[str, dict[str, str]]:
    """Per-topic settings `create_topics` applies to topics it creates."""
    return {
        # the broker stamps each request on arrival: that is the event time
        topics.inbox: {"message.timestamp.type": "LogAppendTime"},
        # the source of truth: kept forever, never compacted
        # (records larger than an inbox record may be: the accepted input plus its source)
        topics.journal: {
            "retention.ms": "-1",
            "retention.bytes": "-1",
            "cleanup.policy": "delete",
            "max.message.bytes": str(MAX_RECORD_BYTES),
        },
        topics.dlq: {
            "retention.ms": str(30 * 86400 * 1000),
            "cleanup.policy": "delete",
            "max.message.bytes": str(MAX_RECORD_BYTES),
        },
        # changelog-style: only the latest snapshot per cluster matters
        topics.snapshots: {
            "cleanup.policy": "compact",
            "max.message.bytes": str(MAX_SNAPSHOT_BYTES),
        },
    }


@dataclass
class TopicsReport:
    created: list[str] = field(default_factory=list)
    existing: list[str] = field(default_factory=list)
    # (topic, setting, what it is, what allot needs) for existing topics made otherwise
    # (by hand, or by a broker creating topics on first use)
    drift: list[tuple[str, str, str, str]] = field(default_factory=list)
    partitions: dict[str, int] = field(default_factory=dict)  # of the existing topics

    def drift_lines(self) -> list[str]:
        """A warning per setting, with the command that fixes it."""
        return [
            f"{topic} has {key}={actual}, allot needs {wanted}"
            + (" (the journal is the source of truth: kept forever)" if "retention" in key else "")
            + f"; fix: kafka-configs.sh --alter --entity-type topics --entity-name {topic} "
            f"--add-config {key}={wanted}"
            for topic, key, actual, wanted in self.drift
        ]


# settings of an existing topic that matter: checked, never changed behind the operator
_CHECKED = {"retention.ms", "retention.bytes", "cleanup.policy", "message.timestamp.type"}


async def _drift(
    admin: AIOKafkaAdminClient, names: list[str], configs: dict[str, dict[str, str]]
) -> list[tuple[str, str, str, str]]:
    from aiokafka.admin.config_resource import ConfigResource, ConfigResourceType

    wanted = {
        name: {k: v for k, v in configs[name].items() if k in _CHECKED}
        for name in names
        if any(k in _CHECKED for k in configs[name])
    }
    if not wanted:
        return []
    resources = [
        ConfigResource(ConfigResourceType.TOPIC, name, dict.fromkeys(keys))
        for name, keys in wanted.items()
    ]
    out = []
    for response in await admin.describe_configs(resources):
        for resource in response.resources:
            name, entries = resource[3], resource[4]
            for entry in entries:
                key, actual = entry[0], entry[1]
                need = wanted.get(name, {}).get(key)
                if need is not None and actual != need:
                    out.append((name, key, str(actual), need))
    return sorted(out)


async def _admin(
    bootstrap: str, timeout_s: float, kafka_options: dict[str, Any] | None = None
) -> AIOKafkaAdminClient:
    options = client_options() if kafka_options is None else kafka_options
    admin = AIOKafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=int(timeout_s * 1000), **options
    )
    try:
        await asyncio.wait_for(admin.start(), timeout_s)
    except (TimeoutError, KafkaConnectionError, KafkaError, OSError) as why:
        with contextlib.suppress(Exception):
            await admin.close()
        # a login problem reads as "no broker answered" too: say which one, as the
        # request and read tools do
        if "Unable to bootstrap" in str(why):
            reason = await diagnose(bootstrap, options)
            if reason is not None:
                raise BrokerUnavailable(f"Kafka at {bootstrap}: {reason}") from None
        raise BrokerUnavailable(unreachable(bootstrap, why)) from None
    return admin


async def create_topics(
    bootstrap: str,
    *,
    partitions: int = 1,
    topics: Topics | None = None,
    replication_factor: int = 1,
    timeout_s: float = 15.0,
    kafka_options: dict[str, Any] | None = None,
    required: tuple[str, ...] = (),
) -> TopicsReport:
    """Create the inbox, journal, DLQ and snapshot topics; existing ones are left as
    they are and reported. Raises BrokerUnavailable when the broker does not answer,
    and MissingTopics (creating nothing) when a topic of `required` does not exist."""
    topics = topics or Topics()
    configs = topic_configs(topics)
    report = TopicsReport()
    admin = await _admin(bootstrap, timeout_s, kafka_options)
    try:
        present = set(await admin.list_topics())
        absent = [name for name in required if name not in present]
        if absent:
            raise MissingTopics(_missing_message(absent, bootstrap, topics), absent)
        missing = [name for name in topics.all() if name not in present]
        report.existing = [name for name in topics.all() if name in present]
        if missing:
            response = await admin.create_topics(
                [
                    NewTopic(
                        name=name,
                        num_partitions=partitions,
                        replication_factor=replication_factor,
                        topic_configs=configs[name],
                    )
                    for name in missing
                ],
                timeout_ms=int(timeout_s * 1000),
            )
            for item in response.topic_errors:
                name, code = item[0], item[1]
                message = item[2] if len(item) > 2 else ""
                if code == 0:
                    report.created.append(name)
                elif code == 36:  # TOPIC_ALREADY_EXISTS: someone else was quicker
                    report.existing.append(name)
                else:
                    raise KafkaError(f"creating topic {name!r} failed (error {code}): {message}")
        try:
            report.drift = await _drift(admin, report.existing, configs)
            if report.existing:
                for t in await admin.describe_topics(report.existing):
                    report.partitions[t["topic"]] = len(t.get("partitions") or [])
        except KafkaError:  # a broker that refuses DescribeConfigs: nothing to say
            report.drift = []
        # wait until the metadata lists them with a leader for every partition, so
        # clients don't race the creation (a consumer started on a partition without
        # its leader yet failed its offset fetch: NotLeaderForPartition)
        deadline = time.monotonic() + timeout_s
        while report.created and time.monotonic() < deadline:
            described = await admin.describe_topics(report.created)
            if all(_ready(t) for t in described):
                break
            await asyncio.sleep(0.1)
    finally:
        await admin.close()
    order = {name: i for i, name in enumerate(topics.all())}
    report.created.sort(key=order.__getitem__)
    report.existing.sort(key=order.__getitem__)
    return report


def _ready(described: dict[str, Any]) -> bool:
    """A described topic with partitions, each with a leader."""
    parts = described.get("partitions") or []
    return (
        described.get("error_code", 0) == 0
        and bool(parts)
        and all(p.get("error_code", 0) == 0 and p.get("leader", -1) >= 0 for p in parts)
    )


def _missing_message(absent: list[str], bootstrap: str, topics: Topics) -> str:
    """The worker's one line about its inbox or journal missing."""
    suffix = (
        topics.inbox.removeprefix(names.BASE_INBOX)
        if topics.inbox.startswith(names.BASE_INBOX)
        else None
    )
    said = names.missing(absent, bootstrap, suffix, who="this deployment")
    user = os.environ.get("ALLOT_KAFKA_USER", "").strip()
    if user:  # the broker lists only the topics the principal may describe
        said += f" (or principal {user!r} may not describe it)"
    return (
        f"{said}; the scheduler creates no topics: if this is a new deployment, run "
        f"`allot topics create --kafka {bootstrap}` first, with the same {names.SUFFIX_ENV}"
    )

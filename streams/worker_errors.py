"""What the Kafka worker raises for its caller to tell in one line."""

from __future__ import annotations

from typing import Any

from aiokafka.errors import (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

# the broker's ACLs refuse something the worker needs: waiting changes nothing
REFUSALS = (
    ClusterAuthorizationFailedError,
    GroupAuthorizationFailedError,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)


class BrokerUnavailable(RuntimeError):
    """The Kafka broker did not answer: one line for the user."""


class WorkerError(RuntimeError):
    """The worker cannot go on (e.g. fenced by a newer worker with its identity)."""


class MissingTopics(WorkerError):
    """The inbox or journal topic does not exist and the worker was not asked to
    create topics: a mistyped or forgotten topic suffix, or a deployment whose topics
    nobody created (`allot topics create`)."""

    def __init__(self, message: str, names: list[str]) -> None:
        super().__init__(message)
        self.names = names


class Refused(WorkerError):
    """The broker's ACLs refuse the worker's principal a topic, its consumer group or
    its transactional ids."""


def refused(bootstrap: str, kafka_options: dict[str, Any], why: Exception) -> Refused:
    """The one line for an ACL refusal (aiokafka's own names only the resource)."""
    user = kafka_options.get("sasl_plain_username")
    who = f"principal {user!r}" if user else "this worker (no login: $ALLOT_KAFKA_USER is unset)"
    return Refused(
        f"Kafka at {bootstrap} refused {who}: {why}; its ACLs must allow the scheduler's "
        "topics, its consumer group and its transactional ids (as deploy/kafka/secure.py "
        "does for allot-scheduler: groups and ids starting with allot-scheduler)"
    )

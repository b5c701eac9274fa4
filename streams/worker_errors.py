"""What the Kafka worker raises for its caller to tell in one line."""

from __future__ import annotations


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

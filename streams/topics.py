"""Kafka topic names (keyed by cluster, so one cluster's records are totally ordered).

`$ALLOT_TOPIC_SUFFIX` (read once, at import) is appended to every name, for every tool
alike — the worker, the faust app, `allot submit`, `allot queue`, the executor, the
metrics and usage readers — so a second deployment (staging, a load test) can share a
broker: `ALLOT_TOPIC_SUFFIX=.staging allot serve --kafka ...` and the same variable for
its clients. The `BASE_*` names are without it.
"""

import os

SUFFIX_ENV = "ALLOT_TOPIC_SUFFIX"

BASE_INBOX = "allot.inbox"  # untrusted requests
BASE_JOURNAL = "allot.journal"  # accepted facts and decisions: the source of truth
BASE_DLQ = "allot.inbox.dlq"  # bytes that could not be parsed, error in the headers
BASE_SNAPSHOTS = "allot.snapshots"  # compacted: latest scheduler snapshot per cluster

SUFFIX = os.environ.get(SUFFIX_ENV, "").strip()

INBOX = BASE_INBOX + SUFFIX
JOURNAL = BASE_JOURNAL + SUFFIX
DLQ = BASE_DLQ + SUFFIX
SNAPSHOTS = BASE_SNAPSHOTS + SUFFIX


def suffix_question(suffix: str | None = None, who: str = "the scheduler") -> str:
    """Which suffix the names were made with, and the question to ask about it: a
    missing topic is far more often a mistyped or forgotten suffix than a deployment
    nobody set up."""
    suffix = SUFFIX if suffix is None else suffix
    if suffix:
        return f"{SUFFIX_ENV} is {suffix!r}: is it {who}'s?"
    return f"{SUFFIX_ENV} is not set: does {who} use one?"


def missing(
    names: list[str], bootstrap: str, suffix: str | None = None, who: str = "the scheduler"
) -> str:
    """`no topic allot.journal.x at HOST (ALLOT_TOPIC_SUFFIX is '.x': is it the
    scheduler's?)`: the start of what every tool says of topics it does not find. What
    follows must not tell to create them outright: with a mistyped suffix that makes
    topics no scheduler reads."""
    return f"no topic {', '.join(names)} at {bootstrap} ({suffix_question(suffix, who)})"


# the end of a request or read tool's line about missing topics
NEW_DEPLOYMENT = (
    f"a new deployment's topics come from `allot topics create`, run with its {SUFFIX_ENV}"
)

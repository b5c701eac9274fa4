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

"""Kafka topic names (keyed by cluster, so one cluster's records are totally ordered)."""

INBOX = "allot.inbox"  # untrusted requests
JOURNAL = "allot.journal"  # accepted facts and decisions: the source of truth
DLQ = "allot.inbox.dlq"  # bytes that could not be parsed, error in the headers
SNAPSHOTS = "allot.snapshots"  # compacted: latest scheduler snapshot per cluster (+ manifests)

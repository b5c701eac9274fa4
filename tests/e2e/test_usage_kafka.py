"""`allot usage --kafka`: the usage table resumes from its saved per-partition positions
in the journal topic of a real broker.

A simulation's journal is produced into `allot.journal` under a cluster name of the
test's own (other tests' clusters share the topic and are skipped): half of it, a
run, the other half, a second run. The second run folds only the new records and its
table equals a from-scratch run's and the journal file's."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from projections.usage_store import KafkaResumableUsage, ResumableUsage, UsageStoreError
from streams.sources import JournalChanged, kafka_batches
from tests.e2e.cli import allot, one_line_error
from tests.e2e.kafka_journal import produce_journal

pytestmark = pytest.mark.kafka


def renamed(records: list[dict[str, Any]], cluster: str) -> list[dict[str, Any]]:
    return [{**r, "cluster": cluster} for r in records]


def tiny_records(tiny_journal: Path, cluster: str) -> list[dict[str, Any]]:
    """The tiny simulation's journal as records of `cluster`."""
    lines = tiny_journal.read_bytes().splitlines()
    return renamed([orjson.loads(line) for line in lines if line.strip()], cluster)


def file_rows(journal: Path, tmp: Path) -> list[dict[str, Any]]:
    store = ResumableUsage.open(tmp / "file.state", journal)
    store.update()
    return store.rows()


def test_second_run_reads_only_new_records_and_matches_from_scratch(
    kafka_bootstrap: str, tiny_journal: Path, tmp_path: Path
) -> None:
    cluster = f"usage-{uuid.uuid4().hex[:10]}"
    records = tiny_records(tiny_journal, cluster)
    half = len(records) // 2
    state = tmp_path / "usage.kafka-state"

    produce_journal(kafka_bootstrap, records[:half])
    first = KafkaResumableUsage.open(state, cluster)
    assert first.update(kafka_batches(kafka_bootstrap, cluster, first.positions)) == half
    first.save(state)
    assert first.positions  # a position per partition read

    produce_journal(kafka_bootstrap, records[half:])
    again = KafkaResumableUsage.open(state, cluster)
    assert again.records == half
    assert again.update(kafka_batches(kafka_bootstrap, cluster, again.positions)) == (
        len(records) - half
    )  # only what is new
    again.save(state)

    scratch = KafkaResumableUsage(cluster)
    assert scratch.update(kafka_batches(kafka_bootstrap, cluster, {})) == len(records)
    assert again.rows() == scratch.rows() == file_rows(tiny_journal, tmp_path)

    # nothing new: nothing folded, same table
    third = KafkaResumableUsage.open(state, cluster)
    assert third.update(kafka_batches(kafka_bootstrap, cluster, third.positions)) == 0
    assert third.rows() == scratch.rows()


def test_allot_usage_kafka_resumes_and_matches_the_file(
    kafka_bootstrap: str, tiny_journal: Path, tmp_path: Path
) -> None:
    cluster = f"usage-{uuid.uuid4().hex[:10]}"
    records = tiny_records(tiny_journal, cluster)
    half = len(records) // 2
    state = tmp_path / "usage.kafka-state"
    args = ["usage", "--kafka", kafka_bootstrap, "--cluster", cluster, "--state", str(state)]

    produce_journal(kafka_bootstrap, records[:half])
    first = allot(*args)
    assert first.returncode == 0, first.stderr
    assert f"({half:,} records, {half:,} new)" in " ".join(first.stdout.split())

    produce_journal(kafka_bootstrap, records[half:])
    second = allot(*args)
    assert second.returncode == 0, second.stderr
    new = len(records) - half
    assert f"({len(records):,} records, {new:,} new)" in " ".join(second.stdout.split())

    as_json = allot(*args, "--json")
    from_file = allot("usage", "--journal", str(tiny_journal), "--state", str(tmp_path / "f"))
    from_file_json = allot(
        "usage", "--journal", str(tiny_journal), "--state", str(tmp_path / "f"), "--json"
    )
    assert from_file.returncode == 0, from_file.stderr
    assert orjson.loads(as_json.stdout) == orjson.loads(from_file_json.stdout)


def test_a_recreated_topic_or_a_state_of_another_kind_is_refused(
    kafka_bootstrap: str, tiny_journal: Path, tmp_path: Path
) -> None:
    cluster = f"usage-{uuid.uuid4().hex[:10]}"
    record = renamed([orjson.loads(tiny_journal.read_bytes().splitlines()[0])], cluster)
    produce_journal(kafka_bootstrap, record)
    store = KafkaResumableUsage(cluster)
    store.update(kafka_batches(kafka_bootstrap, cluster, {}))
    # the record at the saved offset is not the one saved there: another journal
    forged = {p: (offset, "not-that-record") for p, (offset, _) in store.positions.items()}
    with pytest.raises(JournalChanged, match="another journal"):
        list(kafka_batches(kafka_bootstrap, cluster, forged))
    beyond = {p: (offset + 10**9, rid) for p, (offset, rid) in store.positions.items()}
    with pytest.raises(JournalChanged, match="another journal"):
        list(kafka_batches(kafka_bootstrap, cluster, beyond))

    # a file table is not resumed from Kafka, nor another cluster's
    file_state = tmp_path / "file.state"
    file_store = ResumableUsage.open(file_state, tiny_journal)
    file_store.update()
    file_store.save(file_state)
    with pytest.raises(UsageStoreError, match="journal file"):
        KafkaResumableUsage.open(file_state, cluster)
    kafka_state = tmp_path / "k.state"
    store.save(kafka_state)
    with pytest.raises(UsageStoreError, match="cluster"):
        KafkaResumableUsage.open(kafka_state, "other")
    with pytest.raises(UsageStoreError, match="Kafka journal"):
        ResumableUsage.open(kafka_state, tiny_journal)
    one_line_error(
        allot("usage", "--kafka", kafka_bootstrap, "--cluster", "x", "--state", str(file_state)),
        "journal file",
    )


def test_each_topic_suffix_keeps_its_own_default_table(
    kafka_bootstrap: str, tiny_journal: Path, tmp_path: Path
) -> None:
    """The default state file ignored $ALLOT_TOPIC_SUFFIX: a staging journal's run found
    production's table and was refused as "another journal"."""
    cluster = f"usage-{uuid.uuid4().hex[:10]}"
    records = tiny_records(tiny_journal, cluster)
    produce_journal(kafka_bootstrap, records)
    args = ("usage", "--kafka", kafka_bootstrap, "--cluster", cluster)
    first = allot(*args, cwd=tmp_path)
    assert first.returncode == 0, first.stderr
    suffix = f".staging-{uuid.uuid4().hex[:8]}"
    staging = {"ALLOT_TOPIC_SUFFIX": suffix}
    created = allot("topics", "create", "--kafka", kafka_bootstrap, env=staging)
    assert created.returncode == 0, created.stderr
    produce_journal(kafka_bootstrap, records[:5], topic=f"allot.journal{suffix}")
    other = allot(*args, env=staging, cwd=tmp_path)
    assert other.returncode == 0, other.stderr
    assert "(5 records, 5 new)" in " ".join(other.stdout.split())
    assert sorted(p.name for p in tmp_path.glob("allot-usage.*")) == [
        f"allot-usage.{cluster}.kafka-state",
        f"allot-usage.{cluster}{suffix}.kafka-state",
    ]

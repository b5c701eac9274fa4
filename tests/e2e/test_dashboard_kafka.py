"""`allot dashboard --kafka` refreshes from where it stopped in the journal topic: a
refresh after more records arrive folds only those, and gives what a fold of the whole
topic gives (a real broker; the file tail: tests/projections/test_dashboard_refresh.py)."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
import pytest

from projections import views as v
from projections.dashboard import Dashboard, build_snapshot
from streams.sources import journal_lines, journal_tail
from tests.e2e.kafka_journal import produce_journal

pytestmark = pytest.mark.kafka


def test_the_dashboard_folds_only_the_new_records_of_the_topic(
    kafka_bootstrap: str, tiny_journal: Path
) -> None:
    cluster = f"dash-{uuid.uuid4().hex[:10]}"
    records = [
        {**orjson.loads(line), "cluster": cluster}
        for line in tiny_journal.read_bytes().splitlines()
        if line.strip()
    ]
    half = len(records) // 2
    board = Dashboard(
        lambda: journal_lines(kafka=kafka_bootstrap, cluster=cluster),
        label="test",
        ttl=0.0,
        tail=lambda: journal_tail(kafka=kafka_bootstrap, cluster=cluster),
    )
    try:
        produce_journal(kafka_bootstrap, [{**records[0], "cluster": f"other-{cluster}"}])
        snap = board.snapshot()
        assert not snap.ok and "has no records of cluster" in snap.empty  # nothing yet
        # the topic holds another cluster's: the message names what it holds, as the CLI's
        assert "(it holds: " in snap.empty and "pick one with --cluster" in snap.empty

        for done, upto in ((0, half), (half, len(records))):
            produce_journal(kafka_bootstrap, records[done:upto])
            snap = board.snapshot()
            full = build_snapshot([orjson.dumps(r) for r in records[:upto]])
            assert snap.ok and snap.view.records == upto
            assert v.queue_rows(snap.view) == v.queue_rows(full.view)
            assert snap.usage.hourly_rows() == full.usage.hourly_rows()
            assert snap.delivered == full.delivered
        # the first fold found nothing; the records were folded once, in two refreshes
        assert board.refolds == 2
        assert board.snapshot() is snap  # nothing new: the same snapshot, charts kept
    finally:
        board.close()  # its Kafka tail keeps a consumer on a thread

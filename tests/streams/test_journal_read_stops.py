"""A Kafka journal read that stops before the end offsets it saw at the start (nothing
came for `IDLE_TIMEOUT_S`: a stalled broker) says so, rather than answering from part of
the journal without a word."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Callable

import pytest

from streams import sources, topics
from streams.sources import EmptyJournal, journal_lines, kafka_batches
from streams.topic_admin import Topics, create_topics
from tests.e2e.kafka_journal import produce_journal

pytestmark = pytest.mark.kafka


def _lines(bootstrap: str) -> list[bytes]:
    try:
        return list(journal_lines(kafka=bootstrap, cluster="c"))
    except EmptyJournal:
        return []


def _batches(bootstrap: str) -> list[bytes]:
    return [line for batch, _ in kafka_batches(bootstrap, "c") for line in batch]


def _said(caplog: pytest.LogCaptureFixture) -> list[str]:
    """What the read logged (caplog also holds whatever else the process logged, such
    as asyncio's note on an earlier test's task collected meanwhile: a full-run failure)."""
    return [r.getMessage() for r in caplog.records if r.name == "allot.sources"]


@pytest.mark.parametrize(
    "read",
    [
        pytest.param(_lines, id="journal_lines"),
        # `allot usage --kafka`, the dashboard's refresh: stopped without a word
        pytest.param(_batches, id="kafka_batches"),
    ],
)
def test_a_read_that_stops_short_of_the_end_says_where(
    kafka_bootstrap: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    read: Callable[[str], list[bytes]],
) -> None:
    mine = Topics.suffixed(f"-short-{uuid.uuid4().hex[:10]}")
    asyncio.run(create_topics(kafka_bootstrap, topics=mine))
    monkeypatch.setattr(topics, "JOURNAL", mine.journal)
    records = [
        {"type": "clock.tick", "id": f"t{i}", "time": 1.0 + i, "cluster": "c", "actor": "a"}
        for i in range(2)
    ]
    produce_journal(kafka_bootstrap, records, topic=mine.journal)
    caplog.set_level(logging.WARNING, logger="allot.sources")
    assert len(read(kafka_bootstrap)) == 2  # unhurried
    assert not _said(caplog)
    # a broker that never answers in time: the read gives up at once, before any record
    # (below zero: at 0.0 a clock reading equal to the start's would still fetch)
    monkeypatch.setattr(sources, "IDLE_TIMEOUT_S", -1.0)
    assert read(kafka_bootstrap) == []
    (said,) = _said(caplog)
    assert said.startswith(
        f"warning: stopped reading {mine.journal} (partition 0 at offset 0 of 2)"
    )
    assert said.endswith("the answer is as of the last record read")

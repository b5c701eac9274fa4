"""A Kafka journal read that stops before the end offsets it saw at the start (nothing
came for `IDLE_TIMEOUT_S`: a stalled broker) says so, rather than answering from part of
the journal without a word."""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest

from streams import sources, topics
from streams.sources import SourceError, journal_lines
from streams.worker import Topics, create_topics
from tests.e2e.kafka_journal import produce_journal

pytestmark = pytest.mark.kafka


def test_a_read_that_stops_short_of_the_end_says_where(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    mine = Topics.suffixed(f"-short-{uuid.uuid4().hex[:10]}")
    asyncio.run(create_topics(kafka_bootstrap, topics=mine))
    monkeypatch.setattr(topics, "JOURNAL", mine.journal)
    records = [
        {"type": "clock.tick", "id": f"t{i}", "time": 1.0 + i, "cluster": "c", "actor": "a"}
        for i in range(2)
    ]
    produce_journal(kafka_bootstrap, records, topic=mine.journal)
    assert len(list(journal_lines(kafka=kafka_bootstrap, cluster="c"))) == 2  # unhurried
    # a broker that never answers in time: the read gives up at once, before any record
    monkeypatch.setattr(sources, "IDLE_TIMEOUT_S", 0.0)
    caplog.set_level(logging.WARNING, logger="allot.sources")
    with pytest.raises(SourceError, match="no records"):
        list(journal_lines(kafka=kafka_bootstrap, cluster="c"))
    (said,) = [r.getMessage() for r in caplog.records if r.name == "allot.sources"]
    assert said.startswith(
        f"warning: stopped reading {mine.journal} (partition 0 at offset 0 of 2)"
    )
    assert said.endswith("the answer is as of the last record read")

"""`allot queue --start` and `allot why` on a Kafka journal read the topic once: the
journal's last record time is read from the end of the topic first, so the fold keeps
the state the forecast starts from (files did this already: tests/projections/test_forecast.py)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from allot.commands.views import fold_for_forecast, forecast_view, journal_reader
from domain.rederive import is_cause
from projections.forecast import forecast
from projections.views import decode_lines, fold
from streams import topics
from streams.sources import last_record_time
from streams.topic_admin import Topics, create_topics
from tests.e2e.kafka_journal import produce_journal

pytestmark = pytest.mark.kafka

HORIZON_S = 30 * 86400.0


@pytest.fixture
def own_journal_topic(kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """A journal topic of this test's own: what it reads from the end is only its writes."""
    mine = Topics.suffixed(f"-t{uuid.uuid4().hex[:10]}")
    asyncio.run(create_topics(kafka_bootstrap, topics=mine))
    monkeypatch.setattr(topics, "JOURNAL", mine.journal)
    return mine.journal


def test_the_forecast_on_kafka_reads_the_journal_once(
    kafka_bootstrap: str, tiny_journal: Path, own_journal_topic: str
) -> None:
    cluster = "fc"
    records = [
        {**orjson.loads(line), "cluster": cluster}
        for line in tiny_journal.read_bytes().splitlines()
        if line.strip()
    ]
    # cut mid-run, before an input: work is waiting and running there
    models = list(decode_lines(orjson.dumps(r) for r in records))
    cut = next(i for i in range(len(models) // 2, len(models)) if is_cause(models[i]))
    records, models = records[:cut], models[:cut]
    later = {**records[0], "cluster": "other", "time": records[-1]["time"] + 86400.0}
    produce_journal(kafka_bootstrap, [*records, later])  # another cluster's record last

    assert last_record_time(kafka=kafka_bootstrap, cluster=cluster) == records[-1]["time"]
    assert last_record_time(kafka=kafka_bootstrap, cluster="other") == later["time"]
    assert last_record_time(kafka=kafka_bootstrap, cluster="nobody") is None

    read = journal_reader(kafka_bootstrap, None, None, cluster)
    consumed = 0

    def counted() -> Iterator[Any]:
        nonlocal consumed
        for record in read():
            consumed += 1
            yield record

    view = fold_for_forecast(read, kafka_bootstrap, None, None, cluster)
    assert view.records == len(records) and view.tail_copy is not None
    got = forecast_view(view, counted, HORIZON_S)
    assert consumed == 0  # not read again
    exact = forecast(fold(models), HORIZON_S, journal=models)
    assert got.starts and got.starts == exact.starts and got.ends == exact.ends

    # not told the end, the same forecast reads the topic a second time
    forecast_view(fold(read()), counted, HORIZON_S)
    assert consumed == len(records)

"""RepeatFilter: a library's repeated log lines pass once per period, others always."""

from __future__ import annotations

import logging

from streams.log_repeats import RepeatFilter


def _record(name: str, msg: str, level: int = logging.ERROR) -> logging.LogRecord:
    return logging.LogRecord(name, level, __file__, 1, msg, None, None)


def test_repeats_pass_once_per_period_and_say_how_many_were_held() -> None:
    now = [0.0]
    f = RepeatFilter("aiokafka", every_s=30.0, clock=lambda: now[0])
    passed = []
    for second in range(61):  # the same error every second for a minute
        now[0] = float(second)
        record = _record("aiokafka.conn", "Unable to connect to node %s")
        if f.filter(record):
            passed.append((second, record.msg))
    assert passed == [
        (0, "Unable to connect to node %s"),
        (30, "Unable to connect to node %s [and 29 more like it in the last 30 s]"),
        (60, "Unable to connect to node %s [and 29 more like it in the last 30 s]"),
    ]


def test_other_messages_and_other_loggers_always_pass() -> None:
    f = RepeatFilter("aiokafka", every_s=30.0, clock=lambda: 0.0)
    assert f.filter(_record("aiokafka.conn", "one"))
    assert f.filter(_record("aiokafka.conn", "another"))  # another message
    assert f.filter(_record("aiokafka.conn", "one", logging.WARNING))  # another level
    assert not f.filter(_record("aiokafka.conn", "one"))
    for _ in range(3):  # the worker's own lines are never held back
        assert f.filter(_record("streams.worker", "cluster c: broker unreachable"))
    assert f.filter(_record("aiokafkax", "one"))  # only the prefix's own loggers


def _failure(name: str, error: BaseException | None) -> logging.LogRecord:
    exc_info = (type(error), error, None) if error is not None else None
    return logging.LogRecord(
        name, logging.ERROR, __file__, 1, "Future exception was never retrieved", None, exc_info
    )


def test_a_fenced_producers_unretrieved_futures_are_not_reported() -> None:
    """A newer worker fences this one: it says so in one line; aiokafka's own futures
    failing with ProducerFenced were printed after it as tracebacks."""
    from aiokafka.errors import KafkaConnectionError, ProducerFenced

    from streams.log_repeats import FencedFilter

    keep = FencedFilter().filter
    assert not keep(_failure("asyncio", ProducerFenced()))
    assert keep(_failure("asyncio", KafkaConnectionError()))  # anything else still shows
    assert keep(_failure("allot.worker", ProducerFenced()))  # the worker's own lines too
    assert keep(_failure("asyncio", None))

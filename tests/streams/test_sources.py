"""Reading a journal file's end ahead of folding it (`streams.sources.last_record_time`),
and finding the records about a few workloads, or of a few types, without folding it
(`streams.sources.records_naming`, `records_of_type`)."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest

from streams import topics
from streams.inbox import new_ulid
from streams.sources import last_record_time, records_naming, records_of_type, ulid_time


def _line(time: object, cluster: str = "default", pad: int = 0) -> bytes:
    record = {"type": "clock.tick", "id": f"t{time}", "time": time, "cluster": cluster}
    if pad:
        record["pad"] = "x" * pad
    return orjson.dumps(record) + b"\n"


@pytest.mark.parametrize(
    ("lines", "cluster", "expected"),
    [
        ([_line(1.0), _line(2.5)], None, 2.5),
        ([_line(1.0), _line(2.5), b'{"type": "clock.ti'], None, 2.5),  # a write cut short
        ([_line(1.0), _line(2.5), b"\n", b"  \n"], None, 2.5),
        ([_line(1.0), _line(2.0, cluster="b")], "default", None),  # another cluster last
        ([_line(1.0), _line(2.0, cluster="b")], "b", 2.0),
        ([_line(1.0), _line("soon")], None, None),
        ([_line(1.0), _line(True)], None, None),
        ([_line(1.0), b"[1, 2]\n"], None, None),
        ([_line(1.0), b"{not json\n"], None, None),
        ([_line(1.0), _line(9.0, pad=70_000)], None, None),  # longer than the end read
        ([_line(1.0, pad=70_000), _line(9.0)], None, 9.0),
        ([], None, None),
    ],
    ids=[
        "last",
        "torn-tail",
        "blank-lines",
        "other-cluster",
        "its-cluster",
        "time-text",
        "time-bool",
        "not-an-object",
        "not-json",
        "huge-last-line",
        "huge-earlier-line",
        "empty",
    ],
)
def test_the_last_complete_records_time(
    tmp_path: Path, lines: list[bytes], cluster: str | None, expected: float | None
) -> None:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"".join(lines))
    assert last_record_time(journal=path, cluster=cluster) == expected
    assert last_record_time(data=tmp_path, cluster=cluster) == expected


def test_no_file_or_no_file_source_gives_none(tmp_path: Path) -> None:
    assert last_record_time(journal=tmp_path / "missing.jsonl") is None
    assert last_record_time(data=tmp_path / "missing") is None
    assert last_record_time() is None


# ------------------------------------------------------------------ records_naming

NOW = time.time()
BASE = new_ulid(NOW - 60)  # a job array's base: tasks BASE_0, BASE_1
PLAIN = new_ulid(NOW - 30)
SOON = new_ulid(NOW + 3600)  # made by a clock an hour ahead: Kafka is not searched back to now


def _about(type_: str, workload: str, cluster: str = "default", **more: Any) -> dict[str, Any]:
    return {"type": type_, "id": uuid.uuid4().hex, "time": 1.0, "cluster": cluster,
            "workload": workload, **more}  # fmt: skip


NAMING = [
    _about("workload.submitted", f"{BASE}_0"),
    _about("workload.submitted", f"{BASE}_1"),
    _about("workload.submitted", PLAIN),
    _about("workload.placed", PLAIN, attempt=1),
    _about("workload.preempted", f"{BASE}_0", beneficiary=PLAIN),  # PLAIN only beside it
    _about("workload.rejected", BASE, error="unknown workload; it names a job array"),
    _about("workload.submitted", f"{BASE}_10x"),  # not a task: not an index
    _about("workload.submitted", PLAIN + "Z"),  # another id it starts
    _about("workload.submitted", f"{PLAIN}_2", cluster="other"),
    _about("workload.submitted", 'we"ird\\id'),
    _about("workload.submitted", "w1"),
    _about("workload.submitted", SOON),
]


# (ids, the records found: indexes into NAMING)
NAMED = [
    pytest.param([PLAIN], [2, 3], id="a-workload"),
    pytest.param([BASE], [0, 1, 4, 5], id="an-arrays-base"),
    pytest.param([f"{BASE}_1", "w1"], [1, 10], id="a-task-and-a-name"),
    pytest.param(['we"ird\\id'], [9], id="escaped-in-json"),
    pytest.param([new_ulid(NOW)], [], id="nothing-names-it"),
    pytest.param([SOON], [11], id="a-clock-ahead"),
    pytest.param([], [], id="no-ids"),
]


@pytest.mark.parametrize(("ids", "found"), NAMED)
@pytest.mark.parametrize("where", ["file", "data"])
def test_records_naming_finds_the_records_about_workloads_and_their_tasks(
    tmp_path: Path, where: str, ids: list[str], found: list[int]
) -> None:
    path = tmp_path / "journal.jsonl"
    lines = [orjson.dumps(r) + b"\n" for r in NAMING]
    # and a last line cut short: not a record yet
    path.write_bytes(b"".join(lines) + orjson.dumps(_about("workload.placed", PLAIN))[:-3])
    source = {"journal": path} if where == "file" else {"data": tmp_path}
    assert records_naming(ids, cluster="default", **source) == [NAMING[i] for i in found]


def test_records_naming_without_a_journal_finds_nothing(tmp_path: Path) -> None:
    assert records_naming([PLAIN], data=tmp_path) == []
    (tmp_path / "journal.jsonl").write_bytes(b"")
    assert records_naming([PLAIN], data=tmp_path) == []


def _budget(type_: str, allocation: str, cluster: str = "default", **more: Any) -> dict[str, Any]:
    return {"type": type_, "id": uuid.uuid4().hex, "time": 1.0, "cluster": cluster,
            "allocation": allocation, **more}  # fmt: skip


BUDGETS = [
    _budget("budget.set", "lab", weight=1.0),
    _budget("budget.rejected", "lab/x", input_type="budget.set", error="not a manager"),
    _budget("budget.set", "lab/a", weight=2.0),
    _budget("workload.submitted", "lab/a", note='"budget.set"'),  # names it, is not one
    _budget("budget.set", "lab/b", cluster="other", weight=1.0),
    _budget("budget.removed", "lab/a"),
    _budget("budget.settled", "lab/c"),  # a longer type with the same start
]


@pytest.mark.parametrize("where", ["file", "data"])
def test_records_of_type_finds_the_budget_trees_records(tmp_path: Path, where: str) -> None:
    """What `budget set` reads for its typo check instead of folding the journal: the
    accepted changes of the tree, of its cluster only; not a rejection, nor a record
    that merely quotes the type, nor a last line still being written."""
    path = tmp_path / "journal.jsonl"
    cut = orjson.dumps(_budget("budget.set", "lab/late", weight=1.0))[:-3]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in BUDGETS) + cut)
    source = {"journal": path} if where == "file" else {"data": tmp_path}
    kinds = ("budget.set", "budget.removed")
    assert records_of_type(kinds, cluster="default", **source) == [BUDGETS[i] for i in (0, 2, 5)]
    assert records_of_type(kinds, cluster="other", **source) == [BUDGETS[4]]
    assert records_of_type((), **source) == []
    (tmp_path / "new").mkdir()  # a folder whose scheduler wrote nothing yet
    assert records_of_type(kinds, data=tmp_path / "new") == []


def test_ulid_time_reads_the_milliseconds_in_an_id() -> None:
    assert ulid_time(new_ulid(1_767_225_600.123)) == 1_767_225_600.123
    assert ulid_time(f"{new_ulid(1_767_225_600.5)}_3") == 1_767_225_600.5
    assert ulid_time("w1") is None and ulid_time("01kq8m4xj7aaaaaaaaaaaaaaaa") is None


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("ids", "found"),
    [
        pytest.param([PLAIN], [2, 3], id="a-workload"),
        pytest.param([BASE], [0, 1, 4, 5], id="an-arrays-base"),
        pytest.param(["w1"], [10], id="not-a-ulid-from-the-start"),
        # records are searched for from ID_CLOCK_SLACK_S before the time in the id: a
        # clock an hour ahead of the broker's misses them (the scheduler then answers)
        pytest.param([SOON], [], id="a-clock-ahead"),
        pytest.param([BASE, SOON], [0, 1, 4, 5, 11], id="from-the-oldest-id"),
    ],
)
def test_records_naming_in_kafka_searches_from_the_time_in_the_ids(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch, ids: list[str], found: list[int]
) -> None:
    from streams.topic_admin import Topics, create_topics
    from tests.e2e.kafka_journal import produce_journal

    mine = Topics.suffixed(f"-n{uuid.uuid4().hex[:10]}")
    asyncio.run(create_topics(kafka_bootstrap, topics=mine))
    monkeypatch.setattr(topics, "JOURNAL", mine.journal)
    produce_journal(kafka_bootstrap, NAMING)
    got = records_naming(ids, kafka=kafka_bootstrap, cluster="default")
    assert got == [NAMING[i] for i in found]


@pytest.mark.kafka
def test_a_kafka_tail_waiting_for_a_clusters_first_record_reads_on_from_where_it_was(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A poller for a cluster with no record yet (the local launcher started before its
    scheduler, on a topic other clusters share) read the whole topic, twice, on each
    poll: the tail kept no position until the cluster's first record."""
    from streams import sources
    from streams.sources import EmptyJournal, KafkaTail
    from streams.topic_admin import Topics, create_topics
    from tests.e2e.kafka_journal import produce_journal

    mine = Topics.suffixed(f"-t{uuid.uuid4().hex[:10]}")
    asyncio.run(create_topics(kafka_bootstrap, topics=mine))
    monkeypatch.setattr(topics, "JOURNAL", mine.journal)
    others = [{"type": "clock.tick", "id": f"o{n}", "time": n, "cluster": "old"} for n in range(20)]
    produce_journal(kafka_bootstrap, others)
    tail = KafkaTail(kafka_bootstrap, "new")
    try:
        with pytest.raises(EmptyJournal, match="it holds: old"):
            tail.read()
        assert tail.positions == {0: (19, "o19")}  # read once: not again

        def whole(**_: Any) -> Any:
            raise AssertionError("the whole topic read again")

        monkeypatch.setattr(sources, "journal_lines", whole)
        with pytest.raises(EmptyJournal, match="it holds: old"):
            tail.read()  # said again, from what it knows
        first = {"type": "clock.tick", "id": "n0", "time": 20, "cluster": "new"}
        produce_journal(kafka_bootstrap, [others[0] | {"id": "o20"}, first])
        lines, mark = tail.read()
        assert [orjson.loads(line) for line in lines] == [first]
        tail.advance(mark)
        assert tail.positions == {0: (21, "n0")}
    finally:
        tail.close()


@pytest.mark.kafka
def test_a_kafka_tail_keeps_one_consumer_between_reads_and_stops_it(
    kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The local launcher polls its journal twice a second through a KafkaTail, which
    started a new consumer (connect, log in, fetch metadata) for every read. It keeps
    one now, still sees what is appended after each read, and `close()` stops it."""
    import threading

    from streams import sources
    from streams.sources import KafkaTail
    from streams.topic_admin import Topics, create_topics
    from tests.e2e.kafka_journal import produce_journal

    mine = Topics.suffixed(f"-k{uuid.uuid4().hex[:10]}")
    asyncio.run(create_topics(kafka_bootstrap, topics=mine))
    monkeypatch.setattr(topics, "JOURNAL", mine.journal)
    opened: list[Any] = []
    open_journal = sources._open_journal

    async def counted(*args: Any, **kwargs: Any) -> Any:
        consumer, parts = await open_journal(*args, **kwargs)
        opened.append(consumer)
        return consumer, parts

    monkeypatch.setattr(sources, "_open_journal", counted)
    threads_before = set(threading.enumerate())
    ticks = [{"type": "clock.tick", "id": f"t{n}", "time": n, "cluster": "c"} for n in range(6)]
    produce_journal(kafka_bootstrap, ticks[:2])
    tail = KafkaTail(kafka_bootstrap, "c")
    try:
        seen: list[dict] = []
        for more in ([], ticks[2:4], [], ticks[4:]):
            produce_journal(kafka_bootstrap, more)
            lines, mark = tail.read()
            tail.advance(mark)
            seen += [orjson.loads(line) for line in lines]
        assert seen == ticks  # each read saw what was appended before it, once
        assert len(opened) == 1  # one consumer for the four reads
    finally:
        tail.close()
    assert opened[0]._closed  # stopped
    assert not [t for t in set(threading.enumerate()) - threads_before if t.is_alive()]


def _stuck_tail() -> Any:
    """A KafkaTail whose read never ends (a broker that does not answer), to interrupt;
    `reading` is set once the read has begun."""
    from streams.sources import KafkaTail

    class StuckTail(KafkaTail):
        reading = threading.Event()

        async def _read_kept(self, put: Any) -> None:
            self.reading.set()
            await asyncio.Event().wait()

    return StuckTail("127.0.0.1:9", "c")


def test_ctrl_c_during_a_kafka_tail_read_stops_the_poller() -> None:
    """The local launcher stops on SIGINT. Ctrl-C that came while a read waited for the
    broker was taken as a failed read (a BrokerError, which a poller retries), so the
    launcher polled on and had to be killed."""
    tail = _stuck_tail()

    def interrupt_when_reading() -> None:
        if tail.reading.wait(10):  # a real SIGINT: it wakes a blocked wait
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    threading.Thread(target=interrupt_when_reading, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            tail.read()
    finally:
        tail.close()
    assert tail._loop is None  # closed: no read left running on its thread

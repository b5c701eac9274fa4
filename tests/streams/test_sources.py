"""Reading a journal file's end ahead of folding it (`streams.sources.last_record_time`)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from streams.sources import last_record_time


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

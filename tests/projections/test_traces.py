"""Trace importers (`projections.traces`) and `allot trace import`."""

from __future__ import annotations

import gzip
from pathlib import Path
from typing import Any

import orjson
import pytest
import typer
from typer.testing import CliRunner

from allot.commands import trace as trace_cli
from domain.events import WorkloadSubmitted
from projections.traces import (
    FORMATS,
    TraceError,
    load_allocation_map,
    read_trace,
    to_record,
)

FIXTURES = Path(__file__).parent / "fixtures"
PHILLY_HEADER = "timestamp,duration,num_gpus,gpu_time,cluster"
OPENB_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)
CSV_HEADER = "submit_time,runtime,gpus,allocation,workload,user,min_runtime,resumable,priority,tags"


def sub(time: float, allocation: str, gpus: int, **fields: Any) -> dict[str, Any]:
    """An expected submission: every key present, None where the trace is silent."""
    out: dict[str, Any] = {
        "time": time,
        "workload": None,
        "actor": None,
        "allocation": allocation,
        "gpus": gpus,
        "runtime": None,
        "min_runtime": None,
        "resumable": None,
        "priority": None,
        "tags": [],
        "name": None,
    }
    out.update(fields)
    return out


def write(tmp_path: Path, name: str, *lines: str) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# ------------------------------------------------------------------ happy paths

EXPECTED = {
    "allot-csv": [
        sub(
            0.0,
            "lab/olmo/pretrain",
            8,
            workload="train-1",
            actor="alice",
            runtime=3600.0,
            min_runtime=28800.0,
            resumable=True,
            priority=1,
            tags=["train", "big"],
        ),
        sub(
            30.0,
            "lab/olmo/debug",
            1,
            actor="bob",
            runtime=900.0,
            min_runtime=900.0,
            resumable=False,
            tags=["debug"],
        ),
        sub(30.0, "lab/tulu/sft", 2),
        sub(
            3600.0,
            "lab/tulu/rl",
            16,
            workload="rl-9",
            actor="carol",
            runtime=604800.0,
            min_runtime=0.0,
            resumable=True,
            priority=-1,
            tags=["rl", "long"],
        ),
    ],
    "philly": [
        sub(0.0, "7f04d8", 1, runtime=600.0),
        sub(0.0, "11d7e2", 1, runtime=30.0),
        sub(1800.0, "6214e9", 4),
        sub(3600.0, "6214e9", 8, runtime=7200.0),
        sub(86400.0, "11d7e2", 2),
    ],
    "alibaba-openb": [
        sub(0.0, "Guaranteed", 1, tags=["Guaranteed"], name="pod-f"),
        sub(100.0, "Burstable", 8, runtime=4000.0, tags=["Burstable"], name="pod-a"),
        sub(300.0, "BE", 1, runtime=290.0, tags=["BE"], name="pod-b"),
        sub(600.0, "LS", 2, tags=["LS"], name="pod-e"),
    ],
    "allot-jsonl": [
        sub(
            0.0,
            "lab/olmo/pretrain",
            8,
            workload="train-1",
            actor="alice",
            runtime=3600.0,
            min_runtime=28800.0,
            resumable=True,
            priority=1,
            tags=["train", "big"],
        ),
        # written by an earlier import: its made-up actor and id read as unnamed
        sub(45.5, "lab/tulu/sft", 2, name="sft sweep"),
    ],
}


@pytest.mark.parametrize(
    ("fmt", "fixture", "rows", "no_gpu", "unscheduled", "unfinished"),
    [
        pytest.param("allot-csv", "submissions.csv", 5, 1, 0, 1, id="allot-csv"),
        pytest.param("philly", "philly.csv", 6, 1, 0, 2, id="philly"),
        # pod-d is Pending (never scheduled): not imported
        pytest.param("alibaba-openb", "openb_pod_list_sample.csv", 6, 1, 1, 2, id="alibaba-openb"),
        pytest.param("allot-jsonl", "submissions.jsonl", 3, 1, 0, 1, id="allot-jsonl"),
    ],
)
def test_reads_each_format(
    fmt: str, fixture: str, rows: int, no_gpu: int, unscheduled: int, unfinished: int
) -> None:
    result = read_trace(FIXTURES / fixture, fmt)
    assert result.submissions == EXPECTED[fmt]
    counts = (
        result.rows,
        result.skipped_bad,
        result.skipped_no_gpu,
        result.skipped_unscheduled,
        result.unfinished,
    )
    assert counts == (rows, 0, no_gpu, unscheduled, unfinished)


def test_formats_constant_lists_every_reader() -> None:
    assert FORMATS == ("allot-csv", "philly", "alibaba-openb", "allot-jsonl")
    with pytest.raises(TraceError, match=r"unknown trace format 'slurm'.*allot-csv"):
        read_trace(FIXTURES / "philly.csv", "slurm")


@pytest.mark.parametrize(
    ("fmt", "lines", "first_time"),
    [
        pytest.param(
            "allot-csv", [CSV_HEADER, "500,60,1,a", "100,60,1,a"], 100.0, id="allot-csv-as-given"
        ),
        pytest.param(
            "philly",
            [PHILLY_HEADER, "2017-10-03 09:06:40,60,1,,a", "2017-10-03 09:00:00,60,1,,a"],
            0.0,
            id="philly-rebased",
        ),
        pytest.param(
            "alibaba-openb",
            [
                OPENB_HEADER,
                "p1,1,1,1,1000,,LS,Running,500,600,500",
                "p0,1,1,1,1000,,LS,x,100,200,90",
            ],
            0.0,
            id="openb-rebased",
        ),
    ],
)
def test_trace_start_is_kept_or_rebased(
    tmp_path: Path, fmt: str, lines: list[str], first_time: float
) -> None:
    result = read_trace(write(tmp_path, "t.csv", *lines), fmt)
    assert [s["time"] for s in result.submissions] == [first_time, first_time + 400.0]


# ------------------------------------------------------------------ philly order


def test_philly_sorts_unsorted_rows_keeping_row_order_on_ties(tmp_path: Path) -> None:
    lines = (FIXTURES / "philly.csv").read_text().splitlines()
    reversed_file = write(tmp_path, "reversed.csv", lines[0], *reversed(lines[1:]))
    result = read_trace(reversed_file, "philly")
    assert [s["time"] for s in result.submissions] == [0.0, 0.0, 1800.0, 3600.0, 86400.0]
    # the two 09:00 jobs tie: reversed file order puts 11d7e2 (30 s) before 7f04d8 (600 s)
    assert [(s["allocation"], s["runtime"]) for s in result.submissions[:2]] == [
        ("11d7e2", 30.0),
        ("7f04d8", 600.0),
    ]


@pytest.mark.parametrize(
    ("timestamp", "seconds_after_first"),
    [
        pytest.param("2017-10-03 09:00:05", 5.0, id="plain"),
        pytest.param("2017-10-03T09:00:05Z", 5.0, id="iso-z"),
        pytest.param("2017-10-03 11:00:05+02:00", 5.0, id="offset"),
        pytest.param("2017-10-03 09:00:05.5", 5.5, id="fraction"),
        pytest.param("1507021205", 5.0, id="epoch-seconds"),
        # the Philly trace writes `2017-10-03 00:08:00 PDT`: a derived CSV keeping the
        # zone was refused row by row (`is not a timestamp`), or needed --skip-bad for all
        pytest.param("2017-10-03 02:00:05 PDT", 5.0, id="pdt"),
        pytest.param("2017-10-03 01:00:05 PST", 5.0, id="pst"),
        pytest.param("2017-10-03 09:00:05 UTC", 5.0, id="utc"),
        pytest.param("2017-10-03 09:00:05 GMT", 5.0, id="gmt"),
        pytest.param("2017-10-03 02:00:05.5 pdt", 5.5, id="lower-case-fraction"),
    ],
)
def test_philly_timestamps_are_utc_or_in_their_named_zone(
    tmp_path: Path, timestamp: str, seconds_after_first: float
) -> None:
    path = write(
        tmp_path, "p.csv", PHILLY_HEADER, "2017-10-03 09:00:00,1,1,,a", f"{timestamp},1,1,,b"
    )
    assert [s["time"] for s in read_trace(path, "philly").submissions] == [0.0, seconds_after_first]


@pytest.mark.parametrize(
    "duration", ["", "NaN", "nan", "None"], ids=["empty", "NaN", "nan", "None"]
)
def test_philly_missing_duration_is_unfinished(tmp_path: Path, duration: str) -> None:
    path = write(tmp_path, "p.csv", PHILLY_HEADER, f"2017-10-03 09:00:00,{duration},2,,a")
    result = read_trace(path, "philly")
    assert result.unfinished == 1
    assert result.submissions[0]["runtime"] is None


# ------------------------------------------------------------------ alibaba semantics


@pytest.mark.parametrize(
    ("num_gpu", "gpu_milli", "gpus"),
    [
        pytest.param("1", "220", 1, id="fraction-220-rounds-up"),
        pytest.param("1", "50", 1, id="fraction-50-rounds-up"),
        pytest.param("1", "1000", 1, id="whole"),
        pytest.param("8", "1000", 8, id="multi-gpu"),
        pytest.param("0.5", "", 1, id="fractional-count"),
        pytest.param("2.0", "1000", 2, id="pandas-float"),
    ],
)
def test_openb_fractional_gpus_round_up(
    tmp_path: Path, num_gpu: str, gpu_milli: str, gpus: int
) -> None:
    path = write(
        tmp_path, "o.csv", OPENB_HEADER, f"p,1000,1,{num_gpu},{gpu_milli},,BE,Running,0,10,0"
    )
    assert [s["gpus"] for s in read_trace(path, "alibaba-openb").submissions] == [gpus]


def test_openb_pods_without_gpu_are_skipped_and_counted(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "o.csv",
        OPENB_HEADER,
        "cpu1,8000,1,0,0,,BE,Running,0,10,0",
        "gpu1,8000,1,1,300,,BE,Running,1,10,1",
        "cpu2,8000,1,0,,,LS,Pending,2,3,",
    )
    result = read_trace(path, "alibaba-openb")
    assert [s["name"] for s in result.submissions] == ["gpu1"]
    # cpu2 is Pending too: counted once, as a pod without GPUs
    assert (result.rows, result.skipped_no_gpu, result.skipped_unscheduled) == (3, 2, 0)


@pytest.mark.parametrize(
    "row",
    [
        pytest.param("cpu,8000,1,0,0,,,Running,0,10,0", id="no-qos"),
        pytest.param("cpu,8000,1,0,0,,BE,Running,soon,10,0", id="bad-creation"),
        pytest.param("cpu,8000,1,0,0,,BE,Running,100,50,100", id="deleted-before-created"),
    ],
)
def test_openb_cpu_only_pods_are_skipped_whatever_their_other_cells(
    tmp_path: Path, row: str
) -> None:
    """A CPU-only pod is no GPU work: a cell it does not need made it a malformed row,
    which stopped the import (or, with skip_bad, counted it as bad, not as CPU-only)."""
    path = write(tmp_path, "o.csv", OPENB_HEADER, row, "gpu,8000,1,1,300,,BE,Running,1,10,1")
    result = read_trace(path, "alibaba-openb")
    assert [s["name"] for s in result.submissions] == ["gpu"]
    assert (result.skipped_bad, result.skipped_no_gpu) == (0, 1)


@pytest.mark.parametrize(
    ("creation", "deletion", "scheduled", "runtime"),
    [
        pytest.param("100", "400", "150", 250.0, id="scheduled-to-deleted"),
        pytest.param("0", "400", "0", 400.0, id="created-and-scheduled-at-zero"),
        # no pod ran before it existed: from creation, not from the earlier schedule
        pytest.param("100", "400", "50", 300.0, id="scheduled-before-creation"),
        pytest.param("100", "", "120", None, id="no-deletion-unfinished"),
        pytest.param("100", "0", "120", None, id="deletion-zero-unfinished"),
        pytest.param("100", "120", "120", 0.0, id="scheduled-as-deleted"),
    ],
)
def test_openb_runtime(
    tmp_path: Path, creation: str, deletion: str, scheduled: str, runtime: float | None
) -> None:
    path = write(
        tmp_path,
        "o.csv",
        OPENB_HEADER,
        f"p,1,1,1,1000,,LS,Running,{creation},{deletion},{scheduled}",
    )
    result = read_trace(path, "alibaba-openb")
    assert result.submissions[0]["runtime"] == runtime
    assert result.unfinished == (1 if runtime is None else 0)


@pytest.mark.parametrize(
    ("header", "row"),
    [
        # the published files' Pending pods: deleted while waiting, no scheduled_time
        pytest.param(OPENB_HEADER, "p,1,1,1,1000,,BE,Pending,100,160,", id="pending"),
        pytest.param(OPENB_HEADER, "p,1,1,1,1000,,BE,Failed,100,160,", id="failed-unscheduled"),
        pytest.param(OPENB_HEADER, "p,1,1,1,1000,,BE,Pending,100,,", id="still-pending-at-cut"),
        pytest.param(OPENB_HEADER, "p,1,1,1,1000,,BE,Pending,100,160,NaN", id="scheduled-nan"),
        # 0 stands for "none" (as deletion_time 0 does) when the pod was created later
        pytest.param(OPENB_HEADER, "p,1,1,1,1000,,LS,Running,100,400,0", id="scheduled-zero"),
        # scheduled only after it was deleted: it never ran while it existed
        pytest.param(OPENB_HEADER, "p,1,1,1,1000,,LS,Running,100,110,120", id="after-deletion"),
        pytest.param(
            "name,num_gpu,qos,pod_phase,creation_time,deletion_time",
            "p,1,LS,Pending,100,160",
            id="no-scheduled-column-pending",
        ),
    ],
)
def test_openb_pods_never_scheduled_are_skipped_and_counted(
    tmp_path: Path, header: str, row: str
) -> None:
    """A pod that never ran has no runtime: it was imported with `deletion - creation`
    (or until the horizon) as one, work made up for every policy compared."""
    ran = "ran,1,1,1,1000,,LS,Running,50,90,60" if header == OPENB_HEADER else "ran,1,LS,x,50,90"
    path = write(tmp_path, "o.csv", header, ran, row)
    result = read_trace(path, "alibaba-openb")
    assert [s["name"] for s in result.submissions] == ["ran"]
    assert (result.rows, result.skipped_unscheduled, result.skipped_no_gpu) == (2, 1, 0)
    assert (result.skipped_bad, result.unfinished) == (0, 0)


@pytest.mark.parametrize(
    ("header", "row", "runtime"),
    [
        # bound to a node, so holding its GPU, whatever phase it was last seen in
        pytest.param(OPENB_HEADER, "p,1,1,1,1000,,LS,Pending,100,160,130", 30.0, id="pending"),
        pytest.param(
            "name,num_gpu,qos,pod_phase,creation_time,deletion_time",
            "p,1,LS,Running,100,160",
            60.0,
            id="no-scheduled-column-from-creation",
        ),
        pytest.param(
            "name,num_gpu,qos,creation_time,deletion_time",
            "p,1,LS,100,160",
            60.0,
            id="no-phase-no-scheduled-column",
        ),
    ],
)
def test_openb_pods_that_ran_are_kept(
    tmp_path: Path, header: str, row: str, runtime: float
) -> None:
    result = read_trace(write(tmp_path, "o.csv", header, row), "alibaba-openb")
    assert [s["runtime"] for s in result.submissions] == [runtime]
    assert result.skipped_unscheduled == 0


# ------------------------------------------------------------------ allocations

PHILLY_TENANTS = ["7f04d8", "11d7e2", "6214e9", "6214e9", "11d7e2"]
OPENB_TENANTS = ["Guaranteed", "Burstable", "BE", "LS"]


@pytest.mark.parametrize(
    ("fmt", "fixture", "use_map", "prefix", "expected"),
    [
        pytest.param("philly", "philly.csv", False, "", PHILLY_TENANTS, id="philly-tenant-itself"),
        pytest.param(
            "philly",
            "philly.csv",
            False,
            "vc/",
            ["vc/7f04d8", "vc/11d7e2", "vc/6214e9", "vc/6214e9", "vc/11d7e2"],
            id="philly-prefix",
        ),
        pytest.param(
            "philly",
            "philly.csv",
            True,
            "",
            ["lab/tulu/sft", "11d7e2", "lab/olmo/pretrain", "lab/olmo/pretrain", "11d7e2"],
            id="philly-map-unmapped-is-tenant",
        ),
        pytest.param(
            "philly",
            "philly.csv",
            True,
            "vc/",
            ["lab/tulu/sft", "vc/11d7e2", "lab/olmo/pretrain", "lab/olmo/pretrain", "vc/11d7e2"],
            id="philly-map-then-prefix",
        ),
        pytest.param(
            "alibaba-openb",
            "openb_pod_list_sample.csv",
            True,
            "qos/",
            ["qos/Guaranteed", "qos/Burstable", "lab/filler", "qos/LS"],
            id="openb-qos-map-then-prefix",
        ),
        pytest.param(
            "allot-csv",
            "submissions.csv",
            False,
            "x/",
            ["x/lab/olmo/pretrain", "x/lab/olmo/debug", "x/lab/tulu/sft", "x/lab/tulu/rl"],
            id="allot-csv-prefix",
        ),
    ],
)
def test_allocation_map_and_prefix(
    fmt: str, fixture: str, use_map: bool, prefix: str, expected: list[str]
) -> None:
    mapping = load_allocation_map(FIXTURES / "allocation_map.yaml") if use_map else None
    result = read_trace(FIXTURES / fixture, fmt, allocation_map=mapping, allocation_prefix=prefix)
    assert [s["allocation"] for s in result.submissions] == expected
    targets = set(mapping.values()) if mapping else set()
    missed = [a.removeprefix(prefix) for a in expected if use_map and a not in targets]
    assert result.unmapped == {t: missed.count(t) for t in missed}
    if fmt == "alibaba-openb":  # the qos stays a tag whatever the allocation
        assert [s["tags"] for s in result.submissions] == [[t] for t in OPENB_TENANTS]


def test_allocation_map_keeps_tenant_ids_as_written(tmp_path: Path) -> None:
    path = write(tmp_path, "map.yaml", "0123: lab/a", "1e5: lab/b", "yes: lab/c", "'7': lab/d")
    assert load_allocation_map(path) == {
        "0123": "lab/a",
        "1e5": "lab/b",
        "yes": "lab/c",
        "7": "lab/d",
    }


def test_empty_allocation_map_maps_nothing(tmp_path: Path) -> None:
    assert load_allocation_map(write(tmp_path, "map.yaml", "# nothing yet")) == {}


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        pytest.param(["- vc1", "- vc2"], r"must be a mapping of source tenant", id="a-list"),
        pytest.param(["vc1: 3"], r"tenant 'vc1': allocation must be a path.*got 3", id="number"),
        pytest.param(["vc1: ''"], r"tenant 'vc1': allocation must be a path", id="empty-path"),
        pytest.param(["vc1: [a, b]"], r"tenant 'vc1': allocation must be a path", id="list-value"),
        # was written to every LS row as its allocation
        pytest.param(
            ["LS: lab/latency sensitive"],
            r"tenant 'LS': allocation must be a path like lab/olmo/pretrain \(names separated by"
            r" '/', without spaces or control characters\), got 'lab/latency sensitive'",
            id="space-in-path",
        ),
        pytest.param(["vc1: lab//a"], r"tenant 'vc1': .*got 'lab//a'", id="empty-name"),
        pytest.param(["vc1: a", "vc1: b"], r":? ?line 2: tenant 'vc1' is mapped twice", id="twice"),
        pytest.param(
            ["vc1: a", "vc2: [b"], r"map\.yaml:\d+: allocation map is not valid YAML", id="yaml"
        ),
    ],
)
def test_allocation_map_errors(tmp_path: Path, lines: list[str], message: str) -> None:
    path = write(tmp_path, "map.yaml", *lines)
    with pytest.raises(TraceError, match=message) as info:
        load_allocation_map(path)
    assert str(path) in str(info.value)


def test_allocation_map_missing_file(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"nope\.yaml: allocation map not found"):
        load_allocation_map(tmp_path / "nope.yaml")


# ------------------------------------------------------------------ malformed input


@pytest.mark.parametrize(
    ("fmt", "lines", "line", "column", "detail"),
    [
        pytest.param(
            "philly",
            [PHILLY_HEADER, "2017-10-03 09:00:00,60,1,60,a", "2017-10-03 09:00:00,60,x,60,a"],
            3,
            "num_gpus",
            "'x' is not an integer",
            id="philly-gpus",
        ),
        pytest.param(
            "philly",
            [PHILLY_HEADER, "yesterday,60,1,60,a"],
            2,
            "timestamp",
            "'yesterday' is not a timestamp",
            id="philly-timestamp",
        ),
        pytest.param(
            "philly",
            [PHILLY_HEADER, "2017-10-03 09:00:00,60,1,60,"],
            2,
            "cluster",
            "missing value",
            id="philly-no-cluster",
        ),
        # the real reason, not "is not a duration"
        pytest.param(
            "philly",
            [PHILLY_HEADER, "2017-10-03 09:00:00,-5,1,60,a"],
            2,
            "duration",
            "'-5' must be >= 0",
            id="philly-negative-duration",
        ),
        pytest.param(
            "allot-csv",
            [CSV_HEADER, "0,-15m,1,a"],
            2,
            "runtime",
            "'-15m' must be >= 0",
            id="csv-negative-duration-with-unit",
        ),
        pytest.param(
            "allot-csv",
            [CSV_HEADER, "0,60,1,a,,,-inf"],
            2,
            "min_runtime",
            "'-inf' is not a finite number of seconds",
            id="csv-infinite-duration",
        ),
        pytest.param(
            "allot-csv",
            [CSV_HEADER, "0,60,1,a", "", "0,60,1.5,a"],
            4,
            "gpus",
            "'1.5' is not an integer",
            id="csv-gpus-blank-line-counted",
        ),
        pytest.param(
            "allot-csv",
            [CSV_HEADER, "0,10 parsecs,1,a"],
            2,
            "runtime",
            "'10 parsecs' is not a duration",
            id="csv-runtime",
        ),
        pytest.param(
            "allot-csv",
            [CSV_HEADER, "0,60,1,a,,,,maybe"],
            2,
            "resumable",
            "'maybe' is not a boolean",
            id="csv-resumable",
        ),
        pytest.param(
            "allot-csv",
            [CSV_HEADER, "0,60,1,a,,,,,high"],
            2,
            "priority",
            "'high' is not an integer",
            id="csv-priority",
        ),
        pytest.param(
            "allot-csv",
            [CSV_HEADER, "0,60,-2,a"],
            2,
            "gpus",
            "'-2' must be >= 0",
            id="csv-negative-gpus",
        ),
        pytest.param(
            "alibaba-openb",
            [OPENB_HEADER, "p,1,1,1,1000,,LS,Running,soon,10,"],
            2,
            "creation_time",
            "'soon' is not a number",
            id="openb-creation",
        ),
        pytest.param(
            "alibaba-openb",
            [OPENB_HEADER, "p,1,1,1,1000,,LS,Running,100,50,100"],
            2,
            "deletion_time",
            "'50' is before creation_time 100",
            id="openb-deleted-before-created",
        ),
        # a non-finite or absurd value used to pass: -inf turned every time to null, a
        # count past 64 bits crashed the writer with a traceback
        pytest.param(
            "philly",
            [PHILLY_HEADER, "2017-10-03 09:00:00,60,1,60,a", "-inf,60,1,60,a"],
            3,
            "timestamp",
            "'-inf' is not a timestamp",
            id="philly-infinite-time",
        ),
        # an ISO time had no range check: a 0001-01-01 placeholder row moved the others
        # two thousand years after the trace start (a 3-job run simulated for ever)
        pytest.param(
            "philly",
            [PHILLY_HEADER, "2017-10-03 09:00:00,60,1,60,a", "0001-01-01 00:00:00,60,1,60,a"],
            3,
            "timestamp",
            "'0001-01-01 00:00:00' is out of range (a time from 1970 to 9999)",
            id="philly-placeholder-year-1",
        ),
        pytest.param(
            "philly",
            [PHILLY_HEADER, "1969-12-31T23:59:59Z,60,1,60,a"],
            2,
            "timestamp",
            "'1969-12-31T23:59:59Z' is out of range",
            id="philly-before-1970",
        ),
        pytest.param(
            "philly",
            [PHILLY_HEADER, "2017-10-03 09:00:00,60,99999999999999999999,60,a"],
            2,
            "num_gpus",
            "'99999999999999999999' is too large",
            id="philly-huge-gpus",
        ),
        pytest.param(
            "allot-csv",
            [CSV_HEADER, "0,60,1e30,a"],
            2,
            "gpus",
            "'1e30' is too large",
            id="csv-huge-gpus",
        ),
        pytest.param(
            "allot-csv",
            [CSV_HEADER, "0,60,1,a,,,,,-99999999999999999999"],
            2,
            "priority",
            "'-99999999999999999999' is too large",
            id="csv-huge-priority",
        ),
        pytest.param(  # the domain's bound (domain.events.MAX_PRIORITY), not 64 bits
            "allot-csv",
            [CSV_HEADER, "0,60,1,a,,,,,2147483647", "0,60,1,a,,,,,2147483648"],
            3,
            "priority",
            "'2147483648' is too large (at most 2,147,483,647)",
            id="csv-priority-just-beyond",
        ),
        # names the scheduler refuses (domain.admission): imported, every such job was
        # then rejected in the simulation
        pytest.param(
            "allot-csv",
            [CSV_HEADER + ",name", f"0,60,1,a,,,,,,,{'n' * 256}", f"0,60,1,a,,,,,,,{'n' * 257}"],
            3,
            "name",
            "257 characters; at most 256",
            id="csv-long-name",
        ),
        pytest.param(
            "allot-csv",
            [CSV_HEADER + ",name", '0,60,1,a,,,,,,,"sweep\tlr"'],
            2,
            "name",
            "'sweep\\tlr' has control characters",
            id="csv-name-with-a-tab",
        ),
        pytest.param(
            "allot-csv",
            [CSV_HEADER, f"0,60,1,a,{'w' * 257}"],
            2,
            "workload",
            "257 characters; at most 256",
            id="csv-long-workload",
        ),
        pytest.param(
            "allot-csv",
            [CSV_HEADER, f"0,60,1,a,,{'u' * 257}"],
            2,
            "user",
            "257 characters; at most 256",
            id="csv-long-user",
        ),
        pytest.param(
            "allot-csv",
            [CSV_HEADER, f"0,60,1,a,,,,,,{';'.join(f't{i}' for i in range(65))}"],
            2,
            "tags",
            "65 tags; at most 64",
            id="csv-too-many-tags",
        ),
        pytest.param(
            "allot-csv",
            [CSV_HEADER, f"0,60,1,a,,,,,,ok;{'t' * 257}"],
            2,
            "tags",
            "a tag of 257 characters; at most 256",
            id="csv-long-tag",
        ),
        pytest.param(
            "alibaba-openb",
            [OPENB_HEADER, '"pod\x01",1,1,1,1000,,LS,Running,100,150,100'],
            2,
            "name",
            "'pod\\x01' has control characters",
            id="openb-name-control",
        ),
        pytest.param(
            "alibaba-openb",
            [OPENB_HEADER, f"p,1,1,1,1000,,{'Q' * 257},Running,100,150,100"],
            2,
            "qos",
            "a tag of 257 characters; at most 256",
            id="openb-long-qos",
        ),
        pytest.param(
            "alibaba-openb",
            [OPENB_HEADER, "p,1,1,1e300,1000,,LS,Running,100,150,100"],
            2,
            "num_gpu",
            "'1e300' is too large",
            id="openb-huge-gpus",
        ),
    ],
)
def test_malformed_row_names_file_line_and_column(
    tmp_path: Path, fmt: str, lines: list[str], line: int, column: str, detail: str
) -> None:
    path = write(tmp_path, "bad.csv", *lines)
    with pytest.raises(TraceError) as info:
        read_trace(path, fmt)
    assert str(info.value).startswith(f"{path}:{line}: column {column}: {detail}")
    assert info.value.row_error


@pytest.mark.parametrize(
    ("fmt", "header", "row"),
    [
        pytest.param("allot-csv", CSV_HEADER, '0,3600,8,a,"j0,alice,1h,true,1,x', id="allot-csv"),
        pytest.param("philly", PHILLY_HEADER, '2017-10-03 09:00:00,60,1,60,"a', id="philly"),
        pytest.param(
            "alibaba-openb", OPENB_HEADER, '"p,1,1,1,1000,,LS,Running,100,150,100', id="openb"
        ),
    ],
)
def test_a_quote_left_open_is_an_error_not_one_row_holding_the_rest(
    tmp_path: Path, fmt: str, header: str, row: str
) -> None:
    """CSV reads an open quote as a field running to the next quote, maybe the file's
    end: every later row vanished into one field, exit 0 (even with --skip-bad)."""
    rest = {
        "allot-csv": "{i},600,1,a,j{i},bob,0,false,0,",
        "philly": "2017-10-03 10:00:00,60,1,60,a",
        "alibaba-openb": "q{i},1,1,1,1000,,LS,Running,100,150,100",
    }[fmt]
    path = write(tmp_path, "open.csv", header, row, *(rest.format(i=i) for i in range(1, 51)))
    for skip_bad in (False, True):
        with pytest.raises(TraceError, match=r"open\.csv:2: a quoted field runs on over 51 lines"):
            read_trace(path, fmt, skip_bad=skip_bad)


@pytest.mark.parametrize(
    "allocation",
    ["lab/my team", "lab/\x00nul"],
    ids=["space", "nul"],
)
def test_a_tenant_that_makes_no_allocation_path_is_a_row_error(
    tmp_path: Path, allocation: str
) -> None:
    """A space or NUL made a path no command can show."""
    path = write(tmp_path, "bad.csv", CSV_HEADER, f"0,60,1,{allocation}", "1,60,1,lab/a")
    with pytest.raises(TraceError, match="makes no allocation path") as info:
        read_trace(path, "allot-csv")
    assert info.value.row_error
    assert str(info.value).endswith("; --allocation-map can name it")
    assert str(info.value).startswith(f"{path}:2: column allocation: ")


@pytest.mark.parametrize(
    ("fmt", "header", "row", "column"),
    [
        pytest.param("allot-csv", CSV_HEADER, "0,1e10,1,lab/a", "runtime", id="allot-csv"),
        # milliseconds read as seconds: 5e9 s is 158 years
        pytest.param(
            "philly", PHILLY_HEADER, "2017-10-03 11:00:00,5000000000,1,,a", "duration", id="philly"
        ),
        pytest.param(
            "alibaba-openb",
            OPENB_HEADER,
            "pod-1,1000,1000,1,1000,V100,LS,Running,100,1000000000000,200",
            "deletion_time",
            id="openb",
        ),
    ],
)
def test_a_runtime_over_ten_years_is_a_bad_row(
    tmp_path: Path, fmt: str, header: str, row: str, column: str
) -> None:
    """Only submit times were bounded: one such row made a run without a horizon last
    centuries (or run out of memory)."""
    path = write(tmp_path, "long.csv", header, row)
    with pytest.raises(TraceError) as info:
        read_trace(path, fmt)
    assert str(info.value).startswith(f"{path}:2: column {column}: a runtime of ")
    assert "is over ten years" in str(info.value) and info.value.row_error
    assert read_trace(path, fmt, skip_bad=True).skipped_bad == 1


@pytest.mark.parametrize(
    ("fmt", "line", "tags"),
    [
        # an empty-cell marker is no tag, as it is no user, priority, ... in other columns
        pytest.param("allot-csv", "0,60,1,lab/a,,,,,,nan", [], id="csv-nan"),
        pytest.param("allot-csv", "0,60,1,lab/a,,,,,,NaN", [], id="csv-NaN"),
        pytest.param("allot-csv", "0,60,1,lab/a,,,,,,-", [], id="csv-dash"),
        pytest.param("allot-csv", "0,60,1,lab/a,,,,,,None", [], id="csv-None"),
        # a tag named twice counted the workload's wait twice under it in summary.json
        pytest.param("allot-csv", "0,60,1,lab/a,,,,,,debug;x;debug", ["debug", "x"], id="csv-dup"),
        pytest.param("allot-csv", "0,60,1,lab/a,,,,,,a; a ;;b", ["a", "b"], id="csv-dup-spaced"),
        pytest.param(
            "allot-jsonl",
            '{"time": 0, "allocation": "lab/a", "gpus": 1, "tags": ["a", "b", "a"]}',
            ["a", "b"],
            id="jsonl-dup",
        ),
        pytest.param(
            "allot-jsonl",
            '{"time": 0, "allocation": "lab/a", "gpus": 1, "tags": ["", "a"]}',
            ["a"],
            id="jsonl-empty",
        ),
    ],
)
def test_tags_are_kept_once_and_an_empty_marker_is_none(
    tmp_path: Path, fmt: str, line: str, tags: list[str]
) -> None:
    lines = [line] if fmt == "allot-jsonl" else [CSV_HEADER, line]
    result = read_trace(write(tmp_path, "t.txt", *lines), fmt)
    assert [s["tags"] for s in result.submissions] == [tags]


def test_a_tag_with_control_characters_is_a_bad_row(tmp_path: Path) -> None:
    """Admission refuses it: the import let it through, for every such workload to be
    rejected in the simulation one by one."""
    path = write(tmp_path, "t.csv", CSV_HEADER, '0,60,1,lab/a,w1,alice,,,,"a\tb"')
    with pytest.raises(TraceError, match=r"column tags: tag 'a\\tb' has control"):
        read_trace(path, "allot-csv")


@pytest.mark.parametrize(
    "prefix",
    ["my lab/", "/", "lab//", "lab\t/"],
    ids=["space", "slash-first", "empty-name", "tab"],
)
def test_an_allocation_prefix_that_makes_no_path_is_refused_once(
    tmp_path: Path, prefix: str
) -> None:
    """It was blamed on every row ("'vc1' makes no allocation path"), and skip_bad
    skipped them all: an empty import, exit 0."""
    path = write(tmp_path, "p.csv", PHILLY_HEADER, "2017-10-03 09:00:00,60,1,60,vc1")
    for skip_bad in (False, True):
        with pytest.raises(TraceError) as info:
            read_trace(path, "philly", allocation_prefix=prefix, skip_bad=skip_bad)
        assert str(info.value).startswith(
            f"--allocation-prefix {prefix!r} makes no allocation path with a tenant after it"
        )
        assert not info.value.row_error


@pytest.mark.parametrize("prefix", ["vc/", "vc-", "lab/olmo/"])
def test_an_allocation_prefix_completed_by_the_tenant_is_fine(tmp_path: Path, prefix: str) -> None:
    path = write(tmp_path, "p.csv", PHILLY_HEADER, "2017-10-03 09:00:00,60,1,60,vc1")
    [row] = read_trace(path, "philly", allocation_prefix=prefix).submissions
    assert row["allocation"] == prefix + "vc1"


def test_import_with_a_bad_prefix_writes_nothing_even_with_skip_bad(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", PHILLY_HEADER, "2017-10-03 09:00:00,60,1,60,vc1")
    out = tmp_path / "subs.jsonl"
    result = run(path, "-f", "philly", "--allocation-prefix", "my lab/", "--skip-bad", "-o", out)
    assert result.exit_code == 2
    assert result.stderr.startswith("error: --allocation-prefix 'my lab/' makes no allocation")
    assert not out.exists()


def test_malformed_row_message_matches_the_documented_shape(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "philly.csv",
        PHILLY_HEADER,
        *["2017-10-03 09:00:00,60,1,60,a"] * 15,
        "2017,1,x,,a",
    )
    with pytest.raises(TraceError) as info:
        read_trace(path, "philly")
    assert str(info.value) == f"{path}:17: column num_gpus: 'x' is not an integer"


@pytest.mark.parametrize(
    ("line_text", "message"),
    [
        pytest.param(
            '{"time": 1, "allocation": "a", "gpus": "two"}', "field gpus: 'two'", id="gpus"
        ),
        pytest.param('{"time": 1, "allocation": "a"', "not JSON", id="not-json"),
        pytest.param('{"time": 1, "gpus": 1}', "field allocation: missing", id="no-allocation"),
        pytest.param(
            '{"type": "workload.cancelled", "time": 1, "allocation": "a", "gpus": 1}',
            "field type: 'workload.cancelled' is not 'workload.submitted'",
            id="other-type",
        ),
        pytest.param("[1, 2]", "expected a JSON object, got list", id="array"),
        pytest.param(
            '{"time": 1, "allocation": "a", "gpus": 1, "resumable": "yes"}',
            "field resumable",
            id="resumable-string",
        ),
        pytest.param(
            '{"time": 1, "allocation": "a", "gpus": 1, "name": "two\\nlines"}',
            "field name: 'two\\nlines' has control characters",
            id="name-newline",
        ),
        pytest.param(
            orjson.dumps(
                {"time": 1, "allocation": "a", "gpus": 1, "tags": [str(i) for i in range(65)]}
            ).decode(),
            "field tags: 65 tags; at most 64",
            id="too-many-tags",
        ),
        pytest.param(
            orjson.dumps({"time": 1, "allocation": "a", "gpus": 1, "actor": "a" * 300}).decode(),
            "field actor: 300 characters; at most 256",
            id="long-actor",
        ),
        pytest.param(
            '{"time": 1, "allocation": "a", "gpus": 1, "priority": -2147483648}',
            "field priority: -2147483648 is too large (at most 2,147,483,647)",
            id="priority-just-beyond",
        ),
        pytest.param(
            '{"time": 1, "allocation": "a", "gpus": 1, "priority": 99999999999999999999}',
            "field priority: 100000000000000000000 is too large",  # orjson reads a float
            id="huge-priority",
        ),
    ],
)
def test_malformed_jsonl_names_file_line_and_field(
    tmp_path: Path, line_text: str, message: str
) -> None:
    good = '{"time": 0, "allocation": "a", "gpus": 1}'
    path = write(tmp_path, "subs.jsonl", good, line_text)
    with pytest.raises(TraceError) as info:
        read_trace(path, "allot-jsonl")
    assert str(info.value).startswith(f"{path}:2: {message}")


@pytest.mark.parametrize(
    ("fmt", "header", "missing"),
    [
        pytest.param("philly", "timestamp,duration,gpu_time", "num_gpus, cluster", id="philly"),
        pytest.param("allot-csv", "submit_time,gpus,allocation,user", "runtime", id="allot-csv"),
        pytest.param(
            "alibaba-openb",
            "name,cpu_milli,num_gpu,gpu_milli,qos,creation_time",
            "deletion_time",
            id="openb",
        ),
    ],
)
def test_missing_required_columns_are_named(
    tmp_path: Path, fmt: str, header: str, missing: str
) -> None:
    path = write(tmp_path, "t.csv", header, "1,2,3")
    with pytest.raises(TraceError, match="missing required column") as info:
        read_trace(path, fmt)
    assert str(info.value).startswith(f"{path}:1: missing required column")
    assert f" {missing} (header has: {header.replace(',', ', ')})" in str(info.value)
    assert not info.value.row_error


@pytest.mark.parametrize("fmt", ["allot-csv", "philly", "alibaba-openb"])
def test_empty_file_is_an_error(tmp_path: Path, fmt: str) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("\n\n")
    with pytest.raises(TraceError, match=r"empty\.csv: empty file; expected a header"):
        read_trace(path, fmt)


def test_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match=r"gone\.csv: no such file"):
        read_trace(tmp_path / "gone.csv", "philly")


@pytest.mark.parametrize(
    ("fmt", "lines", "kept", "bad"),
    [
        pytest.param(
            "philly",
            [
                PHILLY_HEADER,
                "2017-10-03 09:00:00,60,1,,a",
                "2017-10-03 09:00:00,60,x,,a",
                "not-a-date,60,1,,a",
                "2017-10-03 09:01:00,60,2,,b",
                "2017-10-03 09:02:00,60,0,,b",
            ],
            2,
            2,
            id="philly",
        ),
        pytest.param(
            "allot-csv",
            [CSV_HEADER, "0,60,1,a", "x,60,1,a", "5,60,1,a,,,,perhaps"],
            1,
            2,
            id="allot-csv",
        ),
        pytest.param(
            "alibaba-openb",
            [OPENB_HEADER, "p0,1,1,1,500,,BE,Running,0,10,0", "p1,1,1,one,500,,BE,Running,0,10,0"],
            1,
            1,
            id="openb",
        ),
        pytest.param(
            "allot-csv",
            [CSV_HEADER + ",name", "0,60,1,a,,,,,,,ok", f"1,60,1,a,,,,,,,{'n' * 300}"],
            1,
            1,
            id="allot-csv-long-name",
        ),
        pytest.param(
            "allot-jsonl",
            ['{"time": 0, "allocation": "a", "gpus": 1}', "{oops", '{"time": 1}'],
            1,
            2,
            id="allot-jsonl",
        ),
    ],
)
def test_skip_bad_skips_and_counts(
    tmp_path: Path, fmt: str, lines: list[str], kept: int, bad: int
) -> None:
    path = write(tmp_path, "t.csv", *lines)
    with pytest.raises(TraceError):
        read_trace(path, fmt)
    result = read_trace(path, fmt, skip_bad=True)
    assert (len(result.submissions), result.skipped_bad, result.rows) == (
        kept,
        bad,
        len(lines) - (fmt != "allot-jsonl"),
    )
    assert len(result.bad_examples) == min(bad, 3)
    assert all(e.startswith(f"{path}:") for e in result.bad_examples)


# ------------------------------------------------------------------ robust parsing


def test_bom_crlf_whitespace_case_blank_lines_and_extra_columns(tmp_path: Path) -> None:
    clean = (FIXTURES / "philly.csv").read_text().splitlines()
    messy = ["  Timestamp , DURATION ,num_gpus, gpu_time ,cluster,user_comment "]
    for i, line in enumerate(clean[1:]):
        messy.append(" , ".join(cell for cell in line.split(",")) + f",note {i}")
        messy.append("   ")
    path = tmp_path / "messy.csv"
    path.write_bytes("\ufeff".encode() + "\r\n".join(messy).encode() + b"\r\n")
    result = read_trace(path, "philly")
    assert result.submissions == EXPECTED["philly"]
    assert result.rows == 6


def test_quoted_cells_and_short_rows(tmp_path: Path) -> None:
    path = write(tmp_path, "q.csv", CSV_HEADER, '0,60,1,"lab/a",,,,,,"x;y"', "5,60,1,lab/b")
    result = read_trace(path, "allot-csv")
    assert [(s["allocation"], s["tags"]) for s in result.submissions] == [
        ("lab/a", ["x", "y"]),
        ("lab/b", []),
    ]


def test_gzipped_trace_reads_like_the_plain_one(tmp_path: Path) -> None:
    path = tmp_path / "philly.csv.gz"
    path.write_bytes(gzip.compress((FIXTURES / "philly.csv").read_bytes()))
    assert read_trace(path, "philly").submissions == EXPECTED["philly"]


# ------------------------------------------------------------------ records


def test_record_omits_what_the_trace_does_not_say() -> None:
    philly = read_trace(FIXTURES / "philly.csv", "philly").submissions
    assert to_record(philly[2], 3) == {
        "type": "workload.submitted",
        "v": 1,
        "id": "trace-3",
        "time": 1800.0,
        "cluster": "default",
        "allocation": "6214e9",
        "gpus": 4,
        "tags": [],
    }
    full = to_record(EXPECTED["allot-csv"][0], 1)
    assert (full["workload"], full["actor"], full["runtime"], full["resumable"]) == (
        "train-1",
        "alice",
        3600.0,
        True,
    )
    assert (full["min_runtime"], full["priority"], full["tags"]) == (28800.0, 1, ["train", "big"])


# ------------------------------------------------------------------ CLI


def cli() -> typer.Typer:
    """A stand-in for allot/cli.py: mounts the sub-app the same way."""
    root = typer.Typer()

    @root.callback()
    def main() -> None:
        """allot"""

    root.add_typer(trace_cli.app, name="trace")
    return root


def run(*args: str | Path) -> Any:
    return CliRunner().invoke(cli(), ["trace", "import", *map(str, args)])


@pytest.mark.parametrize(
    ("fmt", "fixture"),
    [
        pytest.param("allot-csv", "submissions.csv", id="allot-csv"),
        pytest.param("philly", "philly.csv", id="philly"),
        pytest.param("alibaba-openb", "openb_pod_list_sample.csv", id="alibaba-openb"),
    ],
)
def test_import_round_trips_through_allot_jsonl(tmp_path: Path, fmt: str, fixture: str) -> None:
    out = tmp_path / "nested" / "subs.jsonl"
    result = run(FIXTURES / fixture, "--format", fmt, "--out", out)
    assert result.exit_code == 0, result.output
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    for record in records:  # the workload.submitted contract, once a scenario names them
        WorkloadSubmitted.model_validate({"actor": "someone", "workload": "an-id", **record})
    assert [r["id"] for r in records] == [f"trace-{n}" for n in range(1, len(records) + 1)]

    read_back = read_trace(out, "allot-jsonl").submissions
    assert read_back == EXPECTED[fmt]  # nothing made up on the way
    assert [to_record(s, n) for n, s in enumerate(read_back, start=1)] == records

    again = tmp_path / "again.jsonl"
    assert run(out, "--format", "allot-jsonl", "--out", again).exit_code == 0
    assert again.read_bytes() == out.read_bytes()


def test_import_prints_a_one_line_summary(tmp_path: Path) -> None:
    out = tmp_path / "subs.jsonl"
    result = run(
        FIXTURES / "philly.csv",
        "--format",
        "philly",
        "--allocation-map",
        FIXTURES / "allocation_map.yaml",
        "--allocation-prefix",
        "vc/",
        "--out",
        out,
    )
    assert result.exit_code == 0, result.output
    summary = result.stdout.strip()
    assert "\n" not in summary
    assert summary.startswith("6 rows read from")
    assert "5 submissions written to" in summary
    assert "skipped 0 bad, 1 without GPUs; 2 unfinished" in summary  # no pods: no "never"
    assert result.stderr.strip() == (  # a tenant the map missed is named, not silently kept
        f"warning: 1 tenant not in {FIXTURES / 'allocation_map.yaml'}, kept as "
        "'vc/<tenant>': 11d7e2 (2 rows)"
    )
    allocations = [orjson.loads(line)["allocation"] for line in out.read_bytes().splitlines()]
    assert allocations == [
        "lab/tulu/sft",
        "vc/11d7e2",
        "lab/olmo/pretrain",
        "lab/olmo/pretrain",
        "vc/11d7e2",
    ]


def test_import_counts_pods_never_scheduled(tmp_path: Path) -> None:
    out = tmp_path / "subs.jsonl"
    result = run(FIXTURES / "openb_pod_list_sample.csv", "--format", "alibaba-openb", "--out", out)
    assert result.exit_code == 0, result.output
    assert "skipped 0 bad, 1 without GPUs, 1 never scheduled; 2 unfinished" in result.stdout
    assert "4 submissions written" in result.stdout
    assert b"pod-d" not in out.read_bytes()


def test_import_skip_bad_reports_the_count(tmp_path: Path) -> None:
    path = write(tmp_path, "bad.csv", PHILLY_HEADER, "2017-10-03 09:00:00,60,1,,a", "x,60,1,,a")
    out = tmp_path / "subs.jsonl"
    failed = run(path, "--format", "philly", "--out", out)
    assert failed.exit_code == 2
    assert failed.stderr.strip() == (
        f"error: {path}:3: column timestamp: 'x' is not a timestamp (expected YYYY-MM-DD HH:MM:SS)"
        " (--skip-bad skips malformed rows)"
    )
    assert not out.exists()
    skipped = run(path, "--format", "philly", "--skip-bad", "--out", out)
    assert skipped.exit_code == 0, skipped.output
    assert "skipped 1 bad" in skipped.stdout
    assert skipped.stderr.strip() == (  # which row, and why
        f"skipped {path}:3: column timestamp: 'x' is not a timestamp (expected YYYY-MM-DD HH:MM:SS)"
    )


def test_import_skip_bad_says_how_many_reasons_it_does_not_list(tmp_path: Path) -> None:
    """`skipped 6 bad` listed three reasons and stopped, as if that were all of them."""
    rows = [f"x{n},60,1,,a" for n in range(1, 7)]
    path = write(tmp_path, "bad.csv", PHILLY_HEADER, "2017-10-03 09:00:00,60,1,,a", *rows)
    result = run(path, "--format", "philly", "--skip-bad", "--out", tmp_path / "subs.jsonl")
    assert result.exit_code == 0, result.output
    assert "skipped 6 bad" in result.stdout
    lines = result.stderr.splitlines()
    assert len(lines) == 4, result.stderr
    for n, line in zip((3, 4, 5), lines, strict=False):
        assert line.startswith(f"  skipped {path}:{n}: "), line
    assert lines[3] == "  … and 3 more"
    three = write(tmp_path, "three.csv", PHILLY_HEADER, "2017-10-03 09:00:00,60,1,,a", *rows[:3])
    result = run(three, "--format", "philly", "--skip-bad", "--out", tmp_path / "three.jsonl")
    assert result.exit_code == 0, result.output
    assert len(result.stderr.splitlines()) == 3  # all three listed, nothing more to say


@pytest.mark.parametrize(
    ("args", "message"),
    [
        pytest.param(
            ["{tmp}/missing.csv", "--format", "philly"],
            "{tmp}/missing.csv: no such file",
            id="missing-file",
        ),
        pytest.param(
            ["{fixtures}/philly.csv", "--format", "slurm"],
            "unknown --format 'slurm'; use one of: allot-csv, philly, alibaba-openb, allot-jsonl",
            id="unknown-format",
        ),
        pytest.param(
            ["{fixtures}/philly.csv", "--format", "philly", "--allocation-map", "{tmp}/m.yaml"],
            "{tmp}/m.yaml: allocation map not found",
            id="missing-map",
        ),
        pytest.param(
            ["{fixtures}/philly.csv", "--format", "allot-csv"],
            "{fixtures}/philly.csv:1: missing required column",
            id="wrong-format-for-file",
        ),
    ],
)
def test_import_errors_are_one_line_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "subs.jsonl"
    fill = {"tmp": str(tmp_path), "fixtures": str(FIXTURES)}
    result = run(*[a.format(**fill) for a in args], "--out", out)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: " + message.format(**fill))
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert not out.exists()


def test_write_submissions_never_leaves_a_half_written_file(tmp_path: Path) -> None:
    """The lines go to a temporary file renamed over --out once complete: a failure half-way
    (here the submissions' source breaking) leaves the old file as it was, and no litter."""
    from projections.traces import write_submissions

    subs = read_trace(FIXTURES / "submissions.csv", "allot-csv").submissions
    out = tmp_path / "subs.jsonl"
    assert write_submissions(subs, out) == len(subs)
    before = out.read_bytes()

    def breaks_half_way() -> Any:
        yield subs[0]
        raise OSError("the trace's disk went away")

    with pytest.raises(OSError, match="went away"):
        write_submissions(breaks_half_way(), out)
    assert out.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["subs.jsonl"]

    fresh = tmp_path / "fresh.jsonl"
    with pytest.raises(OSError):
        write_submissions(breaks_half_way(), fresh)
    assert not fresh.exists()
    assert [p.name for p in tmp_path.iterdir()] == ["subs.jsonl"]


def test_a_workload_id_used_twice_is_a_row_error(tmp_path: Path) -> None:
    """A scenario refuses the same id twice; the import wrote both (exit 0)."""
    path = write(
        tmp_path, "dup.csv", CSV_HEADER, "0,60,1,a,same", "1,60,1,a,other", "2,60,1,a,same"
    )
    with pytest.raises(TraceError) as info:
        read_trace(path, "allot-csv")
    assert str(info.value) == (
        f"{path}:4: column workload: workload id 'same' is used again (first on line 2)"
    )
    assert info.value.row_error
    kept = read_trace(path, "allot-csv", skip_bad=True)
    assert [s["workload"] for s in kept.submissions] == ["same", "other"]


@pytest.mark.parametrize(
    ("fmt", "lines", "workloads"),
    [
        pytest.param(
            "allot-csv",
            [CSV_HEADER, "0,60,1,a", "1,60,1,a,w0000001"],
            [None, "w0000001"],
            id="csv-unnamed-row-1-and-one-named-w0000001",
        ),
        pytest.param(
            "philly",
            [PHILLY_HEADER, "2017-10-03 09:00:00,60,1,60,a", "2017-10-03 09:01:00,60,1,60,a"],
            [None, None],
            id="philly-names-none",
        ),
    ],
)
def test_import_makes_up_no_actor_or_workload_id(
    tmp_path: Path, fmt: str, lines: list[str], workloads: list[str | None]
) -> None:
    """Every import wrote `"actor": "trace"` (no member of a scenario's leaves) and ids
    w0000001, ... (two imported files collided, and a row named w0000001 with them)."""
    out = tmp_path / "subs.jsonl"
    assert run(write(tmp_path, "t.csv", *lines), "--format", fmt, "--out", out).exit_code == 0
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [r.get("workload") for r in records] == workloads
    assert all("actor" not in r for r in records)
    assert [s["workload"] for s in read_trace(out, "allot-jsonl").submissions] == workloads


@pytest.mark.parametrize(
    ("record", "workload", "actor"),
    [
        pytest.param(
            {"id": "trace-7", "actor": "trace", "workload": "w0000007"}, None, None, id="legacy"
        ),
        pytest.param(
            {"id": "trace-2", "actor": "bob", "workload": "w0000001"},
            "w0000001",
            "bob",
            id="named-like-another-position",
        ),
        pytest.param({"actor": "alice", "workload": "w0000001"}, "w0000001", "alice", id="no-id"),
        pytest.param({"id": "trace-1"}, None, None, id="new-unnamed"),
    ],
)
def test_earlier_imports_made_up_actor_and_id_read_as_unnamed(
    tmp_path: Path, record: dict[str, Any], workload: str | None, actor: str | None
) -> None:
    line = orjson.dumps({"time": 0, "allocation": "a", "gpus": 1, **record}).decode()
    [read] = read_trace(write(tmp_path, "old.jsonl", line), "allot-jsonl").submissions
    assert (read["workload"], read["actor"]) == (workload, actor)


def test_a_workload_id_used_twice_in_jsonl_is_a_row_error(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "dup.jsonl",
        '{"time": 0, "allocation": "a", "gpus": 1, "workload": "same"}',
        "",
        '{"time": 1, "allocation": "a", "gpus": 1, "workload": "same"}',
    )
    with pytest.raises(TraceError) as info:
        read_trace(path, "allot-jsonl")
    assert str(info.value) == (
        f"{path}:3: field workload: workload id 'same' is used again (first on line 1)"
    )
    assert info.value.row_error
    assert len(read_trace(path, "allot-jsonl", skip_bad=True).submissions) == 1


@pytest.mark.parametrize(
    ("fmt", "header", "row", "gz"),
    [
        pytest.param("philly", PHILLY_HEADER, "2017-10-03 09:00:00,60,1,60,a", False, id="philly"),
        pytest.param("philly", PHILLY_HEADER, "2017-10-03 09:00:00,60,1,60,a", True, id="gzip"),
        pytest.param(
            "allot-jsonl", None, '{"time": 0, "allocation": "a", "gpus": 1}', False, id="jsonl"
        ),
    ],
)
def test_bytes_not_utf8_name_their_own_line_and_skip_bad_skips_them(
    tmp_path: Path, fmt: str, header: str | None, row: str, gz: bool
) -> None:
    """The decoder read 8 KiB ahead: a bad byte on line 3001 was "near line 2891", and
    it ended the import even with skip_bad."""
    lines = ([header] if header else []) + [row] * 3000
    bad = len(lines) + 1  # the line the bad byte is on
    lines += [row.replace("a", "caf\xe9", 1)] + [row] * 200
    data = "\n".join(lines).encode("latin-1") + b"\n"  # \xe9 alone is not UTF-8
    path = tmp_path / ("t.csv.gz" if gz else "t.csv")
    path.write_bytes(gzip.compress(data) if gz else data)
    with pytest.raises(TraceError) as info:
        read_trace(path, fmt)
    # a CSV names the cell's column too (a JSON line is checked whole)
    column = "" if fmt == "allot-jsonl" else " column cluster:"
    assert str(info.value).startswith(f"{path}:{bad}:{column} not UTF-8 text: ")
    assert info.value.row_error
    result = read_trace(path, fmt, skip_bad=True)
    assert (len(result.submissions), result.skipped_bad) == (3200, 1)


def test_a_header_not_utf8_is_a_file_error(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_bytes(PHILLY_HEADER.encode() + b",\xff\n2017-10-03 09:00:00,60,1,60,a\n")
    with pytest.raises(TraceError, match=r"t\.csv:1: header: not UTF-8 text") as info:
        read_trace(path, "philly", skip_bad=True)
    assert not info.value.row_error


@pytest.mark.parametrize(
    ("file", "given", "meant"),
    [
        pytest.param("philly.csv", "alibaba-openb", "philly", id="philly-as-openb"),
        pytest.param("submissions.csv", "philly", "allot-csv", id="allot-csv-as-philly"),
        pytest.param("openb_pod_list_sample.csv", "allot-csv", "alibaba-openb", id="openb"),
        pytest.param("philly.csv", "allot-jsonl", "philly", id="csv-as-jsonl"),
        pytest.param("submissions.jsonl", "allot-csv", "allot-jsonl", id="jsonl-as-csv"),
    ],
)
def test_a_file_read_in_the_wrong_format_names_the_format_it_looks_like(
    tmp_path: Path, file: str, given: str, meant: str
) -> None:
    """A Philly file given `--format alibaba-openb` was told only which openb columns it
    lacked, leaving the user to recognise the header as another format's."""
    result = run(FIXTURES / file, "--format", given, "--out", tmp_path / "subs.jsonl")
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {FIXTURES / file}:1: ")
    # the one thing to change, and no advice to skip the "bad" rows instead
    assert line.endswith(f"; the file looks like --format {meant}"), line
    # every row "bad" under --skip-bad: the wrong format too, not an empty import
    skipped = run(FIXTURES / file, "--format", given, "--skip-bad", "--out", tmp_path / "s.jsonl")
    assert skipped.exit_code == 2, skipped.output
    assert skipped.stderr.strip().endswith(f"the file looks like --format {meant}")


def test_a_scenario_trace_in_the_wrong_format_names_the_key_to_change(tmp_path: Path) -> None:
    from projections.scenario import ScenarioError, load_scenario

    (tmp_path / "p.csv").write_text((FIXTURES / "philly.csv").read_text())
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "cluster: {name: c, hosts: 2, gpus_per_host: 8}\n"
        "allocations: [{path: vc, weight: 1}]\n"
        "workloads:\n  - trace: {file: p.csv, format: allot-csv}\n"
    )
    with pytest.raises(ScenarioError, match="the file looks like format: philly"):
        load_scenario(scenario, {})


def test_a_bad_row_of_the_right_format_gets_no_format_hint(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", PHILLY_HEADER, "2017-10-03 09:00:00,60,x,,a")
    with pytest.raises(TraceError) as info:
        read_trace(path, "philly")
    assert "looks like" not in str(info.value) and info.value.row_error


# the night US Pacific clocks went back (2017-11-05 02:00 PDT -> 01:00 PST): 23:00 PDT
# the evening before and 05:00 PST that morning are 7 hours apart, not 6
ACROSS_FALL_BACK = ("2017-11-04 23:00:00,60,1,60,vc", "2017-11-05 05:00:00,60,1,60,vc")


def test_philly_timestamps_are_utc_unless_a_timezone_is_given(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", PHILLY_HEADER, *ACROSS_FALL_BACK)
    as_utc = read_trace(path, "philly").submissions
    assert [s["time"] for s in as_utc] == [0.0, 6 * 3600.0]  # the default stays as it was
    pacific = read_trace(path, "philly", timezone="America/Los_Angeles").submissions
    assert [s["time"] for s in pacific] == [0.0, 7 * 3600.0]


def test_a_timestamp_with_its_own_zone_keeps_it(tmp_path: Path) -> None:
    rows = ("2017-11-04T23:00:00-07:00,60,1,60,vc", "2017-11-05T13:00:00Z,60,1,60,vc")
    path = write(tmp_path, "p.csv", PHILLY_HEADER, *rows)
    pacific = read_trace(path, "philly", timezone="America/Los_Angeles").submissions
    assert [s["time"] for s in pacific] == [0.0, 7 * 3600.0]


def test_trace_import_timezone_option(tmp_path: Path) -> None:
    path = write(tmp_path, "p.csv", PHILLY_HEADER, *ACROSS_FALL_BACK)
    out = tmp_path / "subs.jsonl"
    result = run(path, "--format", "philly", "--timezone", "America/Los_Angeles", "--out", out)
    assert result.exit_code == 0, result.output
    times = [orjson.loads(line)["time"] for line in out.read_bytes().splitlines()]
    assert times == [0.0, 7 * 3600.0]
    unknown = run(path, "--format", "philly", "--timezone", "Pacific/Nowhere", "--out", out)
    assert unknown.exit_code == 2
    assert "--timezone 'Pacific/Nowhere': no such time zone" in unknown.stderr
    region = run(path, "--format", "philly", "--timezone", "Pacific", "--out", out)
    assert region.exit_code == 2
    assert region.stderr.splitlines() == [
        "error: --timezone 'Pacific': no such time zone; give an IANA name such as "
        "America/Los_Angeles or UTC (without a time zone database here, install tzdata)"
    ]
    csv = run(
        FIXTURES / "submissions.csv", "--format", "allot-csv", "--timezone", "UTC", "--out", out
    )
    assert csv.exit_code == 2
    assert "--timezone is for --format philly" in csv.stderr
    assert "America/Los_Angeles" in " ".join(run("--help").stdout.split())


def test_a_scenario_trace_takes_a_timezone(tmp_path: Path) -> None:
    from projections.scenario import ScenarioError, load_scenario

    write(tmp_path, "p.csv", PHILLY_HEADER, *ACROSS_FALL_BACK)
    scenario = tmp_path / "s.yaml"
    head = (
        "cluster: {name: c, hosts: 2, gpus_per_host: 8}\n"
        "allocations: [{path: vc, weight: 1}]\n"
        "workloads:\n  - trace: {file: p.csv, format: philly"
    )
    scenario.write_text(head + ", timezone: America/Los_Angeles}\n")
    sc = load_scenario(scenario, {})
    times = [e.time - sc.start for e in sc.timed_inputs() if e.type == "workload.submitted"]
    assert times == [0.0, 7 * 3600.0]
    scenario.write_text(head + ", timezone: Mars/Olympus}\n")
    with pytest.raises(ScenarioError, match="timezone 'Mars/Olympus': no such time zone"):
        load_scenario(scenario, {})


# ------------------------------------------------------------------ real files' shapes
# Fixtures written in the shape of the published files (values made up): Alibaba's
# clusterdata cluster-trace-gpu-v2023/csv/openb_pod_list_*.csv, and a Philly-derived
# CSV keeping the zone names the Philly trace writes after its times.

OPENB_CUT = 12902960.0  # the published files' deletion_time of pods still running


@pytest.mark.parametrize(
    ("fmt", "fixture", "expected", "counts"),
    [
        pytest.param(
            "alibaba-openb",
            "openb_pod_list_real_shape.csv",
            [
                # running when the trace was cut: never ended, not ending at the cut
                sub(0.0, "LS", 1, tags=["LS"], name="openb-pod-0002"),
                sub(431000.0, "LS", 1, tags=["LS"], name="openb-pod-0003"),
                sub(10002000.0, "LS", 1, runtime=1496.0, tags=["LS"], name="openb-pod-0000"),
                sub(10002100.0, "BE", 1, runtime=200.0, tags=["BE"], name="openb-pod-0006"),
                sub(
                    10003000.0,
                    "Burstable",
                    8,
                    runtime=8999.0,
                    tags=["Burstable"],
                    name="openb-pod-0007",
                ),
                sub(10004000.0, "BE", 1, runtime=570.0, tags=["BE"], name="openb-pod-0008"),
                sub(
                    10005000.0,
                    "Guaranteed",
                    1,
                    runtime=1000.0,
                    tags=["Guaranteed"],
                    name="openb-pod-0009",
                ),
            ],
            # rows, no GPU (a CPU pod and a Pending CPU pod), never scheduled, unfinished
            (10, 2, 1, 2),
            id="openb-default-shape",
        ),
        pytest.param(
            "philly",
            "philly_pacific_suffix.csv",
            [
                sub(0.0, "11d7e2", 2),  # 23:00 PDT the evening before: 06:00 UTC
                sub(9000.0, "7f04d8", 1, runtime=120.0),  # 01:30 PDT, first time round
                sub(12600.0, "6214e9", 4),  # 01:30 PST, the hour repeated
                sub(39600.0, "6214e9", 8, runtime=3600.0),
            ],
            (5, 1, 0, 2),
            id="philly-pdt-pst-crlf",
        ),
    ],
)
def test_reads_files_shaped_like_the_published_ones(
    fmt: str, fixture: str, expected: list[dict[str, Any]], counts: tuple[int, ...]
) -> None:
    result = read_trace(FIXTURES / fixture, fmt)
    assert result.submissions == expected
    assert result.skipped_bad == 0
    assert (
        result.rows,
        result.skipped_no_gpu,
        result.skipped_unscheduled,
        result.unfinished,
    ) == counts


def test_openb_pods_running_at_the_cut_never_end(tmp_path: Path) -> None:
    """The published files write the cut as the deletion_time of pods still running
    (with `Running`, a phase they also give pods deleted long before): imported as
    ending then, they looked finished, and a simulation ended them at the cut."""
    path = write(
        tmp_path,
        "o.csv",
        OPENB_HEADER,
        f"long,1,1,1,1000,,LS,Running,0,{OPENB_CUT:.0f},0",
        f"cpu,1,1,0,0,,LS,Running,5,{OPENB_CUT:.0f},5",  # a CPU-only pod shares the cut
        f"done,1,1,2,1000,,LS,Succeeded,10,{OPENB_CUT:.0f},10",  # ended as the trace did
        "short,1,1,1,1000,,BE,Running,20,80,20",  # Running too, deleted long before
    )
    result = read_trace(path, "alibaba-openb")
    runtimes = {s["name"]: s["runtime"] for s in result.submissions}
    assert runtimes == {"long": None, "done": OPENB_CUT - 10, "short": 60.0}
    assert (result.unfinished, result.running_at_cut) == (1, 1)


def test_openb_one_pod_deleted_last_is_no_cut(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "o.csv",
        OPENB_HEADER,
        "a,1,1,1,1000,,LS,Running,0,500,0",
        "b,1,1,1,1000,,LS,Running,10,80,10",
    )
    result = read_trace(path, "alibaba-openb")
    assert [s["runtime"] for s in result.submissions] == [500.0, 70.0]
    assert (result.unfinished, result.running_at_cut) == (0, 0)


def test_a_named_zone_wins_over_the_timezone_option(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "p.csv",
        PHILLY_HEADER,
        "2017-10-03 09:00:00 UTC,1,1,,a",
        "2017-10-03 02:00:00 PDT,1,1,,b",
    )
    submissions = read_trace(path, "philly", timezone="Asia/Tokyo").submissions
    assert [s["time"] for s in submissions] == [0.0, 0.0]


@pytest.mark.parametrize(
    "timestamp",
    [
        pytest.param("2017-10-03 09:00:00 CST", id="ambiguous-zone-name"),
        pytest.param("PDT", id="zone-alone"),
    ],
)
def test_philly_other_zone_names_are_bad_rows(tmp_path: Path, timestamp: str) -> None:
    path = write(tmp_path, "p.csv", PHILLY_HEADER, f"{timestamp},1,1,,a")
    with pytest.raises(TraceError, match=r"column timestamp:.*is not a timestamp"):
        read_trace(path, "philly")


def test_openb_pod_list_without_times_is_refused_saying_why(tmp_path: Path) -> None:
    """The published multigpu*.csv files have no times nor qos: the error listed the
    missing columns, which read like a malformed file rather than one with nothing to
    replay."""
    fixture = FIXTURES / "openb_pod_list_multigpu_shape.csv"
    with pytest.raises(TraceError, match="without creation_time or deletion_time") as info:
        read_trace(fixture, "alibaba-openb")
    assert "nothing to replay" in str(info.value) and not info.value.row_error
    out = tmp_path / "subs.jsonl"
    result = run(fixture, "--format", "alibaba-openb", "--skip-bad", "--out", out)
    assert result.exit_code == 2 and "nothing to replay" in result.stderr
    assert not out.exists()


def test_one_host_is_read_from_allot_csv_and_kept_through_allot_jsonl(tmp_path: Path) -> None:
    """The optional `one_host` column (all GPUs on one host): a true cell is kept through
    `trace import` and read back; false or empty leaves the key out, as before."""
    path = write(
        tmp_path,
        "t.csv",
        "submit_time,runtime,gpus,allocation,one_host",
        "0,1h,8,lab/a,true",
        "60,1h,8,lab/a,false",
        "120,1h,8,lab/a,",
    )
    subs = read_trace(path, "allot-csv").submissions
    assert subs[0] == sub(0.0, "lab/a", 8, runtime=3600.0, one_host=True)
    assert subs[1:] == [sub(t, "lab/a", 8, runtime=3600.0) for t in (60.0, 120.0)]
    out = tmp_path / "subs.jsonl"
    assert run(path, "--format", "allot-csv", "--out", out).exit_code == 0
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert [r.get("one_host") for r in records] == [True, None, None]
    assert read_trace(out, "allot-jsonl").submissions == subs
    bad = write(tmp_path, "b.jsonl", '{"time": 0, "allocation": "a", "gpus": 1, "one_host": 1}')
    with pytest.raises(TraceError, match="one_host"):
        read_trace(bad, "allot-jsonl")


def test_a_one_line_file_in_the_wrong_format_says_its_one_row(tmp_path: Path) -> None:
    """It said "all 1 rows are bad"."""
    path = tmp_path / "one.csv"
    path.write_text((FIXTURES / "philly.csv").read_text().splitlines()[0] + "\n")
    with pytest.raises(TraceError, match=r"one\.csv: its one row is bad as --format allot-jsonl"):
        read_trace(path, "allot-jsonl", skip_bad=True)

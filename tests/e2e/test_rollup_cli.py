"""`allot rollup` end to end: the tiny.yaml simulation (cluster `tiny`) plus a hand-made
journal of cluster `west`, concatenated into one file, read by the real command.

west (one 8-GPU host; lab/train and lab/ops weighted 1:1, 4 GPUs each):
- w1, 8 GPUs on lab/train, 0 → 4h: owed min(4, 8) x 4h = 16 GPU-h, received 32;
- o1, 4 GPUs on lab/ops, waits 0 → 2h and is cancelled: owed 8 GPU-h, received 0.
west delivered = (min(32, 16) + 0) / (16 + 8) = 0.6667.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from projections.usage import HOUR, JournalBuilder
from tests.e2e.cli import allot, one_line_error
from tests.e2e.kafka_journal import produce_journal

RANGE = ("--since", "2026-01-01", "--until", "2026-01-01T12:00")  # tiny.yaml's 12h


def west() -> JournalBuilder:
    j = JournalBuilder(cluster="west").host("h0")
    j.budget("lab", 1).budget("lab/train", 1).budget("lab/ops", 1)
    j.submit("w1", "lab/train", 8).place("w1", {"h0": list(range(8))})
    j.submit("o1", "lab/ops", 4)
    j.at(2 * HOUR).cancel("o1")
    j.at(4 * HOUR).finish("w1")
    return j


@pytest.fixture(scope="module")
def lab(tiny_journal: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("rollup") / "lab.jsonl"
    west_path = west().write(path.with_name("west.jsonl"))
    path.write_bytes(tiny_journal.read_bytes() + west_path.read_bytes())
    return path


@pytest.fixture(scope="module")
def tiny_delivered(tiny_journal: Path) -> dict:
    return json.loads((tiny_journal.parent / "summary.json").read_text())["delivered"]


def rollup_json(*args: str) -> dict:
    result = allot("rollup", *args, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_json_numbers(lab, tiny_delivered):
    out = rollup_json("--journal", str(lab), *RANGE)
    assert sorted(out["clusters"]) == ["tiny", "west"]
    assert out["since"] == "2026-01-01T00:00:00Z" and out["until"] == "2026-01-01T12:00:00Z"
    nodes = {a["path"]: a for a in out["allocations"]}
    assert list(nodes) == ["lab", "lab/eval", "lab/ops", "lab/train"]
    assert nodes["lab/train"]["clusters"] == ["tiny", "west"]
    assert nodes["lab/eval"]["clusters"] == ["tiny"]
    assert nodes["lab/ops"]["clusters"] == ["west"]

    # west, worked out on paper
    w = nodes["lab"]["by_cluster"]["west"]
    assert (w["charged_gpu_h"], w["owed_gpu_h"], w["met_gpu_h"]) == (32.0, 24.0, 16.0)
    assert w["delivered"] == pytest.approx(16 / 24, abs=1e-4)
    assert nodes["lab/ops"]["delivered"] == 0.0
    assert nodes["lab/ops"]["demand_gpu_h"] == 8.0

    # tiny: its own simulation's summary
    t = nodes["lab"]["by_cluster"]["tiny"]
    assert t["delivered"] == pytest.approx(tiny_delivered["overall"], abs=1e-4)
    tiny_owed = sum(tiny_delivered["owed_gpu_h"].values())
    assert t["owed_gpu_h"] == pytest.approx(tiny_owed, abs=0.01)
    assert nodes["lab/eval"]["delivered"] == pytest.approx(
        tiny_delivered["by_allocation"]["lab/eval"], abs=1e-4
    )

    # the lab: sums across clusters and children, delivered from the sums
    total = out["total"]
    for key in ("charged_gpu_h", "owed_gpu_h", "met_gpu_h", "demand_gpu_h", "delivered"):
        assert total[key] == nodes["lab"][key]  # one root: the lab total is the root
    assert total["charged_gpu_h"] == pytest.approx(t["charged_gpu_h"] + 32.0, abs=0.002)
    assert total["owed_gpu_h"] == pytest.approx(tiny_owed + 24.0, abs=0.01)
    met = tiny_delivered["overall"] * tiny_owed + 16.0
    assert total["delivered"] == pytest.approx(met / (tiny_owed + 24.0), abs=1e-3)
    assert total["delivered"] != pytest.approx((t["delivered"] + w["delivered"]) / 2, abs=1e-3)
    children = ("lab/eval", "lab/ops", "lab/train")
    for key in ("charged_gpu_h", "owed_gpu_h", "demand_gpu_h", "met_gpu_h"):
        assert nodes["lab"][key] == pytest.approx(sum(nodes[c][key] for c in children), abs=0.003)


def test_short_range_flags_as_acct_and_usage_take_them(lab):
    assert rollup_json("--journal", str(lab), "-S", "6h", "-E", "1h") == rollup_json(
        "--journal", str(lab), "--since", "6h", "--until", "1h"
    )


def test_human_table(lab):
    result = allot("rollup", "--journal", str(lab), *RANGE)
    assert result.returncode == 0, result.stderr
    out = json.loads(allot("rollup", "--journal", str(lab), *RANGE, "--json").stdout)
    lines = result.stdout.splitlines()
    assert lines[0].startswith(
        "lab roll-up · 2 clusters · 2026-01-01 00:00:00 → 2026-01-01 12:00:00"
    )
    assert lines[1].split() == [
        "ALLOCATION",
        "CLUSTERS",
        "CHARGED",
        "GPU-h",
        "OWED",
        "GPU-h",
        "DELIVERED",
        "DEMAND",
        "GPU-h",
    ]
    rows = {line.split()[0]: line.split()[1:] for line in lines[2:]}
    total = out["total"]
    assert rows["TOTAL"] == [
        "tiny,west",
        f"{total['charged_gpu_h']:,.1f}",
        f"{total['owed_gpu_h']:,.1f}",
        f"{total['delivered']:.3f}",
        f"{total['demand_gpu_h']:,.1f}",
    ]
    assert [line.split()[0] for line in lines[2:]] == ["TOTAL", "lab", "eval", "ops", "train"]
    assert rows["ops"] == ["west", "0.0", "8.0", "0.000", "8.0"]


def test_cluster_depth_and_data_folder(lab, tmp_path):
    folder = tmp_path / "data"
    folder.mkdir()
    shutil.copy(lab, folder / "journal.jsonl")
    out = rollup_json("--data", str(folder), "--cluster", "west", "--depth", "0")
    assert list(out["clusters"]) == ["west"]
    assert [a["path"] for a in out["allocations"]] == ["lab"]
    assert out["total"]["charged_gpu_h"] == 32.0
    # --depth counts from the -a allocation, the top of the tree shown
    under = rollup_json("--journal", str(lab), "-a", "lab/train", "--depth", "0")
    assert [a["path"] for a in under["allocations"]] == ["lab/train"]
    # the default range: the window journaled by tiny (1d) before the latest record
    everything = rollup_json("--journal", str(lab))
    assert everything["window_s"] == 86400.0 and everything["until"] == "2026-01-01T12:00:00Z"


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        pytest.param(("--allocation", "lab/nope"), ("unknown allocation 'lab/nope'",), id="alloc"),
        pytest.param(("--cluster", "north"), ("no records of cluster 'north'",), id="cluster"),
        pytest.param(("--since", "soon"), ("not a time: 'soon'",), id="time"),
    ],
)
def test_errors(lab, args, needles):
    one_line_error(allot("rollup", "--journal", str(lab), *args), *needles)


def test_empty_journal_is_one_line(tmp_path):
    empty = tmp_path / "journal.jsonl"
    empty.write_bytes(b"")
    one_line_error(allot("rollup", "--journal", str(empty)), "empty")
    one_line_error(allot("rollup"), "--journal FILE")


@pytest.mark.parametrize("command", ["rollup", "usage"])
def test_a_record_of_the_wrong_shape_is_one_line(tmp_path, command):
    """Valid JSON, not the contract's shape: a KeyError traceback, where shares and
    queue gave one line; named by its line, as the read commands name a bad one (rollup
    said `record 1 of cluster 'lab'`: it finds it after reading, and counted the
    cluster's records but its clock ticks)."""
    bad = tmp_path / "journal.jsonl"
    bad.write_bytes(
        b'{"type":"clock.tick","v":1,"id":"t","time":1767571200,"cluster":"lab","actor":"a"}\n'
        b"\n"
        b'{"type":"workload.placed","v":1,"id":"x","time":1767571300,"cluster":"lab"}\n'
    )
    result = allot(command, "--journal", str(bad))
    one_line_error(
        result, f"{bad}:3: not a journal record: a 'workload.placed' record without 'workload'"
    )


@pytest.mark.parametrize("command", ["rollup", "usage"])
def test_a_corrupt_line_is_named_by_file_and_line(tiny_journal, tmp_path, command):
    """As `allot replay` and `allot queue` name it (`FILE:LINE: not JSON: ...`): rollup
    said `journal record N is not JSON` (no file), usage `FILE: record N is not JSON` (no
    reason), each counting records, not lines (a blank line comes before it here)."""
    first, *rest = tiny_journal.read_bytes().splitlines(keepends=True)
    bad = tmp_path / "journal.jsonl"
    bad.write_bytes(b"".join([first, b"\n", b"{not json\n", *rest]))
    result = allot(command, "--journal", str(bad))
    one_line_error(result, f"error: {bad}:3: not JSON: ")
    assert result.stderr.count("not JSON") == 1


TICK = b'{"type":"clock.tick","v":1,"id":"late","time":1767268800,"cluster":"tiny","actor":"a"}'


@pytest.mark.parametrize("command", ["rollup", "usage"])
@pytest.mark.parametrize(
    "tail",
    [
        pytest.param(b'{"type":"workload.subm', id="cut-short"),
        pytest.param(TICK, id="whole-but-no-newline"),
    ],
)
def test_a_last_line_without_its_newline_is_left_out_and_said(
    tiny_journal, tmp_path, command, tail
):
    """As `allot replay` and `allot queue` say it: these answered from the whole lines
    without a word about the last one."""
    whole, cut = tmp_path / "whole.jsonl", tmp_path / "cut.jsonl"
    whole.write_bytes(tiny_journal.read_bytes())
    cut.write_bytes(tiny_journal.read_bytes() + tail)
    a = allot(command, "--journal", str(whole), "--json")
    b = allot(command, "--journal", str(cut), "--json")
    assert a.returncode == 0 and b.returncode == 0, b.stderr
    assert json.loads(a.stdout) == json.loads(b.stdout)
    assert a.stderr == ""
    assert b.stderr.splitlines() == [
        f"warning: {cut} ends in the middle of a line (cut short, or still being written); "
        "that last line is left out"
    ]


@pytest.mark.kafka
def test_kafka_reads_several_clusters(lab, kafka_bootstrap):
    """The same two journals produced into the journal topic (keyed by cluster, as the
    worker writes them) under names of this test's own: the same numbers as the file."""
    import uuid

    import orjson

    tag = uuid.uuid4().hex[:8]
    names = {"tiny": f"rollup-{tag}-tiny", "west": f"rollup-{tag}-west"}
    records = []
    for line in lab.read_bytes().splitlines():
        record = orjson.loads(line)
        record["cluster"] = names[record["cluster"]]
        records.append(record)

    produce_journal(kafka_bootstrap, records)
    picked = ("--cluster", names["tiny"], "--cluster", names["west"])
    from_kafka = rollup_json("--kafka", kafka_bootstrap, *picked, *RANGE)
    from_file = rollup_json("--journal", str(lab), *RANGE)
    assert sorted(from_kafka["clusters"]) == sorted(names.values())
    assert from_kafka["allocations"] == [
        {**a, "by_cluster": {names[c]: v for c, v in a["by_cluster"].items()}}
        | {"clusters": sorted(names[c] for c in a["clusters"])}
        for a in from_file["allocations"]
    ]
    assert from_kafka["total"]["delivered"] == from_file["total"]["delivered"]

"""`allot usage` on a journal file: one cluster at a time, as the views read files, and a
table that stays whole at 80 columns.

`default` (one 512-GPU host; two allocations with long paths weighted 3:1):
- big, 512 GPUs on agents/reinforcement-learning/long-horizon, 0 → 30h: charged
  512 x 30 = 15,360 GPU-h;
- eval, 64 GPUs on agents/reinforcement-learning/evaluation, waits 0 → 30h: demand
  64 x 30 = 1,920 GPU-h.
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from allot.commands.usage import gpu_hours
from projections.usage import HOUR, JournalBuilder
from tests.e2e.cli import allot, one_line_error

LONG = "agents/reinforcement-learning/long-horizon"
EVAL = "agents/reinforcement-learning/evaluation"


def agents() -> JournalBuilder:
    j = JournalBuilder(cluster="default").host("h0", gpus=512)
    j.budget("agents", 1).budget("agents/reinforcement-learning", 1)
    j.budget(LONG, 3).budget(EVAL, 1)
    j.submit("big", LONG, 512).place("big", {"h0": list(range(512))})
    j.submit("eval", EVAL, 64)
    j.at(30 * HOUR).finish("big")
    return j


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return agents().write(tmp_path_factory.mktemp("usage") / "agents.jsonl")


@pytest.fixture
def multi(tiny_journal: Path, single: Path, tmp_path: Path) -> Path:
    """tiny.yaml's simulation (cluster `tiny`) and `default`, in one file."""
    path = tmp_path / "multi.jsonl"
    path.write_bytes(tiny_journal.read_bytes() + single.read_bytes())
    return path


def usage_json(*args: str) -> list[dict]:
    result = allot("usage", *args, "--json")
    assert result.returncode == 0, result.stderr
    return orjson.loads(result.stdout)


def test_a_file_of_several_clusters_needs_cluster_as_the_views_do(multi: Path) -> None:
    for command in ("usage", "queue", "shares"):
        one_line_error(
            allot(command, "--journal", str(multi)),
            "holds records of clusters 'tiny' and 'default'; pick one with --cluster",
        )
    assert not multi.with_name("multi.jsonl.usage").exists()  # nothing half-folded is kept
    for command in ("usage", "queue"):
        one_line_error(
            allot(command, "--journal", str(multi), "--cluster", "nope"),
            "no records of cluster 'nope' (it holds: default, tiny); pick one with --cluster",
        )


def test_cluster_picks_one_clusters_usage_from_a_file(
    multi: Path, single: Path, tiny_journal: Path, tmp_path: Path
) -> None:
    picked = usage_json("--journal", str(multi), "--cluster", "default")
    assert picked == usage_json("--journal", str(single), "--state", str(tmp_path / "a"))
    assert {row["allocation"] for row in picked} == {LONG, EVAL}
    tiny = usage_json("--journal", str(multi), "--cluster", "tiny")
    assert tiny == usage_json("--journal", str(tiny_journal), "--state", str(tmp_path / "b"))
    assert {row["allocation"] for row in tiny} == {"lab/eval", "lab/train"}
    # each cluster's table is kept in its own state file, and resumes there
    assert multi.with_name("multi.jsonl.default.usage").exists()
    assert multi.with_name("multi.jsonl.tiny.usage").exists()
    again = allot("usage", "--journal", str(multi), "--cluster", "tiny")
    records = len(tiny_journal.read_bytes().splitlines())
    assert f"({records:,} records, 0 new)" in again.stdout
    # a table of one cluster is not resumed as another's, nor as the whole file's
    state = str(multi.with_name("multi.jsonl.tiny.usage"))
    one_line_error(
        allot("usage", "--journal", str(multi), "--cluster", "default", "--state", state),
        "holds the table of cluster 'tiny', not of cluster 'default'",
    )
    one_line_error(
        allot("usage", "--journal", str(multi), "--state", state),
        "holds the table of cluster 'tiny', not of the whole journal",
    )


def test_a_corrupt_line_appended_since_the_last_run_is_named_by_its_line(
    single: Path, tmp_path: Path
) -> None:
    """The table resumes at a byte offset; the bad line is still named by its line in
    the file, as the other read commands name it. (JSON that is no object was a
    traceback.)"""
    journal = tmp_path / "journal.jsonl"
    journal.write_bytes(single.read_bytes())
    assert allot("usage", "--journal", str(journal)).returncode == 0
    lines = len(single.read_bytes().splitlines())
    with journal.open("ab") as f:
        f.write(b"\n[1, 2]\n")
    one_line_error(
        allot("usage", "--journal", str(journal)),
        f"error: {journal}:{lines + 2}: not a JSON object but list",
    )


@pytest.mark.parametrize("hourly", [False, True], ids=["period", "hourly"])
def test_the_table_is_whole_at_80_columns(single: Path, tmp_path: Path, hourly: bool) -> None:
    extra = ["--hourly"] if hourly else []
    args = ["--journal", str(single), "--state", str(tmp_path / "s"), *extra]
    result = allot("usage", *args, env={"COLUMNS": "80"})
    assert result.returncode == 0, result.stderr
    text = result.stdout
    assert "…" not in text, text
    rows = [line.split() for line in text.splitlines()]
    lines: dict[str, list[str]] = {}
    for row in rows:
        if row and row[0] in (LONG, EVAL):
            lines.setdefault(row[0], row)  # hourly: the first hour's row
    assert set(lines) == {LONG, EVAL}, text  # the full paths
    header = next(row for row in rows if row and row[0] == "ALLOCATION")
    assert header[-1] == ("ENTITLED" if hourly else "DELIVERED")
    if hourly:  # the first hour: 512 GPU-h charged, 64 GPU-h waited for
        assert lines[LONG][1:3] == ["2026-01-01", "00:00"]
        assert lines[LONG][3] == "512.0" and lines[EVAL][5] == "64.0"
        return
    table = {row["allocation"]: row for row in usage_json(*args)}
    for path, row in lines.items():
        numbers = [f"{table[path][k]:,.1f}" for k in ("charged_gpu_h", "unallocated_gpu_h")]
        numbers += [f"{table[path][k]:,.1f}" for k in ("demand_gpu_h", "owed_gpu_h")]
        numbers += [f"{table[path]['entitled_gpu_h']:,.1f}", f"{table[path]['delivered']:.3f}"]
        assert row[1:] == numbers, text
    assert lines[LONG][1] == "15,360.0"  # 512 GPUs for 30 h
    assert lines[EVAL][3] == "1,920.0" and lines[EVAL][-1] == "0.000"  # 64 GPUs waited 30 h


def test_the_period_totals_are_the_designs_numbers(single: Path, tmp_path: Path) -> None:
    """Worked by hand from DESIGN §2 (not from the command's own columns): shares 3:1
    of 512 GPUs for 30 h entitle 384 and 128 GPUs an hour; owed is the smaller of that
    and the demand, hour by hour; delivered is received / owed, at most 1."""
    rows = {
        r["allocation"]: r
        for r in usage_json("--journal", str(single), "--state", str(tmp_path / "s"))
    }
    assert rows[LONG] == {
        "allocation": LONG,
        "charged_gpu_h": 15_360.0,  # 512 GPUs x 30 h
        "unallocated_gpu_h": 0.0,
        "demand_gpu_h": 15_360.0,
        "owed_gpu_h": 11_520.0,  # min(384, 512) x 30
        "received_gpu_h": 15_360.0,
        "entitled_gpu_h": 11_520.0,
        "unrunnable_gpu_h": 0.0,  # no waiting work too big for the healthy hosts
        "delivered": 1.0,  # 15,360 / 11,520, capped
        "since": "2026-01-01T00:00:00Z",  # the period: the whole journal
        "until": "2026-01-02T06:00:00Z",
    }
    assert rows[EVAL] == {
        "allocation": EVAL,
        "charged_gpu_h": 0.0,
        "unallocated_gpu_h": 0.0,
        "demand_gpu_h": 1_920.0,  # 64 GPUs waited 30 h
        "owed_gpu_h": 1_920.0,  # min(128, 64) x 30
        "received_gpu_h": 0.0,
        "entitled_gpu_h": 3_840.0,  # 128 x 30
        "unrunnable_gpu_h": 0.0,
        "delivered": 0.0,
        "since": "2026-01-01T00:00:00Z",
        "until": "2026-01-02T06:00:00Z",
    }


# ------------------------------------------------------------------ the period


def two_days() -> JournalBuilder:
    """A 1-day usage window on a 2-day journal: one 8-GPU host, lab/a's 4 GPUs run
    charged 0 → 48h (4 GPU-h every hour), the journal ends at 48h."""
    j = JournalBuilder(cluster="default").host("h0")
    j.add("config.set", actor="admin", config={"window": "1d"}).budget("lab", 1)
    j.budget("lab/a", 1).submit("w", "lab/a", 4).place("w", {"h0": [0, 1, 2, 3]})
    j.at(48 * HOUR).tick()
    return j


@pytest.mark.parametrize(
    ("args", "period", "since", "until", "charged"),
    [
        # the whole journal, as the title says: 4 GPUs x 48 h
        (
            [],
            "the whole journal, 2026-01-01 00:00 → 2026-01-03 00:00 UTC (2d)",
            "2026-01-01T00:00:00Z",
            "2026-01-03T00:00:00Z",
            192.0,
        ),
        # the usage window's length: what shares and rollup count, 4 x 24 h
        (
            ["--since", "1d"],
            "2026-01-02 00:00 → 2026-01-03 00:00 UTC (1d)",
            "2026-01-02T00:00:00Z",
            "2026-01-03T00:00:00Z",
            96.0,
        ),
        # ISO times, -S/-E as acct takes them: 4 x 12 h
        (
            ["-S", "2026-01-01T12:00", "-E", "2026-01-02"],
            "2026-01-01 12:00 → 2026-01-02 00:00 UTC (12h)",
            "2026-01-01T12:00:00Z",
            "2026-01-02T00:00:00Z",
            48.0,
        ),
        # --until alone: from the first record; 6h before the latest is 42 h in
        (
            ["--until", "6h"],
            "2026-01-01 00:00 → 2026-01-02 18:00 UTC (1d18h)",
            "2026-01-01T00:00:00Z",
            "2026-01-02T18:00:00Z",
            168.0,
        ),
    ],
    ids=["whole-journal", "window-length", "iso-range", "until-only"],
)
def test_the_title_says_the_period_and_a_range_can_be_asked_for(
    tmp_path: Path, args: list[str], period: str, since: str, until: str, charged: float
) -> None:
    """`usage` covered the whole journal, took no range and did not say so, while
    shares and rollup count the window: 10,306.4 GPU-h vs 2,856.9 on one leaf."""
    path = two_days().write(tmp_path / "journal.jsonl")
    table = allot("usage", "--journal", str(path), *args, env={"COLUMNS": "200"})
    assert table.returncode == 0, table.stderr
    title = table.stdout.splitlines()[0]
    assert title.startswith(f"usage in GPU-hours over {period} from"), title
    (row,) = usage_json("--journal", str(path), *args)
    assert (row["charged_gpu_h"], row["since"], row["until"]) == (charged, since, until)
    # the whole-journal title says how to get the window shares and rollup count
    hint = "`allot shares` counts the 1d usage window"
    assert (hint in " ".join(table.stdout.split())) == (not args)


def test_over_the_window_usage_rollup_and_shares_agree(tmp_path: Path) -> None:
    """The window's length as --since gives rollup's default range; shares counts the
    same window (its end on a bucket edge, here the journal's end): 96 GPU-h."""
    path = two_days().write(tmp_path / "journal.jsonl")
    (row,) = usage_json("--journal", str(path), "--since", "1d")
    rolled = orjson.loads(allot("rollup", "--journal", str(path), "--json").stdout)
    leaf = next(n for n in rolled["allocations"] if n["path"] == "lab/a")
    shares = orjson.loads(allot("shares", "--journal", str(path), "--json").stdout)
    usage = {r["path"]: r["usage_gpu_h"] for r in shares["allocations"]}
    assert row["charged_gpu_h"] == leaf["charged_gpu_h"] == usage["lab/a"] == 96.0
    assert (shares["usage_since"], shares["ratios_as_of"]) == (
        "2026-01-02 00:00:00",
        "2026-01-03 00:00:00",
    )
    title = allot("shares", "--journal", str(path), env={"COLUMNS": "200"}).stdout
    assert "usage and ratios over the 1d window to 00:00:00 (last bucket edge)" in title


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        # 48 hours of lab/a: 4 GPUs charged; share 1 of 8 healthy GPUs = 8 GPU-h an hour
        ([], [{"charged_gpu_h": 192.0, "entitled_gpu_h": 384.0}]),
        (
            ["--hourly"],
            [
                {
                    "hour": f"2026-01-{1 + h // 24:02d}T{h % 24:02d}:00:00Z",
                    "hour_time": JournalBuilder.START + h * HOUR,
                    "charged_gpu_h": 4.0,
                    "entitled_gpu_h": 8.0,
                }
                for h in range(48)
            ],
        ),
    ],
    ids=["period", "hourly"],
)
def test_json_is_in_gpu_hours_with_iso_times_hourly_too(
    tmp_path: Path, args: list[str], expected: list[dict]
) -> None:
    """`usage --hourly --json` gave GPU-seconds and the hour as an epoch number, where
    the period rows give GPU-hours and other JSON ISO times."""
    path = two_days().write(tmp_path / "journal.jsonl")
    rows = usage_json("--journal", str(path), *args)
    assert [{k: row[k] for k in want} for row, want in zip(rows, expected, strict=True)] == (
        expected
    )
    assert not [k for row in rows for k in row if k.endswith("_gpu_s")]


def test_shares_json_says_entitled_is_gpus(tmp_path: Path) -> None:
    """`entitled` is GPUs in shares and GPU-hours in usage: shares also names it by its
    unit (the old key is kept), as usage's entitled_gpu_h does."""
    path = two_days().write(tmp_path / "journal.jsonl")
    shares = orjson.loads(allot("shares", "--journal", str(path), "--json").stdout)
    leaf = next(r for r in shares["allocations"] if r["path"] == "lab/a")
    assert leaf["entitled_gpus"] == leaf["entitled"] == 8


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        pytest.param(None, "—", id="none"),
        pytest.param(0.0, "0.0", id="zero"),
        pytest.param(0.04, "0.040", id="a-few-gpu-minutes"),
        pytest.param(0.0999, "0.100", id="just-under-a-tenth"),
        pytest.param(0.1, "0.1", id="a-tenth"),
        pytest.param(12345.67, "12,345.7", id="thousands"),
    ],
)
def test_small_gpu_hours_are_not_shown_as_zero(value: float | None, shown: str) -> None:
    """A leaf that ran a few GPU-minutes read CHARGED 0.0 and OWED 0.0 beside a
    DELIVERED of 0.729 computed from them."""
    assert gpu_hours(value) == shown

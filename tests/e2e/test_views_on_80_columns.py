"""The read commands on an 80-column terminal, as a review found them: rows and lines
wider than the terminal wrapped, every row onto two or three lines. Each runs in a real
pseudo-terminal 80 columns wide; pipes keep what they printed before."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.e2e.cli import allot, allot_on_a_terminal

LONG_ACCT_HEADER = "ID ALLOCATION USER STATE GPUS ALLOC SUBMITTED START END WAIT RUN GPU_H N REASON"


def _shown(*args: str) -> list[str]:
    """What `allot ARGS` shows on an 80-column terminal, line by line, without colours."""
    code, shown = allot_on_a_terminal(*args, columns=80)
    assert code == 0, shown
    return re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown).replace("\r", "").splitlines()


@pytest.fixture(scope="module")
def lab_like(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """lab's ids, paths and users on 8 hosts (one kept for short jobs): a gang
    running, work done, work waiting."""
    from projections.usage import HOUR, JournalBuilder

    j = JournalBuilder(cluster="default")
    for i in range(8):
        j.host(f"h{i}")
    j.budget("multimodal", 1).budget("multimodal/pretrain", 1).budget("language", 1)
    j.budget("language/posttrain", 1)
    j.submit("8-000014", "multimodal/pretrain", 16, actor="olivia", min_runtime=6 * HOUR)
    j.place("8-000014", {"h0": list(range(8)), "h1": list(range(8))})
    j.submit("3-000108", "language/posttrain", 8, actor="mallory", min_runtime=0)
    j.place("3-000108", {"h2": list(range(8))})
    j.at(2 * HOUR).finish("3-000108")
    j.submit("3-000172", "language/posttrain", 32, actor="mallory")
    j.at(3 * HOUR).tick()
    return j.write(tmp_path_factory.mktemp("lab_like") / "journal.jsonl")


def test_acct_fits_80_columns_and_long_shows_every_field(lab_like: Path) -> None:
    """`allot acct` was 180-222 columns on lab (three full timestamps among 15
    columns). Its default is now short, as sacct's: each row fits; -l (sacct's --long)
    gives the former table, -p every field as before."""
    rows = _shown("acct", "--journal", str(lab_like))
    assert rows[1].split() == ["ID", "ALLOCATION", "USER", "STATE", "GPUS", "WAIT", "RUN", "GPU_H"]
    assert [r.split()[0] for r in rows[2:5]] == ["8-000014", "3-000108", "3-000172"]
    assert all(len(line) <= 80 for line in rows), rows
    # the totals line wraps at its words, not inside one
    piped = allot("acct", "--journal", str(lab_like)).stdout.splitlines()
    assert " ".join(rows[5:]) == piped[-1] and len(rows) > len(piped)
    assert [line.split() for line in rows[1:5]] == [line.split() for line in piped[1:5]]

    long = allot("acct", "--journal", str(lab_like), "-l").stdout.splitlines()
    assert " ".join(long[1].split()) == LONG_ACCT_HEADER
    assert max(len(line) for line in long[1:-1]) > 80  # the case this is about
    parsable = allot("acct", "--journal", str(lab_like), "-p").stdout.splitlines()
    assert parsable[0] == LONG_ACCT_HEADER.replace(" ", "|")


def test_acct_long_and_format_exclude_each_other(lab_like: Path) -> None:
    result = allot("acct", "--journal", str(lab_like), "-l", "-o", "id")
    assert result.returncode == 2 and "--format and -l (--long)" in result.stderr
    # -l is asked for on the command line: it wins over $SACCT_FORMAT, as -o does
    env = {"SACCT_FORMAT": "JobID,State"}
    long = allot("acct", "--journal", str(lab_like), "-l", env=env).stdout.splitlines()
    assert " ".join(long[1].split()) == LONG_ACCT_HEADER


def test_host_list_headroom_fits_80_columns(lab_like: Path) -> None:
    """A host kept for short jobs said "kept for short jobs (headroom)": lab's host
    list was 83 columns."""
    rows = _shown("host", "list", "--journal", str(lab_like))
    assert any(line.endswith("headroom (short jobs)") for line in rows), rows
    assert all(len(line) <= 80 for line in rows), rows


def test_why_wraps_its_lines_at_words_on_a_terminal(lab_like: Path) -> None:
    """`allot why` printed lines of 200 columns and more, which the terminal cut
    anywhere, mid-word, and went on at the margin. On a terminal each line wraps at
    its words, the rest indented under it; a pipe gets the lines whole."""
    piped = allot("why", "3-000172", "--journal", str(lab_like)).stdout.splitlines()
    assert max(len(line) for line in piped) > 80  # the case this is about
    shown = _shown("why", "3-000172", "--journal", str(lab_like))
    assert all(len(line) <= 80 for line in shown), shown
    # the same words, each whole, in the same order
    assert " ".join(shown).split() == " ".join(piped).split()
    history = shown.index(next(line for line in shown if line.startswith("history")))
    for line in shown[history + 1 :]:  # a history line goes on under its details
        assert line.startswith("  2026-") or line.startswith(" " * 38), line


def test_queue_stacks_nodelist_under_reason_to_fit_80_columns(lab_like: Path) -> None:
    """lab's queue was 97-114 columns: every running row wrapped. On a terminal too
    narrow for it the columns are one space apart and a row's NODELIST goes below its
    REASON, in one column: each row fits, every value whole. A pipe gets the table as
    before."""
    piped = allot("queue", "--journal", str(lab_like)).stdout.splitlines()
    assert piped[1].split()[-2:] == ["REASON", "NODELIST"]
    assert max(len(line) for line in piped) > 80  # the case this is about
    shown = _shown("queue", "--journal", str(lab_like))
    assert all(len(line) <= 80 for line in shown), shown
    header = next(i for i, line in enumerate(shown) if line.startswith("ID"))
    assert shown[header].split()[-1] == "REASON"  # NODELIST below it, as in each row
    column = shown[header].index("REASON")
    assert shown[header + 1] == " " * column + "NODELIST"
    gang = next(i for i, line in enumerate(shown) if line.startswith("8-000014"))
    stacked = [shown[gang][column:]]
    stacked += [line[column:] for line in shown[gang + 1 :] if line[:column].isspace()]
    assert all(line.startswith(" " * column) for line in shown[gang + 1 : gang + len(stacked)])
    # its reason at its words (it would end in column 81), its hosts below
    assert stacked == ["protected until", "06:00", "h[0-1]"]
    pending = next(line for line in shown if line.startswith("3-000172"))
    assert pending.split() == next(r for r in piped if r.startswith("3-000172")).split()
    # -h and --long are asked for as they are: the rows whole, one line each
    for flags, first in ((["-h"], "3-000172"), (["--long"], "POS")):
        rows = _shown("queue", "--journal", str(lab_like), *flags)
        piped_rows = allot("queue", "--journal", str(lab_like), *flags).stdout.splitlines()
        table = rows[next(i for i, r in enumerate(rows) if r.startswith(first)) :]
        piped_table = piped_rows[next(i for i, r in enumerate(piped_rows) if r.startswith(first)) :]
        assert "".join(table) == "".join(piped_table)  # as the terminal wraps them


LONG_PATH = "lab/long-context/experiments-2026/ablations/long-context-experiments"


@pytest.fixture(scope="module")
def long_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Work of an allocation five levels deep, its path 66 characters long."""
    from projections.usage import HOUR, JournalBuilder

    j = JournalBuilder(cluster="default").host("h0")
    parts = LONG_PATH.split("/")
    for depth in range(1, len(parts) + 1):
        j.budget("/".join(parts[:depth]), 1)
    j.submit("4-000001", LONG_PATH, 8, actor="amir").place("4-000001", {"h0": list(range(8))})
    j.submit("4-000002", LONG_PATH, 8, actor="amir")
    j.at(HOUR).tick()
    return j.write(tmp_path_factory.mktemp("long_path") / "journal.jsonl")


def test_queue_shortens_a_long_allocation_path_in_the_middle_on_a_terminal(
    long_path: Path,
) -> None:
    """A 66-character allocation path made the queue 142 columns wide. On a terminal
    the path loses middle parts until the rows fit, its first and last kept; a pipe,
    --json and `allot why` keep it whole."""
    shown = _shown("queue", "--journal", str(long_path))
    assert all(len(line) <= 80 for line in shown), shown
    rows = [line for line in shown if line.startswith("4-00000")]
    assert [row.split()[1] for row in rows] == ["lab/…/long-context-experiments"] * 2
    assert shown[shown.index(rows[-1]) + 1].split() == ["h0"]  # below its reason
    assert LONG_PATH in allot("queue", "--journal", str(long_path)).stdout
    assert LONG_PATH in allot("queue", "--journal", str(long_path), "--json").stdout
    assert LONG_PATH in " ".join(_shown("why", "4-000002", "--journal", str(long_path)))

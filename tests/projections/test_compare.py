"""`allot compare`'s rows: a difference too small to show is shown as none."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from projections.compare import compare_summaries, load_summary
from projections.journal import JournalError


def _summary(occupancy: float, idle: float, p90: float) -> dict[str, Any]:
    return {
        "policy": "fairshare",
        "occupancy": occupancy,
        "contended_idle": {"gpu_hours": idle},
        "wait_s": {"all": {"p50": 0.0, "p90": p90}, "by_tag": {}},
    }


def _changes(a: dict[str, Any], b: dict[str, Any]) -> dict[str, str]:
    return {label: change for label, _, _, change in compare_summaries(a, b)}


def test_differences_that_round_away_have_no_minus_sign() -> None:
    a = _summary(0.998_4004, 12.000_01, 100.0)
    b = _summary(0.998_4001, 12.000_00, 99.8)
    changes = _changes(a, b)
    assert changes["occupancy"] == "+0.000"
    assert changes["idle GPU-h while work waited"] == "+0.0"
    assert changes["wait p90 (all)"] == "+0s"


def test_real_differences_keep_their_sign() -> None:
    changes = _changes(_summary(0.5, 10.0, 600.0), _summary(0.25, 12.5, 60.0))
    assert changes["occupancy"] == "-0.250"
    assert changes["idle GPU-h while work waited"] == "+2.5"
    assert changes["wait p90 (all)"] == "-9m"


def test_a_malformed_mapping_in_a_summary_is_no_row_not_a_traceback() -> None:
    odd = {**_summary(0.5, 1.0, 1.0), "delivered": {"by_allocation": 5}}
    labels = [label for label, _, _, _ in compare_summaries(odd, _summary(0.5, 1.0, 1.0))]
    leaves = [x for x in labels if x.startswith("delivered ")]
    assert "occupancy" in labels and leaves == ["delivered overall", "delivered min"]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such folder"),
        (b"{}", "not the summary of a run (no policy, workloads, delivered, wait_s)"),
        (b"[1, 2]", "not the summary of a run"),
    ],
    ids=["missing", "empty-object", "a-list"],
)
def test_compare_refuses_what_is_not_a_runs_summary(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    """`echo '{}' > fake/summary.json` printed a table of dashes with rc 0."""
    folder = tmp_path / "fake"
    if content is not None:
        folder.mkdir()
        (folder / "summary.json").write_bytes(content)
    with pytest.raises(JournalError, match=re.escape(message)):
        load_summary(folder)

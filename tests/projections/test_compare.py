"""`allot compare`'s rows: a difference too small to show is shown as none."""

from __future__ import annotations

from typing import Any

from projections.compare import compare_summaries


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

"""The issue's acceptance bars on examples/lab.yaml, kept from regressing: a change to
the scheduling rules that costs a small team its share or debug work its minutes fails
here, not only in BENCHMARKS.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from projections.scenario import load_scenario
from projections.simulate import RunSpec, run_policy

LAB = Path(__file__).resolve().parents[2] / "examples" / "lab.yaml"


@pytest.fixture(scope="module")
def summaries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    spec = RunSpec.of_scenario(load_scenario(LAB))
    out = tmp_path_factory.mktemp("lab")
    return {
        policy: run_policy(spec, policy, out, reports=False)
        for policy in ("fairshare", "legacy-priority")
    }


def test_fair_share_delivers_what_is_owed(summaries: dict[str, dict[str, Any]]) -> None:
    delivered = summaries["fairshare"]["delivered"]
    assert delivered["overall"] >= 0.98
    worst = min(delivered["by_allocation"].items(), key=lambda item: item[1])
    assert delivered["min"] >= 0.90, f"worst allocation {worst}"
    assert summaries["fairshare"]["occupancy_contended"] >= 0.97


def test_debug_work_waits_minutes_under_fair_share_and_longer_under_legacy(
    summaries: dict[str, dict[str, Any]],
) -> None:
    fair = summaries["fairshare"]["wait_s"]["by_tag"]["debug"]
    legacy = summaries["legacy-priority"]["wait_s"]["by_tag"]["debug"]
    assert fair["unplaced"] == 0
    assert fair["p90"] <= 60
    assert legacy["p90"] > max(60, 10 * fair["p90"])

"""A replay measures the period the recorded run measured: a simulation's journal ends
with a clock tick at its horizon, so re-deciding it under the same policy and config
gives the same summary, even when the cluster drained long before the horizon."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from projections.replay import journal_run_spec, verify
from projections.scenario import load_scenario
from projections.simulate import RunSpec, run_policy

DRAINS = Path(__file__).parent / "fixtures" / "drains.yaml"
HOUR = 3600.0


def _measured(summary: dict[str, Any]) -> dict[str, Any]:
    """Everything a summary measures (the engine's wall time and memory aside)."""
    return {k: v for k, v in summary.items() if k != "engine"}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("drains")
    spec = RunSpec.of_scenario(load_scenario(DRAINS, {}))
    summary = run_policy(spec, "fairshare", out, reports=False)
    return out / "fairshare" / "journal.jsonl", summary


def test_the_journal_ends_at_the_horizon_with_a_tick(
    recorded: tuple[Path, dict[str, Any]],
) -> None:
    journal, summary = recorded
    records = [orjson.loads(line) for line in journal.read_bytes().splitlines()]
    last_work = max(r["time"] for r in records if r["type"].startswith("workload."))
    start = summary["period"]["start"]
    assert summary["period"]["hours"] == 24.0
    assert last_work - start < 20 * HOUR  # drained well before the horizon
    assert records[-1]["type"] == "clock.tick"
    assert records[-1]["time"] == summary["period"]["end"] == start + 24 * HOUR
    assert verify(journal).difference is None  # the tick replays like any other


@pytest.mark.parametrize("policy", ["fairshare", "fifo"])
def test_a_replay_measures_the_recorded_runs_period(
    policy: str, recorded: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    journal, original = recorded
    same = run_policy(journal_run_spec(journal, {}, {}), policy, tmp_path, reports=False)
    # the same period, ended where the recording ends rather than at a horizon of its own
    recorded_period, replayed_period = dict(original["period"]), dict(same["period"])
    assert recorded_period.pop("ended") == "horizon"
    assert replayed_period.pop("ended") == "recorded"
    assert replayed_period == recorded_period
    if policy == "fairshare":  # the same policy and config: the same run, measured the same
        assert _measured(same) == _measured(original) | {"period": same["period"]}
        for key in ("occupancy", "occupancy_contended", "delivered", "wait_s", "gpu_hours"):
            assert same[key] == original[key], key
        replayed = (tmp_path / policy / "journal.jsonl").read_bytes()
        assert replayed.splitlines()[-1] == journal.read_bytes().splitlines()[-1]


def test_a_journal_without_the_final_tick_still_replays_to_its_last_record(
    recorded: tuple[Path, dict[str, Any]], tmp_path: Path
) -> None:
    """Journals recorded before the tick (or live ones) end at their last record."""
    journal, _ = recorded
    lines = journal.read_bytes().splitlines(keepends=True)
    assert b'"clock.tick"' in lines[-1]
    old = tmp_path / "old.jsonl"
    old.write_bytes(b"".join(lines[:-1]))
    last = orjson.loads(lines[-2])["time"]
    spec = journal_run_spec(old, {}, {})
    assert spec.horizon_end == last
    summary = run_policy(spec, "fairshare", tmp_path / "out", reports=False)
    assert summary["period"]["end"] == last

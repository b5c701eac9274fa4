"""A scenario's host that dies with its work (`health: [{..., lost: true}]`): the
simulated launcher reports the attempts running there `lost`, the summary counts them,
and a replay of the journal loses the same work."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from projections.compare import compare_summaries
from projections.replay import journal_run_spec
from projections.scenario import ScenarioError, load_scenario
from projections.simulate import RunSpec, run_policy


def scenario(tmp_path: Path, *, resumable: bool = True, lost: bool = True, healthy: bool = False):
    raw: dict[str, Any] = {
        "cluster": {"name": "lab", "hosts": 2, "gpus_per_host": 8},
        "allocations": [{"path": "lab/a", "weight": 1}],
        "health": [
            {"at": "1h", "host": "h0", "healthy": healthy, "reason": "xid-79", "lost": lost},
            {"at": "3h", "host": "h0", "healthy": True, "reason": "repaired"},
        ],
        "workloads": [
            {
                "generate": {
                    "seed": 1,
                    "allocation": "lab/a",
                    "count": 2,
                    "arrival": "poisson",
                    "rate_per_h": 600,
                    "gpus": [8],
                    "runtime": {"fixed": "2h"},
                    "min_runtime": "4h",  # protected past the failure: drain would wait
                    "resumable": resumable,
                }
            }
        ],
    }
    path = tmp_path / "failing.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return load_scenario(path)


def simulate(tmp_path: Path, **kw: Any) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    out = tmp_path / "run"
    summary = run_policy(
        RunSpec.of_scenario(scenario(tmp_path, **kw)), "fairshare", out, reports=False
    )
    lines = (out / "fairshare" / "journal.jsonl").read_bytes().splitlines()
    return summary, [orjson.loads(x) for x in lines]


def lost_reports(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in records if r["type"] == "workload.finished" and r["outcome"] == "lost"]


@pytest.mark.parametrize(
    ("resumable", "lost_attempts", "ended_lost", "completed"),
    [(True, {"all": 1, "requeued": 1}, 0, 2), (False, {"all": 1, "requeued": 0}, 1, 1)],
    ids=["resumable-requeued", "not-resumable-ends"],
)
def test_the_work_on_a_dead_host_is_reported_lost_and_counted(
    tmp_path: Path, resumable: bool, lost_attempts: dict, ended_lost: int, completed: int
) -> None:
    summary, records = simulate(tmp_path, resumable=resumable)
    assert summary["lost_attempts"] == lost_attempts
    assert summary["workloads"]["lost"] == ended_lost
    assert summary["workloads"]["completed"] == completed
    (report,) = lost_reports(records)
    before = records[records.index(report) - 1]
    assert (before["type"], before["host"], before["healthy"]) == ("host.health", "h0", False)
    assert report["actor"] == "executor" and report.get("requeued") is (True if resumable else None)
    assert not [r for r in records if r["type"] == "workload.preempted"]


def test_without_lost_the_failing_host_only_drains(tmp_path: Path) -> None:
    summary, records = simulate(tmp_path, lost=False)
    assert summary["lost_attempts"] == {"all": 0, "requeued": 0}
    assert not lost_reports(records)
    assert summary["workloads"]["completed"] == 2


def test_a_replay_loses_the_same_work(tmp_path: Path) -> None:
    summary, _ = simulate(tmp_path)
    journal = tmp_path / "run" / "fairshare" / "journal.jsonl"
    spec = journal_run_spec(journal, {}, {})
    assert spec.engine["lose_work_at"] == frozenset({"health-0"})
    again = run_policy(spec, "fairshare", tmp_path / "replay", reports=False)
    assert (
        tmp_path / "replay" / "fairshare" / "journal.jsonl"
    ).read_bytes() == journal.read_bytes()
    other = run_policy(spec, "legacy-priority", tmp_path / "replay", reports=False)
    assert again["lost_attempts"] == other["lost_attempts"] == summary["lost_attempts"]
    rows = {label: (a, b) for label, a, b, _ in compare_summaries(summary, other)}
    assert rows["attempts lost with their node"] == ("1", "1")


def test_lost_is_refused_on_a_host_that_turns_healthy(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"health\[0\]: lost: true is for a host that fails"):
        scenario(tmp_path, healthy=True)

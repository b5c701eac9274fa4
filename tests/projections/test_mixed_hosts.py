"""A scenario of mixed host sizes (`cluster.hosts` as groups) simulated: an 8-GPU job
waits for the 8-GPU host while the 4-GPU hosts run small work, a gang of the 4-GPU hosts
takes 8-GPU work only while no 8-GPU host is healthy and it did not ask for one host,
and a replay keeps the hosts of the journal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from projections.gantt import collect
from projections.replay import journal_run_spec
from projections.scenario import load_scenario
from projections.simulate import RunSpec, run_policy

T0 = 1_767_225_600.0  # the default scenario start


def _burst(seed: int, at: str, gpus: int, runtime: str, **extra: Any) -> dict[str, Any]:
    return {
        "generate": {
            "seed": seed,
            "allocation": "lab/a",
            "arrival": "burst",
            "bursts": [{"at": at, "count": 1}],
            "gpus": gpus,
            "runtime": {"fixed": runtime},
            "min_runtime": runtime,
            **extra,
        }
    }


def scenario(tmp_path: Path, *, one_host: bool, big_host_down: bool) -> Path:
    """h0 (8 GPUs) busy with a 2 h job from the start; at 10m another 8-GPU job; from
    15m on, one small job every 20 minutes."""
    raw: dict[str, Any] = {
        "cluster": {
            "name": "lab",
            "hosts": [{"count": 1, "gpus": 8}, {"count": 2, "gpus": 4, "prefix": "ws"}],
        },
        "allocations": [{"path": "lab/a", "weight": 1, "members": ["alice"]}],
        "horizon": "6h",
        "workloads": [
            _burst(1, "0s", 8, "2h", tags=["first"]),
            _burst(2, "10m", 8, "1h", tags=["eight"], one_host=one_host),
            {
                "generate": {
                    "seed": 3,
                    "allocation": "lab/a",
                    "start": "15m",
                    "arrival": "uniform",
                    "rate_per_h": 3,
                    "count": 8,
                    "gpus": [1, 2],
                    "runtime": {"fixed": "30m"},
                    "min_runtime": "15m",
                    "tags": ["small"],
                }
            },
        ],
    }
    if big_host_down:  # cordoned before the 8-GPU job comes, back at 3h
        raw["health"] = [
            {"at": "5m", "host": "h0", "healthy": False, "reason": "xid-79"},
            {"at": "3h", "host": 0, "healthy": True, "reason": "repaired"},
        ]
    path = tmp_path / "mixed.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def simulate(path: Path, out: Path) -> list[dict[str, Any]]:
    run_policy(RunSpec.of_scenario(load_scenario(path)), "fairshare", out, reports=False)
    return [orjson.loads(x) for x in (out / "fairshare" / "journal.jsonl").read_bytes().split()]


def placements(records: list[dict[str, Any]], tag: str) -> list[tuple[float, set[str]]]:
    tagged = {
        r["workload"] for r in records if r["type"] == "workload.submitted" and tag in r["tags"]
    }
    return [
        (r["time"] - T0, set(r["hosts"]))
        for r in records
        if r["type"] == "workload.placed" and r["workload"] in tagged
    ]


@pytest.mark.parametrize(
    ("one_host", "big_host_down", "hosts", "start"),
    [
        # while the 8-GPU host is healthy, 8-GPU work is one host's work, asked or not
        pytest.param(True, False, {"h0"}, 2 * 3600.0, id="one-host-waits-for-h0"),
        pytest.param(False, False, {"h0"}, 2 * 3600.0, id="eight-gpus-wait-for-h0"),
        # with h0 cordoned, the biggest healthy host has 4 GPUs: a gang of both
        # workstations, unless the job asked for one host (then it waits for the repair)
        pytest.param(False, True, {"ws0", "ws1"}, 600.0, id="gang-of-workstations"),
        pytest.param(True, True, {"h0"}, 3 * 3600.0, id="one-host-waits-for-repair"),
    ],
)
def test_eight_gpu_work_on_mixed_hosts(
    tmp_path: Path, one_host: bool, big_host_down: bool, hosts: set[str], start: float
) -> None:
    records = simulate(scenario(tmp_path, one_host=one_host, big_host_down=big_host_down), tmp_path)
    registered = [(r["host"], r["gpus"]) for r in records if r["type"] == "host.registered"]
    assert registered == [("h0", 8), ("ws0", 4), ("ws1", 4)]
    [eight] = placements(records, "eight")
    assert eight == (start, hosts)
    small = placements(records, "small")
    assert len(small) == 8  # all of it ran
    if start > 600.0:  # the 8-GPU job waited: the workstations ran the small work meanwhile
        during = [on for at, on in small if at < start]
        assert len(during) >= 4
        assert all(on <= {"ws0", "ws1"} and len(on) == 1 for on in during)
    [submitted] = [r for r in records if r["type"] == "workload.submitted" and "eight" in r["tags"]]
    assert submitted.get("one_host") is (True if one_host else None)  # absent unless asked


def test_a_replay_of_a_mixed_run_keeps_its_hosts(tmp_path: Path) -> None:
    """Replay registers the journal's hosts, sizes and names as they were: re-deciding
    gives the same records."""
    path = scenario(tmp_path, one_host=True, big_host_down=True)
    simulate(path, tmp_path / "run")
    journal = tmp_path / "run" / "fairshare" / "journal.jsonl"
    run_policy(journal_run_spec(journal, {}, {}), "fairshare", tmp_path / "again", reports=False)
    assert (tmp_path / "again" / "fairshare" / "journal.jsonl").read_bytes() == journal.read_bytes()


def test_occupancy_and_gantt_rows_count_each_hosts_gpus(tmp_path: Path) -> None:
    """Healthy capacity is 4 + 4 GPUs for the 6 h and h0's 8 while it is healthy (5 min,
    then from 3 h); the gantt gives each host as many rows as it has GPUs."""
    path = scenario(tmp_path, one_host=True, big_host_down=True)
    summary = run_policy(RunSpec.of_scenario(load_scenario(path)), "fairshare", tmp_path)
    journal = tmp_path / "fairshare" / "journal.jsonl"
    records = [orjson.loads(x) for x in journal.read_bytes().split()]
    small_gpus = sum(
        r["gpus"] for r in records if r["type"] == "workload.submitted" and "small" in r["tags"]
    )
    healthy_gpu_h = 8 * 6 + 8 * (5 / 60 + 3)
    busy_gpu_h = 8 * 5 / 60 + 8 * 1 + small_gpus * 0.5  # the first job counts while h0 is healthy
    assert summary["occupancy"] == pytest.approx(busy_gpu_h / healthy_gpu_h, abs=1e-6)
    g = collect(journal)
    assert (g.n_rows, g.host_row0, g.host_gpus) == (
        16,
        {"h0": 0, "ws0": 8, "ws1": 12},
        {"h0": 8, "ws0": 4, "ws1": 4},
    )
    assert g.unhealthy == [("h0", T0 + 300, T0 + 3 * 3600)]
    assert (tmp_path / "fairshare" / "gantt.png").stat().st_size > 0

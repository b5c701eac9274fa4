"""A scenario host whose health flaps (a flaky probe): without `health_holddown` the
same work is placed back on it and drained at every flap; with it, the host stays
cordoned, the simulator wakes at the hold-down's end and puts work back there then."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import yaml

from projections.scenario import load_scenario
from projections.simulate import RunSpec, run_policy
from projections.usage import UsageProjection

FLAPS = 6  # unhealthy at 1h, 1h10m, ...; healthy 5 minutes after each
END = 6 * 3600.0  # the horizon


def simulate(tmp_path: Path, overrides: dict[str, Any]) -> list[dict[str, Any]]:
    health = []
    for i in range(FLAPS):
        at = 3600 + 600 * i
        health.append({"at": at, "host": "h0", "healthy": False, "reason": "probe"})
        health.append({"at": at + 300, "host": "h0", "healthy": True, "reason": "probe"})
    raw: dict[str, Any] = {
        "cluster": {"name": "lab", "hosts": 2, "gpus_per_host": 8},
        "horizon": "6h",
        "allocations": [{"path": "lab/a", "weight": 1}],
        "health": health,
        "workloads": [
            {
                "generate": {
                    "seed": 1,
                    "allocation": "lab/a",
                    "count": 4,
                    "arrival": "poisson",
                    "rate_per_h": 600,
                    "gpus": [4],
                    "runtime": {"fixed": "5h"},
                    "min_runtime": 0,  # unallocated: drained at once at every flap
                    "resumable": True,
                }
            }
        ],
    }
    tmp_path.mkdir(exist_ok=True)
    path = tmp_path / "flapping.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    out = tmp_path / "run"
    spec = RunSpec.of_scenario(load_scenario(path, overrides=overrides))
    run_policy(spec, "fairshare", out, reports=False)
    lines = (out / "fairshare" / "journal.jsonl").read_bytes().splitlines()
    return [orjson.loads(x) for x in lines]


def drains(records: list[dict[str, Any]]) -> int:
    return sum(r["type"] == "workload.preempted" and r["reason"] == "drain" for r in records)


def test_the_holddown_stops_the_thrash_on_a_flapping_host(tmp_path: Path) -> None:
    plain = simulate(tmp_path / "plain", {})
    damped = simulate(tmp_path / "damped", {"health_holddown": "30m"})
    # two 4-GPU jobs live on h0: drained at each of the 6 flaps, or at the first two
    assert (drains(plain), drains(damped)) == (2 * FLAPS, 4)


def test_work_returns_to_the_host_when_the_holddown_ends(tmp_path: Path) -> None:
    records = simulate(tmp_path, {"health_holddown": "30m"})
    last_healthy = max(r["time"] for r in records if r["type"] == "host.health")
    back = last_healthy + 1800
    # a tick the simulator journaled at the hold-down's end, and the work placed then
    assert any(r["type"] == "clock.tick" and r["time"] == back for r in records)
    on_h0 = [r for r in records if r["type"] == "workload.placed" and "h0" in r["hosts"]]
    assert on_h0[-1]["time"] == back
    config = records[0]
    assert (config["type"], config["config"]["health_holddown"]) == ("config.set", 1800.0)


def test_the_default_config_record_has_no_holddown_key(tmp_path: Path) -> None:
    """Journals recorded before the key existed keep their bytes: it is left out at 0."""
    records = simulate(tmp_path, {})
    assert "health_holddown" not in records[0]["config"]


def unavailable_h0_s(records: list[dict[str, Any]]) -> float:
    """Seconds h0 (8 of the 16 GPUs) was out of the healthy capacity, by the usage read
    model that occupancy, owed and the summary's healthy GPU-seconds come from."""
    usage = UsageProjection()
    for record in records:
        usage.apply(record)
    start = records[0]["time"]  # the scenario's time 0
    usage.close(start + END)
    assert usage.period() == (start, start + END)
    return (16 * END - usage.totals()["healthy_gpu_s"]) / 8


def test_occupancy_leaves_out_the_time_a_host_is_held_down(tmp_path: Path) -> None:
    """The scheduler places nothing on a held-down host; counting it healthy from its
    healthy report made idle GPUs no one could use lower the occupancy."""
    plain = simulate(tmp_path / "plain", {})
    damped = simulate(tmp_path / "damped", {"health_holddown": "30m"})
    # without: unhealthy 5 minutes at each of the 6 flaps; with: 5 minutes at the first,
    # then from the second flap (1h10m) to 30 minutes after the last healthy report
    last_healthy = 3600 + 600 * (FLAPS - 1) + 300
    assert unavailable_h0_s(plain) == FLAPS * 300
    assert unavailable_h0_s(damped) == 300 + (last_healthy + 1800 - 4200)

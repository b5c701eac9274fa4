"""`allot simulate` of a scenario whose hosts come in groups of different sizes
(examples/mixed.yaml: 8-GPU DGX boxes and 4-GPU workstations): the journal registers
them by name and size, the reports are written, a replay re-decides the journal byte for
byte, and a wrong host group is one error line naming its key."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.e2e.cli import allot, one_line_error

MIXED = Path(__file__).parents[2] / "examples" / "mixed.yaml"


def test_simulate_a_lab_of_two_host_sizes(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = allot("simulate", str(MIXED), "-p", "fairshare", "--out", str(out), "-q")
    assert result.returncode == 0, result.stderr
    run = out / "fairshare"
    records = [orjson.loads(x) for x in (run / "journal.jsonl").read_bytes().splitlines()]
    sizes = {r["host"]: r["gpus"] for r in records if r["type"] == "host.registered"}
    assert sizes == {f"h{i}": 8 for i in range(12)} | {f"ws{i}": 4 for i in range(16)}
    placed = [r for r in records if r["type"] == "workload.placed"]
    nvlink = {
        r["workload"] for r in records if r["type"] == "workload.submitted" and r.get("one_host")
    }
    on_one_dgx = [r["hosts"] for r in placed if r["workload"] in nvlink]
    assert on_one_dgx and all(len(h) == 1 and next(iter(h)).startswith("h") for h in on_one_dgx)
    assert any(any(h.startswith("ws") for h in r["hosts"]) for r in placed)
    down = [(r["host"], r["healthy"]) for r in records if r["type"] == "host.health"]
    assert down == [("h3", False), ("h3", True), ("ws5", False)]
    summary = orjson.loads((run / "summary.json").read_bytes())
    assert 0 < summary["occupancy"] <= 1
    assert summary["lost_attempts"]["all"] >= 1  # ws5 died with its work
    assert (run / "gantt.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "GPU timeline" in (run / "report.html").read_text()
    verified = allot("replay", str(run / "journal.jsonl"), "--verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr
    assert "reproduced byte for byte" in verified.stdout


def test_a_wrong_host_group_is_one_line_naming_its_key(tmp_path: Path) -> None:
    scenario = tmp_path / "bad.yaml"
    scenario.write_text("cluster:\n  name: lab\n  hosts:\n    - {count: 2, gpus: 8, gpu: 4}\n")
    result = allot("simulate", str(scenario), "--out", str(tmp_path / "out"))
    one_line_error(result, "bad.yaml: cluster.hosts[0].gpu: unknown key 'gpu'", "'gpus'")
    assert not (tmp_path / "out").exists()

"""Idle GPUs end to end on a `--data` folder: `allot executor --simulate --idle-fraction`
reports readings to a live `allot serve`, and `allot queue` and `allot idle` show the
idle work (idle_after 0s, so the test need not wait half an hour)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson

from tests.e2e.cli import allot

ROOT = Path(__file__).resolve().parents[2]


def test_executor_readings_make_queue_and_idle_show_the_idle_work(tmp_path: Path) -> None:
    data = tmp_path / "lab"
    env = {"ALLOT_DATA": str(data), "USER": "ops"}

    def run(*args: str) -> str:
        result = allot(*args, env=env)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result.stdout

    full = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")} | env
    with (tmp_path / "serve.log").open("ab") as log:
        serve = subprocess.Popen(
            [sys.executable, "-m", "allot.cli", "serve", "--admin", "ops", "--set", "idle_after=0s"],
            env=full, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        run("host", "register", "h0", "8", "--wait", "60")
        run("budget", "set", "lab", "1", "--member", "alice", "--wait", "60")
        run("submit", "-A", "lab", "-G", "4", "--min-runtime", "1h", "--as", "alice",
            "--wait", "60")  # fmt: skip
        # every workload idle (fraction 1); --once: one reading of each running attempt
        run("executor", "--simulate", "--idle-fraction", "1", "--once")
        deadline = time.monotonic() + 60

        def readings() -> list[dict[str, Any]]:
            lines = (data / "journal.jsonl").read_bytes().splitlines()
            return [r for r in map(orjson.loads, lines) if r["type"] == "workload.utilization"]

        while not readings():
            assert time.monotonic() < deadline, "no reading journaled within 60 s"
            time.sleep(0.1)
        (row,) = orjson.loads(run("queue", "--json"))["workloads"]
        assert row["usage"]["utilization"] == 0.0 and row["usage"]["idle"]
        assert "idle" in row["reason"] and "GPU utilization 0%" in row["detail"]
        idle = orjson.loads(run("idle", "--json"))
        assert [(r["user"], r["gpus"], r["protected"]) for r in idle["workloads"]] == [
            ("alice", 4, True)
        ]
        assert idle["by_user"][0]["gpus"] == 4
        assert "alice: 4 idle GPUs in 1 workload (4 protected)" in run("idle")
    finally:
        serve.terminate()
        serve.wait(30)

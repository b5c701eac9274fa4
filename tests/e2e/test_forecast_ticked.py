"""`allot why`'s forecast against a live `allot serve --data DIR --tick 10s` and its
`allot executor --simulate`: the scheduler decides only at inputs and ticks, so work
waiting on protections acts at the first tick after they end. Two protections ending
between the same two ticks: at that tick both are over, and the victim is the one the
rules pick among both (the most recently started), not the first to end. A forecast
that acted at the moment of the first end named the other victim, up to a tick early."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from streams.embedded import append_requests
from streams.inbox import make_request
from tests.e2e.cli import allot

ROOT = Path(__file__).resolve().parents[2]
# short, so the test waits out few ticks; the submissions before the protections end
# take about a second of the two ticks they are given (6 s: room for a loaded CI machine)
TICK_S = 6.0
GAP_S = 0.3 * TICK_S  # between the tick and the first end, and between the two ends
WAIT_S = 120  # only how long a broken run takes to fail


def _until(what: str, done: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + WAIT_S
    while not (result := done()):
        assert time.monotonic() < deadline, f"no {what} within {WAIT_S} s"
        time.sleep(0.1)
    return result


def test_why_foresees_the_victim_and_start_a_ticked_serve_journals(tmp_path: Path) -> None:
    data = tmp_path / "lab"
    cluster = f"forecast-{uuid.uuid4().hex[:8]}"
    env = {"ALLOT_DATA": str(data), "ALLOT_CLUSTER": cluster, "USER": "ops"}
    procs: list[subprocess.Popen[bytes]] = []

    def spawn(*args: str) -> None:
        full = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")} | env
        log = (tmp_path / f"{args[0]}.log").open("ab")
        procs.append(subprocess.Popen([sys.executable, "-m", "allot.cli", *args], env=full,
                                      cwd=ROOT, stdout=log, stderr=subprocess.STDOUT))  # fmt: skip

    def run(*args: str) -> str:
        result = allot(*args, env=env)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result.stdout

    def journal() -> list[dict[str, Any]]:
        path = data / "journal.jsonl"
        return [orjson.loads(x) for x in path.read_bytes().splitlines()] if path.exists() else []

    def placed(wid: str) -> dict[str, Any] | None:
        verdict = next((r for r in journal() if r["type"] in ("workload.placed",
                        "workload.rejected") and r["workload"] == wid), None)  # fmt: skip
        assert verdict is None or verdict["type"] == "workload.placed", verdict
        return verdict

    def submit(wid: str, allocation: str, min_runtime: float) -> None:
        request = make_request("workload.submitted", cluster=cluster, actor="alice", workload=wid,
                               allocation=allocation, gpus=4, min_runtime=min_runtime,
                               runtime=3600.0)  # fmt: skip
        append_requests(data, [request])

    try:
        spawn("serve", "--admin", "ops", "--tick", f"{TICK_S:g}s")
        run("host", "register", "h0", "8", "--wait", "60")
        run("budget", "set", "lab", "1", "--manager", "ops", "--member", "alice", "--wait", "60")
        for leaf in ("lab/a", "lab/b"):  # equal shares: lab/a ranks first on a tie
            run("budget", "set", leaf, "1", "--member", "alice", "--wait", "60")
        spawn("executor", "--simulate")  # runtimes of an hour: nothing ends during the test

        # the ticker's grid, from a tick just written: the journal's clock is the inbox's,
        # close to the wall clock
        def ticks() -> list[dict[str, Any]]:
            return [r for r in journal() if r["type"] == "clock.tick"]

        seen = len(ticks())
        fresh = _until("a new tick", lambda: len(ticks()) > seen and ticks())
        tick = fresh[-1]["time"]
        assert fresh[-1]["every"] == TICK_S
        # two protections ending GAP_S apart, well inside one tick's interval: both are
        # over at the tick after them (at tick + 3 * TICK_S)
        first_end = tick + 2 * TICK_S + GAP_S
        submit("fc-a", "lab/b", first_end - time.time())
        a = _until("fc-a placed", lambda: placed("fc-a"))
        submit("fc-b", "lab/b", first_end + GAP_S - time.time())
        b = _until("fc-b placed", lambda: placed("fc-b"))
        # waiting work of the allocation owed GPUs: it reclaims them from lab/b once a
        # protection ends, and only then (the cluster is full of protected work)
        submit("fc-c", "lab/a", 900.0)
        _until("fc-c accepted", lambda: any(r["type"] == "workload.submitted"
                                            and r["workload"] == "fc-c" for r in journal()))  # fmt: skip
        answer = orjson.loads(run("why", "fc-c", "--json"))
        fc = answer["forecast"]
        assert fc["from_time"] < a["protected_until"], "the forecast came too late to test"
        ends = sorted([a["protected_until"], b["protected_until"]])
        assert (ends[1] - tick) // TICK_S == (ends[0] - tick) // TICK_S, "not one interval"

        c = _until("fc-c placed", lambda: placed("fc-c"))
        records = journal()
        victims = [r["workload"] for r in records
                   if r["type"] == "workload.preempted" and r.get("beneficiary") == "fc-c"]  # fmt: skip
        assert victims == ["fc-b"]  # the most recently started, both being unprotected
        assert fc["expected_preempts"] == victims
        assert abs(fc["expected_start_time"] - c["time"]) < TICK_S
        assert fc["expected_start_time"] >= ends[1]  # not at the first end: at a tick
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=60)

"""examples/launcher/local_launcher.py, the README's launcher contract made real: a live
`allot serve` (embedded, and on the session's broker), the launcher running each placed
workload as a local process, a preemption, a launcher killed with -9 and restarted, and
a lost host. The journal must end up with one report per attempt, the commands' own exit
codes, and every preempted process stopped. Real processes throughout."""

from __future__ import annotations

import contextlib
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
import pytest

from streams.sources import EmptyJournal, journal_lines
from tests.e2e.cli import allot

ROOT = Path(__file__).resolve().parents[2]
LAUNCHER = ROOT / "examples" / "launcher" / "local_launcher.py"
WAIT_S = 120  # only how long a broken run takes to fail


class Lab:
    """A scheduler, its launcher and the commands a user runs, on one back end."""

    def __init__(self, tmp: Path, kafka: str | None) -> None:
        self.tmp, self.kafka = tmp, kafka
        self.cluster = f"launcher-{uuid.uuid4().hex[:8]}"
        self.data = None if kafka else tmp / "lab"
        where = {"ALLOT_KAFKA": kafka} if kafka else {"ALLOT_DATA": str(self.data)}
        self.env = {"ALLOT_CLUSTER": self.cluster, "USER": "ops", **where}
        self.procs: list[subprocess.Popen[bytes]] = []
        self.launcher: subprocess.Popen[bytes] | None = None

    def spawn(self, *args: str) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")} | self.env
        log = (self.tmp / f"{Path(args[0]).stem}-{len(self.procs)}.log").open("ab")
        proc = subprocess.Popen([sys.executable, *args], env=env, cwd=ROOT, stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)  # fmt: skip
        self.procs.append(proc)
        return proc

    def run(self, *args: str) -> str:
        result = allot(*args, env=self.env)
        assert result.returncode == 0, (args, result.stdout, result.stderr)
        return result.stdout

    def submit(self, gpus: int, min_runtime: str, cmd: str | None, *more: str) -> str:
        tag = ["--tag", f"cmd={cmd}"] if cmd else []
        out = self.run("submit", "-A", "lab", "-G", str(gpus), "--min-runtime", min_runtime,
                       *tag, *more, "--as", "alice", "--parsable", "--wait", "60")  # fmt: skip
        return out.split()[0]

    def start_launcher(self) -> None:
        self.launcher = self.spawn(str(LAUNCHER), "--state", str(self.tmp / "state"))

    def journal(self) -> list[dict[str, Any]]:
        try:
            lines = journal_lines(kafka=self.kafka, data=self.data, cluster=self.cluster)
            return [orjson.loads(line) for line in lines]
        except EmptyJournal:
            return []

    def finished(self, wid: str) -> list[dict[str, Any]]:
        return [r for r in self.journal()
                if r["type"] == "workload.finished" and r["workload"] == wid]  # fmt: skip

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
                proc.wait(timeout=60)
        for pid in (self.tmp / "state" / "attempts").glob("*/*/pid"):  # commands left running
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.killpg(int(pid.read_text()), signal.SIGKILL)


def until(what: str, done: Callable[[], Any]) -> Any:
    deadline = time.monotonic() + WAIT_S
    while not (result := done()):
        assert time.monotonic() < deadline, f"no {what} within {WAIT_S} s"
        time.sleep(0.2)
    return result


def pid_in(path: Path) -> int:
    return int(until(f"{path.name} (the command started)", lambda: path.exists()
                     and path.read_text().strip()))  # fmt: skip


def running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # an orphan the container's init does not reap stays a zombie: it has stopped
    return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"


@pytest.fixture(params=["embedded", pytest.param("kafka", marks=pytest.mark.kafka)])
def lab(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    kafka = request.getfixturevalue("kafka_bootstrap") if request.param == "kafka" else None
    lab = Lab(tmp_path, kafka)
    if kafka:
        lab.run("topics", "create")
    lab.spawn("-m", "allot.cli", "serve", "--admin", "ops", "--tick", "1s")
    try:
        yield lab
    finally:
        lab.stop()


def test_the_local_launcher_reports_each_attempt_once_across_a_kill_and_a_lost_host(
    lab: Lab, tmp_path: Path
) -> None:
    for host in ("h0", "h1"):
        lab.run("host", "register", host, "8", "--wait", "60")
    lab.run("budget", "set", "lab", "1", "--manager", "ops", "--member", "alice", "--wait", "60")
    lab.start_launcher()
    mark = tmp_path / "marks"
    mark.mkdir()

    # a 16-GPU filler, preempted by allocated work: its process is stopped, not reported
    filler = lab.submit(16, "0", f"echo $$ > {mark}/filler; exec sleep 300")
    filler_pid = pid_in(mark / "filler")
    failing = lab.submit(8, "15m", "echo out of memory >&2; sleep 1; exit 3")
    plain = lab.submit(2, "15m", None, "--runtime", "1")  # no cmd tag: `sleep 1`
    until("reports", lambda: lab.finished(failing) and lab.finished(plain))
    until("the filler stopped", lambda: not running(filler_pid))
    # the attempt's folder is gone once reported; what it printed is kept for its user
    output = tmp_path / "state" / "output" / f"{failing}.1.log"
    assert output.read_text() == "out of memory\n"

    # the launcher killed -9 mid-run: while it is down one attempt ends and one is preempted
    victim = lab.submit(8, "0", f"echo $$ > {mark}/victim; exec sleep 300")
    quick = lab.submit(2, "15m", f"echo ran >> {mark}/quick; sleep 1; exit 7")
    slow = lab.submit(2, "15m", f"echo ran >> {mark}/slow; sleep 3")
    victim_pid = pid_in(mark / "victim")
    until("both started", lambda: (mark / "quick").exists() and (mark / "slow").exists())
    assert lab.launcher is not None
    lab.launcher.kill()
    lab.launcher.wait()
    taker = lab.submit(8, "15m", "sleep 1")  # placed where the victim runs
    assert running(victim_pid)  # nobody stops it but the launcher
    lab.start_launcher()
    until("reports after the restart", lambda: all(lab.finished(w) for w in (quick, slow, taker)))
    until("the victim stopped", lambda: not running(victim_pid))
    assert [(mark / w).read_text() for w in ("quick", "slow")] == ["ran\n", "ran\n"]  # adopted

    # a lost host: reported unhealthy, then its attempt lost; the resumable work resumes
    resumable = lab.submit(8, "15m", '[ "$ALLOT_ATTEMPT" -gt 1 ] || exec sleep 300',
                           "--resumable")  # fmt: skip
    placed = [r for r in lab.journal() if r["type"] == "workload.placed"]
    (host,) = next(r["hosts"] for r in placed if r["workload"] == resumable)
    (tmp_path / "state" / "lost" / host).touch()
    until("the second attempt's report", lambda: len(lab.finished(resumable)) == 2)

    journal = lab.journal()
    reports = {}
    for r in journal:
        if r["type"] == "workload.finished":
            assert r["id"] == f"launcher/{lab.cluster}/{r['workload']}/{r['attempt']}"
            assert (r["workload"], r["attempt"]) not in reports, "reported twice"
            reports[r["workload"], r["attempt"]] = r
    got = {k: (r["outcome"], r.get("exit_code"), r.get("requeued", False))
           for k, r in reports.items()}  # fmt: skip
    assert got == {
        (failing, 1): ("failed", 3, False),
        (plain, 1): ("completed", 0, False),
        (quick, 1): ("failed", 7, False),
        (slow, 1): ("completed", 0, False),
        (taker, 1): ("completed", 0, False),
        (resumable, 1): ("lost", None, True),
        (resumable, 2): ("completed", 0, False),
    }
    preempted = {r["workload"] for r in journal if r["type"] == "workload.preempted"}
    assert preempted == {filler, victim}
    order = [r["id"] for r in journal if r["type"] in ("host.health", "workload.finished")]
    health = [r for r in journal if r["type"] == "host.health"]
    assert [(r["host"], r["healthy"], r["actor"]) for r in health] == [(host, False, "ops")]
    assert order.index(health[0]["id"]) < order.index(reports[resumable, 1]["id"])
    # a report resent after a restart (killed between the inbox taking it and the
    # launcher's marker) is rejected as a duplicate id, never applied
    rejected = [r for r in journal if str(r.get("ref", "")).startswith("launcher/")]
    assert all("duplicate" in str(r.get("error", "")) for r in rejected), rejected


@pytest.mark.parametrize(
    ("where", "says"),
    [
        (["--data", "no-such-lab"], "no-such-lab: no such folder"),
        ([], "say where the scheduler is: --kafka HOST:PORT"),
    ],
)
def test_the_local_launcher_pointed_nowhere_says_so_in_one_line(
    tmp_path: Path, where: list[str], says: str
) -> None:
    """A mistyped --data (or none at all) ended the launcher in a traceback."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    result = subprocess.run(
        [sys.executable, str(LAUNCHER), *where, "--state", str(tmp_path / "state")],
        capture_output=True, text=True, cwd=tmp_path, env=env, timeout=WAIT_S,
    )  # fmt: skip
    assert result.returncode == 1
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"local_launcher: error: {says}"), line

"""Whether a request sent to Kafka without --wait waits for the scheduler's verdict.

It waits when a running worker serves the request's cluster, as the broker lists the
worker in its presence group, whether or not the worker journals clock ticks. Once the
worker has stopped, or was killed on this machine, the request says at once that no
scheduler serves the cluster. Before, the tool judged by the journal alone (a record of
the cluster in the last 30 s): a worker stopped a moment ago kept every request waiting
10 s for nothing, and one started with `--tick 0` that had been quiet, or a new cluster
of a worker serving them all, was taken for none, so its refusals went unsaid.

Real `allot serve` / `python -m streams.worker` processes, the session's broker."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.e2e.cli import allot

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
READY_S = 120.0
REFUSED = ["submit", "-A", "lab", "-G", "24", "--min-runtime", "1h"]  # more than registered


class _Worker:
    """A scheduler worker in the background, its log in a file."""

    def __init__(self, environ: dict[str, str], log: Path, *command: str) -> None:
        self.log = log
        with log.open("wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, *command], stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=environ, cwd=ROOT,
            )  # fmt: skip

    def ready(self) -> None:
        deadline = time.monotonic() + READY_S
        while "scheduler ready" not in self.log.read_text():
            assert self.proc.poll() is None, self.log.read_text()
            assert time.monotonic() < deadline, self.log.read_text()
            time.sleep(0.1)

    def end(self, signum: int = signal.SIGINT) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signum)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _deployment(bootstrap: str) -> dict[str, str]:
    """Topics of a deployment of this test's own; the environment its tools run in."""
    environ = {
        "ALLOT_KAFKA": bootstrap,
        "ALLOT_TOPIC_SUFFIX": f".waits-{uuid.uuid4().hex[:8]}",
        "USER": "ops",
    }
    created = allot("topics", "create", env=environ)
    assert created.returncode == 0, created.stderr
    return environ


def _process_env(environ: dict[str, str]) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    return {**base, **environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"}


def _no_scheduler_note(bootstrap: str, environ: dict[str, str], cluster: str) -> str:
    return (
        f"note: no scheduler serves cluster {cluster!r} at kafka {bootstrap} now; the request "
        f"waits in allot.inbox{environ['ALLOT_TOPIC_SUFFIX']} until one runs (`allot serve "
        f"--kafka {bootstrap}`)\n"
    )


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGKILL], ids=["stopped", "killed"])
def test_a_request_right_after_the_scheduler_stopped_says_none_serves_the_cluster(
    kafka_bootstrap: str, tmp_path: Path, signum: int
) -> None:
    """The worker ticks every second, so its cluster's journal had a record a moment
    ago: the request waited 10 s for a verdict that could not come, then printed only
    the "Submitted" line. Now the stopped (or killed) worker is no longer listed."""
    environ = _deployment(kafka_bootstrap)
    serve = _Worker(
        _process_env(environ), tmp_path / "serve.log",
        "-m", "allot.cli", "serve", "--cluster", "c", "--tick", "1s", "--admin", "ops",
    )  # fmt: skip
    try:
        serve.ready()
        for setup in (["host", "register", "n1", "8"], ["budget", "set", "lab", "1"]):
            done = allot(*setup, "--cluster", "c", "--wait", "60", env=environ)
            assert done.returncode == 0, (done.stdout, done.stderr)
        refused = allot(*REFUSED, "--cluster", "c", env=environ)
        assert refused.returncode == 1, (refused.stdout, refused.stderr)  # served: said
    finally:
        serve.end(signum)

    sent = allot(*REFUSED, "--cluster", "c", env=environ)

    assert sent.returncode == 0, (sent.stdout, sent.stderr)
    (line,) = sent.stdout.splitlines()
    assert line.startswith("Submitted workload ")
    assert sent.stderr == _no_scheduler_note(kafka_bootstrap, environ, "c")


def test_a_budget_change_to_a_cluster_nobody_serves_is_sent_with_the_note(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """`budget set` waits 10 s for its verdict by default. On Kafka it waited those
    10 s even when no worker served the cluster, then said no verdict came, exit 1,
    where a --data folder nobody serves got the note and exit 0. Now it asks the
    presence group as the other requests do; a served cluster still gets its verdict."""
    environ = _deployment(kafka_bootstrap)

    sent = allot("budget", "set", "lab", "1", "--cluster", "c", env=environ)

    assert sent.returncode == 0, (sent.stdout, sent.stderr)
    (line,) = sent.stdout.splitlines()
    assert line.startswith("Budget change for lab (weight 1) sent ")
    assert sent.stderr == _no_scheduler_note(kafka_bootstrap, environ, "c")

    serve = _Worker(
        _process_env(environ), tmp_path / "serve.log",
        "-m", "allot.cli", "serve", "--cluster", "c", "--admin", "ops",
    )  # fmt: skip
    try:
        serve.ready()
        refused = allot("budget", "set", "nowhere/x", "1", "--cluster", "c", env=environ)
    finally:
        serve.end()
    assert refused.returncode == 1, (refused.stdout, refused.stderr)
    assert "was rejected" in refused.stdout


@pytest.mark.parametrize(
    "command",
    [
        ["-m", "streams.worker", "--tick-every", "0", "--admin", "ops"],
        ["-m", "allot.cli", "serve", "--group", "g", "--tick", "0", "--admin", "ops"],
    ],
    ids=["one-worker", "group"],
)
def test_a_scheduler_that_journals_no_ticks_is_waited_for(
    kafka_bootstrap: str, tmp_path: Path, command: list[str]
) -> None:
    """A worker without clock ticks (`--tick 0`) serving every cluster: a cluster it has
    journaled nothing of lately (quiet, or new) had no record in the last 30 s, so the
    tool sent without waiting and the scheduler's refusal went unsaid (exit 0)."""
    environ = _deployment(kafka_bootstrap)
    worker = _Worker(_process_env(environ), tmp_path / "worker.log", *command)
    try:
        worker.ready()
        cluster = f"quiet-{uuid.uuid4().hex[:6]}"

        refused = allot(*REFUSED, "--cluster", cluster, env=environ)

        assert refused.returncode == 1, (refused.stdout, refused.stderr)
        first, said = refused.stdout.splitlines()
        workload = first.removeprefix("Submitted workload ")
        assert said.startswith(f"Workload {workload} was rejected: "), said
        assert refused.stderr == ""
    finally:
        worker.end()


def test_a_stop_right_after_a_restart_that_followed_a_crash_is_prompt(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """A worker started right after one was killed joins the presence group, and the
    broker holds that join until the dead member's session ends (here 30 s). Its stop
    waited for the join: Ctrl-C took up to 10 s (the client's stop timeout). The
    presence member now gets a short stop of its own."""
    environ = _deployment(kafka_bootstrap)
    command = ["-m", "streams.worker", "--tick-every", "0", "--admin", "ops"]
    crashed = _Worker(
        _process_env(environ), tmp_path / "crashed.log", *command, "--session-timeout", "30"
    )
    try:
        crashed.ready()
        served = allot(*REFUSED, "--cluster", "c", env=environ)
        assert served.returncode == 1, (served.stdout, served.stderr)  # in the group: said
    finally:
        crashed.end(signal.SIGKILL)
    restarted = _Worker(_process_env(environ), tmp_path / "restarted.log", *command)
    try:
        restarted.ready()
    finally:
        asked = time.monotonic()
        restarted.end()
        took = time.monotonic() - asked

    assert restarted.proc.returncode == 0, restarted.log.read_text()
    assert took < 6.0, f"the stop took {took:.1f} s: {restarted.log.read_text()}"

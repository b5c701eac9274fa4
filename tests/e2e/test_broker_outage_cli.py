"""The request tools when the broker goes away while they `--wait` for a verdict.

The request is out once the broker acknowledged it, so its id (or "sent" line) comes
first, and a broker lost during the wait ends in one line saying no verdict came and
how to see what the scheduler decided, not in a traceback. Real processes and a broker
of this module's own (it is stopped mid-test; the session broker stays untouched).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cli import allot
from tests.streams.rig import Broker

pytestmark = pytest.mark.kafka


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    yield from Broker.running(tmp_path / "kafka")


def _first_line(stream, timeout: float) -> str:
    """The first line `stream` gives within `timeout` seconds ('' if none)."""
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    return got[0] if got else ""


# each request tool with what it says once the broker has the request
REQUESTS = {
    "submit": (
        ["submit", "-A", "lab", "-G", "1", "--min-runtime", "5m", "--as", "alice"],
        "Submitted workload ",
    ),
    "host-health": (
        ["host", "health", "h1", "--unhealthy", "--as", "ops"],
        "Host h1 reported unhealthy",
    ),
}


def test_a_wait_whose_broker_goes_away_says_the_request_was_sent(broker: Broker) -> None:
    """Every tool waits at once on one broker, stopped once: a broker start and a wait
    for each tool in turn took twice as long."""
    environ = {"ALLOT_KAFKA": broker.bootstrap}
    created = allot("topics", "create", env=environ)
    assert created.returncode == 0, created.stderr
    # no scheduler runs: the verdict is still pending when the broker goes away
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    procs = {
        name: subprocess.Popen(
            # long enough to outlast the broker's stop below, short enough for the suite
            [sys.executable, "-m", "allot.cli", *args, "--wait", "15"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            stdin=subprocess.DEVNULL,
            env={**env, **environ},
        )
        for name, (args, _) in REQUESTS.items()
    }
    try:
        # said once the broker has it, while the wait goes on (it came only after the
        # wait, and not at all when the broker went away meanwhile)
        first = {name: _first_line(proc.stdout, 30) for name, proc in procs.items()}
        broker.stop()
        outputs = {name: proc.communicate(timeout=120) for name, proc in procs.items()}
    finally:
        for proc in procs.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    for name, (_, sent) in REQUESTS.items():
        rest, err = outputs[name]
        said = (name, first[name], rest, err)
        # the id / sent line came while the command was still waiting
        assert first[name].startswith(sent), said
        assert procs[name].returncode == 1, said
        assert "Traceback" not in err and "Task was destroyed" not in err, said
        lines = err.strip().splitlines()
        assert len(lines) == 1, said
        assert lines[0].startswith("No verdict on "), said
        assert f"Kafka at {broker.bootstrap} stopped answering during the wait" in lines[0], said
        assert "the request was sent (above)" in lines[0] and "`allot why " in lines[0], said

"""The simulated launcher's bookkeeping: what it remembers is bounded by what is live."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from allot.commands.executor import SimulatedLauncher


def placed(wid: str, attempt: int, t: float) -> dict:
    return {"type": "workload.placed", "cluster": "c", "workload": wid, "attempt": attempt,
            "time": t, "hosts": {"h0": [0]}}  # fmt: skip


@pytest.mark.parametrize("answer", ["accepted", "rejected"])
def test_a_report_is_forgotten_once_the_journal_answers_it(answer: str) -> None:
    launcher = SimulatedLauncher("c", speed=1.0)
    for n in range(100):
        wid = f"w{n}"
        launcher.on_record({"type": "workload.submitted", "cluster": "c", "workload": wid,
                            "runtime": 10, "time": 0.0})  # fmt: skip
        launcher.on_record(placed(wid, 1, 0.0))
    reports = launcher.due(now=10.0)
    assert len(reports) == 100 and len(launcher.sent) == 100
    for report in reports:
        if answer == "accepted":
            launcher.on_record(report)  # the journal holds the accepted report itself
        else:
            launcher.on_record({"type": "workload.rejected", "cluster": "c",
                                "ref": report["id"], "error": "stale attempt"})  # fmt: skip
    assert launcher.sent == {}
    assert launcher.jobs == {} if answer == "accepted" else len(launcher.jobs) == 100
    assert len(launcher.rejected) == (100 if answer == "rejected" else 0)


class FlakyInbox:
    """An inbox that refuses the first `failures` sends, as Kafka does while restarting."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.sent: list[list[dict]] = []

    def send(self, requests: list[dict]) -> None:
        from streams.inbox import InboxError

        if self.failures:
            self.failures -= 1
            raise InboxError("allot.inbox did not acknowledge within 15 s")
        self.sent.append(requests)


def test_reports_are_retried_while_the_inbox_is_down(monkeypatch: pytest.MonkeyPatch) -> None:
    """The executor used to exit on the first failed send, leaving the finished workload
    RUNNING in the journal until someone restarted it."""
    import threading

    from allot.commands import executor

    monkeypatch.setattr(executor, "RETRY_S", (0.01,))
    inbox, logged = FlakyInbox(failures=3), []
    batch = [{"id": "r1", "workload": "w1"}]
    assert executor.send_retrying(inbox, batch, threading.Event(), logged.append)
    assert inbox.sent == [batch]  # the same requests, once they were taken
    assert len(logged) == 3 and "retrying in 0.01 s" in logged[0]
    stopped = threading.Event()
    stopped.set()
    assert not executor.send_retrying(FlakyInbox(failures=1), batch, stopped)


def test_ctrl_c_says_interrupted(tmp_path: Path) -> None:
    """typer turns Ctrl-C in a command into a silent exit 130: a stopped executor (or any
    command without a note of its own) ended without a word."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "allot.cli", "executor", "--simulate", "--data", str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    assert proc.stderr is not None
    banner = proc.stderr.readline()  # it runs: now interrupt it
    assert banner.startswith("allot executor: simulating"), banner
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    assert err.splitlines() == ["interrupted"], err


def test_an_inbox_it_may_not_write_is_not_retried(tmp_path: Path) -> None:
    """A folder whose inbox cannot be written (read-only, not its owner's; here the inbox
    is a folder) failed every send the same way, and the executor retried for ever."""
    import threading

    from allot.commands import executor
    from streams.inbox import EmbeddedInbox, InboxRefused

    (tmp_path / "inbox.jsonl").mkdir()
    stop, logged = threading.Event(), []

    def log(message: str) -> None:  # a retry would log, then stop
        logged.append(message)
        stop.set()

    with pytest.raises(InboxRefused, match=r"inbox\.jsonl"):
        executor.send_retrying(EmbeddedInbox(tmp_path), [{"id": "r1"}], stop, log)
    assert logged == []


def test_the_executor_says_once_that_it_cannot_write_the_inbox(tmp_path: Path) -> None:
    """It started, followed the journal and met the problem only at its first report,
    then retried that report for ever: now it says what is wrong at its start, exit 2."""
    from tests.e2e.cli import one_line_error

    (tmp_path / "inbox.jsonl").mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    result = subprocess.run(
        [sys.executable, "-m", "allot.cli", "executor", "--simulate", "--data", str(tmp_path)],
        capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    one_line_error(result, str(tmp_path / "inbox.jsonl"), "Is a directory")

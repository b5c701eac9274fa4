"""A full disk under the embedded journal (`--data DIR`), for real: the commands run
with a file-size limit (RLIMIT_FSIZE, SIGXFSZ ignored), so their writes past it fail
with EFBIG part-way, as on a disk that fills (ENOSPC)."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from streams.embedded import INBOX_FILE, JOURNAL_FILE, append_requests
from streams.inbox import make_request

ADMIN = "ops"


def allot_limited(
    *args: str, limit: int | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """`allot ARGS` whose writes beyond `limit` bytes of any file fail (EFBIG)."""

    def cap_file_size() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))  # type: ignore[arg-type]

    return subprocess.run(
        [sys.executable, "-m", "allot.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
        | {"USER": "tester"},
        stdin=subprocess.DEVNULL,
        preexec_fn=None if limit is None else cap_file_size,
    )


def setup(folder: Path) -> None:
    append_requests(
        folder,
        [
            make_request("host.registered", cluster="default", actor=ADMIN, host="h0", gpus=8),
            make_request("budget.set", cluster="default", actor=ADMIN, allocation="lab",
                         weight=1, managers=["pm"]),
            make_request("budget.set", cluster="default", actor="pm", allocation="lab/olmo",
                         weight=3, members=["alice"]),
        ],
    )  # fmt: skip


SUBMIT = ("submit", "-A", "lab/olmo", "-G", "1", "--min-runtime", "15m", "--as", "alice")


@pytest.mark.parametrize(
    "args",
    [
        SUBMIT,
        (*SUBMIT, "--array", "0-199"),
        (*SUBMIT, "--wait", "5"),
        ("budget", "set", "lab/olmo", "4", "--as", "pm"),
        ("host", "health", "h0", "--unhealthy", "--reason", "xid-79", "--as", ADMIN),
    ],
    ids=["submit", "array", "submit-wait", "budget", "host-health"],
)
def test_a_request_the_full_disk_refuses_says_nothing_was_sent(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """The request commands said `note: ... the request waits in its inbox until ...`
    before a write that then failed, and the error did not say the request was not
    sent. Now: one line, that nothing was sent, exit 2, and no line of it in the inbox
    (a 200-task array is not half there)."""
    folder = tmp_path / "d"
    setup(folder)
    inbox = folder / INBOX_FILE
    before = inbox.read_bytes()
    result = allot_limited(*args, "--data", str(folder), limit=len(before) + 100)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.stderr.splitlines() == [
        f"error: cannot write {inbox}: File too large; nothing was sent"
    ]
    assert result.stdout == ""  # no "Submitted" line
    assert inbox.read_bytes() == before
    sent = allot_limited(*args, "--data", str(folder))  # space again: it goes
    assert sent.returncode in (0, 1), sent.stderr  # 1: --wait, nobody serves
    assert "note: no scheduler serves" in sent.stderr
    assert len(inbox.read_bytes().splitlines()) > len(before.splitlines())


def records(folder: Path) -> list[dict]:
    return [orjson.loads(line) for line in (folder / JOURNAL_FILE).read_bytes().splitlines()]


def test_serve_stops_at_a_full_disk_and_a_restart_decides_every_request_once(
    tmp_path: Path,
) -> None:
    """The journal write fails part-way: serve stops with one line naming the file and
    the cause, the journal holds none of the batch (only whole lines), and once there
    is space a restart decides each request once."""
    folder = tmp_path / "d"
    setup(folder)
    first = allot_limited("serve", "--data", str(folder), "--once", "--tick", "0")
    assert first.returncode == 0, first.stderr
    journal = folder / JOURNAL_FILE
    kept = journal.read_bytes()
    ids = [
        allot_limited(*SUBMIT, "--parsable", "--data", str(folder)).stdout.strip() for _ in range(6)
    ]
    full = allot_limited(
        "serve", "--data", str(folder), "--tick", "0", "--snapshot-every", "0",
        limit=len(kept) + 700,
    )  # fmt: skip
    assert full.returncode == 2, full.stderr
    assert "Traceback" not in full.stderr
    assert full.stderr.splitlines()[-1] == (
        f"error: cannot write {journal}: File too large; the scheduler stopped: the "
        "requests from inbox offset 3 on wait in inbox.jsonl, decided once `allot serve` "
        "starts again where it can write"
    )
    assert journal.read_bytes() == kept  # no part of the failed batch
    again = allot_limited("serve", "--data", str(folder), "--once", "--tick", "0")
    assert again.returncode == 0, again.stderr
    submitted = [r["workload"] for r in records(folder) if r["type"] == "workload.submitted"]
    assert sorted(submitted) == sorted(ids)
    placed = [r["workload"] for r in records(folder) if r["type"] == "workload.placed"]
    assert sorted(placed) == sorted(ids)


def test_a_full_disk_leaves_the_request_clock_whole(tmp_path: Path) -> None:
    """DIR/.clock keeps the journal's time ahead of a wall clock stepped back. It was
    rewritten in place, so a write cut short left half a record, read as none: request
    times fell back to the wall clock, before times already journaled."""
    folder = tmp_path / "d"
    setup(folder)
    clock = folder / ".clock"
    ahead = {"ts": 4_000_000_000.0, "wall": 1.0, "booted": 0.0, "boot": "another boot"}
    clock.write_bytes(orjson.dumps(ahead))
    result = allot_limited(*SUBMIT, "--data", str(folder), limit=20)
    assert result.returncode == 2, result.stdout + result.stderr
    assert orjson.loads(clock.read_bytes()) == ahead

"""Running the real `allot` command in end-to-end tests, and what its errors look like."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
TINY = FIXTURES / "tiny.yaml"


def allot(
    *args: str, env: dict[str, str] | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """`allot ARGS` in a subprocess, without the caller's $ALLOT_* settings."""
    full_env = {k: val for k, val in os.environ.items() if not k.startswith("ALLOT_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "allot.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=full_env,
        cwd=cwd,
    )


def one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    """Exit 2 with exactly one `error: ...` line naming every needle, no traceback."""
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    for needle in needles:
        assert needle in lines[0], lines[0]


def allot_on_a_terminal(*args: str, timeout: float = 120, columns: int = 160) -> tuple[int, str]:
    """`allot ARGS` with stdout and stderr on a pseudo-terminal `columns` wide (as a
    person runs it): its exit code and everything it printed."""
    import pty
    import select
    import time

    env = {k: val for k, val in os.environ.items() if not k.startswith("ALLOT_")}
    env.update(COLUMNS=str(columns), TERM="xterm")
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "allot.cli", *args],
        stdin=subprocess.DEVNULL,
        stdout=slave,
        stderr=slave,
        env=env,
    )
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
                if not data:
                    break
                chunks.append(data)
            elif proc.poll() is not None:
                break
        code = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
    return code, b"".join(chunks).decode(errors="replace")

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

"""One simulation of tiny.yaml per session, shared read-only by the end-to-end tests
that only need a journal (a test that appends to it works on a copy)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.cli import TINY, allot


@pytest.fixture(scope="session")
def tiny_journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-sim")
    result = allot("simulate", str(TINY), "--out", str(out), "-q", "--no-report")
    assert result.returncode == 0, result.stderr
    return out / "fairshare" / "journal.jsonl"


@pytest.fixture(autouse=True)
def every_command_kept() -> Any:
    """`allot.cli.main` keeps only the command it runs in `app` (start-up speed): a test
    that calls it in-process would leave the next test in this process a pruned app."""
    from allot.cli import app

    commands, groups = list(app.registered_commands), list(app.registered_groups)
    yield
    app.registered_commands, app.registered_groups = commands, groups

"""One simulation of tiny.yaml per session, shared read-only by the end-to-end tests
that only need a journal (a test that appends to it works on a copy)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.e2e.cli import TINY, allot


@pytest.fixture(scope="session")
def tiny_journal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tiny-sim")
    result = allot("simulate", str(TINY), "--out", str(out), "-q", "--no-report")
    assert result.returncode == 0, result.stderr
    return out / "fairshare" / "journal.jsonl"

"""What the dashboard's error page tells the operator to do: fix or replace the
journal only when the journal is what is wrong; a broker that does not answer, or a
journal topic that is not there (a mistyped suffix), is not fixed by touching the
journal. Real `allot dashboard` processes, pages fetched over HTTP."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest

JOURNAL_HINT = "Fix or replace the journal"
BROKER_HINT = "The page asks the broker again on the next request."


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _page(url: str) -> tuple[int, str]:
    deadline = time.monotonic() + 60
    while True:
        try:
            with urllib.request.urlopen(url, timeout=60) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()
        except OSError:  # not listening yet
            assert time.monotonic() < deadline, f"{url} never answered"
            time.sleep(0.2)


def _state(page: str) -> str:
    found = re.search(r"<div class='empty' id='error-state'>(.*?)</div>", page, re.S)
    assert found, page[:2000]
    return found.group(1)


@pytest.fixture
def bad_journal(tmp_path: Path) -> Path:
    path = tmp_path / "journal.jsonl"
    path.write_bytes(b"{not json\n")
    return path


@pytest.mark.parametrize(
    ("case", "says", "hint"),
    [
        pytest.param(
            "broker-unreachable",
            "cannot reach Kafka at 127.0.0.1:1",
            BROKER_HINT,
            id="broker-unreachable",
        ),
        pytest.param(
            "missing-topic",
            "ALLOT_TOPIC_SUFFIX is ",
            BROKER_HINT,
            id="missing-topic",
            marks=pytest.mark.kafka,
        ),
        pytest.param("bad-journal", ":1: not JSON", JOURNAL_HINT, id="bad-journal"),
    ],
)
def test_the_error_page_says_to_fix_the_journal_only_when_it_is_bad(
    case: str, says: str, hint: str, bad_journal: Path, request: pytest.FixtureRequest
) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    if case == "broker-unreachable":
        source = ["--kafka", "127.0.0.1:1"]
    elif case == "missing-topic":
        bootstrap = request.getfixturevalue("kafka_bootstrap")
        source = ["--kafka", bootstrap]
        env["ALLOT_TOPIC_SUFFIX"] = f".nobody-{uuid.uuid4().hex[:8]}"
    else:
        source = ["--journal", str(bad_journal)]
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "allot.cli", "dashboard", "--port", str(port), *source],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL, env=env,
    )  # fmt: skip
    try:
        status, page = _page(f"http://127.0.0.1:{port}/")
    finally:
        proc.terminate()
        proc.wait(timeout=60)
    assert status == 503
    state = _state(page)
    assert says in state, state
    assert hint in state, state
    if hint != JOURNAL_HINT:
        assert JOURNAL_HINT not in state, state

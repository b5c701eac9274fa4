"""What `allot` imports before it does anything: every command pays for it, shell
scripts and researchers run them many times a day, and this suite hundreds of times.
A command's help, a mistyped flag, and a `--data` folder need neither the policy plugins
(importlib.metadata's scan, `domain` and its pydantic models) nor a Kafka client."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# runs `allot ARGV` in-process, then writes which modules were imported to the last argument
PROBE = """
import json, sys
argv, out = sys.argv[1:-1], sys.argv[-1]
sys.argv = ["allot", *argv]
from allot.cli import main
try:
    main()
except SystemExit:
    pass
with open(out, "w") as f:
    json.dump(sorted(sys.modules), f)
"""


def imported(tmp_path: Path, *argv: str, **environ: str) -> set[str]:
    out = tmp_path / "modules.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    env.update(ALLOT_CLUSTER="default", USER="alice", **environ)
    subprocess.run(
        [sys.executable, "-c", PROBE, *argv, str(out)],
        env=env,
        capture_output=True,
        timeout=120,
        check=False,
    )
    return set(json.loads(out.read_text()))


@pytest.mark.parametrize(
    "argv",
    [["--help"], ["queue", "--help"], ["submit", "--bogus-flag"], ["simulate", "--help"]],
    ids=["help", "queue-help", "bad-flag", "simulate-help"],
)
def test_help_and_a_mistyped_flag_load_no_policy_plugins(tmp_path: Path, argv: list[str]) -> None:
    modules = imported(tmp_path, *argv)
    assert "allot" in modules and "allot.cli" in modules  # the probe did run allot
    assert not {"allot.plugins", "domain.events", "aiokafka"} & modules


def test_the_root_help_imports_no_event_loop(tmp_path: Path) -> None:
    assert "asyncio" not in imported(tmp_path, "--help")


def test_a_data_folder_is_read_and_written_without_a_kafka_client(
    tmp_path: Path, tiny_journal: Path
) -> None:
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(tiny_journal, data / "journal.jsonl")
    (data / "inbox.jsonl").write_bytes(b"")
    queue = imported(tmp_path, "queue", "--data", str(data))
    assert "projections.views" in queue  # the queue was read
    submit = imported(
        tmp_path, "submit", "-A", "lab", "-G", "1", "--min-runtime", "15m", "--data", str(data)
    )
    assert b"workload.submitted" in (data / "inbox.jsonl").read_bytes()
    assert not any(name.split(".")[0] == "aiokafka" for name in queue | submit)


@pytest.mark.parametrize(
    ("line", "reads_the_journal"),
    [
        ("allot ", False),
        ("allot cancel --data DATA ", True),
        ("allot submit --data DATA -A ", True),
    ],
    ids=["commands", "workload-ids", "allocations"],
)
def test_a_tab_loads_no_policy_plugins_nor_kafka(
    tmp_path: Path, tiny_journal: Path, line: str, reads_the_journal: bool
) -> None:
    """Completion runs on every TAB: it reads a --data folder's journal by a byte search,
    without `domain` (pydantic), the policy plugins or a Kafka client."""
    data = tmp_path / "data"
    data.mkdir()
    shutil.copy(tiny_journal, data / "journal.jsonl")
    line = line.replace("DATA", str(data))
    modules = imported(
        tmp_path,
        _ALLOT_COMPLETE="complete_bash",
        COMP_WORDS=line,
        COMP_CWORD=str(len(line.split())),
    )
    assert "allot.completion" in modules  # the probe did complete
    assert ("streams.sources" in modules) == reads_the_journal
    assert not {"allot.plugins", "domain.events", "aiokafka"} & modules

"""An operator's backup and restore on the session's broker: `allot journal export` copies
a live Kafka journal to a file that replays byte for byte, that every reader takes, and
that an embedded scheduler can be restored from. Real processes, real broker."""

from __future__ import annotations

import json
import shutil
import uuid
from pathlib import Path

import pytest

from tests.e2e.cli import allot
from tests.e2e.test_serve_kafka_start import _env, _Serve

pytestmark = pytest.mark.kafka


def _ok(*args: str, env: dict[str, str]) -> str:
    result = allot(*args, env=env)
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result.stdout


def _queue(*where: str, env: dict[str, str]) -> list[tuple[str, str, str]]:
    rows = json.loads(_ok("queue", *where, "--cluster", "c", "--json", env=env))["workloads"]
    return sorted((row["id"], row["state"], row["allocation"]) for row in rows)


def test_a_kafka_journal_exported_to_a_file_replays_and_restores_an_embedded_scheduler(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    suffix = f".backup-{uuid.uuid4().hex[:8]}"
    env = {"ALLOT_KAFKA": kafka_bootstrap, "ALLOT_TOPIC_SUFFIX": suffix, "ALLOT_CLUSTER": "c"}
    _ok("topics", "create", env=env)
    serve = _Serve(_env(**env))
    try:
        serve.until("scheduler ready")
        _ok("host", "register", "h0", "8", "--as", "ops", "--wait", "30", env=env)
        _ok("budget", "set", "lab", "1", "--manager", "pm", "--as", "ops", env=env)
        _ok("budget", "set", "lab/a", "1", "--member", "alice", "--as", "pm", env=env)
        submit = ("submit", "-A", "lab/a", "--min-runtime", "1h", "--as", "alice", "--wait")
        for _ in range(2):
            _ok(*submit, "30", "-G", "4", env=env)
        # a --wait this one sits out in full: the scheduler answered each of the two
        # above in well under a second
        waits = allot(*submit, "5", "-G", "8", env=env)
        assert "still waiting to start" in waits.stderr, waits.stderr
    finally:
        assert serve.stop() == 0, serve.text
    live = _queue(env=env)
    assert [state for _, state, _ in live].count("RUNNING") == 2, live

    backup = tmp_path / "backup.jsonl"
    result = allot("journal", "export", "--out", str(backup), env=env)
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in backup.read_bytes().splitlines()]
    # $ALLOT_CLUSTER (c) narrows the copy, and says so
    assert f"exported {len(records)} records of cluster c ($ALLOT_CLUSTER; " in result.stderr
    assert f" from allot.journal{suffix} at " in result.stderr
    assert not (tmp_path / "backup.jsonl.partial").exists()
    assert {r["type"] for r in records} >= {"host.registered", "budget.set", "workload.placed"}

    # the file is a journal: it re-decides byte for byte, and the read commands take it
    assert "reproduced byte for byte" in _ok("replay", str(backup), "--verify", env={})
    assert _queue("--journal", str(backup), env={}) == live

    # restore: an embedded scheduler started on a copy holds the same cluster
    folder = tmp_path / "restored"
    folder.mkdir()
    shutil.copy(backup, folder / "journal.jsonl")
    restored = allot("serve", "--data", str(folder), "--cluster", "c", "--once")
    assert restored.returncode == 0, restored.stderr
    # one warning, saying what happened (it said the inbox was "cut, replaced or edited")
    warnings = [line for line in restored.stderr.splitlines() if "warning" in line]
    assert len(warnings) == 1 and "there is no " in warnings[0], restored.stderr
    assert "journal.jsonl copied in from elsewhere" in warnings[0]
    assert _queue("--data", str(folder), env={}) == live
    _ok("submit", "-A", "lab/a", "-G", "1", "--min-runtime", "1h", "--as", "alice",
        "--data", str(folder), "--cluster", "c", env={})  # fmt: skip
    _ok("serve", "--data", str(folder), "--cluster", "c", "--once", env={})
    assert len(_queue("--data", str(folder), env={})) == len(live) + 1


def test_an_export_of_an_unreachable_broker_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "backup.jsonl"
    out.write_text("yesterday's backup\n")
    result = allot("journal", "export", "--kafka", "127.0.0.1:1", "--out", str(out))
    assert result.returncode == 2
    assert "nothing exported" in result.stderr
    assert out.read_text() == "yesterday's backup\n"


def test_an_export_reads_allot_cluster_as_every_command_does(
    tiny_journal: Path, tmp_path: Path
) -> None:
    """export ignored $ALLOT_CLUSTER (README: every `--cluster` defaults to it) while its
    error on Kafka said to pick a cluster with it. Unset, it copies every cluster."""
    folder = tmp_path / "two-clusters"
    folder.mkdir()
    tiny = tiny_journal.read_bytes().splitlines()
    west = json.loads(tiny[0]) | {"cluster": "west", "id": "west/0"}
    (folder / "journal.jsonl").write_bytes(b"\n".join([*tiny, json.dumps(west).encode()]) + b"\n")
    out = tmp_path / "backup.jsonl"

    def export(*flags: str, env: dict[str, str]) -> list[dict]:
        _ok("journal", "export", "--data", str(folder), "--out", str(out), *flags, env=env)
        return [json.loads(line) for line in out.read_bytes().splitlines()]

    assert len(export(env={})) == len(tiny) + 1
    assert len(export(env={"ALLOT_CLUSTER": ""})) == len(tiny) + 1
    assert export(env={"ALLOT_CLUSTER": "west"}) == [west]
    said = allot("journal", "export", "--data", str(folder), "--out", str(out),
                 env={"ALLOT_CLUSTER": "west"}).stderr  # fmt: skip
    assert "exported 1 record of cluster west ($ALLOT_CLUSTER; unset it for every cluster)" in said
    assert len(export("--cluster", "tiny", env={"ALLOT_CLUSTER": "west"})) == len(tiny)
    out.write_text("yesterday's backup\n")
    nope = allot("journal", "export", "--data", str(folder), "--out", str(out),
                 env={"ALLOT_CLUSTER": "nope"})  # fmt: skip
    assert nope.returncode == 2 and "no records of cluster 'nope'" in nope.stderr, nope.stderr
    assert out.read_text() == "yesterday's backup\n"

"""`allot replay --kafka`: the journal read from the journal topic of a real broker.

A simulation's journal is produced into `allot.journal` (the topic `journal_lines`
reads) under a cluster name of the test's own, keyed by that name as the worker keys
it; `allot replay --kafka --cluster --verify` reproduces it, and a tampered copy under
another cluster name fails with exit 1."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import orjson
import pytest

from tests.e2e.kafka_journal import produce_journal

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]
TINY = Path(__file__).parent / "fixtures" / "tiny.yaml"


def allot(*args: str, **allot_env: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    env.update(allot_env)
    return subprocess.run(
        [sys.executable, "-m", "allot.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
    )


@pytest.fixture(scope="module")
def simulated(tmp_path_factory: pytest.TempPathFactory) -> list[dict]:
    out = tmp_path_factory.mktemp("sim")
    result = allot("simulate", str(TINY), "--out", str(out), "-q", "--no-report")
    assert result.returncode == 0, result.stderr
    lines = (out / "fairshare" / "journal.jsonl").read_bytes().splitlines()
    return [orjson.loads(line) for line in lines if line.strip()]


def renamed(records: list[dict], cluster: str) -> list[dict]:
    """The journal as cluster `cluster` wrote it (decision ids are `cluster/seq`)."""
    out = []
    for record in records:
        old = record["cluster"]
        record = {**record, "cluster": cluster}
        if str(record["id"]).startswith(f"{old}/"):
            record["id"] = f"{cluster}/{record['id'].removeprefix(old + '/')}"
        out.append(record)
    return out


def _cluster() -> str:
    return f"replay-{uuid.uuid4().hex[:10]}"


def test_replay_verify_reads_the_journal_from_kafka(
    kafka_bootstrap: str, simulated: list[dict], tmp_path: Path
) -> None:
    cluster = _cluster()
    produce_journal(kafka_bootstrap, renamed(simulated, cluster))

    ok = allot("replay", "--kafka", kafka_bootstrap, "--cluster", cluster, "--verify")
    assert ok.returncode == 0, ok.stderr
    assert "reproduced byte for byte" in ok.stdout
    assert f"in {len(simulated):,} records" in ok.stdout
    # the same from $ALLOT_KAFKA and $ALLOT_CLUSTER, as every other reader takes them
    from_env = allot("replay", "--verify", ALLOT_KAFKA=kafka_bootstrap, ALLOT_CLUSTER=cluster)
    assert from_env.returncode == 0, from_env.stderr
    assert f"in {len(simulated):,} records" in from_env.stdout
    # $ALLOT_CLUSTER with an explicit --kafka too (it was read only without --kafka)
    mixed = allot("replay", "--kafka", kafka_bootstrap, "--verify", ALLOT_CLUSTER=cluster)
    assert mixed.returncode == 0, mixed.stderr

    # and a what-if from the same topic
    what_if = allot(
        "replay", "--kafka", kafka_bootstrap, "--cluster", cluster, "--out", str(tmp_path),
        "--policy", "legacy-priority", "-q",
    )  # fmt: skip
    assert what_if.returncode == 0, what_if.stderr
    assert (tmp_path / "legacy-priority" / "summary.json").is_file()


def test_replay_from_kafka_catches_a_tampered_record(
    kafka_bootstrap: str, simulated: list[dict]
) -> None:
    cluster = _cluster()
    records = renamed(simulated, cluster)
    index = next(i for i, r in enumerate(records) if r["type"] == "workload.placed")
    records[index] = {**records[index], "charged": not records[index]["charged"]}
    produce_journal(kafka_bootstrap, records)

    bad = allot("replay", "--kafka", kafka_bootstrap, "--cluster", cluster, "--verify")
    assert bad.returncode == 1, (bad.stdout, bad.stderr)
    assert "not reproduced" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_replay_wants_exactly_one_journal(kafka_bootstrap: str, tmp_path: Path) -> None:
    neither = allot("replay", "--verify")
    both = allot("replay", str(tmp_path / "j.jsonl"), "--kafka", kafka_bootstrap, "--verify")
    unknown = allot("replay", "--kafka", kafka_bootstrap, "--cluster", _cluster(), "--verify")
    for result in (neither, both, unknown):
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
        assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1, (
            result.stderr
        )
    assert "JOURNAL file or --kafka" in neither.stderr and "JOURNAL file or --kafka" in both.stderr
    assert "no records" in unknown.stderr

"""A host's life as an operator runs it on a folder served by `allot serve --data`: a
GPU pulled (`host register` again with fewer), a host decommissioned (`host remove`),
and `host list -R` (sinfo -R) saying which hosts take no work, why, by whom, since when."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import orjson
import pytest

from tests.e2e.cli import allot


def _ok(*args: str) -> str:
    result = allot(*args, env={"USER": "ops"})
    assert result.returncode == 0, result.stderr
    return result.stdout


def _journal(data: Path) -> list[dict]:
    return [orjson.loads(line) for line in (data / "journal.jsonl").read_bytes().splitlines()]


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """node7 (8 GPUs) runs `low` on GPUs 0-3 and `high` on 4-7 (resumable); node8
    (8 GPUs) runs `wide`, not resumable. Then GPU 7 of node7 is pulled, node8 is
    decommissioned and node7 reported unhealthy."""
    data = tmp_path_factory.mktemp("hosts") / "lab"
    d = ["--data", str(data)]
    _ok("host", "register", "node7", "8", *d)
    _ok("host", "register", "node8", "8", *d)
    _ok("budget", "set", "lab", "1", *d)
    _ok("budget", "set", "lab/a", "1", *d)
    submit = ("submit", "-A", "lab/a", "--min-runtime", "1h", "--parsable", *d)
    ids = {
        "low": _ok(*submit, "-G", "4", "--resumable").strip(),
        "high": _ok(*submit, "-G", "4", "--resumable").strip(),
        "wide": _ok(*submit, "-G", "8").strip(),
    }
    _ok("serve", "--once", "--tick", "0", *d)
    placed = {r["workload"]: r["hosts"] for r in _journal(data) if r["type"] == "workload.placed"}
    assert placed == {
        ids["low"]: {"node7": [0, 1, 2, 3]},
        ids["high"]: {"node7": [4, 5, 6, 7]},
        ids["wide"]: {"node8": list(range(8))},
    }
    return {"data": str(data), **ids}


def _step(lab: dict[str, str], *args: str) -> list[dict]:
    """Send one request, let the scheduler decide it; the records it wrote."""
    before = len(_journal(Path(lab["data"])))
    _ok(*args, "--data", lab["data"])
    _ok("serve", "--once", "--tick", "0", "--data", lab["data"])
    return _journal(Path(lab["data"]))[before:]


def _hosts(lab: dict[str, str], *args: str) -> dict[str, dict]:
    out = orjson.loads(_ok("host", "list", "--json", "--data", lab["data"], *args))
    return {h["host"]: h for h in out["hosts"]}


def test_a_pulled_gpu_shrinks_the_host_and_requeues_the_work_on_it(lab: dict[str, str]) -> None:
    out = _step(lab, "host", "register", "node7", "7")
    assert [r["type"] for r in out] == ["host.registered", "workload.preempted"]
    stop = out[1]
    assert (stop["workload"], stop["reason"], stop["requeued"]) == (
        lab["high"],
        "gpus_removed",
        True,
    )
    assert (stop["explain"]["gpus"], stop["explain"]["host_gpus"]) == ([7], 7)
    node7 = _hosts(lab)["node7"]
    assert (node7["gpus"], node7["held"], node7["free"]) == (7, 4, 3)
    assert node7["workloads"] == [lab["low"]]
    why = _ok("why", lab["high"], "--data", lab["data"])
    assert "reason gpus_removed (host node7 was registered again with 7 GPUs; GPU 7" in why


def test_a_removed_host_leaves_the_capacity_and_its_work_ends(lab: dict[str, str]) -> None:
    out = _step(lab, "host", "remove", "node8", "--reason", "decommissioned")
    assert [r["type"] for r in out[:2]] == ["host.removed", "workload.preempted"]
    assert (out[1]["workload"], out[1]["requeued"]) == (lab["wide"], False)
    assert out[0]["reason"] == "decommissioned" and out[0]["actor"] == "ops"
    placed = [r for r in out if r["type"] == "workload.placed"]
    # node8's GPUs freed nothing: `high` (4 GPUs) waits; node7 has 3 free
    assert placed == []
    assert "node8" not in _hosts(lab)
    shares = orjson.loads(_ok("shares", "--json", "--data", lab["data"]))
    assert shares["capacity"] == 7, shares
    acct = _ok("acct", "-j", lab["wide"], "-o", "JobID,State", "--noheader", "--data", lab["data"])
    assert acct.split() == [lab["wide"], "NODE_FAIL"]


def test_host_list_r_says_which_hosts_take_no_work_why_by_whom_and_when(
    lab: dict[str, str],
) -> None:
    """As sinfo -R: the hosts of the cluster that take no work. The removed node8 is
    not one (it listed every host ever decommissioned, burying those to repair);
    --removed adds it, with who removed it and why."""
    _step(lab, "host", "health", "node7", "--unhealthy", "--reason", "xid-79")
    listed = orjson.loads(_ok("host", "list", "-R", "--json", "--data", lab["data"]))["hosts"]
    assert [(r["host"], r["state"], r["reason"], r["by"]) for r in listed] == [
        ("node7", "draining", "xid-79", "ops"),
    ]
    table = _ok("host", "list", "-R", "--data", lab["data"]).splitlines()
    assert table[1].split() == ["REASON", "USER", "TIMESTAMP", "HOST", "STATE", "GPUS", "DRAINED"]
    assert table[2].split()[:2] == ["xid-79", "ops"] and "node7" in table[2]
    assert len(table) == 3 and "node8" not in "\n".join(table)
    both = ("host", "list", "-R", "--removed", "--json", "--data", lab["data"])
    rows = orjson.loads(_ok(*both))["hosts"]
    assert [(r["host"], r["state"], r["reason"], r["by"]) for r in rows] == [
        ("node7", "draining", "xid-79", "ops"),
        ("node8", "removed", "decommissioned", "ops"),
    ]
    assert all(r["since"] for r in rows)
    table = _ok("host", "list", "--removed", "--data", lab["data"]).splitlines()
    assert "decommissioned" in table[3] and "removed" in table[3]


def test_removal_of_an_unknown_host_is_one_clear_rejection(lab: dict[str, str]) -> None:
    out = _step(lab, "host", "remove", "node9")
    assert [r["type"] for r in out] == ["host.rejected"]
    rejected = [r for r in _journal(Path(lab["data"])) if r["type"] == "host.rejected"]
    assert rejected[-1]["error"] == "unknown host 'node9'; `allot host list` lists registered hosts"


def test_the_journal_replays_byte_for_byte(lab: dict[str, str]) -> None:
    out = _ok("replay", str(Path(lab["data"]) / "journal.jsonl"), "--verify")
    assert "reproduced byte for byte" in out


def test_a_draining_host_says_when_it_should_be_empty(tmp_path: Path) -> None:
    """An operator taking a host out for maintenance saw `draining` and nothing about
    how long: its work leaves as its protection ends, which the journal knows."""
    data = tmp_path / "lab"
    d = ["--data", str(data)]
    _ok("host", "register", "h0", "8", *d)
    _ok("budget", "set", "lab", "1", *d)
    _ok("budget", "set", "lab/a", "1", *d)
    for protection in ("1h", "2h"):
        _ok("submit", "-A", "lab/a", "-G", "2", "--min-runtime", protection, *d)
    _ok("serve", "--once", "--tick", "0", *d)
    _ok("host", "health", "h0", "--unhealthy", "--reason", "bios", *d)
    _ok("serve", "--once", "--tick", "0", *d)
    last = max(r["protected_until"] for r in _journal(data) if r["type"] == "workload.placed")
    expected = datetime.fromtimestamp(last, UTC).strftime("%Y-%m-%d %H:%M:%S")

    listed = orjson.loads(_ok("host", "list", "--json", *d))["hosts"]
    assert [(h["state"], h["drains_by"]) for h in listed] == [("draining", expected)]
    assert f"bios (by ops); empty by {expected}" in _ok("host", "list", *d)
    reasons = orjson.loads(_ok("host", "list", "-R", "--json", *d))["hosts"]
    assert [(h["drained_at"], h["drains_by"]) for h in reasons] == [(None, expected)]
    assert f"by {expected}?" in _ok("host", "list", "-R", *d)

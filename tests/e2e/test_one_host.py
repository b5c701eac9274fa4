"""`allot submit --one-host` (and sbatch's `-N 1`) end to end on an embedded `--data`
folder: refused when bigger than every host, waiting for one host while a gang of the
same size runs on small hosts, and shown by queue, why and --json; a simulated run with
one_host work replays identically."""

from __future__ import annotations

from pathlib import Path

import orjson

from tests.e2e.requests_rig import ADMIN, allot, journal, one_line_error


def _ok(*args: str) -> str:
    result = allot(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def _serve_once(data: Path) -> None:
    _ok("serve", "--data", str(data), "--admin", ADMIN, "--once")


def _submit(data: Path, *args: str) -> str:
    common = ("-A", "lab/a", "--min-runtime", "1h", "--as", "alice", "--parsable")
    return _ok("submit", *common, *args, "--data", str(data)).strip()


def test_work_on_one_host_waits_for_one_host_and_says_so(tmp_path: Path) -> None:
    data = tmp_path / "data"
    for args in (
        ("host", "register", "h0", "8"),
        ("host", "register", "h1", "4"),
        ("host", "register", "h2", "4"),
        ("host", "health", "h0", "--unhealthy", "--reason", "xid-79"),
        ("budget", "set", "lab", "1"),
        ("budget", "set", "lab/a", "1", "--member", "alice"),
    ):
        _ok(*args, "--as", ADMIN, "--data", str(data))
    one = _submit(data, "-G", "8", "--one-host")
    too_big = _submit(data, "-G", "12", "--one-host")
    gang = _submit(data, "-G", "8")
    nodes = _submit(data, "-G", "4", "-N", "1")
    refused = allot("submit", "-A", "lab/a", "-G", "8", "--min-runtime", "1h", "-N", "2")
    assert one_line_error(refused) == (
        "error: --nodes 2: allot picks the hosts (-G N more than a host holds gets whole "
        "hosts); only -N 1 is taken, as --one-host (all GPUs on one host)"
    )
    _serve_once(data)

    records = journal(data)
    submitted = {r["workload"]: r for r in records if r["type"] == "workload.submitted"}
    assert submitted[one]["one_host"] is True and submitted[nodes]["one_host"] is True
    assert "one_host" not in submitted[gang]
    (rejection,) = [r for r in records if r["type"] == "workload.rejected"]
    assert rejection["workload"] == too_big and rejection["error"] == (
        "asks for 12 GPUs on one host (one_host) but the biggest host of cluster 'default' "
        "has 8; submit with at most 8 GPUs, or without one_host to run on whole hosts"
    )

    rows = {
        r["id"]: r for r in orjson.loads(_ok("queue", "--data", str(data), "--json"))["workloads"]
    }
    assert rows[gang]["state"] == "RUNNING" and set(rows[gang]["hosts"]) == {"h1", "h2"}
    assert (rows[one]["state"], rows[one]["one_host"], rows[gang]["one_host"]) == (
        "PENDING",
        True,
        False,
    )
    assert rows[one]["reason"] == "Resources" and rows[one]["detail"] == (
        "needs 8 GPUs on one host; the hosts that big are unhealthy: it waits for one "
        "host, h0, to be repaired"
    )
    why = _ok("why", one, "--data", str(data))
    assert f"workload {one}: lab/a, 8 GPUs on one host, min runtime 1h" in why
    assert "it waits for one host, h0, to be repaired" in why
    assert orjson.loads(_ok("why", one, "--data", str(data), "--json"))["submitted"]["one_host"]

    # repaired, h0 takes it; the 4-GPU -N 1 work then waits for one host with 4 free
    _ok("host", "health", "h0", "--healthy", "--as", ADMIN, "--data", str(data))
    _serve_once(data)
    rows = {
        r["id"]: r for r in orjson.loads(_ok("queue", "--data", str(data), "--json"))["workloads"]
    }
    assert rows[one]["hosts"] == {"h0": list(range(8))}
    assert rows[nodes]["state"] == "PENDING" and rows[nodes]["detail"] == (
        "no free GPUs and nothing it may preempt; it waits for one host with 4 GPUs "
        "(asked on one host)"
    )
    line = _ok("queue", "--data", str(data), "-h", "-j", nodes, "-o", "nodes,one_host,reason")
    assert line.split() == ["1", "yes", "Resources"]


SCENARIO = """
cluster: {name: lab, hosts: 2, gpus_per_host: 8}
allocations:
  - {path: lab, weight: 1}
  - {path: lab/a, weight: 1, members: [alice]}
workloads:
  - generate: {seed: 1, allocation: lab/a, count: 3, arrival: uniform, rate_per_h: 6,
               gpus: [16], runtime: {fixed: 1h}, min_runtime: 30m, one_host: true}
  - generate: {seed: 2, allocation: lab/a, count: 3, arrival: uniform, rate_per_h: 6,
               gpus: [16], runtime: {fixed: 1h}, min_runtime: 30m}
  - trace: {file: t.csv, format: allot-csv}
horizon: 1d
"""


def test_a_simulated_run_keeps_one_host_and_replays_identically(tmp_path: Path) -> None:
    """generate entries and allot-csv rows carry one_host into the journal: asked on one
    host, 16 GPUs on 8-GPU hosts are refused, the same without it run as gangs; replay
    re-decides the journal to the same records."""
    (tmp_path / "sc.yaml").write_text(SCENARIO)
    (tmp_path / "t.csv").write_text(
        "submit_time,runtime,gpus,allocation,workload,one_host\n"
        "10m,1h,16,lab/a,csv-one,true\n"
        "20m,1h,4,lab/a,csv-fits,yes\n"
        "30m,1h,16,lab/a,csv-gang,\n"
    )
    out = tmp_path / "out"
    _ok(
        "simulate",
        str(tmp_path / "sc.yaml"),
        "-p",
        "fairshare",
        "--no-report",
        "-q",
        "--out",
        str(out),
    )
    path = out / "fairshare" / "journal.jsonl"
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    asked = {
        r["workload"] for r in records if r["type"] == "workload.submitted" and r.get("one_host")
    }
    assert asked == {"csv-fits"}  # the others asked for more than a host has
    refused = {
        r["workload"]
        for r in records
        if r["type"] == "workload.rejected" and "on one host (one_host)" in r["error"]
    }
    assert refused == {"0-000000", "0-000001", "0-000002", "csv-one"}
    placed = {r["workload"] for r in records if r["type"] == "workload.placed"}
    assert {"1-000000", "1-000001", "1-000002", "csv-gang", "csv-fits"} <= placed
    verified = allot("replay", str(path), "--verify")
    assert verified.returncode == 0, verified.stdout + verified.stderr

"""`allot serve --metrics-port`: the running scheduler serves Prometheus /metrics folded
from the journal it writes (and, after a restart, from the journal it recovered).

Real processes: `allot serve --data DIR` (and `--kafka` against the session's broker),
requests sent with `allot host/budget/submit`, scraped over HTTP."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parents[2]
ADMIN = "ops"
WAIT_S = 60.0


def _env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    out.update(USER="tester", **extra)
    return out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def allot(*args: str, environ: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [sys.executable, "-m", "allot.cli", *args],
        capture_output=True,
        text=True,
        timeout=90,
        env=environ or _env(),
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
    )
    assert result.returncode == 0, (args, result.stdout, result.stderr)
    return result


def samples(port: int) -> dict[tuple[str, frozenset], float] | None:
    """Every sample of a scrape: (name, labels) -> value; None when not listening."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
            text = response.read().decode()
    except OSError:
        return None
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(scrape: dict, name: str, **labels: str) -> float | None:
    return scrape.get((name, frozenset(labels.items())))


def wait_scrape(port: int, ok: Callable[[dict], bool], timeout: float = WAIT_S) -> dict:
    deadline = time.monotonic() + timeout
    scrape: dict | None = None
    while time.monotonic() < deadline:
        scrape = samples(port)
        if scrape is not None and ok(scrape):
            return scrape
        time.sleep(0.2)
    shown = scrape and {
        k: v for k, v in scrape.items() if k[0] in ("allot_workloads", "allot_decisions_total")
    }
    raise AssertionError(f"/metrics on port {port} never matched in {timeout} s: {shown}")


@contextmanager
def server(*args: str, environ: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "allot.cli", "serve", "--admin", ADMIN, "--tick", "0", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=environ or _env(),
        stdin=subprocess.DEVNULL,
        cwd=ROOT,
    )
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        assert proc.returncode == 0, (out, err)
        assert "Traceback" not in err, err


def _requests(where: list[str], cluster: list[str]) -> None:
    for args in (
        ("host", "register", "h1", "8", "--as", ADMIN),
        ("budget", "set", "lab", "1", "--member", "alice", "--as", ADMIN),
    ):
        allot(*args, *where, *cluster)
    allot(
        "submit",
        *where,
        *cluster,
        "--allocation",
        "lab",
        "--gpus",
        "2",
        "--min-runtime",
        "15m",
        "--as",
        "alice",
    )


def _placed(cluster: str) -> Callable[[dict], bool]:
    def ok(scrape: dict) -> bool:
        return (
            value(scrape, "allot_workloads", cluster=cluster, state="running") == 1.0
            and value(scrape, "allot_workloads", cluster=cluster, state="pending") == 0.0
            and value(scrape, "allot_decisions_total", cluster=cluster, type="placed") == 1.0
        )

    return ok


def test_serve_data_exposes_metrics_of_what_it_journals(tmp_path: Path) -> None:
    data = tmp_path / "data"
    port = _free_port()
    with server("--data", str(data), "--metrics-port", str(port)):
        wait_scrape(port, lambda s: True)  # listening
        _requests(["--data", str(data)], [])
        scrape = wait_scrape(port, _placed("default"))
        assert value(scrape, "allot_gpus", cluster="default", state="allocated") == 2.0
        assert value(scrape, "allot_gpus", cluster="default", state="idle") == 6.0
        records = len((data / "journal.jsonl").read_bytes().splitlines())
        assert value(scrape, "allot_journal_records_total", cluster="default") == records
        _assert_latency_timed(scrape, "default")
        # the folder's disk, for AllotDataDiskFilling: a full one stops serve
        free = value(scrape, "allot_data_filesystem_avail_bytes", path=str(data))
        size = value(scrape, "allot_data_filesystem_size_bytes", path=str(data))
        assert free is not None and size is not None and 0 < free <= size

    # a restart folds the journal it recovers: the first scrape already shows it all
    port = _free_port()
    with server("--data", str(data), "--metrics-port", str(port)):
        scrape = wait_scrape(port, _placed("default"), timeout=30)
        assert value(scrape, "allot_journal_records_total", cluster="default") == records
        # what it recovered was timed by the run that wrote it
        assert value(scrape, "allot_decision_latency_seconds_count", cluster="default") == 0


@pytest.mark.kafka
def test_the_faust_worker_exposes_the_same_metrics(kafka_bootstrap: str, tmp_path: Path) -> None:
    """`ALLOT_METRICS_PORT=N faust -A streams.app worker`: the faust shell serves what
    `allot serve --kafka --metrics-port N` does (it served none before)."""
    name = f".fm{uuid.uuid4().hex[:8]}"
    cluster = f"fm-{uuid.uuid4().hex[:8]}"
    environ = _env(ALLOT_TOPIC_SUFFIX=name)
    where = ["--kafka", kafka_bootstrap]
    allot("topics", "create", *where, environ=environ)
    port = _free_port()
    worker_env = {
        **environ,
        "PYTHONPATH": str(ROOT),
        "ALLOT_KAFKA": kafka_bootstrap,
        "ALLOT_ADMINS": ADMIN,
        "ALLOT_TICK_EVERY": "0",
        "ALLOT_FAUST_DATADIR": str(tmp_path / "faust"),
        "ALLOT_METRICS_PORT": str(port),
    }
    log = tmp_path / "faust.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            ["faust", "-A", "streams.app", "worker", "-l", "info", "--without-web"],
            cwd=ROOT, env=worker_env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    try:
        wait_scrape(port, lambda s: True)  # listening
        for args in (
            ("host", "register", "h1", "8", "--as", ADMIN),
            ("budget", "set", "lab", "1", "--member", "alice", "--as", ADMIN),
            ("submit", "--allocation", "lab", "--gpus", "2", "--min-runtime", "15m", "--as", "alice"),
        ):  # fmt: skip
            allot(*args, *where, "--cluster", cluster, environ=environ)
        scrape = wait_scrape(port, _placed(cluster))
        _assert_latency_timed(scrape, cluster)
        assert value(scrape, "allot_scheduler_recovering") == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    text = log.read_text(errors="replace")
    assert proc.returncode == 0, text[-3000:]
    assert f"allot metrics on http://127.0.0.1:{port}/metrics" in text, text[-3000:]
    assert samples(port) is None  # the clean stop closed the port


def _assert_latency_timed(scrape: dict, cluster: str) -> None:
    """The placement was timed from the submit's send to its write: on the wall clock,
    so more than nothing (its journal time is its cause's) and less than the test."""
    assert value(scrape, "allot_decision_latency_seconds_count", cluster=cluster) == 1
    assert 0 < value(scrape, "allot_decision_latency_seconds_sum", cluster=cluster) < WAIT_S


def test_a_metrics_port_in_use_is_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "allot.cli",
                "serve",
                "--data",
                str(tmp_path / "d"),
                "--metrics-port",
                str(port),
                "--tick",
                "0",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            env=_env(),
            stdin=subprocess.DEVNULL,
        )
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert f"--metrics-port {port}" in result.stderr


@pytest.mark.kafka
def test_serve_kafka_exposes_metrics_of_what_it_journals(kafka_bootstrap: str) -> None:
    # default topic names (`allot serve --kafka` has no suffix); a cluster of its own
    cluster = f"m-{uuid.uuid4().hex[:10]}"
    where = ["--kafka", kafka_bootstrap]
    created = allot("topics", "create", *where)  # serve creates none
    assert created.returncode == 0, created.stderr
    port = _free_port()
    with server(*where, "--cluster", cluster, "--metrics-port", str(port)):
        wait_scrape(port, lambda s: True)  # listening
        _requests(where, ["--cluster", cluster])
        _assert_latency_timed(wait_scrape(port, _placed(cluster)), cluster)

    # a restart (after a snapshot) still folds the whole journal of the cluster
    port = _free_port()
    with server(*where, "--cluster", cluster, "--metrics-port", str(port)):
        scrape = wait_scrape(port, _placed(cluster), timeout=30)
        assert value(scrape, "allot_decision_latency_seconds_count", cluster=cluster) == 0

"""`allot metrics` scraped by a real Prometheus server, queried with PromQL.

Needs Debian's `prometheus` package (`/usr/bin/prometheus`). Never skipped: without
it the test fails saying what to install.

The test simulates tests/e2e/fixtures/tiny.yaml, serves its journal with
`allot metrics --port P --journal J` (following the file), starts Prometheus on a free
port with a generated config scraping it every second, and checks over the HTTP API
that PromQL sees the journal's numbers — then appends a record and sees it followed,
and runs every query of the Grafana dashboard.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

FIXTURES = Path(__file__).parent / "fixtures"
ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "allot.json"
PROMETHEUS_DIR = ROOT / "deploy" / "prometheus"
ALERTS = PROMETHEUS_DIR / "alerts.yml"
START_TIMEOUT_S = 60.0
SCRAPE_TIMEOUT_S = 60.0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _prometheus_binary() -> str:
    found = shutil.which("prometheus") or (
        "/usr/bin/prometheus" if os.access("/usr/bin/prometheus", os.X_OK) else None
    )
    if not found:
        pytest.fail(
            "Prometheus is not installed: this test needs a real server. Install Debian's "
            "package (`apt-get install -y prometheus`, /usr/bin/prometheus) and run it again.",
            pytrace=False,
        )
    return found


def _wait(what: str, check: Callable[[], Any], timeout: float, logs: list[Path]) -> Any:
    """Poll `check` until it returns something truthy, or fail with the logs' tails."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except (OSError, urllib.error.URLError, ValueError) as why:
            last = why
        else:
            if last:
                return last
        time.sleep(0.25)
    tails = "\n".join(f"--- {p.name}:\n{_tail(p)}" for p in logs)
    pytest.fail(f"timed out after {timeout:g}s waiting for {what} (last: {last!r})\n{tails}")


def _tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=5) as resp:
        return resp.read()


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=15)


@pytest.fixture(scope="module")
def journal(tiny_journal: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # a copy the test may append to (the metrics server follows it)
    copy = tmp_path_factory.mktemp("followed") / "followed.jsonl"
    shutil.copyfile(tiny_journal, copy)
    return copy


class Servers:
    def __init__(self, tmp: Path, journal: Path) -> None:
        self.tmp = tmp
        self.journal = journal
        self.metrics_port = _free_port()
        self.prom_port = _free_port()
        self.metrics_log = tmp / "allot-metrics.log"
        self.prom_log = tmp / "prometheus.log"
        self.procs: list[subprocess.Popen[bytes]] = []

    # the served text once the exporter has folded its journal
    ready_marker = b"allot_gpus{"

    def metrics_command(self) -> list[str]:
        return ["metrics", "--port", str(self.metrics_port), "--journal", str(self.journal)]

    @property
    def logs(self) -> list[Path]:
        return [self.metrics_log, self.prom_log]

    def start(self, prometheus: str) -> None:
        with self.metrics_log.open("wb") as log:
            self.procs.append(
                subprocess.Popen(
                    [sys.executable, "-m", "allot.cli", *self.metrics_command()],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=ROOT,
                )
            )
        metrics_url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        _wait(
            "allot metrics to serve",
            lambda: self.ready_marker in _get(metrics_url),
            START_TIMEOUT_S,
            self.logs,
        )
        config = self.tmp / "prometheus.yml"
        config.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            f"rule_files:\n  - {ALERTS}\n"
            "scrape_configs:\n"
            "  - job_name: allot\n"
            "    scrape_interval: 1s\n"
            f"    static_configs:\n      - targets: ['127.0.0.1:{self.metrics_port}']\n"
        )
        with self.prom_log.open("wb") as log:
            self.procs.append(
                subprocess.Popen(
                    [
                        prometheus,
                        f"--config.file={config}",
                        f"--storage.tsdb.path={self.tmp / 'tsdb'}",
                        f"--web.listen-address=127.0.0.1:{self.prom_port}",
                        "--log.level=warn",
                    ],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self.tmp,
                )
            )
        _wait("Prometheus to be ready", lambda: self.ready(), START_TIMEOUT_S, self.logs)

    def ready(self) -> bool:
        for proc in self.procs:
            if proc.poll() is not None:
                tails = "\n".join(f"--- {p.name}:\n{_tail(p)}" for p in self.logs)
                pytest.fail(f"{proc.args[0]} exited with {proc.returncode}\n{tails}")
        return _get(f"http://127.0.0.1:{self.prom_port}/-/ready").startswith(b"Prometheus")

    def query(self, expr: str) -> list[dict[str, Any]]:
        url = f"http://127.0.0.1:{self.prom_port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}
        )
        try:
            body = json.loads(_get(url))
        except urllib.error.HTTPError as why:
            body = json.loads(why.read() or b"{}")
        assert body.get("status") == "success", f"{expr!r}: {body}"
        return body["data"]["result"]

    def scalar(self, expr: str) -> float | None:
        result = self.query(expr)
        return float(result[0]["value"][1]) if result else None

    def wait_value(self, expr: str, want: float) -> None:
        _wait(
            f"{expr} == {want}",
            lambda: self.scalar(expr) == want,
            SCRAPE_TIMEOUT_S,
            self.logs,
        )

    def alerts(self, name: str) -> list[dict[str, Any]]:
        body = json.loads(_get(f"http://127.0.0.1:{self.prom_port}/api/v1/alerts"))
        return [a for a in body["data"]["alerts"] if a["labels"]["alertname"] == name]

    def stop(self) -> None:
        for proc in reversed(self.procs):
            _stop(proc)


@pytest.fixture(scope="module")
def servers(journal: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    prometheus = _prometheus_binary()
    s = Servers(tmp_path_factory.mktemp("prometheus"), journal)
    try:
        s.start(prometheus)
        yield s
    finally:
        s.stop()


def _journal_counts(path: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for line in path.read_bytes().splitlines():
        record = orjson.loads(line)
        counts[record["type"]] = counts.get(record["type"], 0) + 1
        if record["type"] == "workload.preempted":
            key = f"preempted:{record['reason']}"
            counts[key] = counts.get(key, 0) + 1
    return counts


def test_promql_sees_the_journals_numbers(servers: Servers, journal: Path) -> None:
    counts = _journal_counts(journal)
    preempted = counts["workload.preempted"]
    assert preempted > 0  # tiny.yaml preempts (a drain, unallocated filler, fair share)
    servers.wait_value('sum(allot_preemptions_total{cluster="tiny"})', preempted)
    by_reason = {
        r["metric"]["reason"]: float(r["value"][1])
        for r in servers.query('sum by (reason) (allot_preemptions_total{cluster="tiny"})')
    }
    for reason, n in by_reason.items():
        assert n == counts.get(f"preempted:{reason}", 0), reason
    assert servers.scalar('sum(allot_decisions_total{type="placed"})') == counts["workload.placed"]
    assert servers.scalar("sum(allot_journal_records_total)") == sum(
        n for k, n in counts.items() if ":" not in k
    )
    # 4 hosts of 8 GPUs: the states partition them
    assert servers.scalar('sum(allot_gpus{cluster="tiny"})') == 32
    assert servers.scalar('count(allot_fair_share_ratio{cluster="tiny"})') == 3  # lab, train, eval
    assert servers.scalar("allot_journal_lag_seconds") > 0
    assert servers.scalar('up{job="allot"}') == 1


def test_new_records_are_followed(servers: Servers, journal: Path) -> None:
    last = orjson.loads(journal.read_bytes().splitlines()[-1])
    record = {
        "type": "workload.rejected",
        "id": "metrics-test/rejected",
        "time": last["time"] + 1,
        "cluster": "tiny",
        "actor": "allot",
        "ref": "metrics-test",
        "error": "min_runtime above the cap",
        "input_type": "workload.submitted",
    }
    with journal.open("ab") as f:
        f.write(orjson.dumps(record) + b"\n")
    servers.wait_value('allot_rejected_inputs_total{cluster="tiny",reason="workload.rejected"}', 1)
    # a corrupt record appended while following is skipped and counted: the exporter
    # used to exit, and monitoring went down with it
    later = {**record, "id": "metrics-test/rejected-2", "time": record["time"] + 1}
    with journal.open("ab") as f:
        f.write(b"{not json\n" + orjson.dumps(later) + b"\n")
    servers.wait_value('allot_rejected_inputs_total{cluster="tiny",reason="workload.rejected"}', 2)
    servers.wait_value("allot_journal_unreadable_records_total", 1)


def _dashboard_queries(rate_interval: str) -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target, with Grafana's variables filled in."""
    dash = json.loads(DASHBOARD.read_text())
    return [
        (panel["title"], target["expr"].replace("$__rate_interval", rate_interval)
         .replace("$cluster", ".*"))
        for panel in dash["panels"] for target in panel.get("targets", [])
    ]  # fmt: skip


def test_every_dashboard_query_runs(servers: Servers) -> None:
    """Each panel's PromQL is valid for this Prometheus and returns series."""
    # rate()/increase() need a few samples in the range
    _wait(
        "three scrapes",
        lambda: (servers.scalar("max(count_over_time(allot_journal_records_total[1m]))") or 0) >= 3,
        SCRAPE_TIMEOUT_S,
        servers.logs,
    )
    for title, expr in _dashboard_queries("1m"):
        assert servers.query(expr), f"panel {title!r}: no series for {expr}"


def _promtool() -> str:
    found = shutil.which("promtool")
    if not found:
        pytest.fail(
            "promtool is missing: it comes with Debian's `prometheus` package", pytrace=False
        )
    return found


@pytest.mark.parametrize(
    "args",
    [
        ("check", "config", "prometheus.yml"),
        ("test", "rules", "alerts_test.yml"),
    ],
    ids=["deploy-config-is-valid", "alert-rules-unit-tests"],
)
def test_deploy_prometheus_files(args: tuple[str, ...]) -> None:
    """The shipped config loads with its rules, and every alert fires (and stays quiet)
    on the series of alerts_test.yml as written there."""
    result = subprocess.run(
        [_promtool(), *args], cwd=PROMETHEUS_DIR, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr


def test_a_stopped_clock_raises_its_alert(servers: Servers) -> None:
    """The tiny journal's last record is months old: to a live Prometheus that is a
    cluster whose ticker stopped. Its rule (from deploy/prometheus/alerts.yml) goes
    pending at once (firing after its `for`); the scrape itself is fine."""
    stopped = _wait(
        "AllotClockStopped for cluster tiny",
        lambda: [
            a for a in servers.alerts("AllotClockStopped") if a["labels"].get("cluster") == "tiny"
        ],
        SCRAPE_TIMEOUT_S,
        servers.logs,
    )
    assert stopped[0]["state"] in ("pending", "firing")
    assert stopped[0]["labels"]["severity"] == "critical"
    assert "no journal record for" in stopped[0]["annotations"]["summary"]
    # a broker outage stops the journal too, and is the likeliest cause on Kafka
    assert "the Kafka broker is down or unreachable" in stopped[0]["annotations"]["description"]
    assert not servers.alerts("AllotMetricsDown")


class SchedulerServers(Servers):
    """Prometheus scraping the scheduler itself, `allot serve --data DIR --metrics-port
    N` (the exporter of the compose file and the systemd unit), ticking every second."""

    ready_marker = b"allot_scheduler_recovering 0.0"

    def metrics_command(self) -> list[str]:
        return [
            "serve", "--data", str(self.journal), "--admin", "ops", "--tick", "1s",
            "--metrics-port", str(self.metrics_port),
        ]  # fmt: skip

    def scheduler(self) -> subprocess.Popen[bytes]:
        return self.procs[0]


def _send(data: Path, *args: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    result = subprocess.run(
        [sys.executable, "-m", "allot.cli", *args, "--data", str(data)],
        capture_output=True, text=True, timeout=120, env=env, cwd=ROOT,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr


def test_prometheus_scrapes_the_running_scheduler(tmp_path: Path) -> None:
    """What the shipped alerts see of a live scheduler: its decisions as they are
    made, a clock that moves (AllotClockStopped quiet), and once it stops, the
    scrape failing (AllotMetricsDown: the only alert a dead scheduler can raise)."""
    data = tmp_path / "lab"
    servers = SchedulerServers(tmp_path, data)
    try:
        servers.start(_prometheus_binary())
        _send(data, "host", "register", "h1", "8", "--as", "ops")
        _send(data, "budget", "set", "lab", "1", "--member", "alice", "--as", "ops")
        _send(data, "submit", "-A", "lab", "-G", "2", "--min-runtime", "15m", "--as", "alice")
        servers.wait_value('sum(allot_decisions_total{cluster="default",type="placed"})', 1)
        servers.wait_value('sum(allot_gpus{cluster="default",state="allocated"})', 2)
        assert servers.scalar('up{job="allot"}') == 1
        assert servers.scalar("allot_scheduler_recovering") == 0
        # ticks keep the journal moving: the rule that fires on a stopped clock sees it
        # (its expression's series exists) and stays quiet
        assert servers.scalar('allot_journal_lag_seconds{cluster="default"}') is not None
        assert not servers.alerts("AllotClockStopped")

        scheduler = servers.scheduler()
        scheduler.send_signal(signal.SIGTERM)
        assert scheduler.wait(timeout=60) == 0, _tail(servers.metrics_log)
        down = _wait(
            "AllotMetricsDown",
            lambda: servers.alerts("AllotMetricsDown"),
            SCRAPE_TIMEOUT_S,
            servers.logs,
        )
        assert down[0]["state"] in ("pending", "firing")
        assert down[0]["labels"]["severity"] == "critical"
    finally:
        servers.stop()


@pytest.mark.parametrize("follow", ["--follow", "--no-follow"])
def test_the_exporter_stops_cleanly_on_sigterm(
    tiny_journal: Path, tmp_path: Path, follow: str
) -> None:
    """systemd's and Docker's stop: exit 0, as after Ctrl-C (it died of the signal)."""
    journal = tmp_path / "journal.jsonl"
    shutil.copyfile(tiny_journal, journal)  # not the module's: other tests corrupt it
    port = _free_port()
    log = tmp_path / "metrics.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "allot.cli", "metrics", "--port", str(port),
             "--journal", str(journal), follow],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=ROOT,
        )  # fmt: skip
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        _wait("allot metrics to serve", lambda: b"allot_gpus{" in _get(url), START_TIMEOUT_S, [log])
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0, _tail(log)
        assert "Traceback" not in log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _finite(result: list[dict[str, Any]]) -> list[tuple[dict[str, str], float]]:
    """(labels, value) of the series whose value is a number (not NaN or infinite)."""
    out = []
    for series in result:
        v = float(series["value"][1])
        if math.isfinite(v):
            out.append((series["metric"], v))
    return out


def _by_allocation(result: list[dict[str, Any]]) -> dict[str, float]:
    return {labels["allocation"]: v for labels, v in _finite(result)}


def test_every_dashboard_panel_shows_a_loaded_scheduler(tmp_path: Path) -> None:
    """Every panel's query, against `allot serve` scraped while work arrives, is
    placed, preempted and waits, returns numbers — a series of NaN (a quantile of
    nothing) or none at all is a blank panel. The per-allocation panels show who holds
    the GPUs, who waits and who was preempted."""
    data = tmp_path / "lab"
    servers = SchedulerServers(tmp_path, data)
    try:
        servers.start(_prometheus_binary())
        for host in ("h1", "h2"):
            _send(data, "host", "register", host, "8", "--as", "ops")
        _send(data, "budget", "set", "lab", "1", "--as", "ops")
        _send(data, "budget", "set", "lab/a", "1", "--member", "alice", "--as", "ops")
        _send(data, "budget", "set", "lab/b", "1", "--member", "bob", "--as", "ops")
        # a new leaf's series are there at 0 before its work moves them: rate() and
        # increase() see no change in a series that first appears already counted
        servers.wait_value('allot_allocation_queue_wait_seconds_count{allocation="lab/b"}', 0)
        for _ in range(2):  # unallocated: free, preemptible by anyone's charged work
            _send(data, "submit", "-A", "lab/b", "-G", "8", "--min-runtime", "0", "--as", "bob")
        servers.wait_value('sum(allot_allocation_gpus{allocation="lab/b",state="unallocated"})', 16)
        _send(data, "submit", "-A", "lab/a", "-G", "8", "--min-runtime", "15m", "--as", "alice")
        _send(data, "submit", "-A", "lab/a", "-G", "4", "--min-runtime", "15m", "--tag", "debug",
              "--as", "alice")  # fmt: skip
        # lab/a's protected work holds 12 of 16 GPUs: this waits
        _send(data, "submit", "-A", "lab/b", "-G", "8", "--min-runtime", "15m", "--as", "bob")
        servers.wait_value('sum(allot_allocation_preemptions_total{allocation="lab/b"})', 2)
        servers.wait_value('allot_allocation_workloads{allocation="lab/b",state="pending"}', 1)

        # a range wide enough that the load stays in it while every query is asked
        queries = _dashboard_queries("5m")

        def all_show_numbers() -> bool:
            blank = [f"{t}: {e}" for t, e in queries if not _finite(servers.query(e))]
            if blank:  # _wait reports the last one
                raise ValueError(f"panels without a number: {blank}")
            return True

        _wait("every panel to show numbers", all_show_numbers, SCRAPE_TIMEOUT_S, servers.logs)

        panel: dict[str, list[str]] = {}
        for title, expr in queries:
            panel.setdefault(title, []).append(expr)

        def per_allocation(title: str, target: int = 0) -> dict[str, float]:
            return _by_allocation(servers.query(panel[title][target]))

        allocated, unallocated = (per_allocation("GPUs held per allocation", i) for i in (0, 1))
        assert allocated == {"lab/a": 12, "lab/b": 0}, allocated
        assert unallocated == {"lab/a": 0, "lab/b": 0}, unallocated  # preempted
        assert per_allocation("Pending workloads per allocation") == {"lab/a": 0, "lab/b": 1}
        preempted = per_allocation("Preemptions per allocation")
        assert preempted["lab/b"] > 0 and preempted["lab/a"] == 0, preempted
        # both started work in the range (lab/b its unallocated work, since preempted)
        assert set(per_allocation("Queue wait p90 per allocation")) == {"lab/a", "lab/b"}
    finally:
        servers.stop()

"""`allot dashboard` in a real headless Chromium (Debian's `chromium`).

The test starts `allot dashboard` on a free port over a simulation's journal and loads
every page in Chromium. Neither `websockets` nor `websocket-client` is installed, so
Chromium is driven through its CLI modes instead of the DevTools protocol: `--dump-dom`
(the DOM after load, checked against `projections.views` / summary values computed
here) and `--screenshot` (kept under test-artifacts/dashboard/), both with
`--enable-logging=stderr --v=0`, which prints every console message and uncaught
exception as an `INFO:CONSOLE` line. The pages have no scripts, so any console line is
a failure. Failed sub-resource loads are not printed there, so the server's request
log is checked too: every request Chromium makes must succeed.

Every Chromium run has a bounded wait and its whole process group is killed after.
"""

from __future__ import annotations

import contextlib
import html
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from projections import views as v
from projections.gantt import GanttCollector
from projections.report import fmt_pct
from projections.summary import fold as fold_usage
from projections.usage import iter_journal
from tests.e2e.devtools import (
    CHROMIUM,
    HEADLESS,
    charts_as_shown,
    check_charts_readable,
    evaluate,
)

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts" / "dashboard"
CHROME_TIMEOUT_S = 60.0
SERVER_START_S = 30.0

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    return {k: val for k, val in os.environ.items() if not k.startswith("ALLOT_")}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ------------------------------------------------------------------ server
@dataclass
class Server:
    url: str
    proc: subprocess.Popen[str]
    log_path: Path

    def requests(self) -> list[tuple[str, int]]:
        """(path, status) of every request served so far (the access log)."""
        out = []
        for line in self.log_path.read_text().splitlines():
            m = re.search(r'"(?:GET|HEAD) (\S+) HTTP/[\d.]+" (\d{3})', line)
            if m:
                out.append((m.group(1), int(m.group(2))))
        return out


@pytest.fixture(scope="module")
def journal(tiny_journal: Path) -> Path:
    return tiny_journal  # read only: tests that need another journal write their own


def _start(journal: Path, tmp: Path) -> Iterator[Server]:
    port = _free_port()
    log_path = tmp / f"dashboard-{port}.log"
    with log_path.open("w") as log:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "allot.cli",
                "dashboard",
                "--port",
                str(port),
                "--journal",
                str(journal),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            text=True,
            env=_env(),
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + SERVER_START_S
        while True:
            assert proc.poll() is None, log_path.read_text()
            try:
                with urllib.request.urlopen(url + "/favicon.ico", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError(
                        f"dashboard did not start: {log_path.read_text()}"
                    ) from None
                time.sleep(0.1)
        yield Server(url, proc, log_path)
    finally:
        _kill(proc)


def _kill(proc: subprocess.Popen[str]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


@pytest.fixture(scope="module")
def server(journal: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    yield from _start(journal, tmp_path_factory.mktemp("dash"))


# ------------------------------------------------------------------ chromium
@dataclass
class Loaded:
    dom: str
    console: list[str]


def _chromium(args: list[str], tmp: Path) -> tuple[str, str]:
    assert Path(CHROMIUM).exists(), "Debian's chromium is needed: apt-get install chromium"
    profile = tempfile.mkdtemp(prefix="chrome-", dir=tmp)
    cmd = [
        CHROMIUM,
        *HEADLESS,
        "--enable-logging=stderr",
        "--v=0",
        f"--user-data-dir={profile}",
        *args,
    ]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        out, err = proc.communicate(timeout=CHROME_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate(timeout=10)
        raise AssertionError(f"chromium took more than {CHROME_TIMEOUT_S} s: {cmd}") from None
    finally:
        # renderer / zygote helpers share the process group
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(profile, ignore_errors=True)
    return out, err


def _console(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if ":CONSOLE" in line]


def load(url: str, tmp: Path, shot: str | None = None, height: int = 1600) -> Loaded:
    """The page's DOM after load (Chromium --dump-dom); a screenshot when `shot` names
    it. Asserts no console messages in either run."""
    dom, err = _chromium(["--dump-dom", url], tmp)
    console = _console(err)
    assert "<html" in dom[:200] and dom.rstrip().endswith("</html>"), (url, dom[:200], err[-2000:])
    if shot is not None:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{shot}.png"
        path.unlink(missing_ok=True)
        _, err2 = _chromium(
            ["--hide-scrollbars", f"--window-size=1400,{height}", f"--screenshot={path}", url],
            tmp,
        )
        console += _console(err2)
        assert path.is_file() and path.stat().st_size > 10_000, (path, err2[-2000:])
    assert not console, f"console messages on {url}: {console}"
    return Loaded(dom, console)


def status_of(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=30) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code


# ------------------------------------------------------------------ DOM helpers
def _text(fragment: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", fragment)).split())


def row(dom: str, attr: str, value: str) -> dict[str, str]:
    """Cells (data-k -> text) of the `<tr {attr}="{value}">` row."""
    m = re.search(rf'<tr {attr}="{re.escape(value)}">(.*?)</tr>', dom, re.S)
    assert m, f"no row {attr}={value!r}"
    return {k: _text(c) for k, c in re.findall(r'<td[^>]*data-k="(\w+)"[^>]*>(.*?)</td>', m[1])}


def rows_order(dom: str, table: str, attr: str) -> list[str]:
    m = re.search(rf'<table class="{table}">(.*?)</table>', dom, re.S)
    assert m, f"no table {table}"
    return re.findall(rf'<tr {attr}="([^"]+)">', m[1])


def by_id(dom: str, tag: str, ident: str) -> str:
    m = re.search(rf'<{tag}[^>]*id="{ident}"[^>]*>(.*?)</{tag}>', dom, re.S)
    assert m, f"no <{tag} id={ident}>"
    return html.unescape(re.sub(r"<[^>]+>", "", m[1]))


def assert_no_failed_requests(server: Server) -> None:
    bad = [
        (p, s)
        for p, s in server.requests()
        if s >= 400 and not p.startswith(("/workload/no-such", "/timeline?from=yesterday"))
    ]
    assert not bad, bad


# ------------------------------------------------------------------ tests
@pytest.fixture(scope="module")
def expected(journal: Path) -> dict[str, object]:
    view = v.fold(v.decode_lines(journal.read_bytes().splitlines()))
    gantt = GanttCollector()
    usage = fold_usage(iter_journal(journal), sinks=[gantt])
    gantt.close()
    return {
        "view": view,
        "shares": v.share_rows(view),
        "queue": v.queue_rows(view),
        "delivered": usage.delivered(),
        "gantt": gantt,
    }


def test_allocations_page(server: Server, expected: dict, tmp_path: Path) -> None:
    page = load(server.url + "/", tmp_path, shot="allocations", height=2200)
    dom = page.dom
    assert "Allocation usage over time" in dom
    assert 'alt="usage vs owed per allocation" src="data:image/png;base64,' in dom
    assert "<title>Allocations · allot</title>" in dom
    # the tree: weights and shares as projections.views computes them, in its order
    shares = expected["shares"]
    assert rows_order(dom, "tree", "data-path") == [r["path"] for r in shares]
    for r in shares:
        cells = row(dom, "data-path", r["path"])
        assert cells["weight"] == f"{r['weight']:g}"
        assert cells["share"] == fmt_pct(r["share"], 2)
        assert cells["usage"] == f"{r['usage_gpu_h']:,.1f}"
        assert cells["pending"] == str(r["pending"])
    assert row(dom, "data-path", "lab/train")["share"] == "75.00%"
    assert row(dom, "data-path", "lab/eval")["share"] == "25.00%"
    # delivered per allocation and overall: the summary projection's numbers
    d = expected["delivered"]
    assert d["by_allocation"], d
    for leaf, ratio in d["by_allocation"].items():
        assert row(dom, "data-alloc", leaf)["delivered"] == fmt_pct(ratio)
    card = re.search(r"data-card=\"overall\"><div class=\"v\">([^<]+)<", dom)
    assert card and card[1] == fmt_pct(d["overall"])
    assert "cluster <b>tiny</b>" in dom
    assert_no_failed_requests(server)


def test_queue_page(server: Server, expected: dict, tmp_path: Path) -> None:
    dom = load(server.url + "/queue", tmp_path, shot="queue", height=2400).dom
    pending = [r for r in expected["queue"] if r["state"] == "PENDING"]
    running = [r for r in expected["queue"] if r["state"] == "RUNNING"]
    assert pending and running
    # scheduling order, with the sort keys that make it
    assert rows_order(dom, "pending", "data-id") == [r["id"] for r in pending]
    assert rows_order(dom, "running", "data-id") == [r["id"] for r in running]
    for r in pending:
        cells = row(dom, "data-id", r["id"])
        assert cells["position"] == str(r["position"])
        assert cells["rank"] == str(r["rank"])
        assert cells["ratio"] == f"{r['ratio']:.4f}"
        assert cells["priority"] == str(r["priority"])
        assert cells["submitted"] == r["submitted"]
        assert cells["reason"] == r["reason"]
        assert cells["gpus"] == str(r["gpus"])
    assert f"Pending ({len(pending)})" in dom
    assert f'href="/workload/{pending[0]["id"]}"' in dom
    # filtered by one allocation and cut to one row: its first pending row, in place
    leaf = pending[-1]["allocation"]
    mine = [r for r in pending if r["allocation"] == leaf]
    dom = load(f"{server.url}/queue?allocation={leaf}&limit=1", tmp_path).dom
    assert rows_order(dom, "pending", "data-id") == [mine[0]["id"]]
    assert row(dom, "data-id", mine[0]["id"])["position"] == str(mine[0]["position"])
    assert f"Pending ({len(mine)})" in dom
    if len(mine) > 1:
        assert f"Showing the first 1 of {len(mine)}" in dom
    # a wall display: the page reloads itself
    dom = load(f"{server.url}/queue?refresh=60", tmp_path).dom
    assert re.search(r'<meta http-equiv="refresh" content="60">', dom), dom[:500]
    assert_no_failed_requests(server)


def test_timeline_page(server: Server, expected: dict, tmp_path: Path) -> None:
    g: GanttCollector = expected["gantt"]
    t0 = g.first_time
    dom = load(server.url + "/timeline?from=2h&to=8h", tmp_path, shot="timeline").dom
    assert 'alt="GPU timeline" src="data:image/png;base64,' in dom
    w0, w1 = t0 + 2 * 3600, t0 + 8 * 3600
    shown = sum(1 for a, b in zip(g.start, g.end, strict=True) if b > w0 and a < w1 and b > a)
    preempted = sum(
        1
        for a, b, p in zip(g.start, g.end, g.preempted, strict=True)
        if b > w0 and a < w1 and b > a and p and b <= w1
    )
    assert shown > 0
    assert re.search(rf'data-k="intervals">{shown}<', dom), shown
    assert re.search(rf'data-k="preempted">{preempted}<', dom), preempted
    assert 'name="from" value="2h"' in dom and 'name="to" value="8h"' in dom
    assert "2026-01-01 02:00 UTC → 2026-01-01 08:00 UTC" in dom
    # the default range and a UTC-time range load too
    load(server.url + "/timeline", tmp_path)
    dom = load(server.url + "/timeline?from=2026-01-01+03:00&to=2026-01-01+04:00", tmp_path).dom
    assert "2026-01-01 03:00 UTC → 2026-01-01 04:00 UTC" in dom
    # a bad range: a clear message on the page, never a traceback
    dom = load(server.url + "/timeline?from=yesterday", tmp_path, shot="timeline-bad-range").dom
    assert "is neither an offset from the start" in by_id(dom, "div", "range-error")
    assert "Traceback" not in dom
    assert status_of(server.url + "/timeline?from=yesterday") == 400
    assert_no_failed_requests(server)


def test_workload_page(server: Server, expected: dict, journal: Path, tmp_path: Path) -> None:
    view = expected["view"]
    first = next(r for r in expected["queue"] if r["state"] == "PENDING")["id"]
    dom = load(server.url + f"/workload/{first}", tmp_path, shot="workload").dom
    # what `allot why` prints, its forecast of the start included
    cli = subprocess.run(
        [sys.executable, "-m", "allot.cli", "why", first, "--journal", str(journal)],
        capture_output=True, text=True, timeout=120, env=_env(),
    )  # fmt: skip
    assert cli.returncode == 0, cli.stderr
    page = by_id(dom, "pre", "why")
    assert cli.stdout.startswith(page + "\n")  # the CLI goes on with the history
    assert "expected start" in page
    # a preempted workload (if the run had one) explains its preemption
    preempted = next((w for w, h in view.histories.items() if h.preemptions), None)
    if preempted is not None:
        dom = load(server.url + f"/workload/{preempted}", tmp_path).dom
        text = by_id(dom, "pre", "why")
        # the journal's explanation, then (if it is live) the forecast's lines
        assert text.startswith("\n".join(v.why(view, preempted)["text"]))
        assert "preempted" in text
    # unknown id: a 404 page that helps
    url = server.url + "/workload/no-such-job"
    dom = load(url, tmp_path, shot="workload-404").dom
    assert "Unknown workload no-such-job" in dom
    assert "no workload 'no-such-job' in the journal of cluster 'tiny'" in by_id(
        dom, "div", "not-found"
    )
    assert 'href="/queue"' in dom
    assert status_of(url) == 404


def test_navigation_links(server: Server, tmp_path: Path) -> None:
    dom = load(server.url + "/queue", tmp_path).dom
    nav = re.search(r"<nav>(.*?)</nav>", dom, re.S)
    assert nav
    assert re.findall(r'href="([^"]+)"', nav[1]) == ["/", "/queue", "/timeline"]
    assert 'class="on">Queue<' in nav[1]


@pytest.mark.parametrize("kind", ["empty", "missing"])
def test_empty_state(kind: str, journal: Path, tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    if kind == "empty":
        path.write_bytes(b"")
    for server in _start(path, tmp_path):
        for route, shot in (("/", f"empty-{kind}"), ("/queue", None), ("/timeline", None)):
            dom = load(server.url + route, tmp_path, shot=shot, height=700).dom
            state = by_id(dom, "div", "empty-state")
            assert "No journal records yet" in state
            assert ("is empty" if kind == "empty" else "no such journal file") in state
            assert "Traceback" not in dom
            assert status_of(server.url + route) == 200
        # records arrive: the next request shows them (the journal is re-folded)
        path.write_bytes(journal.read_bytes())
        dom = load(server.url + "/queue", tmp_path).dom
        assert "empty-state" not in dom
        assert rows_order(dom, "pending", "data-id")
        assert_no_failed_requests(server)


def test_truncated_last_line(journal: Path, expected: dict, tmp_path: Path) -> None:
    """A last line cut short is not a record yet: the pages equal the full journal's."""
    path = tmp_path / "journal.jsonl"
    path.write_bytes(journal.read_bytes() + b'{"type": "workload.submitted", "id": "x-')
    for server in _start(path, tmp_path):
        dom = load(server.url + "/queue", tmp_path).dom
        pending = [r["id"] for r in expected["queue"] if r["state"] == "PENDING"]
        assert rows_order(dom, "pending", "data-id") == pending
        # the journal grows (the line is completed by a new copy): re-folded on next load
        lines = journal.read_bytes().splitlines(keepends=True)
        path.write_bytes(b"".join(lines[: len(lines) // 2]))
        dom = load(server.url + "/queue", tmp_path).dom
        half = v.fold(v.decode_lines(b"".join(lines[: len(lines) // 2]).splitlines()))
        assert rows_order(dom, "pending", "data-id") == [
            r["id"] for r in v.queue_rows(half) if r["state"] == "PENDING"
        ]
        assert_no_failed_requests(server)


def test_corrupt_record_is_a_clear_message(journal: Path, tmp_path: Path) -> None:
    path = tmp_path / "journal.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join([*lines[:5], b"{not json\n", *lines[5:]]))
    for server in _start(path, tmp_path):
        dom = load(server.url + "/", tmp_path, shot="unreadable", height=700).dom
        state = by_id(dom, "div", "error-state")
        assert "The journal cannot be read" in state
        assert f"{path}:6: not JSON" in state  # as the read commands name it
        assert "Traceback" not in dom
        assert status_of(server.url + "/") == 503  # an uptime probe sees the failure


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "allot.cli", "dashboard", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=_env(),
        )

    result = run("--port", str(_free_port()))
    assert result.returncode == 2, result
    assert result.stderr.strip().splitlines() == [
        "error: say where the journal is: --kafka HOST:PORT (or $ALLOT_KAFKA), --data DIR "
        "or --journal FILE"
    ]
    for port in ("99999", "-5"):  # an OverflowError traceback from bind()
        result = run("--journal", str(tmp_path / "j.jsonl"), "--port", port)
        assert result.returncode == 2 and result.stderr.startswith(f"error: --port {port}:")
    result = run("--journal", str(tmp_path))
    assert result.returncode == 2 and "a folder; give its journal.jsonl" in result.stderr
    result = run("--data", str(tmp_path / "no-such-folder"))  # a typo: not an empty page
    assert result.returncode == 2 and "no-such-folder: no such folder" in result.stderr
    result = run("--journal", str(tmp_path / "j.jsonl"), "--horizon", "soon")
    assert result.returncode == 2, result
    assert result.stderr.strip().splitlines()[0].startswith("error: --horizon 'soon':")
    assert len(result.stderr.strip().splitlines()) == 1
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = run("--port", str(port), "--journal", str(tmp_path / "j.jsonl"))
    assert result.returncode == 2, result
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: cannot listen on 127.0.0.1:{port}")


# every table of a page, measured where it can be scrolled to: its box scrolled all the
# way right and down (the box is the `div.scroll` around it)
_MEASURE_TABLES = """JSON.stringify([...document.querySelectorAll('div.scroll > table')].map(t => {
  const box = t.parentElement, style = getComputedStyle(box);
  box.scrollLeft = box.scrollWidth; box.scrollTop = box.scrollHeight;
  const b = box.getBoundingClientRect(), heads = t.querySelectorAll('thead th');
  const last = heads[heads.length - 1].getBoundingClientRect();
  return {table: t.className, overflow: style.overflowX, wider: box.scrollWidth > box.clientWidth,
          boxHeight: b.height, boxLeft: b.left, boxRight: b.right, boxTop: b.top,
          lastLeft: last.left, lastRight: last.right, headTop: heads[0].getBoundingClientRect().top,
          page: document.documentElement.scrollWidth, viewport: innerWidth, tall: innerHeight};
}))"""


@pytest.mark.parametrize(
    ("width", "height"),
    [pytest.param(1000, 800, id="half-a-laptop"), pytest.param(700, 900, id="narrow")],
)
def test_a_table_wider_than_the_window_scrolls_to_its_last_column(
    server: Server, width: int, height: int
) -> None:
    """The queue's tables are wider than these windows. Each scrolls sideways in a box
    no taller than the window, so its scroll bar is on screen whenever the table fills
    it (a long table's bar was far below, at its last row: the columns past the right
    edge looked cut off), its header stays in view, and scrolled right it shows its
    last column whole; the page itself never scrolls sideways."""
    tables = orjson.loads(
        evaluate(server.url + "/queue", _MEASURE_TABLES, width=width, height=height)
    )
    assert {t["table"] for t in tables} == {"pending", "running"}
    assert any(t["wider"] for t in tables)  # else this tests nothing
    for t in tables:
        assert t["page"] <= t["viewport"], t
        assert t["overflow"] == "auto", t
        assert t["boxHeight"] <= t["tall"], t
        assert t["boxLeft"] - 1 <= t["lastLeft"] and t["lastRight"] <= t["boxRight"] + 1, t
        assert abs(t["headTop"] - t["boxTop"]) <= 1, t  # scrolled down: the header stays


# each queue row's height, and whether its reason is cut on screen with the whole text
# kept in the cell's tooltip
_MEASURE_DETAILS = """JSON.stringify([...document.querySelectorAll('td.detail')].map(td => {
  const box = td.firstElementChild, line = parseFloat(getComputedStyle(td).lineHeight)
    || 1.25 * parseFloat(getComputedStyle(td).fontSize);
  return {row: td.parentElement.getBoundingClientRect().height, line: line,
          cut: box !== null && box.scrollHeight > box.clientHeight + 1,
          title: box === null ? '' : box.title, text: td.textContent};
}))"""


@pytest.mark.parametrize("width", [1400, 1000], ids=["desktop", "half-a-laptop"])
def test_a_long_reason_keeps_its_queue_row_two_lines_tall(server: Server, width: int) -> None:
    """A pending workload's reason is long; wrapped in its narrow column it made every
    row of the queue six lines tall (nine rows to a screen). It is cut to two lines; the
    whole reason is the cell's tooltip (and on the workload's page)."""
    cells = orjson.loads(
        evaluate(server.url + "/queue", _MEASURE_DETAILS, width=width, height=1000)
    )
    tall = [c for c in cells if c["row"] > 2 * c["line"] + 16]  # two lines and padding
    assert not tall, tall[:3]
    assert [c["title"] for c in cells] == [c["text"] for c in cells]
    assert any(c["cut"] for c in cells)  # else this tests nothing


@pytest.mark.parametrize("width", [1400, 800], ids=["desktop", "narrow"])
@pytest.mark.parametrize("path", ["/", "/timeline"])
def test_dashboard_charts_stay_readable_at_any_window_width(
    server: Server, path: str, width: int
) -> None:
    """As report.html's: shrunk into a narrow window the charts' text was 7-8 px; they
    stop shrinking at a readable size and scroll in their own frame."""
    shown = charts_as_shown(server.url + path, width=width)
    check_charts_readable(shown, width=width)

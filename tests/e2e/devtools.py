"""Measuring a page in a real headless Chromium: load a URL at a window size and
evaluate a JavaScript expression in it (layout sizes, scroll extents).

Neither `websockets` nor `websocket-client` is installed, so this speaks the DevTools
protocol over a pipe (`--remote-debugging-pipe`: JSON messages ending in NUL, the
browser reading fd 3 and writing fd 4). Every wait is bounded and the browser's whole
process group is killed after.
"""

from __future__ import annotations

import contextlib
import fcntl
import itertools
import os
import select
import shutil
import signal
import subprocess
import tempfile
import time
from typing import Any

import orjson

from projections.chart_style import MIN_SHOWN_SCALE

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
# a headless browser that reaches out to nothing (no sandbox: tests may run as root)
HEADLESS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--no-first-run",
    "--disable-extensions",
)
TIMEOUT_S = 60.0


class _Pipe:
    def __init__(self, write_fd: int, read_fd: int, deadline: float) -> None:
        self.write_fd, self.read_fd, self.deadline = write_fd, read_fd, deadline
        self.buffer = b""
        self.ids = itertools.count(1)

    def call(self, method: str, session: str | None = None, **params: Any) -> dict[str, Any]:
        n = next(self.ids)
        message: dict[str, Any] = {"id": n, "method": method, "params": params}
        if session is not None:
            message["sessionId"] = session
        os.write(self.write_fd, orjson.dumps(message) + b"\0")
        while True:
            reply = self._next()
            if reply.get("id") == n:
                assert "error" not in reply, (method, reply["error"])
                return reply["result"]

    def _next(self) -> dict[str, Any]:
        while b"\0" not in self.buffer:
            left = self.deadline - time.monotonic()
            assert left > 0, f"chromium did not answer within {TIMEOUT_S} s"
            ready, _, _ = select.select([self.read_fd], [], [], left)
            if ready:
                chunk = os.read(self.read_fd, 1 << 16)
                assert chunk, "chromium closed its DevTools pipe"
                self.buffer += chunk
        raw, self.buffer = self.buffer.split(b"\0", 1)
        return orjson.loads(raw)


def _above_4(fd: int) -> int:
    moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
    os.close(fd)
    return moved


def evaluate(url: str, expression: str, *, width: int, height: int) -> Any:
    """The value of `expression` in the page at `url`, loaded in a `width` x `height`
    window (scrollbars shown, as a person sees them)."""
    assert os.path.exists(CHROMIUM), "Debian's chromium is needed: apt-get install chromium"
    # above 4, so that moving one to 3 or 4 cannot close the other (bash takes two digits)
    to_browser, from_us = (_above_4(fd) for fd in os.pipe())
    to_us, from_browser = (_above_4(fd) for fd in os.pipe())
    profile = tempfile.mkdtemp(prefix="chrome-devtools-")
    args = [
        CHROMIUM,
        *HEADLESS,
        "--remote-debugging-pipe",
        f"--user-data-dir={profile}",
        f"--window-size={width},{height}",
        "about:blank",
    ]
    # the browser wants the pipe on fds 3 and 4: bash moves it there
    proc = subprocess.Popen(
        ["bash", "-c", f'exec "$@" 3<&{to_browser} 4>&{from_browser}', "bash", *args],
        pass_fds=(to_browser, from_browser),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    os.close(to_browser)
    os.close(from_browser)
    pipe = _Pipe(from_us, to_us, time.monotonic() + TIMEOUT_S)
    try:
        target = pipe.call("Target.createTarget", url="about:blank")["targetId"]
        session = pipe.call("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
        pipe.call(
            "Emulation.setDeviceMetricsOverride",
            session,
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=False,
        )
        pipe.call("Page.navigate", session, url=url)
        while True:  # bounded by the pipe's deadline
            loaded = "location.href != 'about:blank' && document.readyState == 'complete'"
            state = pipe.call("Runtime.evaluate", session, expression=loaded, returnByValue=True)
            if state["result"].get("value") is True:
                break
            time.sleep(0.05)
        answer = pipe.call("Runtime.evaluate", session, expression=expression, returnByValue=True)
        assert "exceptionDetails" not in answer, answer["exceptionDetails"]
        return answer["result"].get("value")
    finally:
        os.close(from_us)
        os.close(to_us)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)


# every chart of a page as shown: its drawn (natural) and shown widths, whether it
# overflows its figure and whether that figure scrolls; and the page's own widths
_MEASURE_CHARTS = """JSON.stringify({
  page: document.documentElement.scrollWidth, viewport: document.documentElement.clientWidth,
  charts: [...document.querySelectorAll('figure img')].map(img => {
    const fig = img.closest('figure'), shown = img.getBoundingClientRect();
    return {alt: img.alt, drawn: img.naturalWidth, shown: shown.width,
            overflows: fig.scrollWidth > fig.clientWidth + 1,
            scrolls: ['auto', 'scroll'].includes(getComputedStyle(fig).overflowX),
            rightOfWindow: shown.right > document.documentElement.clientWidth + 1};
  })})"""


def charts_as_shown(url: str, *, width: int, height: int = 900) -> dict[str, Any]:
    """How the page at `url` shows its chart images in a `width` px window."""
    return orjson.loads(evaluate(url, _MEASURE_CHARTS, width=width, height=height))


def check_charts_readable(shown: dict, *, width: int) -> None:
    """The report's and the dashboard's charts as `charts_as_shown` measured them:
    never shrunk below MIN_SHOWN_SCALE (their text stays readable), scrolling in
    their own frame rather than the page, and whole in a desktop window."""
    assert shown["charts"], "no chart on the page: this tests nothing"
    assert shown["page"] <= shown["viewport"], shown  # no sideways scroll of the page
    for chart in shown["charts"]:
        scale = chart["shown"] / chart["drawn"]
        # 10 pt text drawn at 100 dpi is about 10 px at 70 %, 7-8 px in an 800 px window
        assert scale >= MIN_SHOWN_SCALE - 0.005, (width, chart)
        if chart["overflows"] or chart["rightOfWindow"]:
            assert chart["scrolls"], (width, chart)
        if width >= 1400:  # a desktop window shows every chart whole, nearly 1:1
            assert not chart["overflows"] and scale >= 0.9, (width, chart)

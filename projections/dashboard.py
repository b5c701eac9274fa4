"""`allot dashboard`: a small offline web app over the journal's projections.

Server-rendered HTML (no scripts, no fonts or images from the network): charts are
inline base64 PNGs drawn with matplotlib, like `report.html`. Pages:

- ``/``            allocations: usage vs owed over time per leaf, delivered table, the
                   budget tree with weights and shares (`views.share_rows`);
- ``/queue``       pending work in scheduling order with the sort keys that order it
                   (`views.queue_rows`) and the running work; ``?allocation=``,
                   ``?user=`` filter it, ``?limit=N|all`` (default 500 rows a table);
- ``/timeline``    the GPU timeline (`gantt.GanttCollector`) for ``?from=..&to=..``
                   (offsets from the run start such as ``3h``, or UTC times such as
                   ``2026-01-01 03:00``) and the forecast's below it; ``?gpu=N``: the
                   page of a big cluster's GPUs both pictures show;
- ``/workload/ID`` why a workload is where it is (`views.why`); a job array's base id
                   lists its tasks (`acct.array_summary`), as `allot why BASE`; unknown
                   ids get a 404 page with close matches.

`Dashboard` folds what the journal gained when it changes (file size / mtime; Kafka: at
most every `ttl` seconds), keeping the projections open between refreshes. An empty or
missing journal renders an explicit empty state; a truncated last line is not a record
yet (streams.sources).
"""

from __future__ import annotations

import base64
import html
import inspect
import math
import pickle
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from itertools import islice
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit

from domain.admission import MAX_TIME
from projections.chart_style import chart_img
from projections.report import fmt_dur, fmt_num, fmt_pct

Lines = Callable[[], Iterable[bytes]]
_DRAW = threading.Lock()  # pyplot is not thread-safe: one chart at a time


# ------------------------------------------------------------------ snapshot
@dataclass
class Snapshot:
    """One fold of the journal (or why there is none)."""

    view: Any = None  # projections.views.JournalView
    usage: Any = None  # projections.summary.SummaryProjection (closed, hourly rows)
    chart_usage: Any = None  # the same usage in the chart's bins (`usage` if an hour)
    gantt: Any = None  # projections.gantt.GanttCollector (closed)
    delivered: dict[str, Any] = field(default_factory=dict)
    empty: str | None = None  # an empty or missing journal: the message
    error: str | None = None  # an unreadable journal: the message
    # what to do about `error` (None: the journal itself is bad, fix or replace it)
    hint: str | None = None
    built: float = 0.0
    charts: dict[Any, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    # the records `view` folded, read again: for the forecast (`projections.forecast`)
    journal: Callable[[], Iterable[Any]] | None = None
    _forecast: Any = None
    horizon_s: float | None = None  # how far the forecast looks (None: its default)
    # its own lock: a forecast takes seconds, charts must not wait for it
    _forecast_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def ok(self) -> bool:
        return self.view is not None

    def forecast(self) -> Any:
        """The queue's forecast (`allot queue --start`), made once per snapshot when a
        page first asks for it: it plays the scheduler forward, seconds on a big queue."""
        from projections.forecast import forecast

        with self._forecast_lock:
            if self._forecast is None:
                records = self.journal() if self.journal is not None else None
                # to the horizon, records kept: the timeline page draws them
                kw = {} if self.horizon_s is None else {"horizon_s": self.horizon_s}
                self._forecast = forecast(self.view, journal=records, keep_records=True, **kw)
            return self._forecast


class _Fold:
    """The projections of the records read so far, kept open between refreshes: a
    refresh folds only what was appended since (a live journal grows by a tick every
    few seconds; re-folding weeks of it per page took seconds)."""

    def __init__(self) -> None:
        from projections.gantt import GanttCollector
        from projections.summary import SummaryProjection
        from projections.views import JournalView

        self.view = JournalView()
        self.usage = SummaryProjection()
        self.gantt = GanttCollector()
        self.fine: Any = None  # a young journal's usage in the chart's finer bins
        self.bin_s: float | None = None
        self.last_time = -math.inf

    def fits(self, events: list[Any]) -> bool:
        """Can `events` be added to what is folded: do the charts keep their bin width?"""
        from projections.report import source_bin

        if self.bin_s is None:
            return True
        last = max(self.last_time, max(e.time for e in events))
        return source_bin(self.view.first_time, last) == self.bin_s

    def add(self, events: list[Any], where: Callable[[int], str] | None = None) -> None:
        """Fold `events`; `where(i)` names the record of `events[i]` if the view finds it
        inconsistent (`projections.views.UnintroducedError`)."""
        from projections.report import source_bin
        from projections.usage import HOUR, UsageProjection

        if not events:
            return
        self.last_time = max(self.last_time, max(e.time for e in events))
        if self.bin_s is None:
            self.bin_s = source_bin(events[0].time, self.last_time)
            if self.bin_s < HOUR:
                self.fine = UsageProjection(bin_s=self.bin_s)
        sinks = (
            [self.usage, self.gantt] if self.fine is None else [self.usage, self.gantt, self.fine]
        )
        from projections.journal import gc_paused
        from projections.views import UnintroducedError

        view = self.view
        start = view.records
        with gc_paused():
            for event in events:
                try:
                    view.add(event)
                except UnintroducedError as why:
                    if where is None:
                        raise
                    raise why.at(where(view.records - start)) from None
                for sink in sinks:
                    sink.apply(event)

    def snapshot(self, journal: Callable[[], Iterable[Any]]) -> Snapshot:
        """What is folded, as pages read it: closed copies of the usage projections (a
        closed one takes no more records), the view itself (see `Dashboard.reading`)."""
        usage = _closed(self.usage)
        fine = _closed(self.fine) if self.fine is not None else None
        return Snapshot(
            view=self.view,
            usage=usage,
            chart_usage=fine or usage,
            gantt=_closed(self.gantt),
            delivered=usage.delivered(),
            built=time.time(),
            journal=journal,
        )


def _closed(projection: Any) -> Any:
    copy = pickle.loads(pickle.dumps(projection, protocol=pickle.HIGHEST_PROTOCOL))
    copy.close()
    return copy


def build_snapshot(lines: Iterable[bytes] | Lines) -> Snapshot:
    """Fold journal records (JSON bytes, or a callable returning them) into the views,
    usage and gantt projections."""
    from projections.views import decode_lines

    source = lines
    try:
        events = list(decode_lines(lines() if callable(lines) else lines))
        if not events:
            return Snapshot(empty="the journal holds no records yet", built=time.time())
        fold = _Fold()
        fold.add(events)
    except Exception as why:
        failed = _failed_snapshot(why)
        if failed is None:
            raise
        return failed
    return fold.snapshot(_rereader(source, events, fold.view.records))


def _failed_snapshot(why: Exception) -> Snapshot | None:
    """The empty or error state a failed read or fold shows (None: a bug, raise it)."""
    from projections.views import ViewError
    from streams.sources import BrokerError, EmptyJournal, SourceError

    if isinstance(why, EmptyJournal):
        return Snapshot(empty=str(why), built=time.time())
    if isinstance(why, BrokerError):  # the journal may be fine: nothing there to fix
        return Snapshot(error=str(why), hint=BROKER_HINT, built=time.time())
    if isinstance(why, SourceError):
        text = str(why)
        if "no such" in text:
            return Snapshot(empty=text, built=time.time())
        return Snapshot(error=text, built=time.time())
    if isinstance(why, ViewError):
        return Snapshot(error=str(why), built=time.time())
    if isinstance(why, OSError):
        return Snapshot(error=f"cannot read the journal: {why}", built=time.time())
    return None


def _rereader(source: Any, events: list[Any] | None, folded: int) -> Callable[[], Iterable[Any]]:
    """The folded records again: a source that can be read again is (only the first
    `folded`: a live journal may have grown since); a one-shot iterable's are kept."""
    from projections.views import decode_lines

    if callable(source):
        return lambda: islice(decode_lines(source()), folded)
    kept = events or []
    return lambda: iter(kept)


class _ReadWriteLock:
    """Pages read the shared view together; a refresh writes it alone."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writing = False

    @contextmanager
    def reading(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._writing)
            self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                self._readers -= 1
                self._cond.notify_all()

    @contextmanager
    def writing(self) -> Iterator[None]:
        with self._cond:
            self._cond.wait_for(lambda: not self._writing and not self._readers)
            self._writing = True
        try:
            yield
        finally:
            with self._cond:
                self._writing = False
                self._cond.notify_all()


class Dashboard:
    """The current snapshot of a journal source, refreshed when the source changes.

    `lines()` reads the whole journal (the queue's forecast reads it again); `tail()`
    makes a reader that keeps its place (`streams.sources.journal_tail`), so a refresh
    folds only the records appended since the last (default: `lines()` read whole,
    the records already folded skipped). `stamp()` (optional) is cheap and changes when
    the journal does (a file's size and mtime); without it the journal is read at most
    every `ttl` seconds. A journal rewritten or cut short is folded again from its
    start. `horizon_s`: how far the queue's forecast looks."""

    def __init__(
        self,
        lines: Lines,
        *,
        label: str,
        stamp: Callable[[], Any] | None = None,
        ttl: float = 5.0,
        horizon_s: float | None = None,
        tail: Callable[[], Any] | None = None,
    ) -> None:
        from streams.sources import RereadTail

        self.lines = lines
        self.tail = tail if tail is not None else (lambda: RereadTail(lines))
        self.horizon_s = horizon_s
        self.label = label
        self.stamp = stamp
        self.ttl = ttl
        self._lock = threading.Lock()  # one refresh at a time
        self._rw = _ReadWriteLock()  # no refresh while a page reads the view
        self._snap: Snapshot | None = None
        self._key: Any = None
        self._checked = 0.0
        self._reader: Any = None  # the tail, and the fold of what it returned
        self._fold: _Fold | None = None
        self.refolds = 0  # folds from the journal's start (the first one included)

    def snapshot(self) -> Snapshot:
        """The current snapshot, after folding what the journal gained since the last."""
        with self._lock:
            if self.stamp is not None:
                key = self.stamp()
                fresh = self._snap is not None and key == self._key
            else:
                key = None
                fresh = self._snap is not None and time.time() - self._checked < self.ttl
            if not fresh:
                with self._rw.writing():
                    self._snap = self._refresh()
                    self._snap.horizon_s = self.horizon_s
                self._key = key
                self._checked = time.time()
            assert self._snap is not None
            return self._snap

    @contextmanager
    def reading(self) -> Iterator[Snapshot]:
        """The current snapshot, with no refresh changing its view until the block ends."""
        self.snapshot()
        with self._rw.reading():
            assert self._snap is not None
            yield self._snap

    def _drop_reader(self) -> None:
        """Fold again from the start, with a new tail (this one's client closed)."""
        reader, self._reader, self._fold = self._reader, None, None
        if reader is not None and hasattr(reader, "close"):
            reader.close()

    def close(self) -> None:
        """Close the tail (a Kafka tail keeps its consumer between refreshes)."""
        with self._lock:
            self._drop_reader()

    def _refresh(self) -> Snapshot:
        from functools import partial

        from projections.views import decode_lines, event_place
        from streams.sources import JournalChanged, SourceError

        for _ in range(3):  # a journal rewritten while read: start over, a few times
            try:
                if self._reader is None or self._fold is None:
                    self._reader, self._fold = self.tail(), _Fold()
                    self.refolds += 1
                lines, mark = self._reader.read()
                first, skipped = self._reader.count + 1, []
                events = list(decode_lines(lines, first, skipped))
                if events and not self._fold.fits(events):
                    raise JournalChanged("the charts' bins change: fold again")
                # a record the view finds inconsistent: named as a corrupt one is
                self._fold.add(events, partial(event_place, lines, first, skipped))
                self._reader.advance(mark)
            except JournalChanged:
                self._drop_reader()
                continue
            except Exception as why:
                failed = _failed_snapshot(why)
                if failed is None:
                    raise
                # a read that failed folded nothing: keep the place; a journal that is
                # gone, or a fold that failed half-way, starts over
                if failed.empty is not None or not isinstance(why, OSError | SourceError):
                    self._drop_reader()
                return failed
            if not self._fold.view.records:
                return Snapshot(empty="the journal holds no records yet", built=time.time())
            if not events and self._snap is not None and self._snap.ok:
                return self._snap  # nothing new: keep its charts and forecast
            return self._fold.snapshot(_rereader(self.lines, None, self._fold.view.records))
        return Snapshot(error="the journal keeps changing under the reader", built=time.time())


def file_stamp(path: Any) -> Callable[[], Any]:
    from pathlib import Path

    p = Path(path)

    def stamp() -> Any:
        try:
            st = p.stat()
        except OSError:
            return None
        return (st.st_size, st.st_mtime_ns)

    return stamp


# ------------------------------------------------------------------ html
_CSS = """
:root { --fg:#1d1d1f; --muted:#5f5f66; --line:#e3e3e8; --accent:#35608f; }
* { box-sizing: border-box; }
body { font: 14px/1.45 -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: var(--fg); margin: 0; background: #fafafa; }
nav { background: #1f2d3d; color: #fff; padding: 0 28px; display: flex; gap: 6px;
      align-items: center; flex-wrap: wrap; }
nav .brand { font-weight: 700; margin-right: 18px; padding: 12px 0; }
nav a { color: #dce6f2; text-decoration: none; padding: 12px 12px 9px; display: inline-block;
        border-bottom: 3px solid transparent; }
nav a:hover { background: #2c3e53; }
nav a.on { color: #fff; border-bottom-color: #7fb2e5; font-weight: 600; }
nav .src { margin-left: auto; color: #a9b8c8; font-size: 12px; }
main { max-width: 2400px; margin: 0 auto; padding: 20px 28px 48px; }
h1 { font-size: 22px; margin: 0 0 4px; }
h2 { font-size: 17px; margin: 28px 0 10px; padding-bottom: 4px;
     border-bottom: 1px solid var(--line); }
.sub { color: var(--muted); margin: 0 0 16px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(150px, 1fr)); gap: 10px; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 10px 12px; }
.card .v { font-size: 21px; font-weight: 600; }
.card .k { color: var(--muted); font-size: 12px; }
figure { margin: 8px 0 0; background: #fff; border: 1px solid var(--line); border-radius: 8px;
         padding: 8px; overflow-x: auto; }
figure img { width: 100%; height: auto; display: block; }
figcaption { color: var(--muted); font-size: 12.5px; padding: 6px 4px 0; }
table { border-collapse: collapse; background: #fff; border: 1px solid var(--line); margin: 6px 0; }
th, td { padding: 5px 10px; border-bottom: 1px solid var(--line); text-align: left;
         vertical-align: top; }
th { background: #f2f2f5; font-weight: 600; font-size: 13px; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
td.detail { color: var(--muted); font-size: 12.5px; min-width: 240px; max-width: 420px; }
/* two lines at most, so a long reason does not make every row of a queue screen-tall;
   the whole text is the cell's tooltip and on the workload's page */
td.detail > div { display: -webkit-box; -webkit-box-orient: vertical; -webkit-line-clamp: 2;
                  line-clamp: 2; overflow: hidden; }
.scroll { overflow: auto; max-width: 100%; max-height: 85vh; margin: 6px 0; }
.scroll > table { margin: 0; }
.scroll th { position: sticky; top: 0; z-index: 1; }
td.nowrap, th.nowrap { white-space: nowrap; }
.wname { display: block; color: var(--muted); font-size: 12px; max-width: 220px;
         overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
a { color: var(--accent); }
code, pre { font: 12.5px/1.5 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
pre.why { background: #fff; border: 1px solid var(--line); border-radius: 8px; padding: 12px 14px;
          white-space: pre-wrap; }
.badge { display: inline-block; padding: 1px 7px; border-radius: 10px; font-size: 12px;
         background: #eef2f7; }
.badge.Resources { background: #fde8e8; } .badge.Priority { background: #fff4d6; }
.badge.Reserved { background: #e3f3e6; } .badge.Headroom { background: #e8eefc; }
.empty { background: #fff; border: 1px dashed #b9b9c3; border-radius: 10px; padding: 28px;
         margin-top: 18px; }
.empty h1 { font-size: 20px; }
.bad { color: #b00020; font-weight: 600; } .warn { color: #a15c00; font-weight: 600; }
form.range { background: #fff; border: 1px solid var(--line); border-radius: 8px;
             padding: 10px 12px; display: flex; gap: 12px; align-items: end; flex-wrap: wrap; }
form.range label { display: flex; flex-direction: column; font-size: 12px; color: var(--muted); }
form.range input { font-size: 14px; padding: 4px 6px; width: 200px; }
form.range button { font-size: 14px; padding: 5px 14px; }
.msg { background: #fde8e8; border: 1px solid #f3b6b6; border-radius: 6px; padding: 8px 12px;
       margin: 10px 0; }
.hint { color: var(--muted); font-size: 12.5px; }
"""

_PAGES = (("/", "Allocations"), ("/queue", "Queue"), ("/timeline", "GPU timeline"))


def esc(x: Any) -> str:
    return html.escape("" if x is None else str(x))


def page(title: str, body: str, *, active: str = "", source: str = "") -> str:
    links = "".join(
        f'<a href="{href}" class="{"on" if href == active else ""}">{esc(name)}</a>'
        for href, name in _PAGES
    )
    return (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<link rel='icon' href='data:,'>"
        f"<title>{esc(title)} · allot</title><style>{_CSS}</style></head><body>"
        f"<nav><span class='brand'>allot</span>{links}"
        f"<span class='src'>{esc(source)}</span></nav><main>{body}</main></body></html>"
    )


def _user_limits(row: dict[str, Any]) -> str:
    """`gpus 8, pending 20`: the per-user limits set on a share row, over its subtree."""
    return ", ".join(
        f"{label} {row[key]}"
        for label, key in (("gpus", "max_gpus_per_user"), ("pending", "max_pending_per_user"))
        if row.get(key) is not None
    )


def _table(head: list[tuple[str, bool]], rows: list[str], *, cls: str = "") -> str:
    """A table in a scrolling box no taller than the window: a wide table scrolls
    sideways inside the page instead of widening it, with its scroll bar on screen
    whenever the table fills it (not only at its last row), and its header in view."""
    th = "".join(f'<th class="{"num" if num else ""}">{esc(h)}</th>' for h, num in head)
    return (
        f'<div class="scroll"><table class="{cls}"><thead><tr>{th}</tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table></div>"
    )


def _workload_cell(r: dict[str, Any]) -> str:
    """The id (a link to its page) and, under it, the workload's name if it has one."""
    wid = esc(r["id"])
    name = r.get("name")
    under = f'<span class="wname" title="{esc(name)}">{esc(name)}</span>' if name else ""
    return _td(f'<a href="/workload/{wid}">{wid}</a>{under}', "id", raw=True, cls="nowrap")


def _detail_td(text: Any) -> str:
    """A queue row's long reason, cut to two lines on screen (see `td.detail > div`)."""
    shown = esc(text)
    return _td(f'<div title="{shown}">{shown}</div>', "detail", raw=True, cls="detail")


def _td(value: Any, key: str, *, num: bool = False, raw: bool = False, cls: str = "") -> str:
    classes = " ".join(c for c in ("num" if num else "", cls) if c)
    text = value if raw else esc(value)
    return f'<td class="{classes}" data-k="{key}">{text}</td>'


def _img(png: bytes | str, alt: str) -> str:
    data = png if isinstance(png, str) else base64.b64encode(png).decode("ascii")
    return chart_img(data, alt)


def _when(t: float | None, *, seconds: bool = False) -> str:
    if t is None or not math.isfinite(t):
        return "—"
    form = "%Y-%m-%d %H:%M:%S UTC" if seconds else "%Y-%m-%d %H:%M UTC"
    return datetime.fromtimestamp(t, UTC).strftime(form)


def _header(snap: Snapshot, title: str) -> str:
    state = snap.view.state
    return (
        f"<h1>{esc(title)}</h1><p class='sub'>cluster <b>{esc(state.cluster)}</b> · as of "
        f"<b>{esc(_when(state.now, seconds=True))}</b> (the journal's latest event) · policy "
        f"<b>{esc(state.ordering.name)}</b> · {state.healthy_capacity} of {state.capacity} "
        f"GPUs healthy · {snap.view.records:,} record{'' if snap.view.records == 1 else 's'}</p>"
    )


BROKER_HINT = "The page asks the broker again on the next request."
JOURNAL_HINT = "Fix or replace the journal; the page reloads it on the next request."


def empty_page(snap: Snapshot, active: str, source: str) -> str:
    if snap.empty is not None:
        body = (
            "<div class='empty' id='empty-state'><h1>No journal records yet</h1>"
            f"<p>{esc(snap.empty)}.</p><p class='hint'>The dashboard shows allocations, the "
            "queue and the GPU timeline as soon as the scheduler has written records; every "
            "page load looks for them.</p></div>"
        )
        return page("empty journal", body, active=active, source=source)
    body = (
        "<div class='empty' id='error-state'><h1>The journal cannot be read</h1>"
        f"<p>{esc(snap.error)}</p><p class='hint'>{esc(snap.hint or JOURNAL_HINT)}</p></div>"
    )
    return page("unreadable journal", body, active=active, source=source)


# ------------------------------------------------------------------ allocations
def _usage_chart(snap: Snapshot) -> str | None:
    from projections.report import _allocation_chart, _Timebase

    usage = snap.chart_usage or snap.usage
    rows = usage.hourly_rows()
    start, end = usage.period()
    if start is None or end is None or not rows:
        return None
    tb = _Timebase(start, max(end, start + 1.0), min_width=usage.bin_s)
    return _allocation_chart(usage, tb, rows, snap.delivered)


def allocations_page(snap: Snapshot) -> str:
    from projections.views import share_rows

    d = snap.delivered
    by = d.get("by_allocation") or {}
    owed = d.get("owed_gpu_h") or {}
    received = d.get("received_gpu_h") or {}
    cards = [
        ("delivered (overall)", fmt_pct(d.get("overall")), "overall"),
        ("delivered (worst allocation)", fmt_pct(d.get("min")), "min"),
        ("delivered (hourly, strict)", fmt_pct(d.get("hourly_strict")), "strict"),
        ("healthy GPUs", str(snap.view.state.healthy_capacity), "healthy"),
        ("live workloads", str(len(snap.view.state.workloads)), "live"),
    ]
    out = [_header(snap, "Allocations")]
    out.append(
        "<div class='cards'>"
        + "".join(
            f"<div class='card' data-card='{k}'><div class='v'>{esc(v)}</div>"
            f"<div class='k'>{esc(label)}</div></div>"
            for label, v, k in cards
        )
        + "</div>"
    )
    out.append("<h2>Allocation usage over time</h2>")
    with snap.lock, _DRAW:
        if "usage" not in snap.charts:
            snap.charts["usage"] = _usage_chart(snap) or ""
        chart = snap.charts["usage"]
    if chart:
        out.append(
            f"<figure>{_img(chart, 'usage vs owed per allocation')}<figcaption>Received "
            "(charged) GPUs vs owed = min(share × healthy capacity, demand), per leaf, "
            "as means over time bins (a partial last bin over the time it covers). "
            "Delivered = min(1, Σ received / Σ owed) over the journal.</figcaption>"
            "</figure>"
        )
    else:
        out.append("<p class='hint'>No allocation has had demand or usage yet.</p>")
    rows = []
    leaves = sorted(set(owed) | set(received) | set(by))
    for leaf in leaves:
        ratio = by.get(leaf)
        cls = "bad" if ratio is not None and ratio < 0.9 else ""
        rows.append(
            f'<tr data-alloc="{esc(leaf)}">'
            + _td(leaf, "allocation")
            + _td(fmt_num(owed.get(leaf), 1), "owed", num=True)
            + _td(fmt_num(received.get(leaf), 1), "received", num=True)
            + _td(fmt_pct(ratio), "delivered", num=True, cls=cls)
            + "</tr>"
        )
    out.append("<h2>Delivered per allocation</h2>")
    out.append(
        _table(
            [
                ("allocation", False),
                ("owed GPU-h", True),
                ("received GPU-h", True),
                ("delivered", True),
            ],
            rows,
            cls="delivered",
        )
        if rows
        else "<p class='hint'>Nothing was owed yet.</p>"
    )
    tree_rows = []
    shares = share_rows(snap.view)
    # per-user limits (`allot budget set --max-gpus-per-user`), as `allot shares` shows
    # them: a column only once some allocation has one
    limited = any(_user_limits(r) for r in shares)
    for r in shares:
        indent = "&nbsp;&nbsp;&nbsp;&nbsp;" * r["depth"]
        # an inner node as `vision/`; a root by its name, as `allot shares` shows it
        name = f"{indent}{esc(r['name'])}" + ("" if r["leaf"] or not r["depth"] else "/")
        tree_rows.append(
            f'<tr data-path="{esc(r["path"])}">'
            + _td(name, "name", raw=True)
            + _td(f"{r['weight']:g}", "weight", num=True)
            + _td(fmt_pct(r["share"], 2), "share", num=True)
            + _td(f"{r['usage_gpu_h']:,.1f}", "usage", num=True)
            + _td("inf" if r["ratio"] is None else f"{r['ratio']:.4f}", "ratio", num=True)
            + _td("" if r["rank"] is None else r["rank"], "rank", num=True)
            + _td(f"{r['running']} / {r['entitled']:g}", "running", num=True)
            + _td(r["unallocated"], "unallocated", num=True)
            + _td(r["pending"], "pending", num=True)
            + (_td(_user_limits(r), "limits") if limited else "")
            + "</tr>"
        )
    from domain.durations import format_duration

    state = snap.view.state
    window = state.config.window
    out.append("<h2>Budget tree</h2>")
    out.append(
        f"<p class='hint'>Siblings in Fair-Tree order (lowest fair-share ratio first). "
        f"Share = product of weight / Σ sibling weights along the path; usage = charged "
        f"GPU-hours in the {esc(format_duration(window))} window as of the last usage bucket "
        f"edge, <b>{esc(_when(state.charged.last_edge(state.now), seconds=True))}</b> (ratios "
        "are recomputed once per bucket, like Slurm's PriorityCalcPeriod); ratio = usage / "
        "(share × capacity × window).</p>"
    )
    out.append(
        _table(
            [
                ("allocation", False),
                ("weight", True),
                ("share", True),
                ("usage GPU-h", True),
                ("ratio", True),
                ("rank", True),
                ("running / entitled GPUs", True),
                ("unallocated GPUs", True),
                ("pending GPUs", True),
                *([("per-user limits", False)] if limited else []),
            ],
            tree_rows,
            cls="tree",
        )
        if tree_rows
        else "<p class='hint'>No allocations are configured.</p>"
    )
    return "".join(out)


# ------------------------------------------------------------------ queue
# what each built-in ordering does, in a sentence (its docstring is the full chain)
_POLICY_SUMMARIES = {
    "fairshare": "allocated work first; among allocations, the one furthest below its fair "
    "share of the window goes first; inside an allocation, higher priority, then earlier "
    "submission. Work past its protected time can be preempted for an allocation that is "
    "owed GPUs.",
    "legacy-priority": "the old system — higher priority level first, then earlier "
    "submission; work within its allocation's cap is never preempted, other work can be "
    "preempted by higher levels.",
    "fifo": "allocated work first, then earliest submission first.",
    "largest-first": "allocated work first, then the workloads asking for the most GPUs.",
    "longest-first": "allocated work first, then the longest expected runtime.",
    "shortest-first": "allocated work first, then the shortest expected runtime.",
}


def policy_summary(policy: Any) -> str:
    """A plain-language sentence on what the ordering policy does: the built-ins' own,
    else the first sentence of its docstring without code markup."""
    known = _POLICY_SUMMARIES.get(getattr(policy, "name", ""))
    if known:
        return known
    doc = " ".join((policy.__doc__ or "").split()).replace("`", "")
    first = re.split(r"(?<=[.;:])\s", doc, maxsplit=1)[0]
    return first.rstrip(":;") + ("" if first.endswith(".") or not first else ".")


QUEUE_ROWS = 500  # rows per table unless ?limit=all: a page stays a few hundred kB


def _queue_filter(
    snap: Snapshot, query: dict[str, list[str]]
) -> tuple[list[str] | None, list[str] | None, int | None, str]:
    """?allocation= (paths and what is under them), ?user= (comma-separated lists, as
    the CLI's -a and -u), ?limit= (a number or all): the filters, the row limit, and a
    message for a wrong one."""
    # the budget tree prints inner nodes as `vision/`: a trailing / is the same node
    from projections.views import split_names

    wanted = split_names((query.get("allocation") or [""])[0])
    allocation = [a.rstrip("/") for a in wanted] if wanted else None
    user = split_names((query.get("user") or [""])[0])
    raw = (query.get("limit") or [str(QUEUE_ROWS)])[0].strip()
    message = ""
    limit: int | None = QUEUE_ROWS
    if raw == "all":
        limit = None
    elif raw.isdigit() and int(raw) > 0:
        limit = int(raw)
    else:
        message = f"limit {raw!r}: a number of rows or 'all'; showing {QUEUE_ROWS}"
    unknown = [a for a in allocation or () if a not in snap.view.state.tree]
    if unknown:
        message = f"no allocation {unknown[0]!r}; showing every allocation"
        allocation = None
    return allocation, user, limit, message


def _typed(query: dict[str, list[str]], key: str) -> str | None:
    """What the user typed in a filter box, kept in it (even when it names nothing)."""
    return (query.get(key) or [""])[0].strip() or None


def _queue_form(allocation: str | None, user: str | None, limit: int | None) -> str:
    kept = (
        ""
        if limit == QUEUE_ROWS
        else f"<input type='hidden' name='limit' value='{limit or 'all'}'>"
    )
    return (
        "<form class='range' id='queue-filter' method='get' action='/queue'>"
        f"<label>allocation<input name='allocation' value='{esc(allocation or '')}'></label>"
        f"<label>user<input name='user' value='{esc(user or '')}'></label>{kept}"
        "<button type='submit'>Filter</button>"
        "<span class='hint'>an allocation shows its work and the work under it; positions "
        "stay those of the whole queue. <a href='/queue'>Show everything</a></span></form>"
    )


def _shown(
    rows: list[Any], limit: int | None, what: str, query: dict[str, str]
) -> tuple[list[Any], str]:
    """The first `limit` rows, and a line saying how to see the rest."""
    if limit is None or len(rows) <= limit:
        return rows, ""
    link = "/queue?" + urlencode({**query, "limit": "all"})
    note = (
        f"<p class='hint' id='{what}-more'>Showing the first {limit:,} of {len(rows):,}: "
        f"filter by allocation or user, or <a href='{esc(link)}'>show all {len(rows):,}</a>.</p>"
    )
    return rows[:limit], note


def queue_page(snap: Snapshot, query: dict[str, list[str]] | None = None) -> str:
    from projections.forecast import annotate, footnote
    from projections.views import queue_rows

    allocation, user, limit, message = _queue_filter(snap, query or {})
    rows = queue_rows(snap.view, allocation=allocation, user=user)
    fc = snap.forecast()
    filters = {k: ",".join(v) for k, v in (("allocation", allocation), ("user", user)) if v}
    pending, more_pending = _shown(
        [r for r in rows if r["state"] == "PENDING"], limit, "pending", filters
    )
    running, more_running = _shown(
        [r for r in rows if r["state"] == "RUNNING"], limit, "running", filters
    )
    annotate(pending + running, fc)
    policy = snap.view.state.ordering
    out = [
        _header(snap, "Queue"),
        _queue_form(_typed(query or {}, "allocation"), _typed(query or {}, "user"), limit),
    ]
    if message:
        out.append(f"<div class='msg' id='filter-error'>{esc(message)}</div>")
    matching = " that matches the filter" if filters else ""
    counts = {"PENDING": 0, "RUNNING": 0}
    for r in rows:
        counts[r["state"]] = counts.get(r["state"], 0) + 1
    keys = (
        " Sort key: (not allocated, allocation rank, −priority, submit time); an allocation's "
        "rank comes from its fair-share ratio (usage / (share × capacity × window)) — "
        "lower ratio, better rank."
        if policy.name == "fairshare"
        else ""
    )
    summary = policy_summary(policy)
    out.append(
        f"<p class='hint' id='policy'>Pending work in the order the scheduler considers it. "
        f"Policy <b>{esc(policy.name)}</b>{': ' + esc(summary) if summary else '.'}"
        f"{esc(keys)}</p>"
    )
    doc = inspect.cleandoc(policy.__doc__ or "")
    if doc:
        out.append(
            "<details class='hint' id='policy-chain'><summary>The policy's full ordering "
            f"and preemption rules</summary><pre class='why'>{esc(doc)}</pre></details>"
        )
    out.append(f"<h2>Pending ({counts['PENDING']:,})</h2>")
    prow = []
    for r in pending:
        wid = esc(r["id"])
        prow.append(
            f'<tr data-id="{wid}">'
            + _td(r["position"], "position", num=True)
            + _workload_cell(r)
            + _td(r["allocation"], "allocation")
            + _td(r["user"], "user")
            + _td(r["gpus"], "gpus", num=True)
            + _td("yes" if r["allocated"] else "no", "allocated")
            + _td("" if r["rank"] is None else r["rank"], "rank", num=True)
            # a zero share's ratio is inf; work the policy does not rank has none
            + _td(
                "" if r["rank"] is None else "inf" if r["ratio"] is None else f"{r['ratio']:.4f}",
                "ratio",
                num=True,
            )
            + _td(r["priority"], "priority", num=True)
            + _td(r["submitted"], "submitted", cls="nowrap")
            + _td(fmt_dur(r["time_s"]), "waited", num=True, cls="nowrap")
            + _td(r["expected_start"] or "N/A", "expected_start", cls="nowrap")
            + _td(r["expected_nodes"], "expected_nodes", cls="nowrap")
            + _td(
                f'<span class="badge {esc(r["reason"])}">{esc(r["reason"])}</span>',
                "reason",
                raw=True,
            )
            + _detail_td(r["detail"])
            + "</tr>"
        )
    out.append(
        _table(
            [
                ("#", True),
                ("workload", False),
                ("allocation", False),
                ("user", False),
                ("GPUs", True),
                ("allocated", False),
                ("rank", True),
                ("ratio", True),
                ("priority", True),
                ("submitted (UTC)", False),
                ("waited", True),
                ("expected start (UTC)", False),
                ("expected hosts", False),
                ("reason", False),
                ("detail", False),
            ],
            prow,
            cls="pending",
        )
        + more_pending
        + f"<p class='hint' id='forecast'>{esc(footnote(fc, 'The expected start'))}</p>"
        if prow
        else f"<p class='hint' id='no-pending'>Nothing{matching} is waiting.</p>"
    )
    out.append(f"<h2>Running ({counts['RUNNING']:,})</h2>")
    rrow = []
    for r in running:
        wid = esc(r["id"])
        rrow.append(
            f'<tr data-id="{wid}">'
            + _workload_cell(r)
            + _td(r["allocation"], "allocation")
            + _td(r["user"], "user")
            + _td(r["gpus"], "gpus", num=True)
            + _td(r["started"], "started", cls="nowrap")
            + _td(fmt_dur(r["time_s"]), "time", num=True, cls="nowrap")
            + _td(r["nodelist"], "nodelist", cls="nowrap")
            + _td(_expected_end(r), "expected_end", cls="nowrap")
            + _td(r["reason"], "reason")
            + _detail_td(r["detail"])
            + "</tr>"
        )
    out.append(
        _table(
            [
                ("workload", False),
                ("allocation", False),
                ("user", False),
                ("GPUs", True),
                ("started (UTC)", False),
                ("running for", True),
                ("hosts", False),
                ("expected end (UTC)", False),
                ("state", False),
                ("detail", False),
            ],
            rrow,
            cls="running",
        )
        + more_running
        if rrow
        else f"<p class='hint'>Nothing{matching} is running.</p>"
    )
    return "".join(out)


def _expected_end(r: dict[str, Any]) -> str:
    if r["expected_end"] is None:
        return "N/A"
    if r["expected_end_how"] == "finished":
        return f"{r['expected_end']} (finishes)"
    by = f" for {r['expected_end_by']}" if r["expected_end_by"] else ""
    return f"{r['expected_end']} (preempted{by})"


# ------------------------------------------------------------------ timeline
class RangeError(ValueError):
    """A bad ?from= / ?to=: one line for the user."""


def example_time(start: float, end: float | None = None) -> str:
    """A UTC time inside the journal to show as the ranges' example (`2026-01-05
    03:00`): three whole hours after its first one, or its first whole minute when the
    journal is younger than that (a fixed date would lie outside most journals)."""
    end = start if end is None else max(end, start)
    t = math.ceil(start / 3600) * 3600 + 3 * 3600
    if t > end:
        t = math.ceil(start / 60) * 60
        if t > end:
            t = math.floor(start / 60) * 60
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")


def parse_time(text: str, start: float, end: float | None = None) -> float:
    """An offset from the run start (`3h`, `1d12h`, `90m`), a UTC time (`2026-01-01
    03:00`, `2026-01-01T03:00:00Z`) or a UTC time of day (`08:03`, as the pages print
    times: the last one at or before `end`, the journal's latest time)."""
    from domain.durations import parse_clock, parse_duration, parse_utc

    text = text.strip()
    if text.lower() == "now":  # as --since takes it: the journal's latest time
        return end if end is not None else start
    clock = parse_clock(text, end if end is not None else start)
    if clock is not None:  # before durations: Slurm's MM:SS would read 08:03 as 8m3s
        return clock
    try:
        return start + parse_duration(text)
    except ValueError:
        pass
    try:
        return parse_utc(text)
    except ValueError:
        example = example_time(start, end)
        raise RangeError(
            f"{text!r} is neither an offset from the start (like 3h or 1d6h) nor a UTC "
            f"time (like {example} or {example[-5:]})"
        ) from None


# a journal whose last record is younger than this is a running cluster's
LIVE_WITHIN_S = 86400.0


def default_window(snap: Snapshot, wall: float | None = None) -> tuple[float, float]:
    """The last 24 h of a running cluster (its recent past, beside the forecast of the
    next days); else, for a finished run, its busiest 24 h."""
    from projections.gantt import DAY

    g = snap.gantt
    t0 = g.first_time or 0.0
    t1 = g.last_time or t0
    now = time.time() if wall is None else wall
    if now - t1 < LIVE_WITHIN_S:
        return max(t0, t1 - DAY), t1
    return g.busiest_window()


def timeline_window(snap: Snapshot, query: dict[str, list[str]]) -> tuple[float, float]:
    g = snap.gantt
    t0 = g.first_time or 0.0
    t1 = g.last_time or t0
    a_text = (query.get("from") or [""])[0].strip()
    b_text = (query.get("to") or [""])[0].strip()
    if not a_text and not b_text:
        return default_window(snap)
    a = parse_time(a_text, t0, t1) if a_text else t0
    b = parse_time(b_text, t0, t1) if b_text else max(t1, a + 1.0)
    if b <= a:
        raise RangeError("the range is empty: 'to' must be after 'from'")
    if not (a >= 0 and b <= MAX_TIME):  # datetime cannot show it (a 500 before)
        raise RangeError("times are from 1970 to the year 9999")
    if b - a > MAX_WINDOW_S:
        raise RangeError("a picture shows at most a year: narrow 'from' and 'to'")
    return a, b


MAX_WINDOW_S = 366 * 86400.0
GPU_ROWS = 1024  # GPUs one timeline picture shows; a bigger cluster is paged (?gpu=N)


def first_gpu_row(n_rows: int, query: dict[str, list[str]]) -> int:
    """`?gpu=N`: the picture starts at GPU row N (1-based, as its axis says); 0-based."""
    text = (query.get("gpu") or [""])[0].strip()
    if not text:
        return 0
    if not text.isdigit() or not 1 <= int(text) <= max(1, n_rows):
        raise RangeError(f"gpu={text!r}: a GPU row from 1 to {max(1, n_rows):,}")
    return int(text) - 1


def _gpu_pages(n_rows: int, first: int, query: dict[str, list[str]]) -> str:
    """Links to the previous and next GPU_ROWS GPUs of a cluster bigger than a picture."""
    if n_rows <= GPU_ROWS:
        return ""
    keep = {k: v[0] for k, v in query.items() if k in ("from", "to") and v}

    def link(start: int, text: str) -> str:
        return f"<a href='/timeline?{esc(urlencode({**keep, 'gpu': start + 1}))}'>{text}</a>"

    last = min(n_rows, first + GPU_ROWS)
    parts = [f"GPUs {first + 1:,}–{last:,} of {n_rows:,}"]
    if first > 0:
        parts.insert(0, link(max(0, first - GPU_ROWS), "← previous"))
    if last < n_rows:
        parts.append(link(last, "next →"))
    return f"<p class='sub' id='gpu-pages'>{' · '.join(parts)}</p>"


def _offset(t: float, t0: float) -> str:
    from domain.durations import format_duration

    return format_duration(max(0.0, t - t0))


def timeline_page(snap: Snapshot, query: dict[str, list[str]]) -> tuple[int, str]:
    import numpy as np

    from projections.gantt import gantt_png

    g = snap.gantt
    t0 = g.first_time or 0.0
    out = [_header(snap, "GPU timeline")]
    status = 200
    try:
        w0, w1 = timeline_window(snap, query)
        first = first_gpu_row(g.n_rows, query)
        message = ""
    except RangeError as why:
        status = 400
        message = f"<div class='msg' id='range-error'>{esc(why)}</div>"
        w0, w1 = default_window(snap)
        first = 0
    a_val = (query.get("from") or [_offset(w0, t0)])[0]
    b_val = (query.get("to") or [_offset(w1, t0)])[0]
    out.append(
        "<form class='range' method='get' action='/timeline'>"
        f"<label>from<input name='from' value='{esc(a_val)}'></label>"
        f"<label>to<input name='to' value='{esc(b_val)}'></label>"
        "<button type='submit'>Show</button>"
        "<span class='hint'>offsets from the journal's start (3h, 1d6h) or UTC times "
        f"({esc(example_time(t0, g.last_time))}). The journal spans {esc(_when(t0))} → "
        f"{esc(_when(g.last_time))} ({esc(_offset(g.last_time or t0, t0))}).</span></form>"
    )
    out.append(message)
    starts = np.frombuffer(g.start, dtype=np.float64)
    ends = np.frombuffer(g.end, dtype=np.float64)
    pre = np.frombuffer(g.preempted, dtype=np.int8)
    inside = (ends > w0) & (starts < w1) & (ends > starts)
    shown = int(inside.sum())
    preempted = int((inside & (pre == 1) & (ends <= w1)).sum())
    out.append(
        f"<p class='sub'>{esc(_when(w0))} → {esc(_when(w1))}: "
        f"<b data-k='intervals'>{shown}</b> run intervals on <b>{g.n_rows}</b> GPUs, "
        f"<b data-k='preempted'>{preempted}</b> ended by preemption.</p>"
    )
    out.append(_gpu_pages(g.n_rows, first, query))
    key = ("gantt", round(w0, 3), round(w1, 3), first)
    with snap.lock, _DRAW:
        if key not in snap.charts:
            if len(snap.charts) > 32:  # bounded: drop the oldest ranges
                for old in [k for k in snap.charts if isinstance(k, tuple) and k[0] == "gantt"][
                    :16
                ]:
                    del snap.charts[old]
            png = gantt_png(g, window=(w0, w1), first_row=first, max_rows=GPU_ROWS)
            snap.charts[key] = base64.b64encode(png).decode("ascii")
        chart = snap.charts[key]
    out.append(
        f"<figure>{_img(chart, 'GPU timeline')}<figcaption>Rows are GPUs (host/index), bars "
        "are workloads (a hue per branch of the budget tree — per allocation at its first level with several — and a shade per leaf); hatched where "
        "preemptible (unallocated, or past its protected time); red outline and a red tick "
        "at its end where the run ended by preemption; red dashed boxes over a host's rows while it was "
        "unhealthy.</figcaption></figure>"
    )
    out.append(_forecast_figure(snap, first))
    return status, "".join(out)


def _forecast_figure(snap: Snapshot, first: int = 0) -> str:
    """The next --horizon as the scheduler expects it (`allot queue --start`'s forecast),
    GPU rows `first` on: the page of GPUs the picture of the past shows."""
    from domain.durations import format_duration
    from projections.forecast import footnote, timeline
    from projections.gantt import gantt_png

    fc = snap.forecast()
    end = forecast_window_end(fc)
    span = format_duration(end - fc.now)
    quiet = (
        f" Nothing is expected to change after that, up to the forecast's horizon "
        f"({format_duration(fc.horizon_end - fc.now)})."
        if end < fc.horizon_end
        else ""
    )
    key = ("forecast", first)  # a picture per page of GPUs (a few, even at 10k GPUs)
    with snap.lock, _DRAW:
        if key not in snap.charts:
            g = timeline(snap.view, fc)
            png = gantt_png(
                g, window=(fc.now, end), title="Expected", first_row=first, max_rows=GPU_ROWS
            )
            snap.charts[key] = base64.b64encode(png).decode("ascii")
        chart = snap.charts[key]
    return (
        f"<h2 id='forecast-timeline'>The next {esc(span)}, as the scheduler expects it</h2>"
        f"<figure>{_img(chart, 'expected GPU timeline')}<figcaption>The same picture played "
        f"forward from the journal's latest moment.{esc(quiet)} {esc(footnote(fc, 'It'))}"
        "</figcaption></figure>"
    )


def forecast_window_end(fc: Any) -> float:
    """Where the forecast picture ends: a little after its last expected change (at
    least an hour on), not at the horizon, where minute-long jobs filled 2% of the
    picture; the horizon when changes run up to it."""
    changes = [  # the forecast's own ticks (one at the horizon) change nothing
        r.time
        for r in getattr(fc, "records", None) or ()
        if r.time > fc.now and r.type != "clock.tick"
    ]
    if not changes:
        return min(fc.horizon_end, fc.now + 3600.0)
    last = max(changes)
    return min(fc.horizon_end, max(fc.now + 3600.0, last + 0.1 * (last - fc.now)))


# ------------------------------------------------------------------ workload
def array_page(snap: Snapshot, summary: dict[str, Any]) -> str:
    """A job array's base id (`allot why BASE`): its tasks by state, each linked to
    its own page."""
    base = summary["array"]
    head = esc(summary["text"][0].split(": ", 1)[1])
    rows = [
        "<tr>"
        + _td(f'<a href="/workload/{esc(t["id"])}">{esc(t["id"])}</a>', "id", raw=True)
        + _td(t["state"].lower(), "state")
        + _td(t["nodelist"], "nodelist")
        + _td(t["reason"], "reason")
        + "</tr>"
        for t in summary["tasks"]
    ]
    return (
        _header(snap, f"Job array {base}")
        + f"<p class='sub' id='now'><b>tasks:</b> {head}</p>"
        + _table([("TASK", False), ("STATE", False), ("NODELIST", False), ("REASON", False)], rows)
    )


def workload_page(snap: Snapshot, wid: str) -> tuple[int, str]:
    from projections.acct import array_summary
    from projections.views import ViewError, why

    summary = array_summary(snap.view, wid.strip())
    if summary is not None:  # BASE of BASE_0, BASE_1, ...: the array, as `allot why BASE`
        return 200, array_page(snap, summary)
    try:
        answer = why(snap.view, wid)
    except ViewError as err:
        body = (
            f"<div class='empty' id='not-found'><h1>Unknown workload {esc(wid)}</h1>"
            f"<p>{esc(err)}</p><p class='hint'>The <a href='/queue'>queue</a> lists live "
            "workloads with links; finished ones are reachable by id at "
            "<code>/workload/ID</code> (a unique prefix works too; a job array's base id "
            "lists its tasks).</p></div>"
        )
        return 404, body
    from projections.forecast import add_expectations

    add_expectations(answer, snap.view, snap.forecast)  # as `allot why` says it
    name = answer.get("workload") or answer.get("request") or wid
    out = [_header(snap, f"Workload {name}")]
    current = answer.get("current") or {}
    if current.get("text"):
        out.append(f"<p class='sub' id='now'><b>now:</b> {esc(current['text'])}</p>")
    out.append("<h2>Why</h2>")
    out.append("<pre class='why' id='why'>" + esc("\n".join(answer["text"])) + "</pre>")
    return 200, "".join(out)


# ------------------------------------------------------------------ server
REFRESH_S = (5, 3600)  # how often a page may reload itself, in seconds


def with_refresh(html_text: str, query: dict[str, list[str]]) -> str:
    """`?refresh=N` (5 to 3600 seconds): the page reloads itself every N seconds (a wall
    display of a live cluster); no script, a meta refresh. A number outside the range
    is brought into it, anything else reloads nothing; either is said on the page, as
    a wrong filter or range is."""
    raw = (query.get("refresh") or [""])[0].strip()
    if not raw:
        return html_text
    low, high = REFRESH_S
    if not (raw.isascii() and raw.isdigit()):  # int() refuses '²', which isdigit() takes
        return _said(
            html_text,
            f"refresh={raw!r}: a number of seconds from {low} to {high}; "
            "this page does not reload itself",
        )
    every = min(high, max(low, int(raw)))
    html_text = html_text.replace(
        "<head>", f"<head><meta http-equiv='refresh' content='{every}'>", 1
    )
    if every == int(raw):
        return html_text
    return _said(
        html_text,
        f"refresh={raw}: a page reloads every {low} to {high} seconds; this one every {every}",
    )


def _said(html_text: str, message: str) -> str:
    """`html_text` with `message` on top of its content, where pages say a wrong query."""
    return html_text.replace(
        "<main>", f"<main><div class='msg' id='refresh-error'>{esc(message)}</div>", 1
    )


class _Handler(BaseHTTPRequestHandler):
    dashboard: Dashboard
    log: Callable[[str], None] | None = None

    def log_message(self, format: str, *args: Any) -> None:
        if self.log is not None:
            self.log(format % args)

    def _send(self, status: int, body: str, ctype: str = "text/html; charset=utf-8") -> None:
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_GET(self) -> None:
        try:
            status, html_text = self.route()
        except Exception as exc:  # a bug: one clear page, never a traceback to the user
            status = 500
            html_text = page(
                "error",
                "<div class='empty' id='error-state'><h1>Something went wrong</h1>"
                f"<p>{esc(type(exc).__name__)}: {esc(exc)}</p></div>",
                source=self.dashboard.label,
            )
        self._send(status, with_refresh(html_text, parse_qs(urlsplit(self.path).query)))

    def route(self) -> tuple[int, str]:
        url = urlsplit(self.path)
        path = url.path.rstrip("/") or "/"
        query = parse_qs(url.query)
        src = self.dashboard.label
        if path == "/favicon.ico":
            return 204, ""
        known = path in ("/", "/queue", "/timeline") or path.startswith("/workload/")
        if not known:
            body = (
                f"<div class='empty' id='not-found'><h1>No page {esc(path)}</h1><p>Try "
                "<a href='/'>allocations</a>, <a href='/queue'>the queue</a>, <a "
                "href='/timeline'>the GPU timeline</a> or <code>/workload/ID</code>.</p></div>"
            )
            return 404, page("not found", body, source=src)
        active = "/" if path == "/" else "/" + path.split("/")[1]
        with self.dashboard.reading() as snap:
            return self._render(snap, path, query, active, src)

    def _render(
        self, snap: Snapshot, path: str, query: dict[str, list[str]], active: str, src: str
    ) -> tuple[int, str]:
        if not snap.ok:
            # no records yet is a state (the journal may fill up); one that cannot be read
            # is an error an uptime probe should see
            return (503 if snap.error is not None else 200), empty_page(snap, active, src)
        if path == "/":
            return 200, page("Allocations", allocations_page(snap), active=active, source=src)
        if path == "/queue":
            return 200, page("Queue", queue_page(snap, query), active=active, source=src)
        if path == "/timeline":
            status, body = timeline_page(snap, query)
            return status, page("GPU timeline", body, active=active, source=src)
        wid = unquote(path[len("/workload/") :])
        status, body = workload_page(snap, wid)
        return status, page(f"workload {wid}", body, active="/queue", source=src)


def make_server(
    dashboard: Dashboard,
    host: str = "127.0.0.1",
    port: int = 8080,
    *,
    log: Callable[[str], None] | None = None,
) -> ThreadingHTTPServer:
    handler = type(
        "DashboardHandler",
        (_Handler,),
        {"dashboard": dashboard, "log": staticmethod(log) if log else None},
    )
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


__all__ = [
    "Dashboard",
    "RangeError",
    "Snapshot",
    "build_snapshot",
    "file_stamp",
    "make_server",
    "parse_time",
]

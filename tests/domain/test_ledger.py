"""The usage ledger: GPU time per path over a sliding window by event time (DESIGN §5.2)."""

from __future__ import annotations

import pytest

from domain.ledger import UsageLedger
from tests.domain.builders import cluster

H = 3600.0


def _ledger(window_h: float = 3, bucket_h: float = 1) -> UsageLedger:
    return UsageLedger(window_h * H, bucket_h * H)


# one GPU ran on lab/a from 0 to 1 h; window 3 h, buckets of 1 h
WINDOW_CASES = [
    (0.5, 0.5 * H),
    (1.0, H),
    (3.0, H),
    (3.5, H),  # the window edge is inside the first bucket: it stays
    (3.99, H),
    (4.0, 0.0),  # the whole first bucket left at once
    (10.0, 0.0),
]


@pytest.mark.parametrize(
    ("now_h", "expected"), WINDOW_CASES, ids=[f"at-{h}h" for h, _ in WINDOW_CASES]
)
def test_usage_leaves_the_window_bucket_by_bucket(now_h: float, expected: float) -> None:
    ledger = _ledger()
    ledger.change_rate("lab/a", 1, 0.0)
    ledger.change_rate("lab/a", -1, min(now_h, 1.0) * H)
    assert ledger.usage("lab/a", now_h * H) == pytest.approx(expected)
    assert ledger.usage("lab", now_h * H) == pytest.approx(expected)
    assert ledger.total("lab/a", now_h * H) == pytest.approx(min(now_h, 1.0) * H)


@pytest.mark.parametrize("now_h", [0.5, 2.0, 3.0, 4.5, 7.0, 30.0], ids=lambda h: f"at-{h}h")
def test_running_accrual_read_equals_written(now_h: float) -> None:
    """Reading while a rate runs equals what writing at that moment stores."""
    read = _ledger()
    written = _ledger()
    for ledger in (read, written):
        ledger.change_rate("lab/a", 2, 0.0)
    written.change_rate("lab/a", 0, now_h * H)  # forces a write up to now
    window_start = max(0.0, (now_h - 3) // 1 * H)  # buckets wholly or partly inside
    expected = 2 * (now_h * H - window_start)
    assert read.usage("lab/a", now_h * H) == pytest.approx(expected)
    assert written.usage("lab/a", now_h * H) == pytest.approx(expected)
    assert read.total("lab/a", now_h * H) == written.total("lab/a", now_h * H) == 2 * now_h * H


def test_ancestors_accrue_and_siblings_do_not() -> None:
    ledger = _ledger(window_h=24)
    ledger.change_rate("lab/olmo/pre", 4, 0.0)
    ledger.change_rate("lab/other", 1, 0.0)
    ledger.change_rate("lab/olmo/post", 2, H)
    at = 2 * H
    assert ledger.usage("lab/olmo/pre", at) == 4 * 2 * H
    assert ledger.usage("lab/olmo/post", at) == 2 * H
    assert ledger.usage("lab/olmo", at) == (8 + 2) * H
    assert ledger.usage("lab", at) == (8 + 2 + 2) * H
    assert ledger.usage("lab/nothing", at) == 0.0
    assert ledger.rate("lab/olmo") == 6 and ledger.rate("lab") == 7


def test_total_is_lifetime_not_windowed() -> None:
    ledger = _ledger()
    ledger.change_rate("a", 3, 0.0)
    ledger.change_rate("a", -3, 10 * H)
    assert ledger.usage("a", 20 * H) == 0.0
    assert ledger.total("a", 20 * H) == 30 * H


def test_rate_changes_split_across_buckets_and_order_does_not_matter() -> None:
    """Integer milliseconds: the same facts give the same numbers in any read order."""
    a, b = _ledger(window_h=5), _ledger(window_h=5)
    for ledger in (a, b):
        ledger.change_rate("x/y", 1, 0.1)
        ledger.change_rate("x/y", 2, 1.7 * H)
        ledger.change_rate("x/y", -3, 4.2 * H)
    for t in (1.0, 2.5, 4.0, 6.0):
        a.usage("x", t * H)  # reading pops expired buckets on the way
    assert a.usage_ms("x", 6.5 * H) == b.usage_ms("x", 6.5 * H)
    assert a.usage("x/y", 8.0 * H) == b.usage("x/y", 8.0 * H)
    # buckets [3h,4h) and [4h,5h) are inside the 5h window ending at 8.5h
    assert b.usage("x/y", 8.5 * H) == pytest.approx(3 * (4.2 - 3.0) * H)


def test_reconfigured_window_applies_to_reads() -> None:
    ledger = _ledger(window_h=24)
    ledger.change_rate("a", 1, 0.0)
    ledger.change_rate("a", -1, 2 * H)
    assert ledger.usage("a", 10 * H) == 2 * H
    ledger.reconfigure(3 * H, H)
    assert ledger.usage("a", 10 * H) == 0.0


NEXT_EDGE_CASES = [
    # (window h, now h, next edge h)
    (3, 0.0, 1.0),
    (3, 0.5, 1.0),
    (3, 1.0, 2.0),
    (3, 3.25, 4.0),
    (2.5, 0.0, 1.0),  # a window of no whole buckets is rounded up to them
    (2.5, 3.2, 4.0),
]


@pytest.mark.parametrize(
    ("window_h", "now_h", "edge_h"),
    NEXT_EDGE_CASES,
    ids=[f"window-{w}h-at-{n}h" for w, n, _ in NEXT_EDGE_CASES],
)
def test_next_edge_is_the_next_bucket_edge(window_h: float, now_h: float, edge_h: float) -> None:
    ledger = _ledger(window_h=window_h)
    assert ledger.next_edge(now_h * H) == pytest.approx(edge_h * H)


def test_usage_drops_exactly_at_next_edge() -> None:
    ledger = _ledger(window_h=2.5)
    ledger.change_rate("a", 1, 0.0)
    ledger.change_rate("a", -1, H)
    edge = ledger.next_edge(3.2 * H)
    assert edge == pytest.approx(4 * H)
    assert ledger.usage("a", edge - 0.001) == H
    assert ledger.usage("a", edge) == 0.0


def test_scheduler_tracks_unallocated_apart_and_window_by_event_time() -> None:
    c = cluster(hosts=1, window="3h", bucket="1h").tree({"lab/a": 1, "lab/b": 1})
    c.submit("paid", "lab/a", gpus=4, min_runtime="15m")
    c.submit("free", "lab/b", gpus=4, min_runtime=0)
    c.at("1h").finish("paid")
    c.finish("free")
    assert c.usage("lab/a") == 4 * H and c.usage("lab") == 4 * H
    assert c.usage("lab/b") == 0.0
    assert c.state.unallocated.total("lab/b", c.state.now) == 4 * H
    assert c.state.unallocated.total("lab", c.state.now) == 4 * H
    # nothing happens between events: the window slides only when time is stamped
    c.at("3h30m").tick()
    assert c.usage("lab/a") == 4 * H
    c.at("4h").tick()
    assert c.usage("lab/a") == 0.0
    assert c.charged_total("lab/a") == 4 * H


@pytest.mark.parametrize("gap_days", [1, 365, 100 * 365], ids=lambda d: f"gap-{d}d")
def test_a_long_gap_keeps_one_window_of_buckets_and_the_exact_numbers(gap_days: int) -> None:
    """A rate left running across a long gap (a quiet cluster, a clock jump) writes only
    the buckets a window can still read; the rest goes to the lifetime total."""
    ledger = UsageLedger(window_s=7 * 86400, bucket_s=3600)
    ledger.change_rate("lab/a", +3, 0.0)
    gap = gap_days * 86400.0
    ledger.change_rate("lab/a", -3, gap)  # stops accruing at the end of the gap
    buckets = ledger.accounts["lab/a"].buckets
    assert len(buckets) <= 7 * 24 + 1
    assert ledger.total("lab/a", gap) == 3 * gap
    assert ledger.usage("lab/a", gap) == 3 * min(gap, 7 * 86400)
    assert ledger.usage("lab", gap) == ledger.usage("lab/a", gap)


# one GPU accrues to lab/a from `start` h to `stop` h (None: still running); window 3 h,
# buckets of 1 h; the ranked usage read at `now` h is the window's as of the last edge
RANKED_CASES = [
    # (start, stop, now, expected GPU-h)
    (0.0, None, 0.5, 0.0),  # nothing before the first edge
    (0.0, None, 1.0, 1.0),  # exactly at an edge
    (0.0, None, 1.7, 1.0),  # still running: accrual since the edge waits for the next
    (0.0, 1.4, 1.7, 1.0),  # stopped mid-bucket: written past the edge, not counted yet
    (0.0, 1.4, 2.0, 1.4),
    (0.2, 0.6, 0.9, 0.0),
    (0.2, 0.6, 1.0, 0.4),
    (0.0, None, 4.5, 3.0),  # the window as of 4 h: buckets from 1 h
    (0.0, 1.5, 4.5, 0.5),
    (0.0, 1.5, 5.0, 0.0),
]


@pytest.mark.parametrize(
    ("start_h", "stop_h", "now_h", "expected_h"),
    RANKED_CASES,
    ids=[f"{a}-{b}h-read-at-{n}h" for a, b, n, _ in RANKED_CASES],
)
def test_ranked_usage_is_the_window_as_of_the_last_edge(
    start_h: float, stop_h: float | None, now_h: float, expected_h: float
) -> None:
    ledger = _ledger()
    ledger.change_rate("lab/a", 1, start_h * H)
    if stop_h is not None:
        ledger.change_rate("lab/a", -1, stop_h * H)
    ranked = ledger.ranked_reader(now_h * H)
    assert ranked("lab/a") == round(expected_h * H * 1000)
    assert ranked("lab") == ranked("lab/a")  # ancestors accrue alike


def test_ranked_usage_is_the_live_usage_read_at_the_edge() -> None:
    """Whatever rates change inside a bucket, every read until the next edge gives what
    a live read at the edge gave: the ranking cannot move between edges."""
    ledger = _ledger(window_h=2.5)
    changes = [(0.3, 2), (1.1, 1), (1.25, -2), (2.6, 4), (3.05, -1), (3.5, -2), (4.2, 1)]
    reads = [0.0, 0.4, 1.0, 1.2, 1.3, 1.99, 2.0, 2.7, 3.0, 3.6, 4.0, 4.3]
    timeline = sorted([(t, 1, d) for t, d in changes] + [(t, 0, 0) for t in reads])
    live_at_edge: dict[int, int] = {}
    ranked: dict[int, set[int]] = {}
    for t, is_change, delta in timeline:  # reads before changes at the same moment
        if is_change:
            ledger.change_rate("a", delta, t * H)
            continue
        if t == int(t):
            live_at_edge[int(t)] = ledger.usage_ms("a", t * H)
        ranked.setdefault(int(t), set()).add(ledger.ranked_reader(t * H)("a"))
    assert ranked == {edge: {live} for edge, live in live_at_edge.items()}
    assert len(set(live_at_edge.values())) > 3  # the edges saw different usage

"""Usage ledger: GPU time per allocation path over a sliding window, by event time.

Each account holds a *rate* (GPUs currently accruing) and time buckets. Accrual is
written only when a rate changes, so the stored numbers depend on the journal alone,
not on how often anyone looked; reads add the not-yet-written part on the fly.
Amounts are integer GPU-milliseconds, so sums don't depend on the order they were
added or expired in (floats would, and replay must be byte-identical).

Cost: a rate change touches the path's ancestors and the buckets crossed since the
last change; a read pops only buckets that left the window. Amortized O(1) per event.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from domain.tree import ancestor_chain


def to_ms(seconds: float) -> int:
    return round(seconds * 1000.0)


@dataclass(slots=True)
class Account:
    rate: int = 0  # GPUs accruing now
    since: int = 0  # ms: accrual is written up to here
    buckets: deque[list[int]] = field(default_factory=deque)  # [start_ms, gpu_ms]
    in_window: int = 0  # sum of stored buckets (some may have left the window)
    total: int = 0  # lifetime gpu_ms written


def _in_window(acc: Account, first: int) -> int:
    """The sum of `acc`'s buckets from `first` on, dropping the older ones for good."""
    buckets = acc.buckets
    while buckets and buckets[0][0] < first:
        acc.in_window -= buckets.popleft()[1]
    return acc.in_window


class UsageLedger:
    """One ledger per kind of time (charged, unallocated)."""

    __slots__ = ("accounts", "bucket_ms", "window_ms")

    def __init__(self, window_s: float, bucket_s: float) -> None:
        self.window_ms = to_ms(window_s)
        self.bucket_ms = max(1, to_ms(bucket_s))
        self.accounts: dict[str, Account] = {}

    def reconfigure(self, window_s: float, bucket_s: float) -> None:
        self.window_ms = to_ms(window_s)
        self.bucket_ms = max(1, to_ms(bucket_s))

    def _account(self, path: str) -> Account:
        acc = self.accounts.get(path)
        if acc is None:
            acc = self.accounts[path] = Account()
        return acc

    def _write(self, acc: Account, now_ms: int) -> None:
        """Write accrual from `acc.since` to `now_ms`, split at bucket edges."""
        t = acc.since
        if acc.rate and now_ms > t:
            first = self._window_start(now_ms)
            if t < first:
                # accrual before any window still to be read counts for the lifetime
                # total only: a long gap must not write (and keep) a bucket per width
                acc.total += acc.rate * (first - t)
                t = first
            size = self.bucket_ms
            buckets = acc.buckets
            while t < now_ms:
                start = t - t % size
                end = min(start + size, now_ms)
                amount = acc.rate * (end - t)
                if buckets and buckets[-1][0] == start:
                    buckets[-1][1] += amount
                else:
                    buckets.append([start, amount])
                acc.in_window += amount
                acc.total += amount
                t = end
        acc.since = max(acc.since, now_ms)

    def change_rate(self, path: str, delta_gpus: int, now: float) -> None:
        """`delta_gpus` start (or, negative, stop) accruing to `path` and its ancestors."""
        now_ms = to_ms(now)
        for p in ancestor_chain(path):
            acc = self._account(p)
            self._write(acc, now_ms)
            acc.rate += delta_gpus

    def _window_start(self, now_ms: int) -> int:
        # the window ends at the last bucket edge, so its start (like the ranking read
        # from it, `ranked_reader`) moves only at bucket edges, whatever the window's width
        size = self.bucket_ms
        edge = now_ms - now_ms % size - self.window_ms
        return edge - edge % size

    def usage_ms(self, path: str, now: float) -> int:
        """GPU-ms charged to `path` in the window ending at `now`."""
        acc = self.accounts.get(path)
        if acc is None:
            return 0
        now_ms = to_ms(now)
        first = self._window_start(now_ms)
        pending = acc.rate * (now_ms - max(acc.since, first)) if now_ms > acc.since else 0
        return _in_window(acc, first) + max(0, pending)

    def ranked_reader(self, now: float) -> Callable[[str], int]:
        """GPU-ms charged in the window as it stood at the last bucket edge at or before
        `now`, for many paths. Fair-share ratios are read from it, so they change only
        at bucket edges (as Slurm recomputes priorities every PriorityCalcPeriod): every
        cycle until the next edge ranks on the same numbers, and a cycle that reuses the
        last full cycle's ranking (quick, light) decides as a full one would."""
        now_ms = to_ms(now)
        size = self.bucket_ms
        edge = now_ms - now_ms % size
        first = self._window_start(now_ms)
        accounts = self.accounts

        def usage_ms(path: str) -> int:
            acc = accounts.get(path)
            if acc is None:
                return 0
            amount = _in_window(acc, first)
            buckets = acc.buckets
            since = acc.since
            if since > edge:  # accrual written past the edge (buckets are edge-aligned)
                for i in range(len(buckets) - 1, -1, -1):
                    start, gpu_ms = buckets[i]
                    if start < edge:
                        break
                    amount -= gpu_ms
            elif since < edge and acc.rate:
                amount += acc.rate * (edge - max(since, first))
            return amount

        return usage_ms

    def usage(self, path: str, now: float) -> float:
        """GPU-seconds in the window ending at `now`."""
        return self.usage_ms(path, now) / 1000.0

    def total(self, path: str, now: float) -> float:
        """Lifetime GPU-seconds up to `now` (not windowed)."""
        acc = self.accounts.get(path)
        if acc is None:
            return 0.0
        now_ms = to_ms(now)
        return (acc.total + (acc.rate * (now_ms - acc.since) if now_ms > acc.since else 0)) / 1000.0

    def rate(self, path: str) -> int:
        acc = self.accounts.get(path)
        return acc.rate if acc else 0

    def last_edge(self, now: float) -> float:
        """The last bucket edge at or before `now`: what ratios are read as of."""
        now_ms = to_ms(now)
        return (now_ms - now_ms % self.bucket_ms) / 1000.0

    def next_edge(self, now: float) -> float:
        """The next bucket edge: a bucket leaves the window and ratios are read anew."""
        now_ms = to_ms(now)
        return (now_ms - now_ms % self.bucket_ms + self.bucket_ms) / 1000.0

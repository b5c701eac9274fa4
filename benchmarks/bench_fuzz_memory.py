"""Memory under hostile input: does one `SchedulerCore` stay flat? (issue #6)

    python benchmarks/bench_fuzz_memory.py [--records 200000] [--batch 1000] [--every 10]

Feeds hostile and valid inbox records, mixed, through one `streams.core.SchedulerCore`
in batches, as the worker does, and samples the process RSS (VmRSS from
/proc/self/status) every `--every` batches. Journal output is dropped after each batch
(only the core's own memory is measured).

Hostile half: random bytes, non-object JSON, JSON nested 1023 deep, requests with wrong
field types, unique junk ids, 10 kB names, unknown allocations and workloads, other
clusters' records, time claims far in the past and future, resends of accepted ids.
Valid half: submissions with fresh ids, completions of running work (so the cluster
keeps turning over), host health flaps, ticks. The broker clock advances 2 s per
record, so a run of 200k records spans 4.6 days of event time against a 1-day
window: the dedup horizon (`seen_ids`, `ended`) fills during the first day and must
then stay level. Printed: a table of samples and the RSS growth after warm-up (the
first window of event time).
"""

from __future__ import annotations

import argparse
import gc
import os
import platform
import random
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from domain.config import SchedulerConfig
from streams.core import InboxRecord, SchedulerCore

CLUSTER = "c"
T0 = 1_800_000_000.0
STEP_S = 2.0  # broker time per record
HOSTS, GPUS = 16, 8
MAX_LIVE = 300  # pending + running workloads the valid half keeps in flight


def rss_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


class Feed:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.n = 0
        self.offset = 0
        self.live: dict[str, str] = {}  # accepted submissions not yet ended, oldest first
        self.running: set[str] = set()
        self.accepted: list[bytes] = []  # valid requests, for resends

    def req(self, kind: str, actor: str = "root", **fields: object) -> dict:
        self.n += 1
        return {
            "type": kind,
            "v": 1,
            "id": f"r{self.n}",
            "cluster": CLUSTER,
            "actor": actor,
            **fields,
        }

    def setup(self) -> list[bytes]:
        out = [
            orjson.dumps(self.req("host.registered", host=f"h{i}", gpus=GPUS)) for i in range(HOSTS)
        ]
        out.append(orjson.dumps(self.req("budget.set", allocation="lab", weight=1)))
        for leaf in ("a", "b", "c"):
            out.append(
                orjson.dumps(
                    self.req("budget.set", allocation=f"lab/{leaf}", weight=1, members=["u"])
                )
            )
        return out

    def valid(self) -> bytes:
        rng = self.rng
        roll = rng.random()
        if (roll < 0.45 and len(self.live) < MAX_LIVE) or not self.live:
            body = self.req(
                "workload.submitted",
                "u",
                workload=f"w{self.n}",
                allocation=f"lab/{rng.choice('abc')}",
                gpus=rng.choice([1, 1, 2, 4, 8]),
                min_runtime=rng.choice([0, 60, 900, 3600]),
                resumable=rng.random() < 0.5,
                priority=rng.randrange(3),
            )
        elif roll < 0.9:  # end the oldest live workload (keeps the load level)
            wid = self.live.pop(next(iter(self.live)))
            if wid in self.running:
                self.running.discard(wid)
                body = self.req("workload.finished", "u", workload=wid, outcome="completed")
            else:
                body = self.req("workload.cancelled", "u", workload=wid)
        elif roll < 0.95:
            body = self.req(
                "host.health", host=f"h{rng.randrange(HOSTS)}", healthy=rng.random() < 0.7
            )
        else:
            body = self.req("clock.tick", "allot-ticker")
        value = orjson.dumps(body)
        if len(self.accepted) < 1000:
            self.accepted.append(value)
        else:
            self.accepted[rng.randrange(1000)] = value
        return value

    def hostile(self, now: float) -> bytes:
        rng = self.rng
        kind = rng.randrange(12)
        if kind == 0:
            return rng.randbytes(rng.randrange(1, 300))
        if kind == 1:
            return orjson.dumps(
                rng.choice([[1, 2], "x", 3.5, None, True, [{"type": "clock.tick"}]])
            )
        if kind == 2:
            depth = rng.choice([1023, 1024, 5000])
            return b"[" * depth + b"]" * depth
        if kind == 3:  # wrong types
            body = self.req("workload.submitted", "u", workload=f"j{self.n}", allocation="lab/a")
            body[rng.choice(["gpus", "min_runtime", "id", "tags", "priority", "resumable"])] = (
                rng.choice([None, "NaN", [1], {"a": 1}, 1e308, -(2**63), "x" * 1000])
            )
            return orjson.dumps(body)
        if kind == 4:  # long names, unknown allocation / workload
            long = "é" * rng.choice([100, 10_000])
            body = rng.choice(
                [
                    self.req(
                        "workload.submitted", "u", workload=long, allocation="lab/" + long, gpus=1
                    ),
                    self.req("workload.cancelled", "u", workload=long),
                    self.req("budget.set", allocation="nope/" + long, weight=1),
                    self.req("host.health", host=long, healthy=False),
                ]
            )
            return orjson.dumps(body)
        if kind == 5:  # another cluster, unknown type, decision sent as a request
            body = self.req(
                rng.choice(["clock.tick", "no.such", "workload.placed", "host.drained"])
            )
            if rng.random() < 0.5:
                body["cluster"] = f"other-{self.n}"
            return orjson.dumps(body)
        if kind == 6:  # time claims
            body = self.req("clock.tick", "u")
            body["time"] = rng.choice([0, -1e308, now - 30 * 86400, now + 30 * 86400, 1e300])
            return orjson.dumps(body)
        if kind == 7 and self.accepted:  # a client resending an accepted request
            return rng.choice(self.accepted)
        if kind == 8:  # a v0 submission with a huge contract
            body = self.req("workload.submitted", "u", workload=f"v{self.n}", allocation="lab/a")
            body.update({"v": 0, "gpu_count": 2**62, "min_runtime_minutes": 1e306})
            return orjson.dumps(body)
        if kind == 9:  # config from a non-admin and from a (claimed) admin, unreadable
            body = self.req("config.set", rng.choice(["u", "root"]))
            body["config"] = rng.choice([{"window": None}, {"bucket": "0s"}, {"nope": 1}])
            return orjson.dumps(body)
        # truncated JSON
        value = orjson.dumps(self.req("workload.submitted", "u", workload="t", gpus=1))
        return value[: rng.randrange(1, len(value))]

    def batch(self, size: int) -> list[InboxRecord]:
        out = []
        for _ in range(size):
            ts = T0 + self.offset * STEP_S
            value = self.valid() if self.rng.random() < 0.5 else self.hostile(ts)
            out.append(InboxRecord(0, self.offset, ts, value))
            self.offset += 1
        return out

    def note(self, journal: list[bytes]) -> None:
        """Follow the journal: what is live and what runs (what the valid half ends)."""
        for line in journal:
            head = line[:40]
            if b'"workload.' not in head:
                continue
            body = orjson.loads(line)
            wid = body.get("workload")
            if body["type"] == "workload.submitted":
                self.live[wid] = wid
            elif body["type"] == "workload.placed":
                self.running.add(wid)
            elif body["type"] == "workload.preempted":
                self.running.discard(wid)
                if not body["requeued"]:
                    self.live.pop(wid, None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--every", type=int, default=10, help="sample RSS every N batches")
    parser.add_argument("--window", default="1d")
    parser.add_argument("--seed", type=int, default=6)
    args = parser.parse_args()

    config = SchedulerConfig(admins=("root",), window=args.window)
    core = SchedulerCore(CLUSTER, config)
    feed = Feed(args.seed)
    setup = [InboxRecord(0, i, T0, v) for i, v in enumerate(feed.setup())]
    feed.offset = len(setup)
    core.process(setup)
    gc.collect()
    start_rss = rss_mb()
    warm_records = int(config.window / STEP_S)
    print(
        f"# {args.records} records in batches of {args.batch}; window {config.window:.0f}s "
        f"= {warm_records} records of event time (warm-up); {os.cpu_count()} cores, "
        f"Python {platform.python_version()}"
    )
    print(
        f"{'records':>9} {'event_h':>8} {'rss_mb':>8} {'seen_ids':>9} {'ended':>7} "
        f"{'live':>6} {'dead':>7} {'journal':>8} {'rec/s':>8}"
    )
    samples: list[tuple[int, float]] = []
    done = dead = journal = 0
    started = time.perf_counter()
    batches = (args.records + args.batch - 1) // args.batch
    for i in range(1, batches + 1):
        records = feed.batch(min(args.batch, args.records - done))
        result = core.process(records)
        feed.note(result.journal)
        done += len(records)
        dead += len(result.dead)
        journal += len(result.journal)
        del result, records
        if i % args.every == 0 or i == batches:
            gc.collect()
            rss = rss_mb()
            samples.append((done, rss))
            state = core.state
            print(
                f"{done:>9} {(state.now - T0) / 3600:>8.1f} {rss:>8.1f} {len(state.seen_ids):>9} "
                f"{len(state.ended):>7} {len(state.workloads):>6} {dead:>7} {journal:>8} "
                f"{done / (time.perf_counter() - started):>8.0f}"
            )
    warm = [rss for n, rss in samples if n >= warm_records]
    print(f"# RSS after setup {start_rss:.1f} MB; end {samples[-1][1]:.1f} MB")
    if len(warm) >= 2:
        print(
            f"# growth after warm-up ({warm_records} records): {warm[-1] - warm[0]:+.1f} MB "
            f"({warm[0]:.1f} -> {warm[-1]:.1f}; min {min(warm):.1f}, max {max(warm):.1f})"
        )


if __name__ == "__main__":
    main()

"""How long a snapshot stops the worker's loop: pickled inline vs in a forked child.

    python benchmarks/bench_snapshot.py                       # 400k requests, 2 clusters
    python benchmarks/bench_snapshot.py --records 1000000 --repeat 5

Builds the worker's per-cluster cores in memory (`SchedulerCore.process` on the
requests mix of bench_stream: submissions, cancellations, ticks; default 7-day window,
so every input id stays in the dedup horizon), then makes the snapshot blobs of the
worker's periodic round (`streams.offloop`) both ways, alternately, `--repeat` times:

- *inline*: the blobs made in the loop, as the worker did before: the loop is stopped
  for the whole time;
- *forked*: `start_blobs` forks, the child pickles and compresses; the loop is stopped
  only for the fork. A heartbeat task (every 5 ms) records the longest gap the loop
  saw while the child worked.

No broker: the write itself (one transaction) is the same either way. Results go to
benchmarks/results/snapshot.{json,md}.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stream import code_version, machine, make_records

from domain.config import SchedulerConfig
from streams.core import InboxRecord, SchedulerCore
from streams.offloop import start_blobs

RESULTS = Path(__file__).resolve().parent / "results"
ADMIN = "root"


def build_cores(n: int, clusters: list[str]) -> dict[str, SchedulerCore]:
    config = SchedulerConfig(admins=(ADMIN,))
    per: dict[str, list[InboxRecord]] = {}
    now = time.time()
    for offset, (key, value) in enumerate(make_records(n, clusters, "requests")):
        per.setdefault(key.decode(), []).append(InboxRecord(0, offset, now + offset * 1e-3, value))
    cores = {}
    for cluster, recs in per.items():
        core = cores[cluster] = SchedulerCore(cluster, config)
        for i in range(0, len(recs), 5000):
            core.process(recs[i : i + 5000])
    return cores


def round_objects(cores: dict[str, SchedulerCore]) -> list[dict[str, Any]]:
    """What the worker pickles for one snapshot round (see Worker._begin_snapshots)."""
    return [
        {"format": 1, "round": "bench", "cluster": c, "core": core, "taken": 0.0}
        for c, core in sorted(cores.items())
    ]


def _kb(path: str, field: str) -> int:
    """A `field:  N kB` line of a /proc file (0 when the process is gone)."""
    try:
        for line in Path(path).read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children() -> list[int]:
    """Pids of this process's children (the forked snapshot writer)."""
    me = os.getpid()
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == me:
                found.append(int(entry))
    return found


async def one_round(objects: list[Any], fork: bool) -> dict[str, float]:
    gaps: list[float] = []
    stop = asyncio.Event()
    copied_kb = 0  # most memory the child made its own: pages copied on write

    async def heartbeat() -> None:
        nonlocal copied_kb
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.005)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now
            if fork:
                for pid in _children():
                    copied_kb = max(copied_kb, _kb(f"/proc/{pid}/smaps_rollup", "Private_Dirty"))

    beat = asyncio.create_task(heartbeat())
    await asyncio.sleep(0.05)
    t0 = time.perf_counter()
    pending = start_blobs(objects, fork=fork)
    returned = time.perf_counter()
    blobs = await pending
    done = time.perf_counter()
    stop.set()
    await beat
    return {
        "loop_stopped_by_call_ms": round((returned - t0) * 1000, 1),
        "longest_loop_gap_ms": round(max(gaps) * 1000, 1),
        "blobs_ready_ms": round((done - t0) * 1000, 1),
        "bytes": sum(len(b) for b in blobs),
        "child_copied_mb": round(copied_kb / 1024, 1),
        "parent_rss_mb": round(_kb("/proc/self/status", "VmRSS") / 1024, 1),
    }


async def measure(objects: list[Any], repeat: int) -> dict[str, list[dict[str, float]]]:
    runs: dict[str, list[dict[str, float]]] = {"inline": [], "forked": []}
    for _ in range(repeat):
        runs["inline"].append(await one_round(objects, fork=False))
        runs["forked"].append(await one_round(objects, fork=True))
    return runs


def median(rows: list[dict[str, float]], key: str) -> float:
    return statistics.median(r[key] for r in rows)


def render(result: dict[str, Any]) -> str:
    runs = result["runs"]
    m = result["machine"]
    lines = [
        "# Snapshot stall: inline vs forked (`benchmarks/bench_snapshot.py`)",
        "",
        f"Date {result['date']}; command `{result['command']}`; machine: {m['cpus']} vCPUs "
        f"({m['cpu']}), {m['ram_gb']} GB RAM, Python {m['python']}.",
        f"State: {result['records']:,} requests over {result['clusters']} clusters "
        f"(default 7-day window), {result['dedup_ids']:,} input ids remembered; "
        f"one round = {result['bytes'] / 1e6:.1f} MB of compressed blobs.",
        "",
        "| way | loop stopped by the call (ms) | longest loop gap (ms) | blobs ready (ms) |",
        "|---|---:|---:|---:|",
    ]
    for way in ("inline", "forked"):
        rows = runs[way]
        lines.append(
            f"| {way} (median of {len(rows)}) | {median(rows, 'loop_stopped_by_call_ms'):,.1f} | "
            f"{median(rows, 'longest_loop_gap_ms'):,.1f} | {median(rows, 'blobs_ready_ms'):,.1f} |"
        )
    inline = median(runs["inline"], "longest_loop_gap_ms")
    forked = median(runs["forked"], "longest_loop_gap_ms")
    lines += ["", f"Longest stall, forked / inline: {forked / inline:.3f}", ""]
    copied = median(runs["forked"], "child_copied_mb")
    rss = median(runs["forked"], "parent_rss_mb")
    lines += [
        f"Memory of a forked round: the child copied (copy-on-write; Private_Dirty in "
        f"/proc/PID/smaps_rollup, sampled every 5 ms, most seen) a median of {copied:,.1f} "
        f"MB, against the parent's RSS of {rss:,.1f} MB ({copied / rss:.0%}).",
        "",
    ]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=400_000)
    ap.add_argument("--clusters", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    clusters = [f"c{i}" for i in range(args.clusters)]
    print(f"building cores from {args.records:,} requests ...", flush=True)
    cores = build_cores(args.records, clusters)
    objects = round_objects(cores)
    runs = asyncio.run(measure(objects, args.repeat))
    result = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python benchmarks/bench_snapshot.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "code": code_version(),
        "records": args.records,
        "clusters": args.clusters,
        "dedup_ids": sum(len(core.state.seen_ids) for core in cores.values()),
        "bytes": runs["forked"][0]["bytes"],
        "runs": runs,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "snapshot.json").write_text(json.dumps(result, indent=2))
    text = render(result)
    (args.out / "snapshot.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

"""Aggregate scheduler throughput with 1, 2 and 4 worker processes on a 4-partition inbox.

    python benchmarks/bench_scaleout.py [--records 200000] [--clusters 8] [--workers 1,2,4]
                                        [--kafka HOST:PORT]

For each worker count: fresh topics (4 partitions), N `python -m streams.worker --group`
processes that share the partitions; once the group is stable (every partition taken
over, every worker holding one), the inbox is filled with `--records` requests keyed by
cluster (setup, then submissions, cancellations and ticks, as bench_stream makes them)
and the clock runs until the last record of every inbox partition is folded into the
journal (the last journal record of each partition names it). Reported: records/s
overall, and the ratio to one worker measured in the same run.

The machine matters more than anything here: the workers, the broker and the load
generator share its cores (see `machine` in the results).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stream import broker, code_version, machine, make_records

from streams.topic_admin import Topics, create_topics

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PARTITIONS = 4
END_MARK = b'"ref":"end/'
TOOK_OVER = re.compile(r"took over inbox partitions \[([\d, ]*)\]")


def spawn(bootstrap: str, suffix: str, group: str, log: Path) -> subprocess.Popen:
    cmd = [
        sys.executable, "-m", "streams.worker", "--kafka", bootstrap,
        f"--topic-suffix={suffix}", "--group", group, "--admin", "root",
        "--tick-every", "0", "--snapshot-every", "3600", "--max-batch", "5000",
        "--session-timeout", "10", "--log-level", "info",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with log.open("ab") as out:
        return subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)


def holdings(log: Path) -> set[int]:
    """Partitions the worker holds now: those of its last takeover or rebalance line."""
    text = log.read_text(errors="replace")
    held: set[int] = set()
    for line in text.splitlines():
        match = TOOK_OVER.search(line)
        if match:
            held |= {int(x) for x in match.group(1).split(",") if x.strip()}
        moved = re.search(r"inbox partition (\d+) moved to another worker", line)
        if moved:
            held.discard(int(moved.group(1)))
    return held


async def wait_stable(logs: list[Path], timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        held = [holdings(log) for log in logs]
        union = set().union(*held)
        disjoint = sum(len(h) for h in held) == len(union)
        if union == set(range(PARTITIONS)) and all(held) and disjoint:
            await asyncio.sleep(1.0)  # and it stays that way
            if [holdings(log) for log in logs] == held:
                return
        if time.monotonic() > deadline:
            raise RuntimeError(f"group not stable: {held}")
        await asyncio.sleep(0.2)


async def fill(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> dict[int, int]:
    """Write keyed records in whole batches per partition; returns records per partition."""
    home = DefaultPartitioner()
    parts = list(range(PARTITIONS))
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", max_batch_size=256 * 1024
    )
    await producer.start()
    counts = dict.fromkeys(parts, 0)
    try:
        batches = {p: producer.create_batch() for p in parts}
        futures = []
        for key, value in records:
            p = home(key, parts, parts)
            counts[p] += 1
            if batches[p].append(key=key, value=value, timestamp=None) is None:
                futures.append(await producer.send_batch(batches[p], topic, partition=p))
                batches[p] = producer.create_batch()
                batches[p].append(key=key, value=value, timestamp=None)
        for p, batch in batches.items():
            if batch.record_count():
                futures.append(await producer.send_batch(batch, topic, partition=p))
        await asyncio.gather(*futures)
    finally:
        await producer.stop()
    return counts


async def markers_seen(bootstrap: str, journal: str, clusters: int, ready: asyncio.Event) -> None:
    """Read the journal as it grows until every cluster's end marker (the rejection of
    its last request, `ref` = `end/<cluster>`) is in it: then every record before it on
    that cluster's partition has been folded. A byte search: no decoding on this side."""
    consumer = AIOKafkaConsumer(
        journal,
        bootstrap_servers=bootstrap,
        group_id=None,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        fetch_max_bytes=32 * 1024 * 1024,
    )
    await consumer.start()
    ready.set()
    try:
        seen = 0
        while seen < clusters:
            batches = await consumer.getmany(timeout_ms=200, max_records=20000)
            for records in batches.values():
                seen += sum(1 for r in records if END_MARK in r.value)
    finally:
        await consumer.stop()


async def one_run(bootstrap: str, workers: int, records: list[tuple[bytes, bytes]]) -> dict:
    suffix = f"-scale-{uuid.uuid4().hex[:8]}"
    topics = Topics.suffixed(suffix)
    await create_topics(bootstrap, topics=topics, partitions=PARTITIONS)
    folder = Path(tempfile.mkdtemp(prefix="allot-scaleout-"))
    logs = [folder / f"worker-{i}.log" for i in range(workers)]
    group = f"allot-bench{suffix}"
    procs = [spawn(bootstrap, suffix, group, log) for log in logs]
    try:
        await wait_stable(logs)
        held = [sorted(holdings(log)) for log in logs]
        clusters = len({key for key, _ in records})
        reading = asyncio.Event()
        watcher = asyncio.create_task(markers_seen(bootstrap, topics.journal, clusters, reading))
        await reading.wait()
        t0 = time.perf_counter()
        await fill(bootstrap, topics.inbox, records)
        filled = time.perf_counter() - t0
        while not watcher.done():
            if any(p.poll() is not None for p in procs):
                raise RuntimeError(f"a worker died: see {folder}")
            await asyncio.wait([watcher], timeout=0.5)
        watcher.result()
        elapsed = time.perf_counter() - t0
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(60)
            except subprocess.TimeoutExpired:
                p.kill()
    per_partition = dict.fromkeys(range(PARTITIONS), 0)
    home = DefaultPartitioner()
    for key, _ in records:
        per_partition[home(key, list(range(PARTITIONS)), list(range(PARTITIONS)))] += 1
    return {
        "workers": workers,
        "records": len(records),
        "partitions_held": held,
        # the busiest worker's share of the records bounds the speed-up
        "busiest_share": round(
            max(sum(per_partition[p] for p in h) for h in held) / len(records), 3
        ),
        "fill_s": round(filled, 2),
        "seconds": round(elapsed, 2),
        "records_per_s": round(len(records) / elapsed),
    }


def render(result: dict[str, Any]) -> str:
    runs = result["runs"]
    base = runs[0]["records_per_s"]
    lines = [
        "# Scale-out: aggregate throughput with 1, 2 and 4 workers (4 partitions)",
        "",
        f"- date: {result['date']}  ",
        f"- machine: {result['machine']}  ",
        f"- code: {result['code']}  ",
        f"- command: `{result['command']}`",
        f"- {result['records']:,} inbox records over {result['clusters']} clusters "
        "(setup, then submissions / cancellations / ticks)",
        "",
        "| workers | partitions held | busiest worker's share | records/s | vs 1 worker "
        "| wall s | fill s |",
        "|---:|---|---:|---:|---:|---:|---:|",
    ]
    for r in runs:
        lines.append(
            f"| {r['workers']} | {r['partitions_held']} | {r['busiest_share']:.0%} "
            f"| {r['records_per_s']:,} | "
            f"{r['records_per_s'] / base:.2f}x | {r['seconds']} | {r['fill_s']} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--clusters", type=int, default=8)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--kafka", default=os.environ.get("ALLOT_KAFKA"))
    args = parser.parse_args()
    counts = [int(x) for x in args.workers.split(",")]
    clusters = [f"sc{i}" for i in range(args.clusters)]
    records = make_records(args.records, clusters, "mixed")
    # a tick that changes nothing leaves no journal record: end every cluster's stream
    # with a request that is always journaled (its rejection), so "folded" is visible
    records += [
        (c.encode(), orjson.dumps({"type": "workload.cancelled", "v": 1, "id": f"end/{c}",
                                   "time": time.time(), "cluster": c, "actor": "u",
                                   "workload": "no-such-workload"}))
        for c in clusters
    ]  # fmt: skip
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "machine": machine(),
        "code": code_version(),
        "command": "python benchmarks/bench_scaleout.py " + " ".join(sys.argv[1:]),
        "records": len(records),
        "clusters": args.clusters,
        "runs": [],
    }
    with broker(args.kafka) as bootstrap:
        for n in counts:
            run = asyncio.run(one_run(bootstrap, n, records))
            print(json.dumps(run), flush=True)
            result["runs"].append(run)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "scaleout.json").write_text(json.dumps(result, indent=2) + "\n")
    (RESULTS / "scaleout.md").write_text(render(result))
    print(render(result))


if __name__ == "__main__":
    main()

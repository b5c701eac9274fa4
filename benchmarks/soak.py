"""Soak: a steady stream of submissions through the live pipeline, RSS sampled (issue #6).

    python benchmarks/soak.py --kafka 127.0.0.1:19092 --records 1000000 --clusters 2 --rate 300
    python benchmarks/soak.py --diagnose 200000          # in-process, tracemalloc: what grows

The pipeline, as it runs in production but on fresh, suffixed topics:

- ONE scheduler worker process (`python -m streams.worker --topic-suffix S --admin root
  --tick-every 5 --snapshot-every 30`);
- one simulated launcher per cluster (`allot executor --simulate --speed X`): it follows
  the journal and reports `workload.finished` after each workload's runtime / speed.
  with `--executor-topics own` (default) the executors get this run's topics from
  `$ALLOT_TOPIC_SUFFIX`, as every `allot` command does.
  `--executor-topics default` instead runs the worker and the executors on the default
  topic names (`allot.inbox`, `allot.journal`), the worker narrowed to this run's
  uniquely named clusters with `--cluster`;
- this script: sets each cluster up (hosts, a budget tree whose leaves have member
  `u`), then submits small workloads at `--rate` per second (1-4 GPUs, runtime
  `--runtime-min..--runtime-max` simulated seconds) so the clusters' capacity exceeds the
  offered load and the queue stays bounded. A light journal reader counts submitted /
  placed / finished / cancelled / rejected, which gives the queue depth as it goes.

Feeding stops once the inbox (submissions + the executors' finish reports + the
worker's ticks) will reach `--records` when the outstanding workloads finish; then the
run drains (every accepted workload finished), a sentinel request per cluster (a cancel
of a workload that does not exist: always journaled, as its rejection) proves every
inbox record before it was folded, and everything is stopped with SIGTERM.

Every `--sample-every` seconds: VmRSS of the worker and of each executor (from
/proc/PID/status), their CPU seconds, inbox records so far, journal end offset and the
queue depth. Reported: warm-up RSS (first sample at `--warmup` of the records) against
the final RSS, the growth, and the slope after warm-up (MB per 100k inbox records).

`--diagnose N` runs no Kafka: one in-process `streams.core.SchedulerCore` and the
executor's `SimulatedLauncher` fed the same kind of stream for N inbox records under
tracemalloc, printing what grew between warm-up and the end (by source line) and the
sizes of the state's collections.

Results: benchmarks/results/soak.json and soak.md (`--out`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import random
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition  # noqa: E402
from bench_stream import code_version, machine  # noqa: E402

from streams.inbox import make_request  # noqa: E402
from streams.topic_admin import Topics, create_topics  # noqa: E402

ADMIN = "root"
MEMBER = "u"
LEAVES = 4
GPUS = (1, 1, 1, 2, 2, 4)
MIN_RUNTIMES = (0, 0, 300, 900)  # 0: unallocated (free, preemptible), else allocated
SENTINEL = "workload.cancelled/soak-end"


# ------------------------------------------------------------------ requests


def body(cluster: str, kind: str, actor: str = ADMIN, **fields: Any) -> bytes:
    """An inbox request's bytes, as the `allot` request tools write them."""
    return orjson.dumps(make_request(kind, cluster=cluster, actor=actor, **fields))


def setup_records(cluster: str, hosts: int) -> list[bytes]:
    out = [body(cluster, "host.registered", host=f"h{h}", gpus=8) for h in range(hosts)]
    out.append(body(cluster, "budget.set", allocation="lab", weight=1))
    for leaf in range(LEAVES):
        out.append(
            body(
                cluster,
                "budget.set",
                allocation=f"lab/p{leaf}",
                weight=1 + leaf % 3,
                members=[MEMBER],
            )
        )
    return out


class Workloads:
    """Submissions: small GPU counts, runtimes in simulated seconds."""

    def __init__(
        self,
        runtime_min: float,
        runtime_max: float,
        seed: int = 1,
        min_runtimes: tuple[float, ...] = MIN_RUNTIMES,
    ) -> None:
        self.rng = random.Random(seed)
        self.min_runtimes = min_runtimes
        self.runtime_min, self.runtime_max = runtime_min, runtime_max
        self.n = 0

    def fields(self) -> dict[str, Any]:
        rng = self.rng
        self.n += 1
        return {
            "workload": f"s{self.n}",
            "allocation": f"lab/p{rng.randrange(LEAVES)}",
            "gpus": rng.choice(GPUS),
            "min_runtime": rng.choice(self.min_runtimes),
            "resumable": rng.random() < 0.7,
            "runtime": round(rng.uniform(self.runtime_min, self.runtime_max), 1),
        }

    def mean_gpu_seconds(self) -> float:
        return sum(GPUS) / len(GPUS) * (self.runtime_min + self.runtime_max) / 2


# ------------------------------------------------------------------ processes


def rss_kb(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def cpu_s(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def spawn(cmd: list[str], log: Path, **extra_env: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **extra_env}
    with log.open("ab") as out:
        return subprocess.Popen(
            cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def stop(procs: dict[str, subprocess.Popen]) -> dict[str, int | None]:
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    codes: dict[str, int | None] = {}
    for name, p in procs.items():
        try:
            codes[name] = p.wait(60)
        except subprocess.TimeoutExpired:
            p.kill()
            codes[name] = p.wait(10)
    return codes


def log_oddities(folder: Path, limit: int = 30) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for log in sorted(folder.glob("*.log")):
        lines = [
            line
            for line in log.read_text(errors="replace").splitlines()
            if any(w in line for w in ("WARNING", "ERROR", "Traceback", "error:", "Error"))
        ]
        if lines:
            out[log.name] = lines[:limit] + (
                [f"... {len(lines) - limit} more"] if len(lines) > limit else []
            )
    return out


# ------------------------------------------------------------------ journal reader


class JournalCounts:
    """Counts from the journal as it is written (read_committed), our clusters only."""

    TYPES = (
        "workload.submitted",
        "workload.placed",
        "workload.finished",
        "workload.cancelled",
        "workload.preempted",
        "budget.set",
        "host.registered",
    )

    def __init__(self, clusters: list[str]) -> None:
        self.keys = {c.encode() for c in clusters}
        self.counts: dict[str, int] = {}
        self.rejected: dict[str, int] = {}
        self.rejected_examples: list[str] = []
        self.records = 0
        self.last_inbox: dict[str, int] = {}  # cluster -> inbox offset of its last record
        self.waiting = 0  # submitted or requeued, not yet placed (approximation)
        self.dropped = 0  # preempted and not requeued (not resumable): ended that way

    def fold(self, key: bytes | None, value: bytes) -> None:
        if key not in self.keys:
            return
        self.records += 1
        r = orjson.loads(value)
        kind = r.get("type", "?")
        if kind.endswith(".rejected") and str(r.get("ref", "")).startswith(SENTINEL):
            self.counts["sentinel (rejected cancel)"] = (
                self.counts.get("sentinel (rejected cancel)", 0) + 1
            )
        elif kind.endswith(".rejected"):
            # "workload 's12' has already ended" -> "workload 'W' has already ended"
            error = re.sub(r"\d+", "N", re.sub(r"'[^']*'", "'W'", str(r.get("error"))))
            what = f"{r.get('input_type', kind)}: {error}"
            self.rejected[what] = self.rejected.get(what, 0) + 1
            if len(self.rejected_examples) < 5:
                self.rejected_examples.append(f"{kind}: {r.get('error')}")
        else:
            self.counts[kind] = self.counts.get(kind, 0) + 1
            if kind == "workload.submitted":
                self.waiting += 1
            elif kind == "workload.placed":
                self.waiting -= 1
            elif kind == "workload.preempted":
                if r.get("requeued"):
                    self.waiting += 1
                else:
                    self.dropped += 1
        inbox = r.get("inbox")
        if isinstance(inbox, list) and len(inbox) == 2:
            self.last_inbox[r.get("cluster", "?")] = int(inbox[1])

    def get(self, kind: str) -> int:
        return self.counts.get(kind, 0)

    def outstanding(self) -> int:
        """Accepted workloads not ended yet (waiting or running)."""
        return (
            self.get("workload.submitted")
            - self.get("workload.finished")
            - self.get("workload.cancelled")
            - self.dropped
        )


async def read_journal(
    consumer: AIOKafkaConsumer, counts: JournalCounts, halt: asyncio.Event
) -> None:
    while not halt.is_set():
        batches = await consumer.getmany(timeout_ms=500, max_records=20_000)
        for records in batches.values():
            for r in records:
                if r.value is not None:
                    counts.fold(r.key, r.value)


# ------------------------------------------------------------------ the soak


async def soak(args: argparse.Namespace, result: dict[str, Any]) -> None:
    bootstrap = args.kafka
    run_id = uuid.uuid4().hex[:8]
    own_topics = args.executor_topics == "own"
    suffix = f"-soak-{run_id}" if own_topics else ""
    topics = Topics.suffixed(suffix)
    clusters = [f"soak-{run_id}-c{i}" for i in range(args.clusters)]
    if own_topics:
        await create_topics(bootstrap, topics=topics, partitions=1)
    folder = Path(tempfile.mkdtemp(prefix="allot-soak-"))
    result.update(
        topics=topics.all(),
        clusters=clusters,
        logs=str(folder),
        executor_topics=args.executor_topics,
    )
    print(f"topics {topics.all()}, clusters {clusters}, logs {folder}", flush=True)

    worker_cmd = [
        sys.executable, "-m", "streams.worker", "--kafka", bootstrap,
        f"--topic-suffix={suffix}", "--admin", ADMIN,
        "--tick-every", str(args.tick_every), "--snapshot-every", str(args.snapshot_every),
    ]  # fmt: skip
    for item in args.worker_set:
        worker_cmd += ["--set", item]
    if not own_topics:
        worker_cmd.append("--create-topics")  # the broker's default topics, as before
        for c in clusters:
            worker_cmd += ["--cluster", c]
    procs: dict[str, subprocess.Popen] = {"worker": spawn(worker_cmd, folder / "worker.log")}
    result["worker_command"] = " ".join(shlex.quote(a) for a in worker_cmd[1:])
    exe_cmds = []
    for i, c in enumerate(clusters):
        tail = ["executor", "--simulate", "--kafka", bootstrap, "--cluster", c,
                "--speed", str(args.speed), "--quiet"]  # fmt: skip
        cmd = [sys.executable, "-m", "allot.cli", *tail]
        exe_cmds.append(" ".join(shlex.quote(a) for a in tail))
        procs[f"executor{i}"] = spawn(cmd, folder / f"executor{i}.log", ALLOT_TOPIC_SUFFIX=suffix)
    result["executor_command"] = (f"ALLOT_TOPIC_SUFFIX={suffix} " if own_topics else "") + (
        "allot " + exe_cmds[0]
    )

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, enable_idempotence=True, acks="all", linger_ms=5
    )
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
        fetch_max_bytes=16 * 1024 * 1024,
    )
    await producer.start()
    await consumer.start()
    await consumer.topics()  # metadata of every topic
    journal_tps = [
        TopicPartition(topics.journal, p)
        for p in sorted(consumer.partitions_for_topic(topics.journal) or {0})
    ]
    inbox_tps = [
        TopicPartition(topics.inbox, p)
        for p in sorted(consumer.partitions_for_topic(topics.inbox) or {0})
    ]
    dlq_tps = [
        TopicPartition(topics.dlq, p)
        for p in sorted(consumer.partitions_for_topic(topics.dlq) or {0})
    ]
    consumer.assign(journal_tps)
    inbox_start = dlq_start = 0
    if not own_topics:  # shared default topics: count only what arrives from now on
        ends = await consumer.end_offsets(journal_tps)
        for tp in journal_tps:
            consumer.seek(tp, ends[tp])
        inbox_start = sum((await consumer.end_offsets(inbox_tps)).values())
        dlq_start = sum((await consumer.end_offsets(dlq_tps)).values())
    counts = JournalCounts(clusters)
    halt = asyncio.Event()
    reader = asyncio.create_task(read_journal(consumer, counts, halt))

    async def inbox_end() -> int:
        return sum((await consumer.end_offsets(inbox_tps)).values()) - inbox_start

    async def journal_end() -> int:
        return sum((await consumer.end_offsets(journal_tps)).values())

    samples: list[dict[str, Any]] = []
    t0 = time.monotonic()

    async def sample(phase: str) -> dict[str, Any]:
        s: dict[str, Any] = {
            "t_s": round(time.monotonic() - t0, 1),
            "phase": phase,
            "inbox": await inbox_end(),
            "journal_end": await journal_end(),
            "submitted": counts.get("workload.submitted"),
            "finished": counts.get("workload.finished"),
            "outstanding": counts.outstanding(),
            "waiting": counts.waiting,
            "preempted": counts.get("workload.preempted"),
            "rejected": sum(counts.rejected.values()),
        }
        if args.broker_pid:  # context only: the broker is shared
            kb = rss_kb(args.broker_pid)
            s["broker_rss_mb"] = None if kb is None else round(kb / 1024, 1)
        for name, p in procs.items():
            kb = rss_kb(p.pid)
            s[f"{name}_rss_mb"] = None if kb is None else round(kb / 1024, 1)
            c = cpu_s(p.pid)
            s[f"{name}_cpu_s"] = None if c is None else round(c, 1)
        samples.append(s)
        rss = " ".join(f"{n}={s[f'{n}_rss_mb']}MB" for n in procs)
        print(
            f"[{s['t_s']:7.1f}s {phase}] inbox {s['inbox']:,} journal {s['journal_end']:,} "
            f"submitted {s['submitted']:,} finished {s['finished']:,} "
            f"outstanding {s['outstanding']} waiting {s['waiting']} preempted {s['preempted']} "
            f"rejected {s['rejected']} | {rss}",
            flush=True,
        )
        return s

    def check_alive() -> None:
        for name, p in procs.items():
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited with {p.returncode}: see {folder}/{name}.log")

    gen = Workloads(
        args.runtime_min, args.runtime_max, seed=args.seed, min_runtimes=args.min_runtimes
    )
    pick = random.Random(args.seed + 1)
    sent = 0
    try:
        # ---- setup
        for c in clusters:
            for value in setup_records(c, args.hosts):
                await producer.send(topics.inbox, value, key=c.encode())
        await producer.flush()
        deadline = time.monotonic() + 180
        want_leaves = (LEAVES + 1) * len(clusters)
        while counts.get("budget.set") < want_leaves:
            check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"the worker did not fold the setup: see {folder}")
            await asyncio.sleep(0.2)
        setup_s = time.monotonic() - t0
        print(f"setup folded after {setup_s:.1f}s", flush=True)
        await sample("setup")

        # ---- feed at a steady rate
        t_feed = time.monotonic()
        next_sample = t_feed + args.sample_every
        next_check = 0.0
        projected = 0
        max_outstanding = max_waiting = 0
        futures: list[asyncio.Future] = []
        while True:
            now = time.monotonic()
            if now >= next_check:
                inbox_now = await inbox_end()
                # each submission not yet ended will bring its finish report (one ended by
                # a preemption without requeue brings none)
                ended = counts.get("workload.finished") + counts.dropped
                projected = inbox_now + max(0, sent - ended)
                next_check = now + 0.5
                check_alive()
                if projected >= args.records:
                    break
            due = int((now - t_feed) * args.rate) - sent
            for _ in range(min(due, args.rate)):
                c = clusters[pick.randrange(len(clusters))]
                futures.append(
                    await producer.send(
                        topics.inbox,
                        body(c, "workload.submitted", actor=MEMBER, **gen.fields()),
                        key=c.encode(),
                    )
                )
                sent += 1
            if len(futures) > 2000:
                await asyncio.gather(*futures)
                futures = []
            max_outstanding = max(max_outstanding, counts.outstanding())
            max_waiting = max(max_waiting, counts.waiting)
            if now >= next_sample:
                await sample("feed")
                next_sample += args.sample_every
            await asyncio.sleep(0.02)
        await asyncio.gather(*futures)
        feed_s = time.monotonic() - t_feed
        print(f"fed {sent:,} submissions in {feed_s:.1f}s; draining", flush=True)

        # ---- drain: every accepted submission ended
        deadline = time.monotonic() + args.drain_timeout
        while True:
            check_alive()
            accepted = counts.get("workload.submitted")
            rejected_subs = sum(
                n for k, n in counts.rejected.items() if k.startswith("workload.submitted:")
            )
            if accepted + rejected_subs >= sent and counts.outstanding() == 0:
                break
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"not drained after {args.drain_timeout}s: outstanding {counts.outstanding()}"
                )
            if time.monotonic() >= next_sample:
                await sample("drain")
                next_sample += args.sample_every
            await asyncio.sleep(0.25)

        # ---- sentinel: everything before it was folded
        sentinels = {}
        for c in clusters:
            meta = await producer.send_and_wait(
                topics.inbox,
                orjson.dumps(
                    {
                        "type": "workload.cancelled",
                        "v": 1,
                        "id": f"{SENTINEL}-{c}",
                        "time": time.time(),
                        "cluster": c,
                        "actor": MEMBER,
                        "workload": "no-such-workload",
                    }
                ),
                key=c.encode(),
            )
            sentinels[c] = meta.offset
        deadline = time.monotonic() + 120
        while any(counts.last_inbox.get(c, -1) < o for c, o in sentinels.items()):
            check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"sentinels not folded: {counts.last_inbox} vs {sentinels}")
            await asyncio.sleep(0.1)
        elapsed = time.monotonic() - t_feed
        await asyncio.sleep(1.0)  # the executors read the sentinel too
        final = await sample("end")
        dlq = sum((await consumer.end_offsets(dlq_tps)).values()) - dlq_start
        result.update(
            setup_s=round(setup_s, 1),
            feed_s=round(feed_s, 1),
            seconds=round(elapsed, 1),
            submissions_sent=sent,
            inbox_records=final["inbox"],
            inbox_records_per_s=round(final["inbox"] / elapsed, 1),
            journal_records=counts.records,
            journal_end_offset=final["journal_end"],
            journal_counts=dict(sorted(counts.counts.items())),
            preempted_not_requeued=counts.dropped,
            rejected=counts.rejected,
            rejected_examples=counts.rejected_examples,
            dlq_records=dlq,
            sentinels=sentinels,
            folded_through=counts.last_inbox,
            max_outstanding=max_outstanding,
            max_waiting=max_waiting,
            offered_gpus_per_cluster=round(
                args.rate / len(clusters) * gen.mean_gpu_seconds() / args.speed, 1
            ),
            capacity_gpus_per_cluster=args.hosts * 8,
        )
        # every accepted submission ended (finished, or preempted without requeue: not
        # resumable); every placement ended in a finish or a preemption; no cancels are sent
        result["checks"] = {
            "all inbox records folded (sentinels journaled)": all(
                counts.last_inbox.get(c, -1) >= o for c, o in sentinels.items()
            ),
            "every submission accepted": counts.get("workload.submitted") == sent,
            "finished + preempted-not-requeued == submitted": counts.get("workload.finished")
            + counts.dropped
            == counts.get("workload.submitted"),
            "placed == finished + preempted": counts.get("workload.placed")
            == counts.get("workload.finished") + counts.get("workload.preempted"),
            "no dead letters": dlq == 0,
        }
    finally:
        halt.set()
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await reader
        await producer.stop()
        await consumer.stop()
        result["exit_codes"] = stop(procs)
        result["samples"] = samples
        result["log_oddities"] = log_oddities(folder)


# ------------------------------------------------------------------ analysis


def analyse(
    result: dict[str, Any], procs: list[str], warmup_frac: float, tol_mb: float, tol_pct: float
) -> None:
    samples = [s for s in result["samples"] if s["phase"] != "setup"]
    records = result.get("inbox_records") or (samples[-1]["inbox"] if samples else 0)
    warm = next((s for s in samples if s["inbox"] >= warmup_frac * records), samples[0])
    last = samples[-1]
    out = {}
    for name in procs:
        key = f"{name}_rss_mb"
        w, f = warm.get(key), last.get(key)
        if w is None or f is None:
            continue
        after = [s for s in samples if s["inbox"] >= warm["inbox"] and s.get(key) is not None]
        slope = None
        if len(after) >= 3:
            xs = [s["inbox"] for s in after]
            ys = [s[key] for s in after]
            mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
            den = sum((x - mx) ** 2 for x in xs)
            if den:
                slope = (
                    sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den * 100_000
                )
        peak = max(s[key] for s in samples if s.get(key) is not None)
        growth = f - w
        pct = growth / w * 100 if w else 0.0
        grew = growth > tol_mb and pct > tol_pct
        out[name] = {
            "warmup_rss_mb": w,
            "warmup_at_inbox": warm["inbox"],
            "final_rss_mb": f,
            "peak_rss_mb": peak,
            "growth_mb": round(growth, 1),
            "growth_pct": round(pct, 1),
            "slope_mb_per_100k_records": None if slope is None else round(slope, 2),
            "cpu_s": last.get(f"{name}_cpu_s"),
            "verdict": f"grew by {growth:.1f} MB ({pct:.0f}%)"
            if grew
            else "no growth after warm-up",
        }
    result["rss"] = out
    grown = {n: v for n, v in out.items() if v["verdict"] != "no growth after warm-up"}
    if not grown:
        result["verdict"] = "no growth after warm-up"
    else:
        result["verdict"] = "; ".join(
            f"{n} grew by {v['growth_mb']} MB ({v['growth_pct']}%)" for n, v in grown.items()
        )


def thin(samples: list[dict[str, Any]], rows: int = 20) -> list[dict[str, Any]]:
    if len(samples) <= rows:
        return samples
    idx = sorted({round(i * (len(samples) - 1) / (rows - 1)) for i in range(rows)})
    return [samples[i] for i in idx]


def render(result: dict[str, Any]) -> str:
    m = result["machine"]
    procs = ["worker", *[f"executor{i}" for i in range(len(result["clusters"]))]]
    cols = procs + (["broker"] if any(s.get("broker_rss_mb") for s in result["samples"]) else [])
    lines = [
        "# Soak: inbox records through the live pipeline, RSS sampled",
        "",
        "Generated by `benchmarks/soak.py` (see its docstring); do not edit by hand.",
        "",
        f"- Date: {result['date']}; code: commit {result['code']['commit']}"
        + (
            f" (uncommitted changes in {len(result['code']['dirty'])} files of domain/, streams/)"
            if result["code"]["dirty"]
            else ""
        ),
        f"- Machine: {m['cpus']} CPUs ({m['cpu']}), {m['ram_gb']} GB RAM, Python {m['python']}, "
        f"Apache Kafka {m['kafka']}, aiokafka {m['aiokafka']}; shared with other work "
        f"(load average {result['loadavg_before']} before, {result.get('loadavg_after')} after).",
        f"- Command: `{result['command']}`",
        f"- Worker: `python {result['worker_command']}`; executors: `{result['executor_command']}`, one per cluster.",
        f"- {len(result['clusters'])} clusters x {result['hosts']} hosts x 8 GPUs; submissions at {result['rate']}/s "
        f"(1-4 GPUs, runtime {result['runtime_range']} simulated s, min_runtime one of {result.get('min_runtimes', list(MIN_RUNTIMES))} s, "
        f"executor speed x{result['speed']}; worker --set {result.get('worker_set') or 'none'}): offered "
        f"~{result.get('offered_gpus_per_cluster')} busy GPUs per cluster of {result['hosts'] * 8} (plus report latency).",
        "",
        "## Result",
        "",
    ]
    if "seconds" in result:
        lines += [
            f"- **{result['inbox_records']:,} inbox records** ({result['submissions_sent']:,} submissions, "
            f"{result['journal_counts'].get('workload.finished', 0):,} finish reports from the executors, the rest setup, "
            f"ticks and sentinels) in **{result['seconds']:,.0f} s** ({result['seconds'] / 60:.1f} min): "
            f"**{result['inbox_records_per_s']:,} inbox records/s** (paced by `--rate`, not a throughput limit).",
            f"- Journal: {result['journal_records']:,} records (end offset {result['journal_end_offset']:,}: "
            "the difference is transaction commit markers); "
            f"{', '.join(f'{k} {v:,}' for k, v in result['journal_counts'].items())}; "
            f"{result.get('preempted_not_requeued', 0):,} of the preemptions were not requeued (not resumable: the workload ended there); "
            f"dead letters: {result['dlq_records']}.",
            "- Rejected requests: "
            + (
                "; ".join(
                    f"{n:,} x `{k}`"
                    for k, n in sorted(result["rejected"].items(), key=lambda kv: -kv[1])
                )
                or "none"
            )
            + ".",
            f"- Queue: at most {result['max_outstanding']:,} workloads outstanding (waiting or running), "
            f"at most {result['max_waiting']:,} waiting.",
            "- Checks: "
            + ", ".join(f"{k} {'yes' if v else '**NO**'}" for k, v in result["checks"].items())
            + ".",
            "",
        ]
    else:
        lines += [f"- **Run failed**: {result.get('error')}", ""]
    lines += [
        f"**Verdict: {result.get('verdict', '?')}** (warm-up = first sample at {result['warmup_frac']:.0%} of the "
        f"records; growth counts when > {result['tolerance_mb']} MB and > {result['tolerance_pct']}%).",
        "",
        "| process | warm-up RSS MB (at inbox record) | final RSS MB | peak MB | growth MB | growth % | slope after warm-up, MB per 100k records | CPU s | verdict |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, v in result.get("rss", {}).items():
        lines.append(
            f"| {name} | {v['warmup_rss_mb']} ({v['warmup_at_inbox']:,}) | {v['final_rss_mb']} | {v['peak_rss_mb']} | "
            f"{v['growth_mb']:+} | {v['growth_pct']:+} | {v['slope_mb_per_100k_records']} | {v['cpu_s']} | {v['verdict']} |"
        )
    lines += [
        "",
        f"## RSS samples (every {result['sample_every']} s, thinned to ~20 rows of {len(result['samples'])})",
        "",
        "| t s | phase | inbox records | journal end | submitted | finished | outstanding | preempted | "
        + " | ".join(f"{p} MB" + (" (shared, context)" if p == "broker" else "") for p in cols)
        + " |",
        "|---:|---|---:|---:|---:|---:|---:|---:|" + "---:|" * len(cols),
    ]
    for s in thin(result["samples"]):
        lines.append(
            f"| {s['t_s']} | {s['phase']} | {s['inbox']:,} | {s['journal_end']:,} | {s['submitted']:,} | "
            f"{s['finished']:,} | {s['outstanding']:,} | {s.get('preempted', 0):,} | "
            + " | ".join(str(s.get(f"{p}_rss_mb")) for p in cols)
            + " |"
        )
    if result.get("notes"):
        lines += ["", "## Notes", ""] + [f"- {n}" for n in result["notes"]]
    if result.get("log_oddities"):
        lines += ["", "## Warnings in the process logs", ""]
        for name, found in result["log_oddities"].items():
            lines.append(f"- {name}: {len(found)} lines, e.g. `{found[0][:300]}`")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------ diagnose


def diagnose(args: argparse.Namespace) -> None:
    """In-process SchedulerCore + SimulatedLauncher under tracemalloc: what grows."""
    import gc
    import tracemalloc

    from allot.commands.executor import SimulatedLauncher
    from domain.config import parse_config
    from streams.core import InboxRecord, SchedulerCore

    overrides = dict(item.split("=", 1) for item in args.worker_set)
    config = parse_config({**overrides, "admins": (ADMIN,)})
    cluster = "diag"
    core = SchedulerCore(cluster, config)
    launcher = SimulatedLauncher(cluster, args.speed)
    gen = Workloads(
        args.runtime_min, args.runtime_max, seed=args.seed, min_runtimes=args.min_runtimes
    )
    t0_sim = t = time.time()
    offset = 0

    rejected: dict[str, int] = {}

    def feed(values: list[bytes]) -> None:
        nonlocal offset
        batch = []
        for v in values:
            batch.append(InboxRecord(0, offset, t, v))
            offset += 1
        for line in core.process(batch).journal:
            r = orjson.loads(line)
            if r["type"].endswith(".rejected"):
                rejected[r["type"]] = rejected.get(r["type"], 0) + 1
            launcher.on_record(r)

    feed(setup_records(cluster, args.hosts))
    step = 0.1
    per_step = args.rate * step
    owed = 0.0
    next_tick = t + args.tick_every
    tracemalloc.start(1)
    warm = None
    warm_at = int(args.warmup * args.diagnose)
    t_start = time.perf_counter()
    while offset < args.diagnose:
        t += step
        owed += per_step
        subs = []
        while owed >= 1:
            owed -= 1
            subs.append(body(cluster, "workload.submitted", actor=MEMBER, **gen.fields()))
        if t >= next_tick:
            subs.append(body(cluster, "clock.tick", actor="allot-ticker"))
            next_tick += args.tick_every
        feed(subs)
        feed([orjson.dumps(r) for r in launcher.due(t)])
        if warm is None and offset >= warm_at:
            gc.collect()
            warm = tracemalloc.take_snapshot()
            warm_sizes = sizes(core, launcher)
            print(f"warm-up at {offset:,} records: {warm_sizes}", flush=True)
    gc.collect()
    end = tracemalloc.take_snapshot()
    end_sizes = sizes(core, launcher)
    print(f"end at {offset:,} records ({time.perf_counter() - t_start:.0f}s): {end_sizes}")
    print(f"rejected: {rejected}")
    assert warm is not None
    diff = end.compare_to(warm, "lineno")
    total = sum(d.size_diff for d in diff)
    print(f"traced growth warm-up -> end: {total / 2**20:.1f} MB; top lines:")
    top = []
    for d in diff[:15]:
        frame = d.traceback[0]
        where = f"{Path(frame.filename).relative_to(ROOT) if frame.filename.startswith(str(ROOT)) else frame.filename}:{frame.lineno}"
        print(f"  {d.size_diff / 2**20:+8.2f} MB {d.count_diff:+9,} blocks  {where}")
        top.append({"where": where, "mb": round(d.size_diff / 2**20, 2), "blocks": d.count_diff})
    if args.diagnose_out:
        Path(args.diagnose_out).write_text(
            json.dumps(
                {
                    "records": offset,
                    "warmup_at": warm_at,
                    "config": overrides,
                    "rate": args.rate,
                    "simulated_s": round(t - t0_sim, 1),
                    "sizes_warmup": warm_sizes,
                    "sizes_end": end_sizes,
                    "traced_growth_mb": round(total / 2**20, 1),
                    "top": top,
                },
                indent=2,
            )
            + "\n"
        )


def sizes(core: Any, launcher: Any) -> dict[str, int]:
    s = core.state
    return {
        "seen_ids": len(s.seen_ids),
        "seen_order": len(s.seen_order),
        "ended": len(s.ended),
        "ended_order": len(s.ended_order),
        "workloads": len(s.workloads),
        "protection_ends": len(s.protection_ends),
        "launcher.jobs": len(launcher.jobs),
        "launcher.sent": len(launcher.sent),
        "launcher.heap": len(launcher.heap),
    }


# ------------------------------------------------------------------ main


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--kafka", default=os.environ.get("ALLOT_KAFKA"))
    parser.add_argument("--records", type=int, default=1_000_000, help="inbox records in total")
    parser.add_argument("--clusters", type=int, default=2)
    parser.add_argument("--rate", type=int, default=300, help="submissions per second")
    parser.add_argument("--hosts", type=int, default=64, help="8-GPU hosts per cluster")
    parser.add_argument("--speed", type=float, default=600.0, help="executor --speed")
    parser.add_argument("--runtime-min", type=float, default=60.0, help="simulated seconds")
    parser.add_argument("--runtime-max", type=float, default=600.0, help="simulated seconds")
    parser.add_argument(
        "--min-runtimes",
        type=lambda text: tuple(float(x) for x in text.split(",")),
        default=MIN_RUNTIMES,
        help="comma-separated min_runtime choices, seconds (0: unallocated)",
    )
    parser.add_argument("--sample-every", type=float, default=10.0, help="seconds")
    parser.add_argument("--tick-every", type=float, default=5.0)
    parser.add_argument("--snapshot-every", type=float, default=30.0)
    parser.add_argument("--worker-set", action="append", default=[], help="worker --set KEY=VALUE")
    parser.add_argument("--executor-topics", choices=("own", "default"), default="own")
    parser.add_argument("--warmup", type=float, default=0.10, help="warm-up: this share of records")
    parser.add_argument("--tolerance-mb", type=float, default=10.0)
    parser.add_argument("--tolerance-pct", type=float, default=5.0)
    parser.add_argument("--drain-timeout", type=float, default=600.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--broker-pid", type=int, help="also sample the broker's RSS (context)")
    parser.add_argument("--note", action="append", default=[], help="a note for the report")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--name", default="soak", help="result file stem")
    parser.add_argument(
        "--render-only", action="store_true", help="re-render NAME.md from NAME.json (+ --note)"
    )
    parser.add_argument(
        "--diagnose", type=int, default=0, help="N records in-process under tracemalloc"
    )
    parser.add_argument("--diagnose-out", help="JSON file for --diagnose")
    args = parser.parse_args()
    if args.render_only:
        path = args.out / f"{args.name}.json"
        result = json.loads(path.read_text())
        result.setdefault("notes", []).extend(args.note)
        path.write_text(json.dumps(result, indent=2) + "\n")
        (args.out / f"{args.name}.md").write_text(render(result))
        return
    if args.diagnose:
        diagnose(args)
        return
    if not args.kafka:
        sys.exit("say where Kafka is: --kafka HOST:PORT (or $ALLOT_KAFKA)")
    import logging

    logging.basicConfig(level=logging.WARNING)
    logging.getLogger("aiokafka").setLevel(logging.ERROR)
    result: dict[str, Any] = {
        "command": (
            "python benchmarks/soak.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
        ).strip(),
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "machine": machine(),
        "code": code_version(),
        "loadavg_before": round(os.getloadavg()[0], 2),
        "records_target": args.records,
        "rate": args.rate,
        "hosts": args.hosts,
        "speed": args.speed,
        "runtime_range": f"{args.runtime_min:g}-{args.runtime_max:g}",
        "min_runtimes": list(args.min_runtimes),
        "sample_every": args.sample_every,
        "worker_set": args.worker_set,
        "warmup_frac": args.warmup,
        "tolerance_mb": args.tolerance_mb,
        "tolerance_pct": args.tolerance_pct,
        "notes": args.note,
    }
    failed = None
    try:
        asyncio.run(soak(args, result))
    except (RuntimeError, OSError) as why:
        failed = why
        result["error"] = str(why)
    result["loadavg_after"] = round(os.getloadavg()[0], 2)
    procs = ["worker", *[f"executor{i}" for i in range(args.clusters)]]
    if result.get("samples"):
        analyse(result, procs, args.warmup, args.tolerance_mb, args.tolerance_pct)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(result, indent=2) + "\n")
    md = render(result) if result.get("samples") else f"# Soak failed\n\n{failed}\n"
    (args.out / f"{args.name}.md").write_text(md)
    print(md)
    if failed:
        sys.exit(f"soak failed: {failed}")


if __name__ == "__main__":
    main()

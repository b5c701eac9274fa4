"""Restart time of the embedded scheduler (`allot serve --data DIR`): from its snapshot
vs re-deriving the whole journal.

    python benchmarks/bench_restart.py                     # 100k requests, 3 rounds
    python benchmarks/bench_restart.py --records 300000 --repeat 5

Builds DIR from the requests mix of bench_stream (submissions, cancellations, ticks on
one cluster), serves it once taking snapshots (every `--snapshot-every` seconds, default
1), then sends a further 1% of requests and serves those without snapshots, so the journal runs on
past the last snapshot as after any crash. Then, alternately, `--repeat` times:

- *from the snapshot*: `allot serve --data DIR --once` (DIR/snapshot.pickle present);
- *from the beginning*: the same with the snapshot moved aside (the re-derivation of
  every journal record the embedded scheduler did before snapshots existed).

Each is a fresh process timed end to end (interpreter start-up included), with the
journal records it reports folded. Results go to benchmarks/results/restart.{json,md}.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_stream import code_version, machine, make_records

from streams.embedded import SNAPSHOT_FILE, append_requests

RESULTS = Path(__file__).resolve().parent / "results"
ADMIN = "root"


def serve(folder: Path, *extra: str) -> tuple[float, str]:
    cmd = [sys.executable, "-m", "allot.cli", "serve", "--data", str(folder), "--once",
           "--admin", ADMIN, *extra]  # fmt: skip
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, check=True)
    return time.perf_counter() - t0, done.stdout


def folded(stdout: str) -> int:
    m = re.search(r"(\d+) journal records folded", stdout)
    return int(m[1]) if m else -1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--snapshot-every",
        default="1",
        help="the first serve's snapshot period (seconds; small runs need a small one)",
    )
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="allot-restart-")) / "data"
    records = make_records(args.records + args.records // 100, ["default"], "requests")
    append_requests(folder, [v for _, v in records[: args.records]])
    print(f"serving {args.records:,} requests with snapshots into {folder} ...", flush=True)
    first_s, _ = serve(folder, "--snapshot-every", args.snapshot_every)
    if not (folder / SNAPSHOT_FILE).exists():
        raise SystemExit(
            f"no snapshot was taken in {first_s:.1f} s: give a --snapshot-every below that"
        )
    append_requests(folder, [v for _, v in records[args.records :]])
    serve(folder, "--snapshot-every", "0")  # a journal tail past the snapshot
    snapshot = folder / SNAPSHOT_FILE
    aside = folder.parent / "snapshot.aside"
    runs: dict[str, list[dict[str, float]]] = {"from the snapshot": [], "from the beginning": []}
    for _ in range(args.repeat):
        seconds, out = serve(folder, "--snapshot-every", "0")
        runs["from the snapshot"].append({"seconds": round(seconds, 3), "folded": folded(out)})
        snapshot.rename(aside)
        seconds, out = serve(folder, "--snapshot-every", "0")
        runs["from the beginning"].append({"seconds": round(seconds, 3), "folded": folded(out)})
        aside.rename(snapshot)
    journal_lines = sum(1 for _ in (folder / "journal.jsonl").open("rb"))
    result: dict[str, Any] = {
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": "python benchmarks/bench_restart.py " + " ".join(sys.argv[1:]),
        "machine": machine(),
        "code": code_version(),
        "records": args.records,
        "journal_records": journal_lines,
        "snapshot_bytes": snapshot.stat().st_size,
        "first_serve_s": round(first_s, 2),
        "runs": runs,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "restart.json").write_text(json.dumps(result, indent=2))
    m = result["machine"]
    med = {k: statistics.median(r["seconds"] for r in v) for k, v in runs.items()}
    lines = [
        "# Embedded restart: from the snapshot vs from the beginning (`benchmarks/bench_restart.py`)",
        "",
        f"Date {result['date']}; command `{result['command']}`; machine: {m['cpus']} vCPUs "
        f"({m['cpu']}), {m['ram_gb']} GB RAM, Python {m['python']}.",
        f"DIR: {args.records:,} + {args.records // 100:,} requests, {journal_lines:,} journal "
        f"records, snapshot {result['snapshot_bytes'] / 1e6:.1f} MB.",
        "",
        "| restart | seconds (median of " + str(args.repeat) + ") | journal records folded |",
        "|---|---:|---:|",
    ]
    for name, rows in runs.items():
        lines.append(f"| {name} | {med[name]:.2f} | {rows[0]['folded']:,} |")
    ratio = med["from the snapshot"] / med["from the beginning"]
    lines += ["", f"From the snapshot / from the beginning: {ratio:.2f}", ""]
    text = "\n".join(lines)
    (args.out / "restart.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()

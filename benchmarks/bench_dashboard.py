"""What a dashboard refresh costs once the journal has history: folding only what was
appended (the dashboard now) against folding the whole journal again (before).

    python benchmarks/bench_dashboard.py [--journal FILE]... [--append 10] [--rounds 5]

For each journal (default: `examples/lab.yaml` simulated under fairshare), the file is
written without its last records, the dashboard folds it once, and then, `--rounds`
times, `--append` records are appended (a few ticks and decisions: what a live journal
gains between two page loads) and both refreshes are timed side by side on the same
file: `Dashboard.snapshot()` (the tail) and `build_snapshot` of the whole file. Prints a
markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--journal", type=Path, action="append", default=[])
    parser.add_argument("--append", type=int, default=10, help="records per refresh")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))

    from projections.dashboard import Dashboard, build_snapshot, file_stamp
    from streams.sources import journal_lines, journal_tail

    journals = args.journal
    if not journals:
        out = Path(tempfile.mkdtemp(prefix="bench-dashboard-"))
        scenario = str(ROOT / "examples" / "lab.yaml")
        options = ["-p", "fairshare", "--out", str(out), "--no-report", "--quiet"]
        subprocess.run(
            [sys.executable, "-m", "allot.cli", "simulate", scenario, *options],
            check=True,
            cwd=ROOT,
        )
        journals = [out / "fairshare" / "journal.jsonl"]

    print(
        "| journal | records | first fold s | refresh, whole journal s | refresh, tail s | ratio |"
    )
    print("|---|---:|---:|---:|---:|---:|")
    for source in journals:
        lines = source.read_bytes().splitlines(keepends=True)
        keep = len(lines) - args.append * args.rounds
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "journal.jsonl"
            path.write_bytes(b"".join(lines[:keep]))
            board = Dashboard(
                lambda p=path: journal_lines(journal=p),
                label="bench",
                stamp=file_stamp(path),
                tail=lambda p=path: journal_tail(journal=p),
            )
            t = time.perf_counter()
            assert board.snapshot().ok
            first = time.perf_counter() - t
            whole, tail = [], []
            for r in range(args.rounds):
                start = keep + r * args.append
                with path.open("ab") as f:
                    f.write(b"".join(lines[start : start + args.append]))
                t = time.perf_counter()
                snap = board.snapshot()
                tail.append(time.perf_counter() - t)
                t = time.perf_counter()
                full = build_snapshot(lambda p=path: journal_lines(journal=p))
                whole.append(time.perf_counter() - t)
                assert snap.view.records == full.view.records
                assert snap.delivered == full.delivered
            assert board.refolds == 1
        w, s = statistics.median(whole), statistics.median(tail)
        print(f"| {source} | {len(lines):,} | {first:.2f} | {w:.3f} | {s:.3f} | {w / s:,.0f}x |")


if __name__ == "__main__":
    main()

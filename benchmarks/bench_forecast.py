"""How good is `allot queue --start`, and what does it cost, on a real-shaped run?

    python benchmarks/bench_forecast.py [--scenario examples/lab.yaml] [--cuts 12]
                                        [--horizon 2d] [--out DIR]

Simulates the scenario under its config (fairshare), then at `--cuts` moments spread
over its middle 80% (each just before an input) folds the journal up to there, asks for
the forecast as `allot queue --start` does, and compares it with what the rest of the
run did. Work keeps arriving after each cut, so this measures the forecast where its
"no new input" assumption is broken, as it always is on a live cluster. Reports, per
cut and overall: how long the forecast took; of the workloads pending at the cut, how
many started within the horizon and how many the forecast placed there; the error
(actual − expected start) for those both place, overall and for the first ten in the
queue. Prints a markdown table for BENCHMARKS.md.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:+.1f} h"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scenario", type=Path, default=ROOT / "examples" / "lab.yaml")
    parser.add_argument("--cuts", type=int, default=12)
    parser.add_argument("--horizon", default="2d")
    parser.add_argument("--out", type=Path, default=None, help="keep the simulation here")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))

    from domain.durations import parse_duration
    from domain.rederive import is_cause
    from projections.forecast import forecast
    from projections.journal import read_journal
    from projections.views import JournalView, queue_rows

    horizon = parse_duration(args.horizon)
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-forecast-"))
    import subprocess

    subprocess.run(
        [
            sys.executable,
            "-m",
            "allot.cli",
            "simulate",
            str(args.scenario),
            "-p",
            "fairshare",
            "--out",
            str(out),
            "--no-report",
            "--quiet",
        ],
        check=True,
        cwd=ROOT,
    )
    records = list(read_journal(out / "fairshare" / "journal.jsonl"))
    n = len(records)
    candidates = [i for i in range(n // 10, n - n // 10) if is_cause(records[i])]
    step = max(1, len(candidates) // args.cuts)
    cuts = candidates[::step][: args.cuts]

    first_start: dict[str, list[tuple[int, float]]] = {}
    for i, r in enumerate(records):
        if r.type == "workload.placed":
            first_start.setdefault(r.workload, []).append((i, r.time))

    def started_after(wid: str, cut: int) -> float | None:
        for i, t in first_start.get(wid, ()):
            if i >= cut:
                return t
        return None

    print(f"{args.scenario.name}: {n:,} journal records, {len(cuts)} cuts, horizon {args.horizon}")
    print()
    print(
        "| cut (record) | pending | forecast s | started in horizon | forecast placed | both | median error | p90 abs error | top-10 median error |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    view = JournalView()
    done = 0
    all_errors: list[float] = []
    top_errors: list[float] = []
    totals = [0, 0, 0, 0]
    walls: list[float] = []
    for cut in cuts:
        while done < cut:
            view.add(records[done])
            done += 1
        now = view.state.now
        t0 = time.perf_counter()
        fc = forecast(view, horizon, journal=records[:cut])
        wall = time.perf_counter() - t0
        walls.append(wall)
        pending = [r["id"] for r in queue_rows(view) if r["state"] == "PENDING"]
        actual = {wid: started_after(wid, cut) for wid in pending}
        in_horizon = {w for w, t in actual.items() if t is not None and t <= now + horizon}
        foreseen = set(fc.starts)
        both = in_horizon & foreseen
        errors = [actual[w] - fc.starts[w].time for w in both]
        top = [actual[w] - fc.starts[w].time for w in pending[:10] if w in both]
        all_errors += errors
        top_errors += top
        totals[0] += len(pending)
        totals[1] += len(in_horizon)
        totals[2] += len(foreseen)
        totals[3] += len(both)
        med = _hours(statistics.median(errors)) if errors else "-"
        p90 = (
            f"{sorted(abs(e) for e in errors)[int(0.9 * (len(errors) - 1))] / 3600:.1f} h"
            if errors
            else "-"
        )
        topm = _hours(statistics.median(top)) if top else "-"
        print(
            f"| {cut:,} | {len(pending)} | {wall:.2f} | {len(in_horizon)} | {len(foreseen)} | "
            f"{len(both)} | {med} | {p90} | {topm} |"
        )
    abs_sorted = sorted(abs(e) for e in all_errors)
    print()
    print(
        f"overall: {totals[0]} pending at the cuts; {totals[1]} started within the horizon, "
        f"the forecast placed {totals[2]}, both {totals[3]}; error (actual - expected) median "
        f"{_hours(statistics.median(all_errors)) if all_errors else '-'}, "
        f"|error| p50 {abs_sorted[len(abs_sorted) // 2] / 3600:.1f} h, "
        f"p90 {abs_sorted[int(0.9 * (len(abs_sorted) - 1))] / 3600:.1f} h; "
        f"top-10 median {_hours(statistics.median(top_errors)) if top_errors else '-'}, "
        f"within 1 h: {sum(1 for e in all_errors if abs(e) <= 3600) / max(1, len(all_errors)):.0%}; "
        f"forecast wall median {statistics.median(walls):.2f} s, max {max(walls):.2f} s"
    )


if __name__ == "__main__":
    main()

"""Cancelling a job array of waiting work: what it costs the scheduling core.

    python benchmarks/bench_cancel.py [--records 30000] [--cancels 3000] [--root DIR]

Builds one cluster's state from bench_stream's request mix (64 hosts x 8 GPUs, demand
far above supply, so thousands of workloads wait), then folds `--cancels` cancellations
of waiting workloads through `streams.core.SchedulerCore.process` and reports the time
per cancel and the journal records they produced. `--root` runs another checkout's code
(for side-by-side runs: alternate the two, one process each).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=30_000)
    parser.add_argument("--cancels", type=int, default=3_000)
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose code runs")
    args = parser.parse_args()
    root = args.root.resolve()
    sys.path[:0] = [str(root / "benchmarks"), str(root)]

    import orjson
    from bench_stream import make_records

    from domain.config import SchedulerConfig
    from domain.state import RUNNING
    from streams.core import InboxRecord, SchedulerCore

    core = SchedulerCore("c1", SchedulerConfig())
    t0 = time.time()  # the generated requests claim times near now
    setup = [
        InboxRecord(0, i, t0 + i * 1e-3, value)
        for i, (_, value) in enumerate(make_records(args.records, ["c1"], "requests"))
    ]
    core.process(setup)
    waiting = sorted(w.id for w in core.state.workloads.values() if w.state != RUNNING)
    chosen = waiting[: args.cancels]
    now = core.state.now
    cancels = [
        InboxRecord(
            0,
            len(setup) + i,
            now + 1 + i * 1e-3,
            orjson.dumps(
                {
                    "type": "workload.cancelled",
                    "id": f"cancel-{i}",
                    "cluster": "c1",
                    "actor": "root",
                    "workload": wid,
                }
            ),
        )
        for i, wid in enumerate(chosen)
    ]
    started = time.perf_counter()
    out = core.process(cancels)
    elapsed = time.perf_counter() - started
    kinds: dict[str, int] = {}
    for line in out.journal:
        kind = orjson.loads(line)["type"]
        kinds[kind] = kinds.get(kind, 0) + 1
    print(
        f"{root}: {len(chosen):,} cancels of waiting work ({len(waiting):,} waiting): "
        f"{elapsed * 1e3:,.0f} ms, {elapsed / max(1, len(chosen)) * 1e6:,.0f} µs each; "
        f"journal {kinds}"
    )


if __name__ == "__main__":
    main()

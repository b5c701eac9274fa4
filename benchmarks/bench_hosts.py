"""Setting up a cluster of many hosts: `evolve` of N `host.registered` records.

    python benchmarks/bench_hosts.py --hosts 20000 [--hosts 100000 ...]

Prints the wall time per size. Each registration re-derives the headroom hosts; this
shows that it no longer scans every host each time (which made setup n²).
"""

from __future__ import annotations

import argparse
import time

from domain import events as ev
from domain.config import SchedulerConfig
from domain.evolve import evolve
from domain.state import State


def register(hosts: int, headroom_hosts: int = 2) -> float:
    state = State("c", SchedulerConfig(headroom_hosts=headroom_hosts))
    started = time.perf_counter()
    for i in range(hosts):
        evolve(
            state,
            ev.HostRegistered(
                id=f"h{i}", time=0.0, cluster="c", actor="admin", host=f"h{i}", gpus=8
            ),
        )
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hosts", type=int, action="append", default=[])
    args = parser.parse_args()
    for n in args.hosts or [20_000]:
        print(f"{n:>9,} hosts registered in {register(n):.2f} s")


if __name__ == "__main__":
    main()

"""What `allot` costs before it does anything: commands a researcher types all day.

    python benchmarks/bench_cli_start.py [--root DIR] [--old DIR] [--runs 20]

Times `allot --help`, `allot queue --help`, `allot submit --bogus-flag`, and `allot queue`
and `allot submit` on a small served folder (one 8-GPU host, a 12-task array, served by
this checkout's `allot serve`, then stopped), each as `python -m allot.cli ...` in its own
process with `PYTHONPATH` set to the checkout. `--root` is the checkout whose code runs
(default: this one); with `--old DIR` each run of a command is made from DIR and from
`--root` one right after the other, and the table gives both, their ratio and whether the
outputs agree (ids, times and counts masked: they differ from run to run). Wall and CPU
(user + system, from `wait4`) are medians over `--runs`, after one untimed run of each.

Bytecode is cached (in a scratch `PYTHONPYCACHEPREFIX`), as an installed allot's is;
`--uncached` compiles every module on every run instead, as with PYTHONDONTWRITEBYTECODE=1
(the test suite's environment may set it).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = "{data}"  # stands for the served folder in a command
SCRATCH = "{scratch}"  # a copy of it made for each run: submit writes into it

COMMANDS = [
    ["--help"],
    ["queue", "--help"],
    ["submit", "--bogus-flag"],
    ["queue", "--data", DATA],
    ["submit", "-A", "lab/olmo", "-G", "1", "--min-runtime", "15m", "--as", "alice",
     "--data", SCRATCH],
]  # fmt: skip

# what differs between two runs of one command whatever the code: request ids, clock times
_VARYING = re.compile(rb"[0-9A-Z]{26}|\d+")


# where bytecode is cached; None: not cached (set by main)
PYCACHE: dict[str, Path | None] = {"prefix": None}


def _env(root: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("ALLOT_")
        and k not in ("PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX")
    }
    env.update(PYTHONPATH=str(root), ALLOT_CLUSTER="default", USER="ops", COLUMNS="100")
    prefix = PYCACHE["prefix"]
    if prefix is None:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env["PYTHONPYCACHEPREFIX"] = str(prefix)
    return env


def run(root: Path, argv: list[str]) -> tuple[float, float, bytes]:
    """(wall s, CPU s, masked stdout+stderr+exit code) of `python -m allot.cli ARGV`."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "allot.cli", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=_env(root),
        cwd=root,
    )
    out = proc.stdout.read() if proc.stdout else b""
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_utime + usage.ru_stime, _VARYING.sub(b"#", out) + b"exit %d" % code


def allot(data: Path, *argv: str) -> None:
    subprocess.run(
        [sys.executable, "-m", "allot.cli", *argv, "--data", str(data)],
        check=True,
        env=_env(ROOT),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def served_folder(data: Path) -> None:
    """A folder `allot serve` has scheduled: a host, two allocations, a 12-task array."""
    serve = subprocess.Popen(
        [sys.executable, "-m", "allot.cli", "serve", "--data", str(data), "--admin", "ops"],
        env=_env(ROOT),
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        time.sleep(2)
        allot(data, "host", "register", "h0", "8", "--wait", "10")
        allot(data, "budget", "set", "lab", "1", "--manager", "pm", "--wait", "10")
        allot(data, "budget", "set", "lab/olmo", "3", "--member", "alice", "--as", "pm")
        allot(data, "submit", "-A", "lab/olmo", "-G", "1", "--min-runtime", "15m",
              "--runtime", "20m", "--array", "0-11", "--as", "alice", "--wait", "10")  # fmt: skip
    finally:
        serve.send_signal(signal.SIGINT)
        serve.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", type=Path, default=ROOT, help="checkout whose code runs")
    parser.add_argument("--old", type=Path, help="another checkout, run alternately")
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--uncached", action="store_true", help="no bytecode cache")
    args = parser.parse_args()
    roots = [r.resolve() for r in ([args.old] if args.old else []) + [args.root]]
    work = Path(tempfile.mkdtemp(prefix="bench-cli-start-"))
    data, scratch = work / "lab", work / "scratch"
    PYCACHE["prefix"] = None if args.uncached else work / "pycache"
    served_folder(data)
    times: dict[tuple[int, Path], list[tuple[float, float]]] = {}
    outputs: dict[tuple[int, Path], set[bytes]] = {}
    try:
        for timed in [False] + [True] * args.runs:
            for i, command in enumerate(COMMANDS):
                for root in roots:
                    shutil.rmtree(scratch, ignore_errors=True)
                    shutil.copytree(data, scratch)
                    argv = [
                        str(data) if a == DATA else str(scratch) if a == SCRATCH else a
                        for a in command
                    ]
                    wall, cpu, out = run(root, argv)
                    outputs.setdefault((i, root), set()).add(out)
                    if timed:
                        times.setdefault((i, root), []).append((wall, cpu))
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"{os.cpu_count()} CPUs, {platform.processor() or platform.machine()}, Python "
        f"{platform.python_version()}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
        f"median of {args.runs} runs, bytecode {'not ' if args.uncached else ''}cached"
    )
    header = "| command |" + "".join(f" {r}: wall / CPU ms |" for r in roots)
    if args.old:
        header += " CPU old/new | same output |"
    print(header)
    print("|---|" + "---:|" * len(roots) + ("---:|---|" if args.old else ""))
    for i, command in enumerate(COMMANDS):
        name = " ".join("DIR" if a in (DATA, SCRATCH) else a for a in command)
        cells, cpus = [], []
        for root in roots:
            walls, cpu = zip(*times[(i, root)], strict=True)
            cpus.append(statistics.median(cpu))
            cells.append(f"{statistics.median(walls) * 1e3:.0f} / {cpus[-1] * 1e3:.0f}")
        row = f"| `allot {name}` | " + " | ".join(cells) + " |"
        if args.old:
            same = outputs[(i, roots[0])] == outputs[(i, roots[1])]
            row += f" {cpus[0] / cpus[1]:.2f}x | {'yes' if same else 'no'} |"
        print(row)


if __name__ == "__main__":
    main()

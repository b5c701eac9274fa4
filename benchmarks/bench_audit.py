"""Benchmark the audit store: load N journal records into DuckDB, time each preset.

    python benchmarks/bench_audit.py --records 1000000 [--base JOURNAL] [--json OUT]

The journal is a simulation's journal (default: `allot simulate` of
tests/e2e/fixtures/tiny.yaml) replicated end to end until it holds N records: copy k
has its times shifted by k x (the base's span) and its workload/event ids prefixed with
`k.`, so every copy is a new stretch of history of the same cluster. Then:

1. load: `projections.audit.load` of the whole file (records/s);
2. reload: loading the same file again (nothing new: the resume path);
3. each preset, in-process on a read-only connection (median of 3 runs, after a
   warm-up): `history` of the root allocation over all time and over the last 7 days,
   `budget log`, `preemptions --since 7d`, and `why ID --audit` (the history of the
   last workload preempted, from the database alone);
4. each preset as the CLI (`python -m allot.cli ...`, wall time including start-up:
   median of `--repeat` runs after a first, cold, one; and CPU time, user + system,
   which a busy machine does not inflate as much), and `allot --help` (start-up alone);
   with `--baseline DIR` the same commands of another version (a checkout in DIR),
   interleaved run by run so both see the same load.

The target (issue 5): 10M records, each preset under 1 s.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

ROOT = Path(__file__).resolve().parent.parent
TINY = ROOT / "tests" / "e2e" / "fixtures" / "tiny.yaml"
SIMULATE = (sys.executable, "-m", "allot.cli", "simulate")
_IDS = ("workload", "beneficiary", "cause", "ref", "id")


def base_journal(tmp: Path) -> Path:
    out = tmp / "sim"
    subprocess.run(
        [*SIMULATE, str(TINY), "--out", str(out), "-q", "--no-report"],
        check=True,
        cwd=ROOT,
    )
    return out / "fairshare" / "journal.jsonl"


def replicate(base: Path, target: Path, records: int) -> int:
    """Write `records` records: copies of `base`, shifted in time, with fresh ids."""
    rows = [orjson.loads(line) for line in base.read_bytes().splitlines() if line.strip()]
    t0, t1 = rows[0]["time"], rows[-1]["time"]
    span = (t1 - t0) + 60.0
    written = 0
    with target.open("wb") as f:
        copy = 0
        while written < records:
            out = []
            shift = copy * span
            for r in rows:
                if written >= records:
                    break
                r2 = dict(r)
                r2["time"] = r["time"] + shift
                for key in _IDS:
                    if isinstance(r2.get(key), str) and copy:
                        r2[key] = f"{copy}.{r2[key]}"
                if "protected_until" in r2 and isinstance(r2["protected_until"], int | float):
                    r2["protected_until"] = r2["protected_until"] + shift
                out.append(orjson.dumps(r2))
                written += 1
            f.write(b"\n".join(out) + b"\n")
            copy += 1
    return written


def timed(fn: Any, repeat: int = 3) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--base", type=Path, help="Journal to replicate (default: tiny.yaml)")
    parser.add_argument("--workdir", type=Path, help="Keep the journal and database here")
    parser.add_argument("--json", type=Path, help="Write the numbers here")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="Also run the CLI presets from this checkout of another version (e.g. "
        "`git archive HEAD | tar -x -C DIR`), interleaved with this one's runs",
    )
    parser.add_argument("--repeat", type=int, default=3, help="CLI runs per preset (3)")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="With --workdir: keep its journal and database when they hold --records "
        "records (time the presets again without generating and loading)",
    )
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    from projections import audit
    from streams.sources import journal_lines

    with tempfile.TemporaryDirectory(prefix="bench-audit-") as tmpdir:
        work = args.workdir or Path(tmpdir)
        work.mkdir(parents=True, exist_ok=True)
        journal = work / "journal.jsonl"
        db = work / "audit.duckdb"
        reused = False
        if args.reuse and args.workdir and db.exists() and journal.exists():
            con = audit.connect(db, read_only=True)
            held = (audit.state(con) or {}).get("records")
            con.close()
            reused = held == args.records
        gen_s = load_s = None
        if reused:
            n = args.records
            print(f"reusing {journal} and {db} ({n:,} records): not generated, not loaded")
        else:
            base = args.base or base_journal(work)
            for stale in (db, Path(str(db) + ".wal")):
                stale.unlink(missing_ok=True)
            start = time.perf_counter()
            n = replicate(base, journal, args.records)
            gen_s = time.perf_counter() - start
            size = journal.stat().st_size / 1e6
            print(f"generated {n:,} records ({size:,.0f} MB) in {gen_s:.1f} s")

            start = time.perf_counter()
            loaded = audit.load(db, journal_lines(journal=journal), source=str(journal))
            load_s = time.perf_counter() - start
            print(f"load: {loaded['added']:,} records in {load_s:.1f} s ({n / load_s:,.0f}/s)")
        start = time.perf_counter()
        again = audit.load(db, journal_lines(journal=journal), source=str(journal))
        reload_s = time.perf_counter() - start
        assert again["added"] == 0
        print(f"reload (nothing new): {reload_s:.1f} s")

        con = audit.connect(db, read_only=True)
        root = con.execute("SELECT allocation FROM budget_changes ORDER BY seq LIMIT 1").fetchall()[
            0
        ][0]
        wid = con.execute("SELECT workload FROM preemptions ORDER BY seq DESC LIMIT 1").fetchall()[
            0
        ][0]

        def why() -> Any:
            from projections.timeline import timeline

            return timeline(audit.workload_records(con, audit.find_workload(con, wid)))

        presets: dict[str, Any] = {
            f"history --allocation {root}": lambda: audit.history(con, root),
            f"history --allocation {root} --since 7d": lambda: audit.history(con, root, "7d"),
            "budget log": lambda: audit.budget_log_json(con),  # as `budget log --json`
            "preemptions --since 7d": lambda: audit.preemptions(con, "7d"),
            f"why {wid} --audit": why,
        }
        query_s = {name: timed(fn) for name, fn in presets.items()}
        counts = dict(
            zip(
                ("journal", "runs", "preemptions", "budget_changes"),
                con.execute(
                    "SELECT (SELECT count(*) FROM journal), (SELECT count(*) FROM runs), "
                    "(SELECT count(*) FROM preemptions), (SELECT count(*) FROM budget_changes)"
                ).fetchall()[0],
                strict=True,
            )
        )
        con.close()
        for name, s in query_s.items():
            print(f"  {name:45s} {s * 1000:8.1f} ms (in-process, median of 3)")

        cli_args = {
            f"history --allocation {root}": ["history", "--allocation", root, "--json"],
            f"history --allocation {root} --since 7d": [
                "history",
                "--allocation",
                root,
                "--since",
                "7d",
                "--json",
            ],
            "budget log": ["budget", "log", "--json"],
            "preemptions --since 7d": ["preemptions", "--since", "7d", "--json"],
            f"why {wid} --audit": ["why", wid, "--audit", str(db), "--json"],
        }
        cpu: dict[str, list[float]] = {}

        def cli(argv: list[str], name: str, root: Path = ROOT) -> float | None:
            """Wall time of one run of the `allot` in `root` (None if it fails there);
            its CPU time (user + system) goes to `cpu[name]`: on a busy machine wall
            time waits for a core, CPU time does not."""
            env = {
                **{k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")},
                "ALLOT_AUDIT_DB": str(db),
                "PYTHONPATH": str(root),
            }
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            start = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "allot.cli", *argv],
                cwd=root,
                env=env,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            wall = time.perf_counter() - start
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            if done.returncode != 0:
                if root == ROOT:
                    raise SystemExit(f"allot {' '.join(argv)} failed (exit {done.returncode})")
                return None
            used = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
            cpu.setdefault(name, []).append(used)
            return wall

        def median(values: list[float | None]) -> float | None:
            kept = [v for v in values if v is not None]
            return statistics.median(kept) if kept else None

        cli_args["--help (start-up alone)"] = ["--help"]
        cli_cold_s: dict[str, Any] = {}
        cli_s: dict[str, Any] = {}
        cli_cpu_s: dict[str, Any] = {}
        base_s: dict[str, Any] = {}
        base_cpu_s: dict[str, Any] = {}
        for name, argv in cli_args.items():
            cli_cold_s[name] = cli(argv, name + " (first)")
            if args.baseline:
                cli(argv, "baseline " + name + " (first)", args.baseline)
            walls, base_walls = [], []
            for _ in range(args.repeat):  # interleaved: both see the same load
                walls.append(cli(argv, name))
                if args.baseline:
                    base_walls.append(cli(argv, "baseline " + name, args.baseline))
            cli_s[name] = median(walls)
            cli_cpu_s[name] = median(cpu.get(name, []))
            line = (
                f"  {name:45s} {cli_s[name] * 1000:8.0f} ms (CLI wall, median of "
                f"{args.repeat}; first run {cli_cold_s[name] * 1000:.0f} ms; "
                f"CPU {cli_cpu_s[name] * 1000:.0f} ms)"
            )
            if args.baseline:
                base_s[name] = median(base_walls)
                base_cpu_s[name] = median(cpu.get("baseline " + name, []))
                line += (
                    f"; baseline {base_s[name] * 1000:.0f} ms, CPU {base_cpu_s[name] * 1000:.0f} ms"
                    if base_s[name] is not None
                    else "; baseline: not available there"
                )
            print(line)

        result = {
            "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": f"{platform.machine()} {os.cpu_count()} CPUs, {platform.platform()}",
            "python": platform.python_version(),
            "duckdb": __import__("duckdb").__version__,
            "records": n,
            "journal_mb": round(journal.stat().st_size / 1e6, 1),
            "db_mb": round(db.stat().st_size / 1e6, 1),
            "reused": reused,
            "generate_s": round(gen_s, 2) if gen_s is not None else None,
            "load_s": round(load_s, 2) if load_s is not None else None,
            "load_records_per_s": round(n / load_s) if load_s else None,
            "reload_s": round(reload_s, 2),
            "counts": counts,
            "preset_s": {k: round(v, 4) for k, v in query_s.items()},
            "preset_cli_s": {k: round(v, 3) for k, v in cli_s.items()},
            "preset_cli_first_s": {k: round(v, 3) for k, v in cli_cold_s.items()},
            "preset_cli_cpu_s": {k: round(v, 3) for k, v in cli_cpu_s.items()},
            "baseline": str(args.baseline) if args.baseline else None,
            "baseline_cli_s": {k: v if v is None else round(v, 3) for k, v in base_s.items()},
            "baseline_cli_cpu_s": {
                k: v if v is None else round(v, 3) for k, v in base_cpu_s.items()
            },
            "load_average_at_end": os.getloadavg(),
        }
        print(json.dumps(result, indent=2))
        if args.json:
            args.json.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()

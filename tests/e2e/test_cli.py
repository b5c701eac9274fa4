"""The `allot` command end to end: simulate, replay, compare, demo, and its errors."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.e2e.cli import allot, allot_on_a_terminal, one_line_error

FIXTURES = Path(__file__).parent / "fixtures"
TINY = FIXTURES / "tiny.yaml"
SUMMARY_KEYS = {
    "policy",
    "workloads",
    "preemptions",
    "occupancy",
    "occupancy_contended",
    "allocated_fraction",
    "unallocated_fraction",
    "delivered",
    "wait_s",
    "engine",
}


@pytest.fixture(scope="module")
def two_policies(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sim")
    result = allot(
        "simulate", str(TINY), "-p", "fairshare", "-p", "legacy-priority", "--out", str(out), "-q"
    )
    assert result.returncode == 0, result.stderr
    return out


def test_simulate_writes_every_output_per_policy(two_policies: Path) -> None:
    for policy in ("fairshare", "legacy-priority"):
        folder = two_policies / policy
        assert {p.name for p in folder.iterdir()} >= {
            "journal.jsonl",
            "summary.json",
            "report.html",
            "gantt.png",
        }
        summary = orjson.loads((folder / "summary.json").read_bytes())
        assert summary.keys() >= SUMMARY_KEYS
        assert summary["policy"] == policy
        assert summary["workloads"]["submitted"] == 80
        assert (folder / "gantt.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = (two_policies / "comparison.md").read_text()
    assert "| metric | fairshare | legacy-priority |" in table
    assert "wait p90 (debug)" in table


def test_gantt_png_is_the_reports_timeline_with_one_window_for_all_policies(
    two_policies: Path,
) -> None:
    """gantt.png is the picture report.html embeds (titled with the policy), and with
    several policies every report's timeline shows the same window."""
    import base64

    windows = set()
    for policy in ("fairshare", "legacy-priority"):
        text = (two_policies / policy / "report.html").read_text()
        images = re.findall(r'<img[^>]*\bsrc="data:image/png;base64,([^"]*)"', text)
        assert base64.b64decode(images[-1]) == (two_policies / policy / "gantt.png").read_bytes()
        windows.update(re.findall(r"Window: [^<]*\.", text))
    assert len(windows) == 1


def test_journal_follows_the_event_contract(two_policies: Path) -> None:
    from streams.codec import decode_event

    lines = (two_policies / "fairshare" / "journal.jsonl").read_bytes().splitlines()
    events = [decode_event(line) for line in lines]
    assert events[0].type == "config.set"
    assert [e.time for e in events] == sorted(e.time for e in events)
    placed = [e for e in events if e.type == "workload.placed"]
    assert placed and all(e.explain.get("policy") == "fairshare" for e in placed)
    assert any(e.type == "host.drained" for e in events)  # h1 fails at 3h in the scenario


def test_same_scenario_gives_byte_identical_journals(two_policies: Path, tmp_path: Path) -> None:
    result = allot(
        "simulate", str(TINY), "-p", "fairshare", "--out", str(tmp_path), "-q", "--no-report"
    )
    assert result.returncode == 0, result.stderr
    first = (two_policies / "fairshare" / "journal.jsonl").read_bytes()
    assert (tmp_path / "fairshare" / "journal.jsonl").read_bytes() == first


def test_string_hashing_does_not_change_decisions(tmp_path: Path) -> None:
    """Byte-identical journals from processes with different string hashes: an order
    taken from a set or a hash of host or workload names would differ (the same-process
    property tests cannot see that). debug-flood has gangs, preemption and ties."""
    scenario = Path(__file__).parents[2] / "examples" / "debug-flood.yaml"
    journals = []
    for seed in ("0", "1"):
        out = tmp_path / f"seed-{seed}"
        result = allot(
            "simulate", str(scenario), "-p", "fairshare", "-p", "legacy-priority",
            "--out", str(out), "-q", "--no-report", "-j", "1",
            env={"PYTHONHASHSEED": seed},
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        journals.append(
            [(out / p / "journal.jsonl").read_bytes() for p in ("fairshare", "legacy-priority")]
        )
    assert journals[0] == journals[1]
    assert all(len(j) > 100_000 for j in journals[0])  # runs with something to decide


def test_replay_verify_reproduces_a_journal_and_catches_tampering(
    two_policies: Path, tmp_path: Path
) -> None:
    journal = two_policies / "fairshare" / "journal.jsonl"
    ok = allot("replay", str(journal), "--verify")
    assert ok.returncode == 0, ok.stderr
    assert "reproduced byte for byte" in ok.stdout

    lines = journal.read_bytes().splitlines()
    index = next(i for i, line in enumerate(lines) if b'"workload.placed"' in line)
    record = orjson.loads(lines[index])
    record["charged"] = not record["charged"]
    lines[index] = orjson.dumps(record)
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_bytes(b"\n".join(lines) + b"\n")
    bad = allot("replay", str(tampered), "--verify")
    assert bad.returncode == 1
    assert f"line {index + 1}" in bad.stderr


def test_replay_what_if_under_another_policy(two_policies: Path, tmp_path: Path) -> None:
    journal = two_policies / "fairshare" / "journal.jsonl"
    result = allot(
        "replay",
        str(journal),
        "--policy",
        "fifo",
        "--set",
        "hysteresis=0.2",
        "--out",
        str(tmp_path),
        "-q",
    )
    assert result.returncode == 0, result.stderr
    summary = orjson.loads((tmp_path / "fifo" / "summary.json").read_bytes())
    original = orjson.loads((two_policies / "fairshare" / "summary.json").read_bytes())
    assert summary["policy"] == "fifo"
    assert summary["workloads"]["submitted"] == original["workloads"]["submitted"]
    config = orjson.loads((tmp_path / "fifo" / "journal.jsonl").read_bytes().splitlines()[0])[
        "config"
    ]
    assert config["ordering"] == "fifo"
    assert config["hysteresis"] == 0.2
    assert config["window"] == 86400.0  # the journal's own config is kept


def test_compare_shows_changes_per_tag_and_allocation(two_policies: Path) -> None:
    result = allot(
        "compare", str(two_policies / "fairshare"), str(two_policies / "legacy-priority")
    )
    assert result.returncode == 0, result.stderr
    for row in ("wait p90 (debug)", "preemptions", "lab/eval: delivered", "lab/train: wait p90"):
        assert row in result.stdout
    # the idle GPU-hours while work waited, from each summary, and their difference
    idle = [
        json.loads((two_policies / p / "summary.json").read_text())["contended_idle"]["gpu_hours"]
        for p in ("fairshare", "legacy-priority")
    ]
    line = next(x for x in result.stdout.splitlines() if "idle GPU-h while work waited" in x)
    for text in (f"{idle[0]:,.1f}", f"{idle[1]:,.1f}", f"{idle[1] - idle[0]:+,.1f}"):
        assert text in line


def test_demo_runs_on_a_given_scenario_and_says_where_reports_are(tmp_path: Path) -> None:
    out = tmp_path / ("a-long-folder-name-so-that-the-paths-pass-eighty-columns" * 2) / "demo"
    result = allot("demo", "--scenario", str(TINY), "--out", str(out), "-q")
    assert result.returncode == 0, result.stderr
    # each path whole on its line (a path broken over two lines cannot be pasted)
    lines = result.stdout.splitlines()
    assert (
        f"  {out / 'fairshare' / 'report.html'}   (gantt: {out / 'fairshare' / 'gantt.png'})"
        in lines
    )
    assert f"  comparison table: {out / 'comparison.md'}" in lines
    summaries = [str(out / p / "summary.json") for p in ("fairshare", "legacy-priority")]
    assert lines[-1] == f"  summaries: {', '.join(summaries)}"
    assert (out / "legacy-priority" / "report.html").exists()
    assert (out / "comparison.md").exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["simulate", "missing.yaml", "--out", "x"], "missing.yaml"),
        (["simulate", str(TINY), "--out", "x", "--set", "windw=3d"], "windw"),
        (
            ["simulate", str(TINY), "--out", "x", "--policy", "nope"],
            "unknown ordering policy 'nope'",
        ),
        (["simulate", str(TINY), "--out", "x", "--set", "window"], "KEY=VALUE"),
        (
            ["simulate", str(TINY), "--out", "x", "--set", "ordering=nope"],
            "unknown ordering policy 'nope'",
        ),
        (["replay", "missing.jsonl", "--verify"], "missing.jsonl"),
        (["compare", "nowhere", "elsewhere"], "nowhere: no such folder"),
    ],
    ids=[
        "missing-scenario",
        "unknown-config-key",
        "unknown-policy",
        "set-without-value",
        "unknown-ordering-in-config",
        "missing-journal",
        "compare-not-a-run",
    ],
)
def test_bad_input_gives_one_clear_line_and_exit_2(
    args: list[str], message: str, tmp_path: Path
) -> None:
    result = allot(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_simulate_ends_by_saying_where_its_results_are_unless_quiet(tmp_path: Path) -> None:
    """As `allot demo` does: simulate wrote report.html, gantt.png and summary.json
    without saying where they went."""
    out = tmp_path / "out"
    result = allot("simulate", str(TINY), "--out", str(out))
    assert result.returncode == 0, result.stderr
    folder = out / "fairshare"
    assert result.stdout.splitlines()[-3:] == [
        "Reports (open in a browser; they work offline):",
        f"  {folder / 'report.html'}   (gantt: {folder / 'gantt.png'})",
        f"  summary: {folder / 'summary.json'}",
    ]
    bare = allot("simulate", str(TINY), "--out", str(out), "--no-report")
    assert bare.returncode == 0, bare.stderr
    assert bare.stdout.splitlines()[-2:] == [
        "Results (--no-report: no report.html or gantt.png):",
        f"  summary: {folder / 'summary.json'}",
    ]
    quiet = allot("simulate", str(TINY), "--out", str(out), "-q")
    assert quiet.returncode == 0 and quiet.stdout == "", (quiet.stdout, quiet.stderr)


def test_the_scenarios_ordering_is_the_default_policy(tmp_path: Path) -> None:
    """No --policy: the config's `ordering` (here from --set) runs, not fairshare."""
    out = tmp_path / "out"
    result = allot(
        "simulate", str(TINY), "--out", str(out), "--set", "ordering=fifo", "--no-report", "-q"
    )
    assert result.returncode == 0, result.stderr
    assert [p.name for p in out.iterdir() if p.is_dir()] == ["fifo"]
    first = orjson.loads((out / "fifo" / "journal.jsonl").read_bytes().splitlines()[0])
    assert first["type"] == "config.set" and first["config"]["ordering"] == "fifo"


def test_bad_scenario_names_the_key(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    shutil.copy(TINY, bad)
    bad.write_text(bad.read_text().replace("rate_per_h: 4", "rate_per_h: -4"))
    result = allot("simulate", str(bad), "--out", str(tmp_path / "out"))
    assert result.returncode == 2
    assert "workloads[0].generate.rate_per_h" in result.stderr


def test_a_long_error_stays_on_one_line(tmp_path: Path) -> None:
    """stderr is no terminal here: rich used to break the line at 80 columns."""
    long_name = "lab/" + "x" * 120
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        TINY.read_text().replace(
            "allocation: lab/eval, count: 40", f"allocation: {long_name}, count: 40"
        )
    )
    result = allot("simulate", str(bad), "--out", str(tmp_path / "out"))
    one_line_error(result, f"unknown allocation '{long_name}'", "leaves are: lab/train, lab/eval")
    assert not (tmp_path / "out").exists()


REJECTING = """
cluster: {name: small, hosts: 2, gpus_per_host: 8}
allocations:
  - {path: a, managers: [pm]}
  - {path: a/x, members: [al]}
config: {window: 1d, max_min_runtime: 8h}
horizon: 12h
workloads:
"""
TOO_LONG = """  - generate: {seed: 2, allocation: a/x, count: 7, arrival: poisson, rate_per_h: 4,
               gpus: 1, runtime: 1h, min_runtime: 9h}
"""
TOO_BIG = """  - generate: {seed: 1, allocation: a/x, count: 20, arrival: poisson, rate_per_h: 4,
               gpus: [8, 64], runtime: 1h, min_runtime: 30m}
"""


@pytest.mark.parametrize(
    ("workloads", "line"),
    [
        (
            TOO_LONG,
            '0 workloads in .* \\(7 rejected: "min_runtime 9h exceeds the cap 8h \\(max_min_runtime\\)',
        ),
        (
            TOO_BIG + TOO_LONG,
            "(\\d+) workloads in .* \\((\\d+) rejected, (\\d+) of them: "
            "\"asks for 64 GPUs but cluster 'small' has 16 registered; submit with at most 16 "
            "GPUs",
        ),
    ],
    ids=["all-rejected", "some-rejected"],
)
def test_simulate_says_how_many_workloads_were_rejected_and_why(
    tmp_path: Path, workloads: str, line: str
) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(REJECTING + workloads)
    result = allot("simulate", str(scenario), "--out", str(tmp_path / "out"), "--no-report")
    assert result.returncode == 0, result.stderr
    summary = orjson.loads((tmp_path / "out" / "fairshare" / "summary.json").read_bytes())
    shown = next(x for x in result.stdout.splitlines() if x.startswith("✓ fairshare: "))
    found = re.search(line, shown)
    assert found, shown
    assert shown.endswith(f"; see {tmp_path / 'out' / 'fairshare' / 'journal.jsonl'})")
    rejected = summary["workloads"]["rejected"]
    if found.groups():
        submitted, total, most = map(int, found.groups())
        assert (submitted, total) == (summary["workloads"]["submitted"], rejected)
        assert submitted + total == 27 and 0 < most < total
        assert list(summary["rejected_by_reason"].values()) == [most, 7]
    else:
        assert rejected == 7 and summary["workloads"]["submitted"] == 0
    journal = (tmp_path / "out" / "fairshare" / "journal.jsonl").read_text()
    assert journal.count('"workload.rejected"') == rejected
    # --quiet drops the line per run, not the news that submissions were refused
    quiet = allot("simulate", str(scenario), "--out", str(tmp_path / "q"), "--no-report", "-q")
    assert quiet.returncode == 0 and quiet.stdout == ""
    (warning,) = quiet.stderr.splitlines()
    said = shown.split(str(tmp_path / "out" / "fairshare"), 1)[1].strip()[1:-1]
    assert said.endswith("journal.jsonl") and "rejected" in said
    out, q = str(tmp_path / "out"), str(tmp_path / "q")
    assert warning == f"warning: fairshare: {said.replace(out, q)}"


def test_simulate_refuses_a_trace_whose_rows_go_to_no_allocation(tmp_path: Path) -> None:
    shutil.copy(Path(__file__).parents[1] / "projections" / "fixtures" / "philly.csv", tmp_path)
    scenario = tmp_path / "s.yaml"
    scenario.write_text(REJECTING + "  - trace: {file: philly.csv, format: philly}\n")
    result = allot("simulate", str(scenario), "--out", str(tmp_path / "out"))
    one_line_error(
        result,
        "s.yaml: workloads[0].trace: philly.csv: 5 of 5 rows go to allocations that are not "
        "leaves of this scenario: '7f04d8', '11d7e2', '6214e9'; leaves are: a/x",
    )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("entry", "where"),
    [
        pytest.param(
            "  - generate: {seed: 1, allocation: a/x, count: 2, arrival: burst, gpus: 1,"
            " runtime: 1h, priority: 2147483648}\n",
            "s.yaml: workloads[0].generate.priority: Input should be less than or equal to",
            id="generate",
        ),
        pytest.param(
            "  - trace: {file: t.csv, format: allot-csv, priority: -2147483648}\n",
            "s.yaml: workloads[0].trace.priority: Input should be greater than or equal to",
            id="trace",
        ),
    ],
)
def test_simulate_refuses_a_priority_beyond_the_domains_bound(
    tmp_path: Path, entry: str, where: str
) -> None:
    """Every submission failed to build: a pydantic traceback, OUT/.fairshare.partial left."""
    (tmp_path / "t.csv").write_text("submit_time,runtime,gpus,allocation\n0,600,1,a/x\n")
    scenario = tmp_path / "s.yaml"
    scenario.write_text(REJECTING + entry)
    result = allot("simulate", str(scenario), "--out", str(tmp_path / "out"))
    one_line_error(result, where)
    assert not (tmp_path / "out").exists()


def test_simulate_warns_of_health_changes_after_the_horizon(tmp_path: Path) -> None:
    """Late trace rows got a warning; late health changes were dropped silently."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        REJECTING + "  - generate: {seed: 1, allocation: a/x, count: 1, arrival: burst, gpus: 1,"
        " runtime: 1h}\nhealth:\n  - {at: 13h, host: h1}\n"
    )
    result = allot("simulate", str(scenario), "--out", str(tmp_path / "out"), "--no-report")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "warning: s.yaml: health[0].at: 13h comes after the horizon (12h): this health change"
        " is not simulated"
    ]


def test_simulate_says_how_many_rows_skip_bad_skipped(tmp_path: Path) -> None:
    rows = ["0,600,1,a/x", "x,600,1,a/x", "60,600,1,a/x", "120,600,nope,a/x"]
    (tmp_path / "t.csv").write_text("submit_time,runtime,gpus,allocation\n" + "\n".join(rows))
    scenario = tmp_path / "s.yaml"
    trace = "  - trace: {file: t.csv, format: allot-csv, skip_bad: true}\n"
    scenario.write_text(REJECTING + trace)
    result = allot("simulate", str(scenario), "--out", str(tmp_path / "out"), "--no-report")
    assert result.returncode == 0, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(
        "warning: s.yaml: workloads[0].trace: t.csv: skipped 2 bad rows of 4 (skip_bad: true);"
        f" the first: {tmp_path / 't.csv'}:3: column submit_time:"
    ), line
    assert "✓ fairshare: 2 workloads in" in result.stdout


@pytest.mark.parametrize(
    ("command", "out", "message"),
    [
        (
            ["simulate", str(TINY)],
            "/proc/nope",
            "--out /proc/nope: cannot create it in /proc: No such file or directory",
        ),
        (["simulate", str(TINY)], "afile", "--out afile: is a file, not a folder"),
        (["simulate", str(TINY)], "afile/sub", "--out afile/sub: afile is a file, not a folder"),
        (
            ["simulate", str(TINY), "-p", "fairshare", "-p", "fifo", "-j", "2"],
            "afile",
            "--out afile: is a file, not a folder",
        ),
        (
            ["simulate", str(TINY), "-p", "fairshare", "-p", "fifo", "-j", "2"],
            "runs",
            "--out runs: runs/fifo is a file, not a folder",
        ),
        (
            ["replay", "journal.jsonl"],
            "/proc/zz",
            "--out /proc/zz: cannot create it in /proc: No such file or directory",
        ),
    ],
    ids=["unwritable", "a-file", "under-a-file", "several-policies", "policy-a-file", "replay"],
)
def test_an_unusable_out_is_one_error_line_before_any_run(
    tmp_path: Path, tiny_journal: Path, command: list[str], out: str, message: str
) -> None:
    if out.startswith("/proc") and not Path("/proc/self").is_dir():
        pytest.skip("needs Linux's /proc")
    (tmp_path / "afile").write_text("not a folder")
    (tmp_path / "runs").mkdir()
    (tmp_path / "runs" / "fifo").write_text("not a folder")
    shutil.copy(tiny_journal, tmp_path / "journal.jsonl")
    before = sorted(p.name for p in tmp_path.rglob("*"))
    result = allot(*command, "--out", out, "-q", cwd=tmp_path)
    one_line_error(result, message)
    assert sorted(p.name for p in tmp_path.rglob("*")) == before


def test_a_second_run_into_a_folder_being_written_is_refused(tmp_path: Path) -> None:
    """Two runs into one --out used to swap each other's .partial folders away (a
    FileNotFoundError traceback): the second is refused while the first holds the lock."""
    import fcntl

    out = tmp_path / "runs"
    out.mkdir()
    held = os.open(out, os.O_RDONLY)  # as a first run holds it
    try:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        refused = allot("simulate", str(TINY), "--out", str(out), "-q", "--no-report")
        one_line_error(refused, f"--out {out}: another allot run is writing there")
        assert list(out.iterdir()) == []
    finally:
        os.close(held)
    ran = allot("simulate", str(TINY), "--out", str(out), "-q", "--no-report")
    assert ran.returncode == 0, ran.stderr
    assert (out / "fairshare" / "journal.jsonl").is_file()


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (hidden ones too), by relative path."""
    return {
        str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()
    }


def test_a_rerun_replaces_each_policy_folder_whole(tmp_path: Path) -> None:
    """A rerun leaves no file of the previous run beside the new ones: --no-report
    used to keep the old report.html and gantt.png, a one-policy run an old
    comparison.md."""
    out = tmp_path / "out"
    first = allot("simulate", str(TINY), "-p", "fairshare", "-p", "fifo", "--out", str(out), "-q")
    assert first.returncode == 0, first.stderr
    before = snapshot(out)
    assert "comparison.md" in before and "fairshare/report.html" in before

    again = allot(
        "simulate", str(TINY), "--out", str(out), "-q", "--no-report", "--set", "hysteresis=0.2"
    )
    assert again.returncode == 0, again.stderr
    after = snapshot(out)
    assert sorted(after) == [  # no comparison.md, no report of the old run, no .partial
        "fairshare/journal.jsonl",
        "fairshare/summary.json",
        "fifo/gantt.png",
        "fifo/journal.jsonl",
        "fifo/report.html",
        "fifo/summary.json",
    ]
    assert after["fairshare/journal.jsonl"] != before["fairshare/journal.jsonl"]
    assert b'"hysteresis":0.2' in after["fairshare/journal.jsonl"].splitlines()[0]
    assert all(after[name] == before[name] for name in after if name.startswith("fifo/"))

    # a what-if of DIR/fairshare's journal into DIR itself: it used to truncate the
    # journal it was reading; now the new run is swapped in once complete
    journal = out / "fairshare" / "journal.jsonl"
    replay = allot("replay", str(journal), "-p", "fairshare", "--out", str(out), "-q")
    assert replay.returncode == 0, replay.stderr
    replayed = orjson.loads((out / "fairshare" / "summary.json").read_bytes())
    original = orjson.loads(after["fairshare/summary.json"])
    assert replayed["workloads"]["submitted"] == original["workloads"]["submitted"] == 80
    assert sorted(p.name for p in out.iterdir()) == ["fairshare", "fifo"]
    assert (out / "fairshare" / "report.html").read_text().count(str(journal)) == 1


DEBUG_FLOOD = Path(__file__).parents[2] / "examples" / "debug-flood.yaml"


@pytest.mark.parametrize(
    ("policies", "whole_group"),
    [(["fairshare"], False), (["fairshare", "fifo"], True)],
    ids=["one-policy", "two-in-parallel"],
)
def test_ctrl_c_keeps_the_previous_results_and_says_where_the_partial_journal_is(
    tmp_path: Path, policies: list[str], whole_group: bool
) -> None:
    """Ctrl-C in a rerun used to leave the new, partial journal beside the old
    summary.json, report.html and gantt.png, the previous journal lost. With two
    policies the runs are worker processes; Ctrl-C reaches the whole process group."""
    out = tmp_path / "out"
    one_policy = len(policies) == 1
    chosen = [arg for policy in policies for arg in ("-p", policy)]
    reports = [] if one_policy else ["--no-report"]  # once is enough (they take seconds)
    first = allot("simulate", str(TINY), *chosen, "--out", str(out), "-q", *reports)
    assert first.returncode == 0, first.stderr
    before = snapshot(out)
    assert ("fairshare/report.html" in before) == one_policy

    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    command = [sys.executable, "-m", "allot.cli", "simulate", str(DEBUG_FLOOD), *chosen]
    command += ["--out", str(out), "--set", "window=3d", "--no-report", "-j", "2"]
    run = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        start_new_session=True,  # its own process group, as a terminal's foreground job
    )  # fmt: skip
    partial = [out / f".{policy}.partial" / "journal.jsonl" for policy in policies]
    deadline = time.monotonic() + 60
    try:
        while not all(p.is_file() and p.stat().st_size for p in partial):
            assert run.poll() is None, "the run ended before it could be interrupted"
            assert time.monotonic() < deadline
            time.sleep(0.02)
        if whole_group:
            os.killpg(run.pid, signal.SIGINT)
        else:
            run.send_signal(signal.SIGINT)
        stdout, stderr = run.communicate(timeout=30)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 130, (stdout, stderr)
    assert "Traceback" not in stderr
    kept = ", ".join(str(out / p) for p in policies)
    journals = ", ".join(str(p) for p in partial)
    assert stderr.splitlines() == [
        f"interrupted: the previous results in {kept} are unchanged; "
        f"the partial journal{' is' if one_policy else 's are'} in {journals}"
    ]
    after = snapshot(out)
    assert {k: v for k, v in after.items() if not k.startswith(".")} == before
    assert sorted(k for k in after if k.startswith(".")) == sorted(
        str(p.relative_to(out)) for p in partial
    )
    for journal in partial:  # whole lines, the new config's
        lines = journal.read_bytes().splitlines()
        assert b'"window":259200.0' in lines[0]
        for line in lines:
            orjson.loads(line)


def test_ctrl_c_while_shared_reports_are_drawn_keeps_every_previous_result(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Several policies share one gantt window, so their reports are drawn after all
    runs: each run used to be swapped in first, and Ctrl-C while drawing left folders
    with no report (the old one gone) that the message called finished."""
    import projections.simulate as simulate
    from allot.cli import main

    out = tmp_path / "out"
    chosen = ["-p", "fairshare", "-p", "fifo"]
    first = allot("simulate", str(TINY), *chosen, "--out", str(out), "-q")
    assert first.returncode == 0, first.stderr
    before = snapshot(out)
    assert "fifo/report.html" in before

    drawn = []

    def interrupted_after_one(folder: Path, *args: Any, **kwargs: Any) -> None:
        if drawn:
            raise KeyboardInterrupt
        drawn.append(folder)

    monkeypatch.setattr(simulate, "write_reports", interrupted_after_one)
    rerun = [*chosen, "--out", str(out), "-q", "-j", "1", "--set", "window=3d"]
    capfd.readouterr()
    monkeypatch.setattr(sys, "argv", ["allot", "simulate", str(TINY), *rerun])
    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 130
    said = capfd.readouterr().err
    assert "finished" not in said
    assert said.startswith("interrupted: the previous results in"), said
    assert said.count("interrupted") == 1, said  # the note alone, no bare "interrupted"
    after = snapshot(out)
    assert {k: v for k, v in after.items() if not k.startswith(".")} == before
    assert drawn == [out / ".fairshare.partial"]  # drawn where the run is, not in place


def test_a_full_disk_is_one_line_and_keeps_the_previous_results(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """ENOSPC while writing (here injected where the report is drawn) used to end in a
    traceback with the .partial folder left behind."""
    import errno

    import projections.simulate as simulate
    from allot.cli import main

    out = tmp_path / "out"
    first = allot("simulate", str(TINY), "--out", str(out), "-q")
    assert first.returncode == 0, first.stderr
    before = snapshot(out)

    def full(*args: Any, **kwargs: Any) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(simulate, "write_reports", full)
    monkeypatch.setattr(sys, "argv", ["allot", "simulate", str(TINY), "--out", str(out), "-q"])
    with pytest.raises(SystemExit) as stop:
        main()
    assert stop.value.code == 2
    assert capfd.readouterr().err.splitlines() == [
        f"error: cannot write the results in {out}: No space left on device; the previous "
        "results there are unchanged"
    ]
    assert snapshot(out) == before  # nothing partial left either


def test_trace_import_refuses_to_overwrite_its_input(tmp_path: Path) -> None:
    trace = tmp_path / "good.csv"
    shutil.copy(Path(__file__).parents[1] / "projections" / "fixtures" / "submissions.csv", trace)
    original = trace.read_bytes()
    (tmp_path / "link.csv").hardlink_to(trace)
    (tmp_path / "sub").mkdir()
    for out in ("good.csv", "./good.csv", "sub/../good.csv", str(trace), "link.csv"):
        result = allot(
            "trace", "import", "good.csv", "--format", "allot-csv", "--out", out, cwd=tmp_path
        )
        one_line_error(result, "--out ", " is the input file good.csv; write the submissions to")
        assert trace.read_bytes() == original
    assert sorted(p.name for p in tmp_path.iterdir()) == ["good.csv", "link.csv", "sub"]
    for out in ("", "sub"):  # `-o ""` is the current folder: a ValueError traceback
        result = allot("trace", "import", "good.csv", "-f", "allot-csv", "-o", out, cwd=tmp_path)
        one_line_error(result, "--out ", " is a folder; give the submissions file's name")
    ok = allot(
        "trace", "import", "good.csv", "-f", "allot-csv", "--out", "subs.jsonl", cwd=tmp_path
    )
    assert ok.returncode == 0, ok.stderr
    assert "submissions written to subs.jsonl" in ok.stdout
    assert trace.read_bytes() == original


@pytest.mark.parametrize("group", [(), ("audit",), ("budget",)], ids=["allot", "audit", "budget"])
def test_command_lists_give_each_command_one_line(group: tuple[str, ...]) -> None:
    """Wide enough, every command in a `--help` list is one line: a hard-wrapped
    docstring paragraph would otherwise print ragged across several."""
    result = allot(*group, "--help", env={"COLUMNS": "400", "TERM": "dumb"})
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if "Commands" in line)
    rows = []
    for line in lines[start + 1 :]:
        if line.lstrip().startswith(("╰", "+")):
            break
        rows.append(line.strip().strip("│|").rstrip())
    assert len(rows) >= 2, result.stdout
    continuation = [r for r in rows if r.startswith("   ")]  # the name column left blank
    assert not continuation, "\n".join(rows)
    names = [r.split()[0] for r in rows if r.strip()]
    assert len(set(names)) == len(names), names


@pytest.mark.parametrize(
    ("command", "sentence"),
    [
        (
            ["submit"],
            "With --test-only nothing is sent: the journal is read (--data or --kafka) and",
        ),
        (["hold"], "`allot release` puts held work back in the queue with its original submit"),
        (["audit", "load"], "the database holds one journal. A last line without its newline"),
    ],
    ids=["submit", "hold", "audit-load"],
)
def test_a_commands_help_reflows_its_paragraphs(command: list[str], sentence: str) -> None:
    """Wide enough, a description paragraph is one line: rich kept the docstring's
    line breaks, so the text printed ragged at any width but the source's."""
    result = allot(*command, "--help", env={"COLUMNS": "400", "TERM": "dumb"})
    assert result.returncode == 0, result.stderr
    assert any(sentence in line for line in result.stdout.splitlines()), result.stdout


def test_long_reads_show_a_progress_bar_on_a_terminal_only(
    tiny_journal: Path, tmp_path: Path
) -> None:
    records = len(tiny_journal.read_bytes().splitlines())
    count = f"{records:,} records"
    code, shown = allot_on_a_terminal("replay", str(tiny_journal), "--verify")
    assert code == 0, shown
    assert "verifying" in shown and count in shown and "reproduced" in shown
    code, shown = allot_on_a_terminal(
        "audit", "load", "--journal", str(tiny_journal), "--db", str(tmp_path / "a.duckdb")
    )
    assert code == 0, shown
    assert "loading" in shown and count in shown
    code, shown = allot_on_a_terminal(
        "audit", "load", "-q", "--journal", str(tiny_journal), "--db", str(tmp_path / "b.duckdb")
    )
    assert code == 0 and "loading" not in shown and f"loaded {records:,} new records" in shown
    piped = allot("replay", str(tiny_journal), "--verify")  # not a terminal: no bar
    assert piped.returncode == 0 and "verifying" not in piped.stdout + piped.stderr
    # several policies share one gantt window: their reports are drawn after all runs,
    # which was half of `allot demo`'s time with nothing on the screen
    out = tmp_path / "out"
    code, shown = allot_on_a_terminal(
        "simulate", str(TINY), "-p", "fairshare", "-p", "fifo", "--out", str(out), "-j", "1"
    )
    assert code == 0, shown
    assert "reports" in shown and "fifo: report.html, gantt.png" in shown
    # a finished run's bar says so at once (it stayed short of the horizon until the
    # slowest run ended), side by side or one after the other
    assert "sim done" in shown
    code, shown = allot_on_a_terminal(
        "simulate", str(TINY), "-p", "fairshare", "-p", "fifo", "--out", str(out), "-j", "2",
        "--no-report",
    )  # fmt: skip
    assert code == 0, shown
    assert shown.count("sim done") >= 2, shown


def test_policies_simulated_side_by_side_give_the_same_outputs(tmp_path: Path) -> None:
    runs = {}
    for jobs in ("1", "2"):
        out = tmp_path / f"j{jobs}"
        args = ["simulate", str(TINY), "-p", "fairshare", "-p", "fifo", "--out", str(out)]
        result = allot(*args, "--no-report", "-q", "--jobs", jobs)
        assert result.returncode == 0, result.stderr
        runs[jobs] = out
    for policy in ("fairshare", "fifo"):
        one, two = (runs[j] / policy for j in ("1", "2"))
        assert (one / "journal.jsonl").read_bytes() == (two / "journal.jsonl").read_bytes()
        summaries = [orjson.loads((d / "summary.json").read_bytes()) for d in (one, two)]
        for summary in summaries:
            del summary["engine"]  # wall time and memory: the only things allowed to differ
        assert summaries[0] == summaries[1]
    assert (runs["1"] / "comparison.md").read_text() == (runs["2"] / "comparison.md").read_text()
    recorded = runs["1"] / "fairshare" / "journal.jsonl"
    for jobs in ("1", "2"):  # a what-if replay under two policies, the same way
        args = ["replay", str(recorded), "-p", "fifo", "-p", "largest-first", "-q", "-j", jobs]
        result = allot(*args, "--out", str(tmp_path / f"replay-j{jobs}"))
        assert result.returncode == 0, result.stderr
    for policy in ("fifo", "largest-first"):
        one, two = (tmp_path / f"replay-j{j}" / policy / "journal.jsonl" for j in ("1", "2"))
        assert one.read_bytes() == two.read_bytes()
    code, shown = allot_on_a_terminal(
        "simulate", str(TINY), "-p", "fairshare", "-p", "fifo", "--out", str(tmp_path / "tty"),
        "--no-report", "-j", "2",
    )  # fmt: skip
    assert code == 0, shown
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", shown)  # without colours and cursor moves
    assert plain.count("sim ") >= 2 and "✓ fairshare" in plain and "✓ fifo" in plain


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        pytest.param(
            ["submit", "--gpus", "1"], ["Missing option '--allocation'"], id="missing-option"
        ),
        pytest.param(["why"], ["Missing argument"], id="missing-argument"),
        pytest.param(
            ["budget", "set", "lab", "abc"], ["'weight'", "budget set --help"], id="bad-number"
        ),
        pytest.param(["queue", "--nope"], ["No such option: --nope"], id="unknown-option"),
        # click's guess compared the dashes too: --horizon came with --allocation
        pytest.param(
            ["submit", "--alocation", "x"],
            ["No such option: --alocation (did you mean --allocation?) (see"],
            id="mistyped-option-gets-the-closest-only",
        ),
        pytest.param(
            ["queue", "--staet"],
            ["No such option: --staet (did you mean --start or --state?) (see"],
            id="mistyped-option-ties-are-all-named",
        ),
        # budget set and host register take a negative number as an argument, so click
        # let unknown options through as arguments: "Got unexpected extra argument(s)"
        pytest.param(
            ["budget", "set", "lab", "1", "--members", "dave"],
            ["No such option: --members (did you mean --member?)"],
            id="unknown-option-of-budget-set",
        ),
        pytest.param(
            ["budget", "set", "lab", "--weight", "3"],
            ["No such option: --weight (WEIGHT is given without a flag)"],
            id="weight-as-an-option",
        ),
        pytest.param(
            ["host", "register", "h0", "--gpus", "8"],
            ["No such option: --gpus (GPUS is given without a flag)"],
            id="gpus-as-an-option",
        ),
        pytest.param(
            ["budget", "set", "lab", "1", "2"], ["unexpected extra argument"], id="extra-argument"
        ),
        pytest.param(["nosuch"], ["No such command 'nosuch'"], id="unknown-command"),
        # kubectl's and kueuectl's verbs were "No such command" (get: "Did you mean
        # 'budget'?"), and Kueue's queue label and priority class click's guesses
        pytest.param(
            ["describe", "workload", "w1"],
            ["No such command 'describe'", "`allot why ID`"],
            id="kubectl-describe",
        ),
        pytest.param(
            ["get", "workloads"], ["No such command 'get'", "`allot queue`"], id="kubectl-get"
        ),
        pytest.param(
            ["stop", "workload", "w1"],
            ["No such command 'stop'", "`allot hold ID`", "`allot requeue ID`"],
            id="kueuectl-stop",
        ),
        pytest.param(
            ["submit", "-A", "lab/a", "-G", "1", "--queue", "team-a"],
            ["No such option: --queue", "leaf allocation here: -A PATH"],
            id="kueue-queue-name",
        ),
        pytest.param(
            ["submit", "-A", "lab/a", "-G", "1", "--priority-class=high"],
            ["No such option: --priority-class", "--priority N"],
            id="kueue-priority-class",
        ),
    ],
)
def test_a_usage_mistake_is_one_error_line_pointing_at_help(
    args: list[str], needles: list[str], tmp_path: Path
) -> None:
    """As every other error: one `error:` line (not click's boxed panel), exit 2."""
    one_line_error(allot(*args, cwd=tmp_path), *needles, "--help`)")


def test_help_and_a_commands_own_exit_code_pass_through(tmp_path: Path) -> None:
    shown = allot("queue", "--help", cwd=tmp_path)
    assert shown.returncode == 0 and "squeue" in shown.stdout
    # `allot submit --wait` exits 1 when no verdict came in time (no scheduler running)
    waited = allot(
        *("submit", "-A", "lab", "-G", "1", "--min-runtime", "1h", "--wait", "0.5s"),
        *("--data", str(tmp_path / "lab")),
        cwd=tmp_path,
    )
    assert waited.returncode == 1, waited.stderr
    assert "still pending after" in waited.stderr


def test_a_headroom_above_one_host_in_eight_is_said(tmp_path: Path) -> None:
    """Asking for more headroom than one host in eight ran with the cap, silently
    (the journal said what was asked); the default asks for nothing."""
    scenario = tmp_path / "s.yaml"
    scenario.write_text(
        "cluster: {name: x, hosts: 16}\nallocations: [{path: a, weight: 1}]\nworkloads: []\n"
    )
    run = ("simulate", str(scenario), "--out", str(tmp_path / "o"), "-q", "--no-report")
    asked = allot(*run, "--set", "headroom_hosts=3")
    assert asked.returncode == 0, asked.stderr
    assert asked.stderr.strip() == (
        "warning: headroom_hosts 3: at most one host in eight is kept for short jobs, "
        "so this 16-host cluster keeps 2"
    )
    default = allot(*run)
    assert default.returncode == 0 and "headroom" not in default.stderr


@pytest.mark.parametrize(
    ("first", "then", "noted"),
    [
        (["--set", "bucket=1h"], [], True),  # a journal from before: 1 h recorded
        (["--set", "bucket=1h"], ["--set", "bucket=1h"], False),  # asked for: kept
        (["--set", "bucket=1h"], ["--set", "bucket=15m"], False),
        ([], [], False),  # a new cluster: 15 minutes
    ],
    ids=["old-default-kept", "hour-asked-for", "moved-to-15m", "new-cluster"],
)
def test_serve_notes_a_journal_still_on_the_old_hourly_bucket(
    tmp_path: Path, first: list[str], then: list[str], noted: bool
) -> None:
    data = str(tmp_path / "lab")
    assert allot("host", "register", "h1", "8", "--data", data).returncode == 0
    once = ["serve", "--data", data, "--once", "--tick", "0"]
    started = allot(*once, *first)
    assert started.returncode == 0 and "note:" not in started.stderr, started.stderr
    again = allot(*once, *then)
    assert again.returncode == 0, again.stderr
    assert ("allot serve: note: the journal's usage bucket is 1h" in again.stderr) == noted
    if noted:
        assert "--set bucket=15m" in again.stderr


def test_allot_data_stands_for_data_when_no_source_is_named(tmp_path: Path) -> None:
    """As $ALLOT_KAFKA for --kafka: one export instead of --data on every command."""
    data = tmp_path / "lab"
    sent = allot("host", "register", "h1", "8", env={"ALLOT_DATA": str(data)})
    assert sent.returncode == 0, sent.stderr
    assert f"to folder {data})" in sent.stdout
    served = allot("serve", "--once", "--tick", "0", env={"ALLOT_DATA": str(data)})
    assert served.returncode == 0, served.stderr
    listed = allot("host", "list", "--json", env={"ALLOT_DATA": str(data)})
    assert listed.returncode == 0, listed.stderr
    assert [h["host"] for h in json.loads(listed.stdout)["hosts"]] == ["h1"]
    # a source on the command line wins; so does $ALLOT_KAFKA (here unreachable)
    other = allot("host", "list", "--data", str(tmp_path / "none"), env={"ALLOT_DATA": str(data)})
    assert other.returncode == 2 and "none: no such folder" in other.stderr
    kafka = allot("host", "list", env={"ALLOT_DATA": str(data), "ALLOT_KAFKA": "127.0.0.1:1"})
    assert kafka.returncode == 2 and "127.0.0.1:1" in kafka.stderr
    # it goes in after the command's words, not at the end: after `--` it was an
    # argument, after an option left without its value that value
    ended = allot("why", "--", "nope", env={"ALLOT_DATA": str(data)})
    assert ended.returncode == 2 and "no workload 'nope'" in ended.stderr
    dangling = allot("queue", "-o", env={"ALLOT_DATA": str(data)})
    assert dangling.returncode == 2 and "Option '-o' requires an argument" in dangling.stderr


def test_a_gantt_window_after_the_run_is_warned_about(tmp_path: Path) -> None:
    """It drew an empty chart without a word."""
    result = allot(
        "simulate", str(TINY), "-p", "fairshare", "--out", str(tmp_path), "-q",
        "--gantt-window", "3000d:3001d",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith("warning: fairshare: --gantt-window starts after the run ended (")
    assert line.endswith(" in): its GPU timeline is empty")


NEVER_STARTS = """\
cluster: {name: tiny, hosts: 2, gpus_per_host: 8}
allocations:
  - {path: lab/a, weight: 1}
  - {path: lab/b, weight: 1}
config: {headroom_hosts: 0}
health:
  - {at: 10m, host: h1, healthy: false, reason: xid-79}
workloads:
  - trace: {file: jobs.csv, format: allot-csv}
"""


def test_simulate_without_a_horizon_ends_when_waiting_work_can_never_start(
    tmp_path: Path,
) -> None:
    # h1 fails for good at 10 min; the 16-GPU job can never start. Without a horizon the
    # run used to tick at every bucket edge for ever, its journal growing by gigabytes
    (tmp_path / "jobs.csv").write_text(
        "submit_time,runtime,gpus,allocation,min_runtime\n0,1h,8,lab/a,15m\n20m,1h,16,lab/b,15m\n"
    )
    scenario = tmp_path / "s.yaml"
    scenario.write_text(NEVER_STARTS)
    out = tmp_path / "out"
    result = allot("simulate", str(scenario), "--out", str(out), "--no-report", "-q")
    assert result.returncode == 0, result.stderr
    (warning,) = result.stderr.splitlines()
    assert warning.startswith("warning: fairshare: nothing could change after 2026-01-01T01:00:00Z")
    assert "1 workload still waiting" in warning and "set a horizon" in warning
    summary = orjson.loads((out / "fairshare" / "summary.json").read_bytes())
    assert summary["engine"]["stalled_at"] == "2026-01-01T01:00:00Z"
    assert summary["period"]["end_iso"] == "2026-01-01T01:00:00Z"
    assert summary["workloads"]["unfinished"] == 1
    assert summary["wait_s"]["all"]["unplaced"] == 1
    verify = allot("replay", str(out / "fairshare" / "journal.jsonl"), "--verify")
    assert verify.returncode == 0, verify.stderr


def test_simulate_says_1_workload_not_1_workloads(tmp_path: Path) -> None:
    scenario = tmp_path / "one.yaml"
    scenario.write_text(
        REJECTING
        + "  - generate: {seed: 1, allocation: a/x, count: 1, arrival: uniform, rate_per_h: 1,\n"
        "               gpus: 1, runtime: 1h, min_runtime: 30m}\n"
    )
    result = allot("simulate", str(scenario), "--out", str(tmp_path / "out"), "--no-report")
    assert result.returncode == 0, result.stderr
    shown = next(x for x in result.stdout.splitlines() if x.startswith("✓ fairshare: "))
    assert shown.startswith("✓ fairshare: 1 workload in "), shown


def test_trace_import_counts_openb_pods_running_at_the_cut(tmp_path: Path) -> None:
    trace = Path(__file__).parents[1] / "projections" / "fixtures" / "openb_pod_list_real_shape.csv"
    result = allot(
        "trace", "import", str(trace), "-f", "alibaba-openb", "-o", "s.jsonl", cwd=tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "2 unfinished (2 still running when the trace was cut)" in result.stdout
    records = [json.loads(line) for line in (tmp_path / "s.jsonl").read_text().splitlines()]
    assert [r["name"] for r in records if "runtime" not in r] == [
        "openb-pod-0002",
        "openb-pod-0003",
    ]

"""`allot replay` on what it cannot replay, and what it refuses: one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.e2e.cli import FIXTURES, TINY, allot, one_line_error

SUBMISSIONS_CSV = FIXTURES.parent.parent / "projections" / "fixtures" / "submissions.csv"


def _not_a_journal(kind: str, tiny_journal: Path, tmp_path: Path) -> tuple[Path, str]:
    """A path that is no journal, and what the error line must say about it."""
    if kind == "scenario":
        return TINY, f"{TINY}:1: not JSON"
    if kind == "csv":
        return SUBMISSIONS_CSV, f"{SUBMISSIONS_CSV}:1: not JSON"
    if kind == "inbox":  # an embedded folder's inbox: requests, not journal records
        data = tmp_path / "data"
        sent = allot("budget", "set", "lab", "1", "--data", str(data), "--as", "root")
        assert sent.returncode == 0, sent.stderr
        inbox = data / "inbox.jsonl"
        return inbox, f"{inbox}:1: not a journal record: a request in an embedded inbox"
    if kind == "bad-record":  # a journal with one record that is no event, at line 6
        lines = tiny_journal.read_bytes().splitlines(keepends=True)
        bad = tmp_path / "bad.jsonl"
        bad.write_bytes(b"".join(lines[:5]) + b'{"type": "workload.placed", "v": 1}\n')
        return bad, f"{bad}:6: not a journal record: id: missing"
    if kind == "empty":
        empty = tmp_path / "empty.jsonl"
        empty.write_bytes(b"")
        return empty, f"{empty}: empty: no journal records"
    if kind == "blank":
        blank = tmp_path / "blank.jsonl"
        blank.write_bytes(b"\n\n  \n")
        return blank, f"{blank}: empty: no journal records"
    if kind == "binary":  # no newline anywhere: no complete record
        binary = tmp_path / "data.bin"
        binary.write_bytes(bytes(range(256)).replace(b"\n", b""))
        return binary, f"{binary}: no journal records"
    if kind == "binary-lines":
        binary = tmp_path / "lines.bin"
        binary.write_bytes(b"\x00\xff\xfe\n\x01\x02\n")
        return binary, f"{binary}:1: not JSON"
    if kind == "folder":  # a folder without journal.jsonl
        folder = tmp_path / "out"
        folder.mkdir()
        return folder, f"{folder}: a folder without journal.jsonl"
    raise AssertionError(kind)


KINDS = [
    "scenario",
    "csv",
    "inbox",
    "bad-record",
    "empty",
    "blank",
    "binary",
    "binary-lines",
    "folder",
]


@pytest.mark.parametrize("mode", [["--verify"], ["--out", "what-if", "-q"]], ids=["verify", "out"])
@pytest.mark.parametrize("kind", KINDS)
def test_replay_of_what_is_no_journal_names_the_file_and_the_problem(
    kind: str, mode: list[str], tiny_journal: Path, tmp_path: Path
) -> None:
    path, message = _not_a_journal(kind, tiny_journal, tmp_path)
    result = allot("replay", str(path), *mode, cwd=tmp_path)
    one_line_error(result, message)
    assert "reproduced" not in result.stdout
    assert not (tmp_path / "what-if").exists()


def test_replay_takes_a_run_folder_as_compare_does(tiny_journal: Path, tmp_path: Path) -> None:
    run = tiny_journal.parent  # <out>/fairshare
    verified = allot("replay", str(run), "--verify")
    assert verified.returncode == 0, verified.stderr
    records = len(tiny_journal.read_bytes().splitlines())
    assert f"in {records:,} records reproduced byte for byte" in verified.stdout
    what_if = allot("replay", str(run), "--out", str(tmp_path), "-p", "fifo", "-q")
    assert what_if.returncode == 0, what_if.stderr
    assert (tmp_path / "fifo" / "summary.json").exists()


@pytest.mark.parametrize(
    ("options", "refused"),
    [
        (["--policy", "fifo"], "--policy/--set/--budget"),
        (["-p", "fairshare"], "--policy/--set/--budget"),
        (["--set", "window=2d"], "--policy/--set/--budget"),
        (["--budget", "lab=2"], "--policy/--set/--budget"),
        (["--out", "somewhere"], "--out/--jobs"),
        (["--jobs", "2"], "--out/--jobs"),
    ],
    ids=["policy", "same-policy", "set", "budget", "out", "jobs"],
)
def test_replay_verify_refuses_options_it_would_ignore(
    options: list[str], refused: str, tiny_journal: Path, tmp_path: Path
) -> None:
    result = allot("replay", str(tiny_journal), "--verify", *options, cwd=tmp_path)
    one_line_error(result, f"{refused} have no effect with --verify")
    assert "reproduced" not in result.stdout
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_replay_set_with_a_typo_says_which_key_was_meant_as_simulate_does(
    tiny_journal: Path, tmp_path: Path
) -> None:
    """`--set windw=1d` said "unknown config key 'windw' (known: ...)" on replay, where
    simulate names --set and the key meant."""
    replayed = allot("replay", str(tiny_journal), "--set", "windw=1d", "--out", str(tmp_path))
    simulated = allot("simulate", str(TINY), "--set", "windw=1d", "--out", str(tmp_path))
    one_line_error(replayed, "--set: windw: unknown key 'windw' (did you mean 'window'?)")
    assert replayed.stderr == simulated.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_replay_set_with_a_bad_value_names_set_as_simulate_does(
    tiny_journal: Path, tmp_path: Path
) -> None:
    """`--set window=3days` said "config key 'window': not a duration" on replay,
    without naming --set, where simulate says "--set: window: not a duration"."""
    replayed = allot("replay", str(tiny_journal), "--set", "window=3days", "--out", str(tmp_path))
    simulated = allot("simulate", str(TINY), "--set", "window=3days", "--out", str(tmp_path))
    one_line_error(replayed, "--set: window: not a duration: '3days'")
    assert replayed.stderr == simulated.stderr
    assert list(tmp_path.iterdir()) == []  # nothing written


DRAINS = FIXTURES.parent.parent / "projections" / "fixtures" / "drains.yaml"
NO_CHANGE = {"", "+0", "+0s", "+0.0", "+0.000"}


def test_compare_of_a_run_and_its_replay_shows_no_changes(tmp_path: Path) -> None:
    """A scenario whose cluster drains hours before its horizon, simulated, then
    replayed under the same policy and config: the same run, measured over the same
    24 hours (the replay used to stop measuring at the last record)."""
    simulated = allot("simulate", str(DRAINS), "--out", str(tmp_path / "o1"), "-q", "--no-report")
    assert simulated.returncode == 0, simulated.stderr
    journal = tmp_path / "o1" / "fairshare" / "journal.jsonl"
    replayed = allot("replay", str(journal), "--out", str(tmp_path / "same"), "-q")
    assert replayed.returncode == 0, replayed.stderr
    result = allot(
        "compare",
        str(tmp_path / "o1" / "fairshare"),
        str(tmp_path / "same" / "fairshare"),
        env={"COLUMNS": "200"},
    )
    assert result.returncode == 0, result.stderr
    rows = [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in result.stdout.splitlines()
        if line.startswith("│")
    ]
    occupancy = next(row for row in rows if row[0] == "occupancy")
    assert occupancy[1] == occupancy[2] and occupancy[3] == "+0.000", result.stdout
    changed = [row for row in rows if row[-1] not in NO_CHANGE]
    assert not changed, result.stdout


TEAMS = DRAINS.with_name("two_teams.yaml")


def test_a_budget_what_if_and_its_comparison_by_allocation(tmp_path: Path) -> None:
    """A manager's question: if lab/a had three times lab/b's weight, who would wait
    longer? The replay says so by allocation, and a budget change the scheduler refuses
    in the what-if is a warning, not silence."""
    simulated = allot("simulate", str(TEAMS), "--out", str(tmp_path / "o"), "-q", "--no-report")
    assert simulated.returncode == 0, simulated.stderr
    journal = tmp_path / "o" / "fairshare" / "journal.jsonl"
    lines = journal.read_text().splitlines(keepends=True)
    stray = json.loads(lines[-1]) | {"type": "budget.set", "id": "stray", "actor": "eve"}
    stray |= {"allocation": "lab/b", "weight": 5}
    edited = tmp_path / "edited.jsonl"
    edited.write_text("".join([*lines[:-1], json.dumps(stray) + "\n", lines[-1]]))
    what_if = allot(
        "replay", str(edited), "--out", str(tmp_path / "w"), "--budget", "lab/a=3", "-q",
        "--no-report",
    )  # fmt: skip
    assert what_if.returncode == 0, what_if.stderr
    assert "warning: fairshare: 1 budget.set input refused" in what_if.stderr
    assert "'eve' is not a manager of 'lab'" in what_if.stderr
    result = allot(
        "compare", str(tmp_path / "o" / "fairshare"), str(tmp_path / "w" / "fairshare"),
        env={"COLUMNS": "200"},
    )  # fmt: skip
    rows = {
        cells[0]: cells[1:]
        for line in result.stdout.splitlines()
        if line.startswith("│") and (cells := [c.strip() for c in line.split("│")[1:-1]])
    }
    assert rows["weight lab/a"][:2] == ["1", "3"]
    assert rows["lab/b: never started"][2].startswith("+"), result.stdout
    assert rows["lab/a: GPU-h received"][2].startswith("+"), result.stdout


def test_compare_says_when_a_summary_is_from_an_older_allot(tmp_path: Path) -> None:
    simulated = allot("simulate", str(TEAMS), "--out", str(tmp_path / "o"), "-q", "--no-report")
    assert simulated.returncode == 0, simulated.stderr
    old = tmp_path / "old"
    old.mkdir()
    summary = json.loads((tmp_path / "o" / "fairshare" / "summary.json").read_text())
    del summary["config"], summary["weights"], summary["wait_s"]["by_allocation"]
    (old / "summary.json").write_text(json.dumps(summary))
    result = allot("compare", str(old), str(tmp_path / "o" / "fairshare"))
    assert result.returncode == 0, result.stderr
    assert f"note: {old} was summarized by an older allot" in result.stderr.replace("\n", " ")
    assert "fairshare" not in result.stderr  # the new run needs no note


def test_a_journal_cut_mid_line_is_replayed_without_that_line_and_says_so(
    tiny_journal: Path, tmp_path: Path
) -> None:
    """The readers leave a partial last line out (rightly, for a journal being written);
    replay of a file cut short said nothing about it."""
    whole = tiny_journal.read_bytes()
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(whole + whole.splitlines()[-1][:40])  # a record half written
    result = allot("replay", str(cut), "--verify")
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        f"warning: {cut} ends in the middle of a line (cut short, or still being written); "
        "that last line is left out"
    ]
    whole_run = allot("replay", str(tiny_journal), "--verify")
    assert whole_run.returncode == 0 and "warning" not in whole_run.stderr


def test_a_journal_cut_inside_an_inputs_decisions_is_not_called_nondeterministic(
    tiny_journal: Path, tmp_path: Path
) -> None:
    """Cut mid-line after an input's first decision, the replay's later decisions of
    that input have nothing to match: that is the cut, not a difference ('✗ not
    reproduced' sent people hunting for non-determinism). Cut at a line's end instead,
    the same gap is still a difference."""
    lines = tiny_journal.read_bytes().splitlines(keepends=True)
    decision = [b'"cause":' in line and b'"cause":null' not in line for line in lines]
    at = next(
        i
        for i in range(1, len(lines) - 2)
        if not decision[i - 1] and decision[i] and decision[i + 1]
    )  # an input whose decisions are lines at, at + 1, ...
    more = 1
    while at + more < len(decision) and decision[at + more]:
        more += 1
    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[: at + 1]) + lines[at + 1][:30])
    result = allot("replay", str(cut), "--verify")
    assert result.returncode == 0, (result.stdout, result.stderr)
    left = more - 1
    assert f"(the last input's {left} decision{'s' if left > 1 else ''} after the cut line" in (
        result.stdout
    )
    whole_lines = tmp_path / "short.jsonl"
    whole_lines.write_bytes(b"".join(lines[: at + 1]))
    short = allot("replay", str(whole_lines), "--verify")
    assert short.returncode == 1 and "the replay made decisions the journal lacks" in short.stderr


FAILING_HOST = """\
cluster: {name: fail, hosts: 3, gpus_per_host: 8}
allocations:
  - {path: a, weight: 1}
config: {window: 1d, headroom_hosts: 0}
horizon: 12h
health:
  - {at: 1h, host: h0, healthy: false, reason: xid-79}
  - {at: 6h, host: h0, healthy: true, reason: fixed}
workloads:
  - generate: {seed: 5, allocation: a, arrival: burst, count: 3, gpus: 8, runtime: 4h,
               min_runtime: 2h, resumable: true, tags: [train]}
"""


def test_a_replay_keeps_the_runs_checkpoint_loss(tmp_path: Path) -> None:
    """The journal does not hold the simulated launcher's checkpoint_loss: a replay
    under the same policy dropped it and finished the preempted work earlier, silently."""
    scenario = tmp_path / "fail.yaml"
    scenario.write_text(FAILING_HOST)
    run = allot(
        "simulate", str(scenario), "--out", str(tmp_path / "run"), "-q", "--no-report",
        "--set", "checkpoint_loss=30m",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    journal = tmp_path / "run" / "fairshare" / "journal.jsonl"
    replayed = allot("replay", str(journal), "--out", str(tmp_path / "again"), "-q", "--no-report")
    assert replayed.returncode == 0, replayed.stderr
    assert not (tmp_path / "again" / "fairshare" / "report.html").exists()
    assert "replaying with the run's checkpoint_loss=30m" in replayed.stderr
    before = json.loads((tmp_path / "run" / "fairshare" / "summary.json").read_text())
    after = json.loads((tmp_path / "again" / "fairshare" / "summary.json").read_text())
    assert before["occupancy"] == after["occupancy"] and before["gpu_hours"] == after["gpu_hours"]
    dropped = allot(
        "replay", str(journal), "--out", str(tmp_path / "no-loss"), "-q",
        "--set", "checkpoint_loss=0",
    )  # fmt: skip
    assert dropped.returncode == 0 and "replaying with" not in dropped.stderr
    without = json.loads((tmp_path / "no-loss" / "fairshare" / "summary.json").read_text())
    assert without["gpu_hours"]["busy"] < before["gpu_hours"]["busy"]  # less work redone


def test_compare_warns_when_the_runs_cover_different_periods(tmp_path: Path) -> None:
    """Runs of one scenario under a 12h and a 24h horizon: the longer one's waits and
    delivered shares count twelve more hours, and compare printed its table as if the
    two were a policy's difference alone."""
    longer = tmp_path / "longer.yaml"
    longer.write_text(TEAMS.read_text().replace("horizon: 12h", "horizon: 24h"))
    for scenario, out in ((TEAMS, "short"), (longer, "long")):
        ran = allot("simulate", str(scenario), "--out", str(tmp_path / out), "-q", "--no-report")
        assert ran.returncode == 0, ran.stderr
    short, long = tmp_path / "short" / "fairshare", tmp_path / "long" / "fairshare"
    start = json.loads((short / "summary.json").read_text())["period"]["start_iso"]
    assert json.loads((long / "summary.json").read_text())["period"]["horizon"] is True
    result = allot("compare", str(short), str(long))
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: these runs cover different periods (A: "
        f"{start} to {_iso_after(start, 12)}, at its horizon, 59 workloads still "
        f"unfinished (53 pending and 6 running); B: {start} to {_iso_after(start, 24)}, at "
        "its horizon, 5 workloads still unfinished (1 pending and 4 running)): waits, "
        "counts and delivered are not comparable; give both the same horizon"
    ]
    # a summary written before the horizon was recorded compares as before
    old = tmp_path / "old"
    old.mkdir()
    summary = json.loads((short / "summary.json").read_text())
    del summary["period"]["horizon"], summary["period"]["ended"]
    (old / "summary.json").write_text(json.dumps(summary))
    same = allot("compare", str(old), str(short))
    assert same.returncode == 0 and "warning" not in same.stderr, same.stderr
    # and one without any period says it cannot tell
    del summary["period"]
    (old / "summary.json").write_text(json.dumps(summary))
    unknown = allot("compare", str(old), str(long))
    assert unknown.returncode == 0, unknown.stderr
    assert "warning" not in unknown.stderr
    assert f"note: {old} does not record the period measured" in unknown.stderr


def _iso_after(start: str, hours: int) -> str:
    from datetime import datetime, timedelta

    moment = datetime.strptime(start, "%Y-%m-%dT%H:%M:%SZ") + timedelta(hours=hours)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def test_simulate_warns_when_its_policies_runs_end_at_different_times(tmp_path: Path) -> None:
    """Without a horizon each policy's run lasts until its own work has ended: the
    comparison table set a 14-hour run beside a 20-hour one without a word."""
    open_ended = tmp_path / "open.yaml"
    open_ended.write_text(TEAMS.read_text().replace("horizon: 12h\n", ""))
    out = tmp_path / "o"
    result = allot(
        "simulate", str(open_ended), "-p", "fairshare", "-p", "legacy-priority", "--out",
        str(out), "-q", "--no-report",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    ends = {
        policy: json.loads((out / policy / "summary.json").read_text())["period"]
        for policy in ("fairshare", "legacy-priority")
    }
    assert ends["fairshare"]["end"] != ends["legacy-priority"]["end"]
    assert not ends["fairshare"]["horizon"]
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("warning:")]
    assert line.startswith("warning: the policies' runs cover different periods (fairshare: ")
    for period in ends.values():
        assert f"{period['start_iso']} to {period['end_iso']}, when its work ended" in line
    # and with a horizon the periods agree: no warning
    fixed = allot(
        "simulate", str(TEAMS), "-p", "fairshare", "-p", "fifo", "--out", str(tmp_path / "h"),
        "-q", "--no-report",
    )  # fmt: skip
    assert fixed.returncode == 0 and "warning" not in fixed.stderr, fixed.stderr


def test_a_replay_of_a_journal_that_stops_with_work_left_says_so(tmp_path: Path) -> None:
    """A live journal read mid-run: a1 runs, a2 waits when the recording stops. The
    replay's period ends there, not at a horizon (summary and compare said "at its
    horizon"), and the command says what was left unfinished."""
    from domain.config import SchedulerConfig
    from projections.usage import HOUR, JournalBuilder

    j = JournalBuilder()
    j.add("config.set", config={**SchedulerConfig().model_dump(mode="json"), "admins": ["admin"]})
    j.host("h0").budget("lab", 1).budget("lab/a", 1)
    j.submit("a1", "lab/a", 8).place("a1", {"h0": list(range(8))})
    j.at(600).submit("a2", "lab/a", 8)
    j.at(HOUR).add("clock.tick")
    journal = j.write(tmp_path / "live.jsonl")
    out = tmp_path / "what-if"
    ran = allot("replay", str(journal), "--set", "window=3d", "--out", str(out), "--no-report")
    assert ran.returncode == 0, ran.stderr
    assert (
        "note: fairshare: the replay stopped at 2026-01-01T01:00:00Z, where the recorded "
        "journal ends, 2 workloads still unfinished (1 pending and 1 running); the pending "
        "work's waits so far are in no wait percentile"
    ) in ran.stderr
    assert "horizon" not in ran.stderr
    summary = json.loads((out / "fairshare" / "summary.json").read_text())
    assert summary["period"]["ended"] == "recorded"
    assert (
        summary["workloads"]["unfinished_pending"],
        summary["workloads"]["unfinished_running"],
    ) == (1, 1)

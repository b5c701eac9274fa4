"""Budget and config what-ifs of a recorded journal (`allot replay --budget/--set`):
who gets more and who waits longer, by allocation; later config changes of a live
journal replay as changes, keeping the what-if's own policy and overrides."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from projections.compare import compare_summaries
from projections.journal import JournalError
from projections.replay import BudgetChange, journal_run_spec
from projections.scenario import load_scenario
from projections.simulate import RunSpec, comparison_markdown, run_policy

TEAMS = Path(__file__).parent / "fixtures" / "two_teams.yaml"
HOUR = 3600.0


def records(folder: Path) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in (folder / "journal.jsonl").read_bytes().splitlines()]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    out = tmp_path_factory.mktemp("teams")
    summary = run_policy(
        RunSpec.of_scenario(load_scenario(TEAMS, {})), "fairshare", out, reports=False
    )
    return out / "fairshare" / "journal.jsonl", summary


def what_if(journal: Path, out: Path, *budgets: str, policy: str = "fairshare", **config: Any):
    spec = journal_run_spec(journal, config, {}, [BudgetChange.parse(b) for b in budgets])
    return run_policy(spec, policy, out, reports=False)


def test_a_bigger_weight_moves_gpu_hours_and_waits_to_that_team(base, tmp_path: Path) -> None:
    journal, before = base
    after = what_if(journal, tmp_path, "lab/a=3")
    received = lambda s, leaf: s["delivered"]["received_gpu_h"][leaf]  # noqa: E731
    assert received(after, "lab/a") > 1.3 * received(before, "lab/a")
    assert received(after, "lab/b") < 0.7 * received(before, "lab/b")
    waits = lambda s, leaf: s["wait_s"]["by_allocation"][leaf]  # noqa: E731
    assert waits(after, "lab/a")["unplaced"] < waits(before, "lab/a")["unplaced"]
    assert waits(after, "lab/b")["unplaced"] > waits(before, "lab/b")["unplaced"]
    assert after["weights"]["lab/a"] == 3.0 and before["weights"]["lab/a"] == 1.0
    # every recorded change of lab/a carries the what-if's weight; nothing was refused
    sets = [r for r in records(tmp_path / "fairshare") if r["type"] == "budget.set"]
    assert [r["weight"] for r in sets if r["allocation"] == "lab/a"] == [3.0]
    assert after["rejected_inputs"] == {}
    rows = {label: (a, b) for label, a, b, _ in compare_summaries(before, after)}
    assert rows["weight lab/a"] == ("1", "3")
    assert {"lab/a: wait p90", "lab/b: wait p90", "lab/b: never started"} <= rows.keys()


def test_a_change_from_a_moment_on_is_added_after_that_moments_inputs(base, tmp_path: Path) -> None:
    journal, before = base
    start = before["period"]["start"]
    after = what_if(journal, tmp_path, "lab/b=0@6h")
    journaled = records(tmp_path / "fairshare")
    (added,) = [r for r in journaled if r["id"] == "what-if-1-budget-0"]
    assert added["time"] == start + 6 * HOUR and added["weight"] == 0.0
    assert added["allocation"] == "lab/b" and added["actor"] == "scenario"
    assert not [r for r in journaled if r["type"].endswith(".rejected")]
    # from then on lab/b is owed nothing: lab/a gets the cluster
    assert (
        after["delivered"]["received_gpu_h"]["lab/a"]
        > before["delivered"]["received_gpu_h"]["lab/a"]
    )


def test_a_what_if_of_a_what_if_adds_its_own_changes(base, tmp_path: Path) -> None:
    """Both rounds' added changes stand: the second's ids used to repeat the first's and
    be refused as duplicates."""
    journal, _ = base
    what_if(journal, tmp_path / "one", "lab/b=2@2h")
    second = what_if(
        tmp_path / "one" / "fairshare" / "journal.jsonl", tmp_path / "two", "lab/b=1@3h"
    )
    journaled = records(tmp_path / "two" / "fairshare")
    added = [r["id"] for r in journaled if r["id"].startswith("what-if-")]
    assert added == ["what-if-1-budget-0", "what-if-2-budget-0"]
    assert second["rejected_inputs"] == {} and second["weights"]["lab/b"] == 1.0


@pytest.mark.parametrize(
    "given, says",
    [
        ("lab/nope=2", "the journal never sets lab/nope"),
        ("lab/a", "give PATH=WEIGHT"),
        ("lab/a=-1", "a number from 0 to"),
        ("lab/a=2@", "say when after '@'"),
        ("lab/a=2@40h", "outside the journal"),
        ("lab/a=2@soon", "TIME is a duration"),
    ],
    ids=["unknown-path", "no-weight", "negative", "no-time", "past-the-end", "not-a-time"],
)
def test_a_budget_what_if_it_cannot_make_is_an_error(base, given: str, says: str) -> None:
    journal, _ = base
    with pytest.raises(JournalError, match=says):
        journal_run_spec(journal, {}, {}, [BudgetChange.parse(given)])


def test_a_later_config_change_replays_as_one_keeping_the_what_ifs_policy_and_overrides(
    base, tmp_path: Path
) -> None:
    """A live journal records a restarted server's new config (actor `allot`): it used to
    be refused in the replay ("'allot' may not change the scheduler config")."""
    journal, before = base
    lines = journal.read_bytes().splitlines(keepends=True)
    first = orjson.loads(lines[0])
    assert first["type"] == "config.set"
    mid = next(
        i
        for i, x in enumerate(lines)
        if orjson.loads(x)["time"] > before["period"]["start"] + 4 * HOUR
    )
    later = {
        **first,
        "id": "teams/config@0:99",
        "time": orjson.loads(lines[mid])["time"],
        "actor": "allot",
        "config": {**first["config"], "hysteresis": 0.3},
    }
    live = tmp_path / "live.jsonl"
    live.write_bytes(b"".join([*lines[:mid], orjson.dumps(later) + b"\n", *lines[mid:]]))
    after = what_if(live, tmp_path / "out", policy="fifo", window=7200.0)
    journaled = records(tmp_path / "out" / "fifo")
    assert not [r for r in journaled if r["type"] == "config.rejected"]
    configs = [r["config"] for r in journaled if r["type"] == "config.set"]
    assert len(configs) == 2
    assert all(c["ordering"] == "fifo" and c["window"] == 7200.0 for c in configs)
    assert configs[1]["hysteresis"] == 0.3 and after["config"]["hysteresis"] == 0.3


def test_a_refused_budget_change_is_counted_not_silent(base, tmp_path: Path) -> None:
    journal, _ = base
    lines = journal.read_bytes().splitlines(keepends=True)
    stray = {
        "type": "budget.set", "v": 1, "id": "stray", "time": orjson.loads(lines[-1])["time"] - 60,
        "cluster": "teams", "actor": "nobody", "allocation": "lab/a", "weight": 9.0,
    }  # fmt: skip
    edited = tmp_path / "edited.jsonl"
    edited.write_bytes(b"".join([*lines[:-1], orjson.dumps(stray) + b"\n", lines[-1]]))
    after = what_if(edited, tmp_path / "out")
    refused = after["rejected_inputs"]["budget.set"]
    assert refused["count"] == 1 and "'nobody' is not a manager of 'lab'" in refused["first"]


def test_comparison_md_has_a_table_by_allocation(base, tmp_path: Path) -> None:
    journal, before = base
    after = what_if(journal, tmp_path, "lab/a=3")
    text = comparison_markdown({"equal": before, "a=3": after})
    by_leaf = text.split("By allocation")[1]
    assert "| lab/a: wait p90 |" in by_leaf and "| lab/b: never started |" in by_leaf
    row = next(x for x in by_leaf.splitlines() if x.startswith("| lab/b: never started |"))
    cells = [c.strip() for c in row.strip("|").split("|")][1:]
    # `N of M`, as the main table counts them
    started = [re.fullmatch(r"([\d,]+) of ([\d,]+)", c) for c in cells]
    assert all(started), cells
    assert int(started[1][1].replace(",", "")) > int(started[0][1].replace(",", ""))

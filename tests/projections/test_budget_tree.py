"""`BudgetTree`: the request commands' view of the budget tree, from its records alone."""

from __future__ import annotations

from typing import Any

from projections.budget_tree import BudgetTree


def _set(path: str, weight: float | None = 1) -> dict[str, Any]:
    return {"type": "budget.set", "allocation": path, "weight": weight}


def _removed(path: str) -> dict[str, Any]:
    return {"type": "budget.removed", "allocation": path}


def test_paths_and_children_follow_sets_and_removals() -> None:
    tree = BudgetTree.from_records(
        [_set("lab"), _set("lab/a"), _set("lab/b"), _set("lab/a", 2), _removed("lab/b")]
    )
    assert tree.paths == {"lab", "lab/a"}
    assert tree.children_of("lab") == ["lab/a"]
    assert tree.children_of(None) == ["lab"]
    assert tree.children_of("lab/a") == []


def test_zero_share_at_names_the_topmost_node_without_a_share() -> None:
    records = [_set("lab"), _set("lab/a", 0), _set("lab/a/x"), _set("lab/b"), _set("lab/b/y")]
    tree = BudgetTree.from_records(records)
    assert tree.zero_share_at("lab/a/x") == "lab/a"
    assert tree.zero_share_at("lab/a") == "lab/a"
    assert tree.zero_share_at("lab/b/y") is None
    assert tree.zero_share_at("lab/nowhere") is None
    # a weight kept (None) keeps the zero
    assert (
        BudgetTree.from_records([*records, _set("lab/a", None)]).zero_share_at("lab/a") == "lab/a"
    )


def test_a_path_under_a_parent_never_set_is_still_a_path() -> None:
    """The typo check compares against the paths the journal names, whether or not a
    tree could hold them; a record with no number for a weight or no path is skipped."""
    tree = BudgetTree.from_records([_set("lab/orphan"), _set("x", "heavy"), {"type": "budget.set"}])
    assert tree.paths == {"lab/orphan", "x"}
    assert tree.children_of(None) == ["x"]
    assert "x" not in tree.shares

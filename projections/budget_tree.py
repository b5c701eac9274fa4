"""The budget tree at a journal's end, from its `budget.set` and `budget.removed`
records alone (a byte search finds them: folding a lab's week for this took 0.8 s in a
folder). The tree changes by nothing else, and the journal holds only the changes
accepted. The request commands read it for their hints (a likely typo, a zero share,
members given to a node with children):

    tree = BudgetTree.from_records(records_of_type(("budget.set", "budget.removed"), ...))
    tree.paths, tree.children_of("lab"), tree.zero_share_at("lab/olmo")
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from domain.tree import AllocationTree, ancestors, parent_of
from projections.budget_log import USER_LIMITS


class BudgetTree:
    """`paths`: every allocation whose last record set it. `shares`: the same records
    applied to a domain `AllocationTree` as far as they apply (one the scheduler could
    not have accepted, a parent never set or a weight that is no number, fails part
    way and is skipped). On a journal the scheduler wrote both hold the same paths;
    `paths` never needs a parent, so the typo check compares against exactly the paths
    the journal names."""

    def __init__(self) -> None:
        self.paths: set[str] = set()
        self.shares = AllocationTree()

    @classmethod
    def from_records(cls, records: Iterable[dict[str, Any]]) -> BudgetTree:
        tree = cls()
        for record in records:
            tree.apply(record)
        return tree

    def apply(self, record: dict[str, Any]) -> None:
        path, weight = record.get("allocation"), record.get("weight")
        if not isinstance(path, str):
            return
        removed = record.get("type") == "budget.removed"
        if removed:
            self.paths.discard(path)
        else:
            self.paths.add(path)
        try:
            if removed:
                self.shares.remove(path)
            else:
                self.shares.set(
                    path, None if weight is None else float(weight), limits=_limits(record)
                )
        except (KeyError, ValueError, TypeError):
            pass  # not a record the scheduler accepted as such: skipped, as for a hint

    def user_limits(self, path: str) -> dict[str, int | None] | None:
        """`path`'s per-user limits by field name (None: no limit), or None when the
        tree has no such allocation."""
        node = self.shares.nodes.get(path)
        if node is None:
            return None
        return {name: getattr(node, name) for name in USER_LIMITS}

    def children_of(self, path: str | None) -> list[str]:
        """The paths directly under `path` (the top-level ones for None), sorted."""
        return sorted(p for p in self.paths if parent_of(p) == path)

    def zero_share_at(self, allocation: str) -> str | None:
        """The topmost node of `allocation`'s path whose share is zero (its work runs
        unallocated, `State.allocated`); None when its share is not zero or the tree
        has no such node."""
        if allocation not in self.shares:
            return None
        return next((p for p in ancestors(allocation) if self.shares.share(p) <= 0), None)


def _limits(record: dict[str, Any]) -> dict[str, int]:
    """The per-user limits a `budget.set` record sets (a value below 1 removes one)."""
    return {name: value for name in USER_LIMITS if type(value := record.get(name)) is int}

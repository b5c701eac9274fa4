"""The budget tree: allocations addressed by path, their weights, shares and principals.

A node's *share* of the cluster is the product of `weight / sum(sibling weights)`
along its path. Shares are recomputed only when a weight changes (rare), so reading
them is a dict lookup.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from domain.text import is_word


def parent_of(path: str) -> str | None:
    head, sep, _ = path.rpartition("/")
    return head if sep else None


def ancestors(path: str) -> list[str]:
    """`a/b/c` -> [`a`, `a/b`, `a/b/c`] (root first, the path itself last)."""
    parts = path.split("/")
    return ["/".join(parts[: i + 1]) for i in range(len(parts))]


@lru_cache(maxsize=65536)
def ancestor_chain(path: str) -> tuple[str, ...]:
    """`ancestors(path)` as a tuple, memoized (the ledger asks on every rate change)."""
    return tuple(ancestors(path))


def valid_path(path: str) -> bool:
    """Names separated by '/': each non-empty, printable, without whitespace (a tab or
    newline in a name would break every table and `squeue`-style line that shows it)."""
    return bool(path) and all(is_word(part) for part in path.split("/"))


@dataclass(frozen=True, slots=True)
class Resolved:
    """A principals list after named additions and removals, and the names that changed
    nothing: `already` (added, were there) and `absent` (removed, were not)."""

    names: tuple[str, ...]
    already: tuple[str, ...]
    absent: tuple[str, ...]


def resolve_names(
    current: tuple[str, ...],
    replace: tuple[str, ...] | None,
    add: tuple[str, ...] | None,
    remove: tuple[str, ...] | None,
) -> Resolved:
    """`replace` (or `current`) with `remove` taken out and `add` appended, in order.
    Applying the same add and remove to the result changes nothing, so a journal record
    that carries the result and the changes folds to the same list."""
    base = current if replace is None else tuple(replace)
    add, remove = tuple(dict.fromkeys(add or ())), tuple(dict.fromkeys(remove or ()))
    there = set(base)
    gone = set(remove)
    names = tuple(n for n in base if n not in gone) + tuple(n for n in add if n not in there)
    return Resolved(
        names,
        already=tuple(n for n in add if n in there),
        absent=tuple(n for n in remove if n not in there),
    )


@dataclass(slots=True)
class Node:
    path: str
    weight: float
    managers: tuple[str, ...] = ()
    members: tuple[str, ...] = ()
    children: list[str] = field(default_factory=list)
    share: float = 0.0
    # per-user limits over the subtree (None: no limit; see `AllocationTree.limits_of`)
    max_gpus_per_user: int | None = None
    max_pending_per_user: int | None = None

    @property
    def is_leaf(self) -> bool:
        return not self.children


class AllocationTree:
    """Nodes by path. Top-level nodes are siblings of each other."""

    __slots__ = ("_leaves", "_managers", "limited", "nodes", "roots")

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.roots: list[str] = []
        self._leaves: list[str] = []
        self._managers: dict[str, frozenset[str]] = {}
        # leaf -> the nodes on its path (root first) that set a per-user limit; only
        # leaves with one are keys, so an empty dict means no limit anywhere
        self.limited: dict[str, tuple[Node, ...]] = {}

    # ------------------------------------------------------------ queries
    def __contains__(self, path: str) -> bool:
        return path in self.nodes

    def share(self, path: str) -> float:
        node = self.nodes.get(path)
        return node.share if node else 0.0

    def leaves(self) -> list[str]:
        return self._leaves

    def siblings_of(self, path: str) -> list[str]:
        parent = parent_of(path)
        return self.roots if parent is None else self.nodes[parent].children

    def top_level(self, path: str) -> str:
        return path.split("/", 1)[0]

    def managers_above(self, path: str) -> frozenset[str]:
        """Managers of `path` and of every ancestor (cached until the tree changes)."""
        try:
            cache = self._managers
        except AttributeError:  # a tree pickled before the cache existed
            cache = self._managers = {}
        found = cache.get(path)
        if found is None:
            names: set[str] = set()
            for p in ancestors(path):
                node = self.nodes.get(p)
                if node:
                    names.update(node.managers)
            found = cache[path] = frozenset(names)
        return found

    def limits_of(self, leaf: str) -> tuple[Node, ...]:
        """The nodes on `leaf`'s path that limit each user's work under them."""
        return self.limited.get(leaf, ())

    def gpu_limited(self, leaf: str) -> bool:
        """Does a node on `leaf`'s path limit the GPUs each user's work may hold?"""
        return any(n.max_gpus_per_user is not None for n in self.limited.get(leaf, ()))

    def may_manage(self, actor: str, path: str) -> bool:
        """Only managers of a node (or of an ancestor) change its children."""
        parent = parent_of(path)
        return parent is not None and actor in self.managers_above(parent)

    def may_submit(self, actor: str, leaf: str) -> bool:
        """Members of the leaf, or managers of it or any ancestor. A path that names no
        principal at all is open (a laptop cluster nobody has locked down)."""
        node = self.nodes[leaf]
        managers = self.managers_above(leaf)
        if actor in node.members or actor in managers:
            return True
        return not node.members and not managers

    # ----------------------------------------------------------- changes
    def set(
        self,
        path: str,
        weight: float | None,
        managers: tuple[str, ...] | None = None,
        members: tuple[str, ...] | None = None,
        limits: dict[str, int] | None = None,
    ) -> None:
        """Create or change `path`; a None weight keeps the current one (0 for a new
        node, which admission refuses). `limits`: per-user limits to set (a value
        below 1 removes one); those not named are kept."""
        node = self.nodes.get(path)
        if node is None:
            node = self.nodes[path] = Node(path, weight or 0.0)
            parent = parent_of(path)
            siblings = self.roots if parent is None else self.nodes[parent].children
            siblings.append(path)
            siblings.sort()
        if weight is not None:
            node.weight = weight
        if managers is not None:
            node.managers = tuple(managers)
        if members is not None:
            node.members = tuple(members)
        for name, value in (limits or {}).items():
            setattr(node, name, value if value >= 1 else None)
        self._recompute()

    def remove(self, path: str) -> None:
        self.nodes.pop(path)
        parent = parent_of(path)
        (self.roots if parent is None else self.nodes[parent].children).remove(path)
        self._recompute()

    def _recompute(self) -> None:
        self._managers = {}
        leaves: list[str] = []

        def visit(paths: list[str], parent_share: float) -> None:
            total = sum(max(0.0, self.nodes[p].weight) for p in paths)
            for p in paths:
                node = self.nodes[p]
                node.share = parent_share * node.weight / total if total > 0 else 0.0
                if node.children:
                    visit(node.children, node.share)
                else:
                    leaves.append(p)

        visit(self.roots, 1.0)
        self._leaves = leaves
        self.limited = {}
        limiting = [
            n
            for n in self.nodes.values()
            if n.max_gpus_per_user is not None or n.max_pending_per_user is not None
        ]
        if limiting:  # (a tree without limits costs nothing more)
            for leaf in leaves:
                chain = tuple(
                    n
                    for p in ancestors(leaf)
                    if (n := self.nodes[p]).max_gpus_per_user is not None
                    or n.max_pending_per_user is not None
                )
                if chain:
                    self.limited[leaf] = chain

"""Hierarchical fair share: ratios and Fair-Tree ranks (DESIGN §5 rule 3)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache

from domain.state import State
from domain.tree import ancestors


@dataclass(slots=True)
class Ranking:
    """Leaf ranks (1 = served first) plus the numbers behind them, for `explain`."""

    ranks: dict[str, int] = field(default_factory=dict)
    ratios: dict[str, float] = field(default_factory=dict)
    # (winner leaf, loser leaf) -> outranks?; one cycle asks the same pairs many times
    verdicts: dict[tuple[str, str], bool] = field(default_factory=dict)


def ratio(state: State, path: str, now: float) -> float:
    """usage / (share x capacity x window), usage as of the last bucket edge (see
    `UsageLedger.ranked_reader`); +inf for a zero-share node."""
    share = state.tree.share(path)
    if share <= 0:
        return math.inf
    budget = share * state.capacity * state.config.window
    if budget <= 0:
        return 0.0
    return state.charged.ranked_reader(now)(path) / 1000.0 / budget


def fair_tree(state: State, now: float) -> Ranking:
    """At each level sort siblings by (ratio asc, share desc, path), depth first."""
    tree = state.tree
    nodes = tree.nodes
    ranking = Ranking()
    ratios = ranking.ratios
    ranks = ranking.ranks
    capacity = state.capacity
    window = state.config.window
    usage_ms = state.charged.ranked_reader(now)  # as of the last bucket edge
    inf = math.inf

    def visit(paths: list[str]) -> None:
        for p in paths:  # ratio(state, p, now), the same arithmetic
            share = nodes[p].share
            if share <= 0:
                ratios[p] = inf
                continue
            budget = share * capacity * window
            ratios[p] = 0.0 if budget <= 0 else usage_ms(p) / 1000.0 / budget
        for p in sorted(paths, key=lambda p: (ratios[p], -nodes[p].share, p)):
            children = nodes[p].children
            if children:
                visit(children)
            else:
                ranks[p] = len(ranks) + 1

    visit(tree.roots)
    return ranking


@lru_cache(maxsize=65536)
def diverging(a: str, b: str) -> tuple[str, str] | None:
    """The sibling ancestors of `a` and `b` where their paths split (None if nested)."""
    for x, y in zip(ancestors(a), ancestors(b), strict=False):
        if x != y:
            return x, y
    return None


def outranks(state: State, ranking: Ranking, winner: str, loser: str) -> bool:
    """`winner`'s side leads `loser`'s at the level they split, by the hysteresis margin."""
    key = (winner, loser)
    verdict = ranking.verdicts.get(key)
    if verdict is None:
        verdict = ranking.verdicts[key] = _outranks(state, ranking, winner, loser)
    return verdict


def _outranks(state: State, ranking: Ranking, winner: str, loser: str) -> bool:
    split = diverging(winner, loser)
    if split is None:
        return False
    w, lo = split
    rw, rl = ranking.ratios.get(w), ranking.ratios.get(lo)
    if rw is None or rl is None:
        return False
    if math.isinf(rl):
        return not math.isinf(rw)
    return rl > rw * (1.0 + state.config.hysteresis) and rl > rw


def entitlement(state: State, path: str) -> float:
    """GPUs `path` is entitled to right now: its share of the healthy capacity."""
    return state.tree.share(path) * state.healthy_capacity


# GPUs run whole while entitlements are products of weight fractions: a leaf running 8
# GPUs of an entitlement computed as 7.999999999999999 does not borrow
BORROW_SLACK = 1e-9


def reclaims(state: State, winner: str, loser: str, gpus: int) -> bool:
    """Kueue-style reclaim: at the level the paths split, the winner's side still fits
    within its entitlement after taking `gpus`, while the loser's side and the loser's
    own allocation run beyond theirs (borrow). Ratios over the window decide the order; this lets work that is owed
    GPUs *now* take them back from a borrower even when the window ratios are close
    (within the hysteresis margin). The fairshare policy asks it only when the winner
    ranks above the loser, so reclaim never reverses the window order."""
    split = diverging(winner, loser)
    if split is None:
        return False
    w, lo = split
    # inlined `state.charged.rate(p) > entitlement(state, p) + BORROW_SLACK`
    accounts = state.charged.accounts
    nodes = state.tree.nodes
    capacity = state.healthy_capacity
    slack = BORROW_SLACK
    acc = accounts.get(w)
    node = nodes.get(w)
    if (acc.rate if acc else 0) + gpus > (node.share if node else 0.0) * capacity + slack:
        return False
    # the victim's side borrows, and so does the victim's own allocation: a small team
    # inside a borrowing program is not made to pay for its big siblings
    acc = accounts.get(lo)
    node = nodes.get(lo)
    if not (acc.rate if acc else 0) > (node.share if node else 0.0) * capacity + slack:
        return False
    acc = accounts.get(loser)
    node = nodes.get(loser)
    return (acc.rate if acc else 0) > (node.share if node else 0.0) * capacity + slack

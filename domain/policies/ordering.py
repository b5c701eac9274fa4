"""Ordering policies (DESIGN §5 rule 4). Each is a comparator chain ending in a
deterministic tie-break (submit time, then workload id — array tasks by index,
`state.id_order`)."""

from __future__ import annotations

import math
from typing import Any

from domain.fairshare import Ranking, fair_tree, outranks, reclaims
from domain.policies import register_ordering
from domain.state import State, Workload

_UNIFORM = Ranking()


def _estimate(w: Workload) -> float:
    """The user's declared runtime, else the contract's minimum (a lower bound)."""
    return w.expected_runtime if w.expected_runtime is not None else w.min_runtime


def _contract_terms(w: Workload, allocated: bool, now: float) -> tuple[bool, float]:
    """Allocated work is charged and protected for its min runtime; the rest is neither."""
    return (True, now + w.min_runtime) if allocated else (False, now)


class FairShare:
    """Default. Chain:
    1. allocated work before unallocated work;
    2. leaf rank from Fair-Tree over fair-share ratios (lower usage/share first);
    3. priority, high first (priority only orders work inside one allocation);
    4. submit time, earlier first;
    5. workload id.
    Preemption: unallocated victims always; past-protection victims when the
    beneficiary's side out-ranks the victim's by the hysteresis margin, or when it
    ranks above the victim's by any margin and reclaims (`fairshare.reclaims`: it is
    owed GPUs now that the victim borrows). Reclaim never reverses the window order,
    and a plan reclaims only down to the borrower's entitlement
    (`Cycle.reclaim_holds`).
    """

    name = "fairshare"
    unallocated_may_preempt = False

    def rank(self, state: State, now: float) -> Ranking:
        return fair_tree(state, now)

    def queue_key(self, w: Workload) -> tuple[Any, ...]:
        return (-w.priority, w.submit_time)

    def sort_key(self, ranking: Ranking, w: Workload, allocated: bool) -> tuple[Any, ...]:
        return (not allocated, ranking.ranks.get(w.allocation, math.inf), *w.queue_key)

    def terms(self, state: State, w: Workload, allocated: bool, now: float) -> tuple[bool, float]:
        return _contract_terms(w, allocated, now)

    def preemption_scope(self, w: Workload) -> Any:
        # whom `w` may preempt depends on its allocation (rank, own work, reclaim room)
        return w.allocation

    def may_preempt(
        self, state: State, ranking: Ranking, beneficiary: Workload, victim: Workload, at: float
    ) -> str | None:
        if not victim.charged:
            return "unallocated"
        loser = victim.allocation
        winner = beneficiary.allocation
        if victim.protected_until > at or loser == winner:
            return None
        ranks = ranking.ranks
        if not ranks.get(winner, math.inf) < ranks.get(loser, math.inf):
            return None  # both rules below need the winner ranked above (outranking implies it)
        verdict = ranking.verdicts.get((winner, loser))  # outranks(), memoized per ranking
        if verdict is None:
            verdict = outranks(state, ranking, winner, loser)
        if verdict or reclaims(state, winner, loser, beneficiary.gpus):
            return "fair_share"
        return None


class _NoFairShare:
    """Base for orderings that ignore budgets: allocated work first, then the policy's
    key; preemption only of unallocated work (there is no rank to out-rank)."""

    name = ""
    unallocated_may_preempt = False

    def rank(self, state: State, now: float) -> Ranking:
        return _UNIFORM

    def queue_key(self, w: Workload) -> tuple[Any, ...]:
        raise NotImplementedError

    def sort_key(self, ranking: Ranking, w: Workload, allocated: bool) -> tuple[Any, ...]:
        return (not allocated, *w.queue_key)

    def terms(self, state: State, w: Workload, allocated: bool, now: float) -> tuple[bool, float]:
        return _contract_terms(w, allocated, now)

    def preemption_scope(self, w: Workload) -> Any:
        return None  # every beneficiary may take the same victims: unallocated work

    def may_preempt(
        self, state: State, ranking: Ranking, beneficiary: Workload, victim: Workload, at: float
    ) -> str | None:
        return None if victim.charged else "unallocated"


class Fifo(_NoFairShare):
    """1. allocated first; 2. submit time; 3. workload id."""

    name = "fifo"

    def queue_key(self, w: Workload) -> tuple[Any, ...]:
        return (w.submit_time,)


class LargestFirst(_NoFairShare):
    """1. allocated first; 2. more GPUs first; 3. submit time; 4. workload id."""

    name = "largest-first"

    def queue_key(self, w: Workload) -> tuple[Any, ...]:
        return (-w.gpus, w.submit_time)


class LongestFirst(_NoFairShare):
    """1. allocated first; 2. longer expected runtime (else min runtime) first;
    3. submit time; 4. workload id."""

    name = "longest-first"

    def queue_key(self, w: Workload) -> tuple[Any, ...]:
        return (-_estimate(w), w.submit_time)


class ShortestFirst(_NoFairShare):
    """1. allocated first; 2. shorter expected runtime (else min runtime) first;
    3. submit time; 4. workload id."""

    name = "shortest-first"

    def queue_key(self, w: Workload) -> tuple[Any, ...]:
        return (_estimate(w), w.submit_time)


class LegacyPriority:
    """The old system, for A/B comparison. Chain:
    1. priority level, high first (0 low, 1 normal, 2 high, 3 urgent);
    2. submit time; 3. workload id.
    Work with min_runtime > 0 is non-preemptible while its top-level allocation stays
    within its cap (`legacy_caps`, default share x capacity); everything else is
    preemptible overflow, preempted by strictly higher levels. No time slicing.
    """

    name = "legacy-priority"
    unallocated_may_preempt = True

    @staticmethod
    def level(w: Workload) -> int:
        return min(3, max(0, w.priority))

    def rank(self, state: State, now: float) -> Ranking:
        return _UNIFORM

    def queue_key(self, w: Workload) -> tuple[Any, ...]:
        return (-self.level(w), w.submit_time)

    def sort_key(self, ranking: Ranking, w: Workload, allocated: bool) -> tuple[Any, ...]:
        return w.queue_key

    def terms(self, state: State, w: Workload, allocated: bool, now: float) -> tuple[bool, float]:
        if w.min_runtime <= 0 or not allocated:  # e.g. a zero-share leaf: never protected
            return allocated, now
        top = state.tree.top_level(w.allocation)
        cap = state.config.legacy_caps.get(top)
        if cap is None:
            cap = math.floor(state.tree.share(top) * state.capacity)
        used = state.legacy_protected.get(top, 0)
        return allocated, (math.inf if used + w.gpus <= cap else now)

    def preemption_scope(self, w: Workload) -> Any:
        # rights grow with the level, and work is ordered by level: work after a failure
        # may preempt no more than the failed work could
        return None

    def may_preempt(
        self, state: State, ranking: Ranking, beneficiary: Workload, victim: Workload, at: float
    ) -> str | None:
        if victim.protected_until > at or self.level(victim) >= self.level(beneficiary):
            return None
        return "priority"


# sort keys that read nothing of the ranking but its leaf ranks (domain.decide caches them)
BUILTIN = (FairShare, Fifo, LargestFirst, LongestFirst, ShortestFirst, LegacyPriority)

for _policy in (
    FairShare(),
    Fifo(),
    LargestFirst(),
    LongestFirst(),
    ShortestFirst(),
    LegacyPriority(),
):
    register_ordering(_policy)

"""What an ordering policy and a placement policy must provide."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from domain.fairshare import Ranking
    from domain.state import Host, State, Workload


class OrderingPolicy(Protocol):
    """Orders pending work and says who may preempt whom.

    `queue_key` must be static (computed at submit); `sort_key` may use the cycle's
    ranking and must end with `queue_key`, so one bucket's order is its sort order.
    """

    name: str
    # may pending work that is not allocated preempt anything (legacy levels: yes)
    unallocated_may_preempt: bool

    def rank(self, state: State, now: float) -> Ranking:
        """Leaf ranks for one cycle. Quick and light cycles reuse the last full cycle's
        ranking until the next usage bucket edge or budget, host or config change, so
        read usage as of the last edge (`state.charged.ranked_reader(now)`, as the
        built-in fair share does), not the live ledger."""
        ...

    def queue_key(self, w: Workload) -> tuple[Any, ...]: ...

    def sort_key(self, ranking: Ranking, w: Workload, allocated: bool) -> tuple[Any, ...]: ...

    def terms(self, state: State, w: Workload, allocated: bool, now: float) -> tuple[bool, float]:
        """(charged, protected_until) for placing `w` now; math.inf = until it ends."""
        ...

    def preemption_scope(self, w: Workload) -> Any:
        """What `w`'s right to preempt depends on besides its GPUs (optional; without
        it, its allocation and priority): once work fails to fit, later work of the same
        scope and class needing at least as many GPUs is not tried in that cycle. Return
        None when rights only shrink along the order."""
        ...

    def may_preempt(
        self, state: State, ranking: Ranking, beneficiary: Workload, victim: Workload, at: float
    ) -> str | None:
        """The preemption reason if `beneficiary` may take `victim`'s GPUs at `at`."""
        ...


class PlacementPolicy(Protocol):
    name: str

    def choose(self, hosts: list[Host], gpus: int) -> Host | None:
        """One host among `hosts` (all with enough free GPUs) for a single-host workload."""
        ...

"""Policy registries. Built-ins register themselves; plugins register through
`register_ordering` / `register_placement` (the shells load entry points and
`module:attr` import paths, see `allot.plugins`), so allot needs no edit."""

from __future__ import annotations

from domain.policies.base import OrderingPolicy, PlacementPolicy

ORDERING: dict[str, OrderingPolicy] = {}
PLACEMENT: dict[str, PlacementPolicy] = {}


class UnknownPolicy(ValueError):
    pass


def register_ordering(policy: OrderingPolicy, name: str | None = None) -> OrderingPolicy:
    ORDERING[name or policy.name] = policy
    return policy


def register_placement(policy: PlacementPolicy, name: str | None = None) -> PlacementPolicy:
    PLACEMENT[name or policy.name] = policy
    return policy


def resolve_ordering(name: str) -> OrderingPolicy:
    try:
        return ORDERING[name]
    except KeyError:
        raise UnknownPolicy(
            f"unknown ordering policy {name!r} (known: {', '.join(sorted(ORDERING))}; "
            "plugins register under the 'allot.ordering' entry point or as module:attr)"
        ) from None


def resolve_placement(name: str) -> PlacementPolicy:
    try:
        return PLACEMENT[name]
    except KeyError:
        raise UnknownPolicy(
            f"unknown placement policy {name!r} (known: {', '.join(sorted(PLACEMENT))})"
        ) from None


from domain.policies import ordering as _ordering  # noqa: E402,F401  (registers built-ins)
from domain.policies import placement as _placement  # noqa: E402,F401

"""Load third-party policies without editing allot.

Two ways, both registering into `domain.policies`:
- an installed package declares entry points in group `allot.ordering` or
  `allot.placement` (name = policy name, value = an object or class with the
  policy's methods);
- a config names the policy as an import path `package.module:attr`.
"""

from __future__ import annotations

import importlib
from importlib.metadata import entry_points
from typing import Any

from domain.policies import (
    ORDERING,
    PLACEMENT,
    UnknownPolicy,
    register_ordering,
    register_placement,
)

GROUPS = {"allot.ordering": register_ordering, "allot.placement": register_placement}


def _instance(obj: Any) -> Any:
    return obj() if isinstance(obj, type) else obj


def load_entry_points() -> list[str]:
    """Register every policy installed packages declare; returns their names."""
    loaded = []
    for group, register in GROUPS.items():
        for ep in entry_points(group=group):
            register(_instance(ep.load()), ep.name)
            loaded.append(ep.name)
    return loaded


def import_policy(name: str, kind: str = "ordering") -> None:
    """Make `module:attr` resolvable as a policy name (no-op for registered names)."""
    registry = ORDERING if kind == "ordering" else PLACEMENT
    if name in registry or ":" not in name:
        return
    module_name, _, attr = name.partition(":")
    try:
        obj = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as why:
        raise UnknownPolicy(f"cannot load {kind} policy {name!r}: {why}") from None
    policy = _instance(obj)
    for method in (
        ("queue_key", "sort_key", "rank", "terms", "may_preempt")
        if kind == "ordering"
        else ("choose",)
    ):
        if not callable(getattr(policy, method, None)):
            raise UnknownPolicy(f"{name!r} is not an {kind} policy: it has no {method}()")
    (register_ordering if kind == "ordering" else register_placement)(policy, name)


def prepare(config: dict[str, Any]) -> None:
    """Load what a config names, before a State is built from it."""
    if isinstance(config.get("ordering"), str):
        import_policy(config["ordering"], "ordering")
    if isinstance(config.get("placement"), str):
        import_policy(config["placement"], "placement")

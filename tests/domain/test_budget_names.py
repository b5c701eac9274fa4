"""`budget.set` with `add_*`/`remove_*`: named changes to the lists the scheduler holds.

The fold applies them to the lists as they are when the record is folded (journal
order), so two managers adding people at once both land; the accepted record carries
the resulting list and the names that changed nothing.
"""

from __future__ import annotations

from typing import Any

import pytest

from domain import State, evolve
from domain import events as ev
from tests.domain.builders import Cluster, cluster

MEMBERS = ("alice", "bob")


def _lab(managers: tuple[str, ...] = ("pm",)) -> Cluster:
    """`lab` managed by pm; `lab/mid` with members alice and bob."""
    c = cluster(hosts=1)
    c.budget("lab", 1, managers=managers)
    c.budget("lab/mid", 1, members=MEMBERS, actor="pm")
    return c


def _set(c: Cluster, actor: str = "pm", **fields: Any) -> Any:
    fields.setdefault("allocation", "lab/mid")
    return c.input(ev.BudgetSet, actor=actor, **fields)[0]


# (request fields, members after, already_members, absent_members)
FOLDS: list[tuple[dict[str, Any], tuple[str, ...], Any, Any]] = [
    ({"add_members": ("erin",)}, ("alice", "bob", "erin"), None, None),
    ({"add_members": ("bob",)}, MEMBERS, ("bob",), None),
    ({"add_members": ("erin", "erin")}, ("alice", "bob", "erin"), None, None),
    ({"remove_members": ("alice",)}, ("bob",), None, None),
    ({"remove_members": ("zed",)}, MEMBERS, None, ("zed",)),
    ({"remove_members": ("alice", "bob")}, (), None, None),
    (
        {"add_members": ("erin", "bob"), "remove_members": ("alice", "zed")},
        ("bob", "erin"),
        ("bob",),
        ("zed",),
    ),
    ({"add_members": ()}, MEMBERS, None, None),
    ({"members": ("carol",), "add_members": ("erin",)}, ("carol", "erin"), None, None),
    ({"members": ("carol",), "add_members": ("carol",)}, ("carol",), ("carol",), None),
    ({"weight": 3.0, "add_members": ("erin",)}, ("alice", "bob", "erin"), None, None),
]


@pytest.mark.parametrize(
    ("fields", "members", "already", "absent"),
    FOLDS,
    ids=[
        "add-new",
        "add-present",
        "add-twice-in-one-request",
        "remove-present",
        "remove-absent",
        "remove-everyone",
        "add-and-remove",
        "add-nobody",
        "after-a-replacement-in-the-same-record",
        "after-a-replacement-already-there",
        "with-a-weight",
    ],
)
def test_named_changes_apply_to_the_current_members(
    fields: dict[str, Any], members: tuple[str, ...], already: Any, absent: Any
) -> None:
    c = _lab()
    accepted = _set(c, **fields)
    assert accepted.type == "budget.set"
    assert c.state.tree.nodes["lab/mid"].members == members
    assert accepted.members == members  # the journal says the resulting list
    assert (accepted.already_members, accepted.absent_members) == (already, absent)
    assert accepted.managers is None  # a list not named is kept, and not written
    if "weight" in fields:
        assert c.state.tree.nodes["lab/mid"].weight == fields["weight"]
    else:
        assert c.state.tree.nodes["lab/mid"].weight == 1


# (request fields, managers after, already_managers, absent_managers)
MANAGER_FOLDS: list[tuple[dict[str, Any], tuple[str, ...], Any, Any]] = [
    ({"add_managers": ("tl",)}, ("lead", "tl"), None, None),
    ({"add_managers": ("lead",)}, ("lead",), ("lead",), None),
    ({"remove_managers": ("lead",)}, (), None, None),
    ({"remove_managers": ("tl",)}, ("lead",), None, ("tl",)),
]


@pytest.mark.parametrize(
    ("fields", "managers", "already", "absent"),
    MANAGER_FOLDS,
    ids=["add-new", "add-present", "remove-present", "remove-absent"],
)
def test_named_changes_apply_to_the_current_managers(
    fields: dict[str, Any], managers: tuple[str, ...], already: Any, absent: Any
) -> None:
    c = _lab()
    _set(c, managers=("lead",))
    accepted = _set(c, **fields)
    assert c.state.tree.nodes["lab/mid"].managers == managers
    assert accepted.managers == managers
    assert (accepted.already_managers, accepted.absent_managers) == (already, absent)
    assert c.state.tree.nodes["lab/mid"].members == MEMBERS  # untouched
    assert accepted.members is None


def test_two_managers_adding_at_once_both_land() -> None:
    """Both requests were made against the list [alice, bob]; folded in journal order,
    each applies to the list the one before it left (a replacement built from a read
    would have dropped the first)."""
    c = _lab(managers=("pm", "pm2"))
    _set(c, actor="pm", add_members=("erin",))
    _set(c, actor="pm2", add_members=("frank",), remove_members=("alice",))
    assert c.state.tree.nodes["lab/mid"].members == ("bob", "erin", "frank")


def test_a_new_allocation_starts_from_empty_lists() -> None:
    c = _lab()
    accepted = _set(c, allocation="lab/new", weight=2.0, add_members=("erin",))
    assert accepted.members == ("erin",) and accepted.already_members is None
    assert c.state.tree.nodes["lab/new"].members == ("erin",)


def test_the_journal_folds_to_the_same_lists() -> None:
    """A restart or replay folds the accepted records (result and changes together): the
    changes applied again to the result change nothing."""
    c = _lab()
    _set(c, add_members=("erin",), remove_members=("alice",))
    _set(c, add_members=("bob", "gus"), add_managers=("tl",))
    _set(c, remove_members=("erin",), remove_managers=("nobody",))
    rebuilt = State(c.name)
    for record in c.journal:
        evolve(rebuilt, record)
    for path, node in c.state.tree.nodes.items():
        again = rebuilt.tree.nodes[path]
        assert (again.managers, again.members) == (node.managers, node.members)
    assert c.state.tree.nodes["lab/mid"].members == ("bob", "gus")


def test_a_senders_claim_of_what_changed_nothing_is_not_taken() -> None:
    c = _lab()
    accepted = _set(c, add_members=("erin",), already_members=("mallory",))
    assert accepted.already_members is None
    plain = _set(c, weight=2.0, absent_members=("mallory",))
    assert plain.absent_members is None


def test_a_plain_budget_set_is_written_as_before() -> None:
    """Without the new fields the record's bytes are those of the previous release."""
    c = _lab()
    accepted = _set(c, weight=2.0, members=("carol",))
    assert set(ev.event_to_dict(accepted)) == {
        "type",
        "v",
        "id",
        "time",
        "cluster",
        "actor",
        "allocation",
        "weight",
        "members",
    }


# (actor, request fields, part of the rejection; None: accepted)
ADMISSIONS: list[tuple[str, dict[str, Any], str | None]] = [
    ("pm", {"add_members": ("erin",)}, None),
    ("root", {"add_members": ("erin",)}, None),
    ("alice", {"add_members": ("erin",)}, "'alice' is not a manager of 'lab'"),
    ("alice", {"remove_members": ("bob",)}, "'alice' is not a manager of 'lab'"),
    ("pm", {"allocation": "lab/nope", "add_members": ("erin",)}, "does not exist yet"),
    (
        "pm",
        {"add_members": ("erin",), "remove_members": ("erin",)},
        "erin both added to and removed from the members",
    ),
    (
        "pm",
        {"add_managers": ("tl",), "remove_managers": ("tl",)},
        "tl both added to and removed from the managers",
    ),
    ("pm", {"add_members": ("erin frank",)}, "add_members: 'erin frank' is not a user name"),
    ("pm", {"remove_members": ("a,b",)}, "remove_members: 'a,b' is not a user name"),
    ("pm", {"add_managers": ("",)}, "add_managers: '' is not a user name"),
    ("pm", {"add_members": ("x" * 300,)}, "a name in add_members of 300 characters"),
]


@pytest.mark.parametrize(
    ("actor", "fields", "error"),
    ADMISSIONS,
    ids=[
        "manager-above",
        "admin",
        "member-may-not-add",
        "member-may-not-remove",
        "unknown-allocation",
        "member-added-and-removed",
        "manager-added-and-removed",
        "name-with-a-space",
        "name-with-a-comma",
        "empty-name",
        "name-too-long",
    ],
)
def test_named_changes_are_admitted_as_a_budget_set_is(
    actor: str, fields: dict[str, Any], error: str | None
) -> None:
    c = cluster(hosts=1, admins=("root",))
    c.budget("lab", 1, managers=("pm",))
    c.budget("lab/mid", 1, members=MEMBERS, actor="pm")
    record = _set(c, actor=actor, **fields)
    if error is None:
        assert record.type == "budget.set"
        assert "erin" in c.state.tree.nodes["lab/mid"].members
        return
    assert record.type == "budget.rejected" and error in record.error, record
    assert c.state.tree.nodes["lab/mid"].members == MEMBERS

"""Old records replay: the v0 -> v1 `workload.submitted` upcaster (domain/upcasting.py)."""

from __future__ import annotations

import orjson
import pytest

from domain import events as ev
from domain.upcasting import CURRENT_VERSION, UPCASTERS, upcast
from streams.codec import decode_event, decode_input, encode

V0 = {
    "type": "workload.submitted",
    "v": 0,
    "id": "in-1",
    "time": 1_767_225_600.0,
    "cluster": "c",
    "actor": "alice",
    "workload": "w1",
    "allocation": "lab/a",
    "gpu_count": 4,
    "min_runtime_minutes": 15,
    "preemptible": True,
}

UPCAST_CASES = [
    # (v0 overrides, expected v1 fields)
    ({}, {"gpus": 4, "min_runtime": 900.0, "resumable": True}),
    ({"preemptible": False}, {"resumable": False}),
    ({"min_runtime_minutes": 0}, {"min_runtime": 0.0}),
    ({"min_runtime_minutes": 2.5}, {"min_runtime": 150.0}),
    ({"preemptible": None}, {"resumable": False}),  # v0 tools sent null for "no"
    # a v1 name present in a v0 record is kept (setdefault): never overwritten
    ({"gpus": 2}, {"gpus": 2}),
]


@pytest.mark.parametrize(
    ("override", "expected"),
    UPCAST_CASES,
    ids=["defaults", "not-preemptible", "zero-minutes", "fractional-minutes", "null", "v1-wins"],
)
def test_v0_submission_decodes_as_v1(override: dict, expected: dict) -> None:
    raw = {**V0, **override}
    event = decode_input(orjson.dumps(raw))
    assert isinstance(event, ev.WorkloadSubmitted)
    assert event.v == CURRENT_VERSION == 1
    for key, value in expected.items():
        assert getattr(event, key) == value
    assert (event.workload, event.allocation, event.actor) == ("w1", "lab/a", "alice")


def test_round_trip_v0_to_v1_bytes_and_back() -> None:
    event = decode_input(orjson.dumps(V0))
    data = encode(event)
    record = orjson.loads(data)
    assert record["v"] == 1 and "gpu_count" not in record and "preemptible" not in record
    assert record["gpus"] == 4 and record["min_runtime"] == 900.0
    assert decode_input(data) == event
    assert decode_event(data) == event
    assert encode(decode_event(data)) == data


def test_upcast_leaves_current_and_unversioned_records_alone() -> None:
    v1 = {**V0, "v": 1}
    assert upcast(dict(v1)) == v1
    unversioned = {k: v for k, v in V0.items() if k != "v"}
    assert upcast(dict(unversioned)) == unversioned  # taken as v1: v0 names stay unread
    assert decode_input(orjson.dumps(unversioned)).type == "workload.rejected"  # no `gpus`


def test_upcast_does_not_touch_other_types() -> None:
    tick = {"type": "clock.tick", "v": 0, "id": "t", "time": 1.0}
    assert upcast(dict(tick)) == tick


def test_upcasters_chain_until_none_matches() -> None:
    steps = {("clock.tick", 0): "first", ("clock.tick", 1): "second"}
    assert not steps.keys() & UPCASTERS.keys()
    for (kind, version), name in steps.items():
        UPCASTERS[(kind, version)] = lambda raw, name=name: {**raw, name: raw["v"]}
    try:
        out = upcast({"type": "clock.tick", "v": 0, "id": "t", "time": 1.0})
        assert (out["v"], out["first"], out["second"]) == (2, 0, 1)
        out = upcast({"type": "clock.tick", "v": 1, "id": "t", "time": 1.0})
        assert out["v"] == 2 and "first" not in out and out["second"] == 1
    finally:
        for key in steps:
            del UPCASTERS[key]


def test_upcast_v0_record_then_schedules_like_v1() -> None:
    from tests.domain.builders import START, Cluster

    c = Cluster(hosts=1, name="c")
    c.budget("lab/a", 1)
    event = decode_input(orjson.dumps({**V0, "id": "fresh", "time": START}))
    out = c.send(event)
    assert out[0].type == "workload.submitted"
    placed = out[1]
    assert placed.type == "workload.placed" and placed.charged is True
    assert placed.protected_until == START + 900.0


FINISHED_V1 = {
    "type": "workload.finished",
    "v": 1,
    "id": "done-1",
    "time": 1_767_225_600.0,
    "cluster": "c",
    "actor": "launcher",
    "workload": "w1",
    "outcome": "lost",
    "attempt": 1,
}


def test_a_report_that_ends_work_keeps_its_v1_bytes() -> None:
    """`requeued` came without a new version: absent, a report ends the workload, as
    every record written before it did; so old journals re-derive byte for byte."""
    data = orjson.dumps(FINISHED_V1)
    event = decode_event(data)
    assert isinstance(event, ev.WorkloadFinished) and event.requeued is None
    assert encode(event) == data
    requeued = event.model_copy(update={"requeued": True})
    assert orjson.loads(encode(requeued)) == {**FINISHED_V1, "requeued": True}


@pytest.mark.parametrize("claimed", [False, "yes", 1, None, [True]])
def test_a_senders_requeued_is_neither_taken_nor_refused(claimed: object) -> None:
    event = decode_input(orjson.dumps({**FINISHED_V1, "requeued": claimed}))
    assert isinstance(event, ev.WorkloadFinished) and event.requeued is None

"""Hostile and broken input through `streams.core.SchedulerCore.process` (issue #6).

The transport-free loop both shells run (the Kafka worker and `allot serve --data`) is
fed random bytes, non-object JSON, JSON nested up to and past orjson's depth limit,
valid-looking events of every type with wrong types in their fields, huge and
non-finite numbers, unicode / control characters / very long names, replayed ids and
replayed inbox positions, client time claims far in the past or future and broker
timestamps that jump, mixed with valid setup, submissions and reports.

The contract checked (`SchedulerCore.process`, DESIGN §4 and §7):

- `process` never raises;
- every inbox record given (at a new position) is accounted for exactly once: it is a
  dead letter iff its bytes are not a JSON object, else its journal records are one
  contiguous run, in inbox order, all carrying `inbox: [partition, offset]`, made of
  an optional config re-assertion by the scheduler (`config.set` + its decisions),
  then exactly one *cause* (the accepted input or its `*.rejected`), then the
  decisions that cause triggered; `BatchResult.inputs` counts the non-dead records;
- an accepted input's event time is its broker stamp (clamped never to go back),
  never the client's claim; a claim older than the window is rejected, also by a
  core that has no clock yet;
- an already-folded (partition, offset) yields nothing and changes nothing;
- every journal record is JSON that the domain's own journal parser reads back
  (`streams.codec.decode_event`) and re-encodes to the same bytes; event time never
  goes backwards in the journal and stays within year 9999;
- a fresh core re-derives the journal (`fold_journal`, what a restarted worker does)
  without divergence into the same state;
- a rejection that triggers no decision leaves the state's fingerprint unchanged;
- an accepted input id replayed within the window is never accepted again;
- the same records give byte-identical output in fresh cores, whatever the batch
  boundaries;
- the core is not wedged: after the hostile batch, a fresh valid submission on a
  freshly registered host is placed.

Each property runs with the worker's config journaled first (`--admin root`) and
without one (an open cluster that keeps whatever config the journal holds), and ends
with regression tests for what fuzzing found (see the issue #6 report).
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from domain import events as ev
from domain.admission import MAX_TIME
from domain.config import SchedulerConfig
from domain.rederive import is_cause
from streams.codec import Undecodable, decode_event, load_object
from streams.core import BatchResult, InboxRecord, SchedulerCore
from tests.domain.builders import fingerprint
from tests.streams.hostile_json import Deep, to_bytes

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = "c"
ADMIN = "root"
USER = "u"
T0 = 1_800_000_000.0  # 2027-01-15
WINDOW = 86400.0
CONFIG = SchedulerConfig(admins=(ADMIN,), window=WINDOW)
SETTINGS = settings(
    deadline=None,
    # ALLOT_HYPOTHESIS_EXAMPLES=5000 for a long search; the default keeps the module ~30 s
    max_examples=int(os.environ.get("ALLOT_HYPOTHESIS_EXAMPLES", "100")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
SCHEDULER_TYPES = ("workload.placed", "workload.preempted", "host.drained")
REJECTION_TYPES = tuple(sorted({m.model_fields["type"].default for m in ev.Rejection.__args__}))  # type: ignore[attr-defined]


# ---------------------------------------------------------------- strategies

# names that valid records use, so hostile records collide with real state
NAMES = ["lab", "lab/a", "lab/b", "a", "h0", "h1", "w0", "w1", "w2", "root", "u", "c", ""]
ID_POOL = [f"dup-{i}" for i in range(4)]  # replayed envelope ids

weird_text = st.one_of(
    st.sampled_from(NAMES),
    st.text(max_size=12),  # any code point: control chars, RTL marks, emoji, NUL
    st.sampled_from(
        [
            "lab/a/",
            "/lab",
            "lab//a",
            " lab",
            "lab\n/a",
            "lab/\u202eevil",
            "\x00",
            "lab/" + "\u00e9" * 3,
            "../../etc/passwd",
            "\ud800",  # lone surrogate: not encodable as UTF-8
        ]
    ),
    st.builds(lambda n, c: c * n, st.sampled_from([1000, 20_000]), st.sampled_from("xé/")),
)
huge_numbers = st.sampled_from(
    [
        0,
        -0.0,
        1,
        -1,
        8,
        1024,
        1025,
        2**31,
        2**53 + 1,
        2**63 - 1,
        -(2**63),
        2**63,  # beyond int64: orjson reads it as a float
        2**64,
        10**30,
        1e308,
        -1e308,
        5e-324,
        0.5,
        "NaN",
        "nan",
        "inf",
        "-inf",
        "Infinity",
        "1e999",
        " 8 ",
        "0x10",
        "8",
        True,
        False,
    ]
)
json_scalar = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=8),
)
json_value = st.recursive(
    json_scalar,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=8,
)
field_value = st.one_of(weird_text, huge_numbers, json_value)


# orjson refuses depth > 1024 (a dead letter); 1000..1023 parse, and then exceed
# Python's recursion limit wherever the value is printed (the bug fixed in events._show)
deep_values = st.builds(
    Deep,
    st.sampled_from([50, 999, 1000, 1023, 1024, 1025, 10_000]),
    st.sampled_from(["list", "obj"]),
)


def good_fields(kind: str) -> st.SearchStrategy[dict[str, Any]]:
    """Plausible fields for an input of `kind` (valid most of the time)."""
    if kind == "workload.submitted":
        return st.fixed_dictionaries(
            {
                "workload": st.sampled_from(["w0", "w1", "w2", "w3"]),
                "allocation": st.sampled_from(["lab/a", "lab/a", "lab/b", "lab"]),
                "gpus": st.sampled_from([1, 1, 2, 4, 8, 16]),
                "min_runtime": st.sampled_from([0, 60.0, 900, 3600]),
                "resumable": st.booleans(),
                # now and then past 64 bits (1e20 was accepted, then crashed the writer)
                "priority": st.one_of(
                    st.integers(-2, 3), st.integers(-2, 3), st.sampled_from([1e20, 2.0**64])
                ),
            },
            optional={
                "tags": st.lists(st.text(max_size=4), max_size=2),
                "expected_runtime": st.sampled_from([10.0, 1e9]),
            },
        )
    if kind in ("workload.cancelled", "workload.finished", "workload.requeue_requested"):
        return st.fixed_dictionaries(
            {"workload": st.sampled_from(["w0", "w1", "w2", "w3"])},
            optional={
                "outcome": st.sampled_from(["completed", "failed", "lost"]),
                "attempt": st.integers(0, 3),
            },
        )
    if kind == "budget.set":
        return st.fixed_dictionaries(
            {
                "allocation": st.sampled_from(["lab", "lab/a", "lab/b", "x"]),
                "weight": st.sampled_from([0, 1, 2.5]),
            },
            optional={"members": st.just([USER]), "managers": st.just([ADMIN])},
        )
    if kind == "budget.removed":
        return st.fixed_dictionaries({"allocation": st.sampled_from(["lab/a", "lab/b", "x"])})
    if kind == "host.registered":
        return st.fixed_dictionaries(
            {"host": st.sampled_from(["h0", "h1", "h2"]), "gpus": st.sampled_from([8, 8, 4])}
        )
    if kind == "host.health":
        return st.fixed_dictionaries(
            {"host": st.sampled_from(["h0", "h1", "h2"]), "healthy": st.booleans()},
            optional={"reason": st.text(max_size=10)},
        )
    if kind == "config.set":
        return st.fixed_dictionaries(
            {
                "config": st.one_of(
                    st.just({"admins": [ADMIN], "window": "1d"}),
                    st.dictionaries(
                        # not "bucket": a 1 s bucket makes the ledger write a bucket per
                        # second crossed (see the month-long jump in `batches`)
                        st.sampled_from(["window", "ordering", "admins", "headroom_hosts", "nope"]),
                        field_value,
                        max_size=2,
                    ),
                )
            }
        )
    return st.just({})


ALL_TYPES = sorted(ev.INPUT_TYPES) + list(SCHEDULER_TYPES) + list(REJECTION_TYPES)


@st.composite
def events(draw: st.DrawFn, hostile: bool) -> dict[str, Any]:
    kind = draw(
        st.sampled_from(sorted(ev.INPUT_TYPES)) if not hostile else st.sampled_from(ALL_TYPES)
    )
    body: dict[str, Any] = {
        "type": kind,
        "v": 1,
        "id": draw(st.one_of(st.uuids().map(str), st.sampled_from(ID_POOL))),
        "cluster": CLUSTER,
        "actor": ADMIN if kind.startswith(("host.", "budget.", "config.")) else USER,
        **draw(good_fields(kind)),
    }
    if draw(st.booleans()):  # a client's time claim; the broker's time replaces it
        body["time"] = draw(
            st.sampled_from([T0, T0 - 10 * WINDOW, T0 + 10 * WINDOW, 0, -1, 1e12, 1e300, -1e300])
        )
    if hostile:
        keys = [*body, "type", "v", "id", "time", "cluster", "actor", "extra"]
        for key in draw(st.lists(st.sampled_from(keys), max_size=3, unique=True)):
            choice = draw(st.integers(0, 5))
            if choice == 0:
                body.pop(key, None)
            elif choice == 1:
                body[key] = draw(deep_values)
            else:
                body[key] = draw(field_value)
        if draw(st.integers(0, 9)) == 0:  # a pre-release v0 submission
            body.update({"v": 0, "gpu_count": draw(field_value)})
            body["min_runtime_minutes"] = draw(st.one_of(huge_numbers, st.just(1e306)))
    return body


@st.composite
def hostile_values(draw: st.DrawFn) -> bytes:
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=64))
    if kind == 1:  # JSON, but not an object
        return to_bytes(draw(st.one_of(json_scalar, st.lists(json_scalar, max_size=3))))
    if kind == 2:  # nested at the top level, around orjson's depth limit
        return to_bytes(draw(deep_values))
    if kind == 3:  # truncated / mangled JSON object
        good = to_bytes(draw(events(hostile=False)))
        cut = draw(st.integers(0, max(0, len(good) - 1)))
        return good[:cut] + draw(st.sampled_from([b"", b"\xff", b"\x00", b"}}", b",,"]))
    if kind == 4:  # a JSON string that holds an event (double-encoded)
        return orjson.dumps(to_bytes(draw(events(hostile=False))).decode("utf-8", "replace"))
    return to_bytes(draw(events(hostile=True)), ensure_ascii=draw(st.booleans()))


def setup_values(claim: float | None = None) -> list[bytes]:
    """Two hosts and a budget tree; `claim`: the time every one of them claims."""

    def rec(i: int, kind: str, actor: str = ADMIN, **fields: Any) -> bytes:
        body = {"type": kind, "v": 1, "id": f"setup-{i}", "cluster": CLUSTER, "actor": actor}
        if claim is not None:
            body["time"] = claim
        return orjson.dumps({**body, **fields})

    return [
        rec(0, "host.registered", host="h0", gpus=8),
        rec(1, "host.registered", host="h1", gpus=8),
        rec(2, "budget.set", allocation="lab", weight=1, managers=[ADMIN]),
        rec(3, "budget.set", allocation="lab/a", weight=1, members=[USER]),
        rec(4, "budget.set", allocation="lab/b", weight=2, members=[USER]),
    ]


@st.composite
def batches(draw: st.DrawFn, max_size: int = 40) -> list[InboxRecord]:
    """Setup records, then valid and hostile records on up to three partitions, with
    increasing offsets (gaps allowed) and broker timestamps that mostly advance."""
    # mostly no claim; else one older than the window (a fresh core without a config
    # has no clock of its own yet: such claims were accepted as the event time)
    values = setup_values(draw(st.sampled_from([None, None, None, 0.0, T0 - 10 * 86400.0])))
    values += draw(
        st.lists(
            st.one_of(
                hostile_values(),
                st.builds(to_bytes, events(hostile=False)),
            ),
            min_size=1,
            max_size=max_size,
        )
    )
    records, next_offset, ts = [], {0: 0, 1: 0, 2: 0}, T0
    for i, value in enumerate(values):
        partition = 0 if i < 5 else draw(st.integers(0, 2))
        offset = next_offset[partition] + draw(st.sampled_from([0, 0, 0, 1, 1000]))
        next_offset[partition] = offset + 1
        jump = draw(st.integers(0, 19)) if i >= 5 else -1
        if jump == 0:
            # a broker (or CreateTime producer) timestamp from nowhere: "none" (-1 ms),
            # the epoch, far behind, a month ahead, past year 9999 (int64 ms max).
            # Not years ahead while work runs: `domain.ledger` then writes one bucket
            # per hour crossed (a jump to year 5000 is ~27M buckets per account, GBs of
            # RSS) -- reported, see the issue #6 report; ledger.py is not ours to fix
            stamp = draw(
                st.sampled_from([-0.001, 0.0, T0 - 10 * WINDOW, T0 + 30 * 86400.0, 2**63 / 1000])
            )
        else:
            ts += draw(st.sampled_from([0.0, 1.0, 60.0, 901.0, 3 * 3600.0, -30.0]))
            stamp = ts
        records.append(InboxRecord(partition, offset, stamp, value))
    return records


# ---------------------------------------------------------------- checks


def _core(wanted: SchedulerConfig | None = CONFIG) -> SchedulerCore:
    """`wanted=None`: a worker started without --admin/--set keeps whatever config the
    journal has (none: an open cluster where anyone may do anything)."""
    return SchedulerCore(CLUSTER, wanted)


wanted_configs = st.sampled_from([CONFIG, None])


def _is_object(value: bytes) -> bool:
    try:
        load_object(value)
    except Undecodable:
        return False
    return True


def _raw_id(value: bytes) -> Any:
    return orjson.loads(value).get("id")


@dataclass
class Folded:
    """One record's outcome: dead, or its run of journal records (decoded)."""

    record: InboxRecord
    dead: bool
    run: list[tuple[bytes, Any]]
    before: Any  # state fingerprint before the record
    after: Any


def process_each(core: SchedulerCore, records: list[InboxRecord]) -> list[Folded]:
    """Feed records one by one, checking the accounting contract for each."""
    out: list[Folded] = []
    for record in records:
        before = fingerprint(core.state)
        now = core.state.now
        stamp = record.timestamp if not math.isfinite(now) else max(now, record.timestamp)
        result = core.process([record])
        out.append(check_one(core, record, result, before, stamp))
    return out


def check_one(
    core: SchedulerCore, record: InboxRecord, result: BatchResult, before: Any, stamp: float
) -> Folded:
    where = [record.partition, record.offset]
    if not _is_object(record.value):
        assert result.journal == [] and result.inputs == 0
        assert [d.record for d in result.dead] == [record]
        assert result.dead[0].error
        return Folded(record, True, [], before, fingerprint(core.state))
    assert result.dead == [] and result.inputs == 1
    run = []
    for line in result.journal:
        raw = orjson.loads(line)
        assert raw["inbox"] == where
        event = decode_event(line)  # the journal parser replay and recovery use
        # the wire form is exactly what the model encodes: nothing lost or added
        assert orjson.dumps({**ev.event_to_dict(event), "inbox": where}) == line
        assert math.isfinite(event.time) and event.time <= MAX_TIME
        run.append((line, event))
    assert run, "an input (accepted or rejected) is always journaled"
    events_ = [e for _, e in run]
    if events_[0].id == f"{CLUSTER}/config@{record.partition}:{record.offset}":
        assert events_[0].type == "config.set" and events_[0].actor == ev.SCHEDULER
        rest = events_[1:]
        while rest and not is_cause(rest[0]):
            rest = rest[1:]
    else:
        rest = events_
    assert rest and is_cause(rest[0]), [e.type for e in events_]
    cause = rest[0]
    assert not any(is_cause(e) for e in rest[1:]), [e.type for e in events_]
    assert all(e.type in SCHEDULER_TYPES for e in rest[1:])
    raw_id = _raw_id(record.value)
    if isinstance(cause, ev._Rejected):
        shown = None if raw_id is None else ev._clip(raw_id)
        # the edge clips a refused record's id to 200 characters, admission to 256
        kept = raw_id[:256] if isinstance(raw_id, str) else raw_id
        assert cause.ref in (shown or "?", raw_id, kept), (cause.ref, raw_id)
        assert cause.error
    else:
        assert cause.id == raw_id and cause.type in ev.INPUT_TYPES
        assert cause.cluster == CLUSTER
        # an accepted input's event time is its broker stamp, never the client's claim
        assert cause.time == stamp, (cause.time, stamp, orjson.loads(record.value).get("time"))
    return Folded(record, False, run, before, fingerprint(core.state))


def check_journal(core: SchedulerCore, folded: list[Folded]) -> list[bytes]:
    lines = [line for f in folded for line, _ in f.run]
    times = [e.time for f in folded for _, e in f.run]
    assert times == sorted(times), "event time went backwards"
    # a rejection that decided nothing changed nothing
    for f in folded:
        if len(f.run) == 1 and isinstance(f.run[0][1], ev._Rejected):
            assert f.before == f.after, f.run[0][1]
    # a restarted worker re-derives the same state from the journal alone
    fresh = SchedulerCore(CLUSTER, core.wanted)
    assert fresh.fold_journal(lines) == len(lines)
    assert not fresh.diverged
    assert fingerprint(fresh.state) == fingerprint(core.state)
    assert fresh.state.seq == core.state.seq and fresh.state.now == core.state.now
    journaled = {(f.record.partition, f.record.offset) for f in folded if not f.dead}
    for partition in {p for p, _ in journaled}:
        assert fresh.positions[partition] == max(o for p, o in journaled if p == partition)
    return lines


def not_wedged(core: SchedulerCore, records: list[InboxRecord]) -> None:
    """Cancel whatever is live, register a fresh host and budget, submit: it is placed."""
    offset = max(r.offset for r in records if r.partition == 0) + 1
    ts = max((r.timestamp for r in records if r.timestamp < MAX_TIME), default=T0)
    admin = (core.state.config.admins or (ADMIN,))[0]  # whoever a hostile config.set named
    values = [
        {"type": "workload.cancelled", "workload": wid, "actor": admin}
        for wid in sorted(core.state.workloads)
    ]
    values += [
        {"type": "host.registered", "host": "zz-fresh-host", "gpus": 8, "actor": admin},
        {"type": "budget.set", "allocation": "zzfresh", "weight": 1, "actor": admin},
        {
            "type": "budget.set",
            "allocation": "zzfresh/leaf",
            "weight": 1,
            "members": [USER],
            "actor": admin,
        },
        {
            "type": "workload.submitted",
            "workload": "zz-fresh-work",
            "allocation": "zzfresh/leaf",
            "gpus": 1,
            "min_runtime": 0,
            "actor": USER,
        },
    ]
    tail = [
        InboxRecord(
            0,
            offset + i,
            ts,
            orjson.dumps({**v, "v": 1, "id": f"zz-fresh-{i}", "cluster": CLUSTER}),
        )
        for i, v in enumerate(values)
    ]
    folded = process_each(core, tail)
    causes = [next(e for _, e in f.run if is_cause(e) and e.id.startswith("zz")) for f in folded]
    rejected = [e for e in causes if isinstance(e, ev._Rejected)]
    assert not rejected, [e.error for e in rejected]
    placed = [
        e
        for f in folded
        for _, e in f.run
        if e.type == "workload.placed" and e.workload == "zz-fresh-work"
    ]
    assert placed, "a valid submission after the hostile batch was not placed"
    assert core.state.workloads["zz-fresh-work"].state == "running"


# ---------------------------------------------------------------- properties


@SETTINGS
@given(batches(), wanted_configs)
def test_every_record_is_accounted_for_and_the_core_survives(
    records: list[InboxRecord], wanted: SchedulerConfig | None
) -> None:
    core = _core(wanted)
    folded = process_each(core, records)
    check_journal(core, folded)
    not_wedged(core, records)


@SETTINGS
@given(batches(), wanted_configs, st.data())
def test_output_is_deterministic_whatever_the_batch_boundaries(
    records: list[InboxRecord], wanted: SchedulerConfig | None, data: st.DataObject
) -> None:
    whole = _core(wanted).process(records)
    again = _core(wanted).process(records)
    assert whole.journal == again.journal
    assert whole.dead == again.dead and whole.inputs == again.inputs
    # cut into batches anywhere: the same journal (replay cannot see batch boundaries)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(records) - 1), max_size=5)))
    chunked, out, start = _core(wanted), BatchResult(), 0
    for end in [*cuts, len(records)]:
        chunked.process(records[start:end], out)
        start = end
    assert out.journal == whole.journal
    assert [(d.record, d.error) for d in out.dead] == [(d.record, d.error) for d in whole.dead]
    assert out.inputs == whole.inputs == len(records) - len(whole.dead)


@SETTINGS
@given(batches(max_size=25), wanted_configs, st.data())
def test_replayed_positions_and_ids_are_not_folded_twice(
    records: list[InboxRecord], wanted: SchedulerConfig | None, data: st.DataObject
) -> None:
    core = _core(wanted)
    first = core.process(records)
    state_before = fingerprint(core.state)
    seq, now = core.state.seq, core.state.now
    # the same inbox positions again (a consumer that re-reads): nothing at all
    replay = data.draw(st.lists(st.sampled_from(records), max_size=10))
    again = core.process(replay)
    assert again.journal == [] and again.dead == [] and again.inputs == 0
    assert fingerprint(core.state) == state_before and core.state.seq == seq
    assert core.state.now == now
    # the same bytes at new positions (a client that resends): an input accepted once
    # is not accepted again while its id is remembered (one window)
    accepted: dict[str, float] = {}
    window = core.state.config.window  # ids are remembered for the shortest window in force
    for line in first.journal:
        event = decode_event(line)
        if event.type in ev.INPUT_TYPES and event.actor != ev.SCHEDULER:
            accepted[event.id] = event.time
        if event.type == "config.set":
            window = min(window, SchedulerConfig.model_validate(event.config).window)
    offset = max(r.offset for r in records) + 1
    resent = [
        InboxRecord(3, offset + i, r.timestamp, r.value)
        for i, r in enumerate(records)
        if _is_object(r.value)
        and isinstance(_raw_id(r.value), str)
        and _raw_id(r.value) in accepted
    ]
    result = core.process(resent)
    for line in result.journal:
        event = decode_event(line)
        if event.type in ev.INPUT_TYPES and event.id in accepted:
            assert accepted[event.id] < core.state.now - window, f"{event.id} accepted twice"


# ---------------------------------------------------------------- regressions


@pytest.mark.parametrize("depth", [999, 1000, 1023])
@pytest.mark.parametrize("field", ["id", "type", "workload", "cluster", "actor", "tags", "gpus"])
@pytest.mark.parametrize("kind", ["list", "obj"])
def test_json_nested_just_under_orjson_limit_is_rejected_not_raised(
    depth: int, field: str, kind: str
) -> None:
    """JSON nested 1000..1023 deep parses (orjson allows 1024) but cannot be printed
    (Python's recursion limit): the rejection used to raise RecursionError from
    `str`/`repr` of the value, stopping the worker on every restart (a poison pill)."""
    body = {"type": "workload.submitted", "v": 1, "id": "x", "cluster": CLUSTER, "actor": USER}
    body.update({"workload": "w", "allocation": "lab/a", "gpus": 1, field: Deep(depth, kind)})
    core = _core()
    folded = process_each(core, [InboxRecord(0, 0, T0, to_bytes(body))])
    assert not folded[0].dead
    assert isinstance(folded[0].run[-1][1], ev._Rejected)
    check_journal(core, folded)


@pytest.mark.parametrize("depth", [1024, 1025, 10_000, 100_000])
def test_json_nested_past_orjson_limit_is_a_dead_letter(depth: int) -> None:
    core = _core()
    for i, kind in enumerate(["list", "obj"]):
        value = to_bytes({"type": "clock.tick", "id": "t", "x": Deep(depth, kind)})
        result = core.process([InboxRecord(0, i, T0, value)])
        assert result.journal == [] and len(result.dead) == 1
        assert "depth" in result.dead[0].error


@pytest.mark.parametrize("value", [None, [1], {"d": 1}, [[["7d"]]]])
def test_config_with_a_duration_of_the_wrong_type_is_rejected_not_raised(value: Any) -> None:
    """`{"window": null}` from an admin (the actor is a claim) used to raise
    AttributeError out of `parse_duration` through pydantic and `admit`."""
    body = {"type": "config.set", "v": 1, "id": "x", "cluster": CLUSTER, "actor": ADMIN}
    core = _core()
    folded = process_each(
        core, [InboxRecord(0, 0, T0, to_bytes({**body, "config": {"window": value}}))]
    )
    rejection = folded[0].run[-1][1]
    assert rejection.type == "config.rejected" and "unreadable config" in rejection.error
    check_journal(core, folded)


def test_unknown_long_allocation_gets_no_quadratic_did_you_mean() -> None:
    """A submission to an unknown 300 kB allocation near a 300 kB leaf spent 14 s in
    difflib (quadratic) before it was rejected, stalling the worker; long names now get
    no suggestion, short ones still do."""
    long = "".join(chr(0x4E00 + (i * 7919) % 20000) for i in range(20_000))
    values = [
        {"type": "budget.set", "allocation": "lab", "weight": 1, "actor": ADMIN},
        {"type": "budget.set", "allocation": "lab/" + long, "weight": 1, "actor": ADMIN},
        {"type": "budget.set", "allocation": "lab/short", "weight": 1, "actor": ADMIN},
        {"type": "workload.submitted", "allocation": "lab/" + long[::-1], "workload": "w"},
        {"type": "workload.submitted", "allocation": "lab/shorts", "workload": "x"},
    ]
    records = [
        InboxRecord(
            0,
            i,
            T0,
            orjson.dumps(
                {"v": 1, "id": f"i{i}", "cluster": CLUSTER, "actor": USER, "gpus": 1, **v}
            ),
        )
        for i, v in enumerate(values)
    ]
    core = _core()
    folded = process_each(core, records)
    check_journal(core, folded)
    long_error, short_error = (f.run[-1][1].error for f in folded[3:])
    assert "did you mean" not in long_error and "`allot shares` lists them" in long_error
    assert "did you mean lab/short?" in short_error


@pytest.mark.parametrize("claim", [0.0, T0 - 10 * 86400.0])
def test_a_claim_older_than_the_window_is_rejected_even_before_the_core_has_a_clock(
    claim: float,
) -> None:
    """A core without a config to journal (a worker started without --admin/--set) has
    no clock until its first input: requests claiming 1970 were accepted *at* 1970,
    and the next one, stamped now, made the ledger write one bucket per hour of the 57
    years between (500k per account, 6 s) for work placed "in 1970"."""
    values = [
        {"type": "host.registered", "host": "h0", "gpus": 8},
        {"type": "budget.set", "allocation": "lab", "weight": 1},
        {"type": "workload.submitted", "workload": "w", "allocation": "lab", "gpus": 1},
    ]
    records = [
        InboxRecord(
            0,
            i,
            T0 + i,
            orjson.dumps(
                {"v": 1, "id": f"i{i}", "cluster": CLUSTER, "actor": ADMIN, "time": claim, **v}
            ),
        )
        for i, v in enumerate(values)
    ]
    core = _core(None)
    folded = process_each(core, records)
    check_journal(core, folded)
    for f in folded:
        (cause,) = (e for _, e in f.run)
        assert isinstance(cause, ev._Rejected) and "older than the 7d window" in cause.error
        assert T0 <= cause.time <= f.record.timestamp  # the broker's time, not 1970
    # and a clock lagging the broker (a jump ahead) does not let a claim in either
    core = _core(None)
    setup = [InboxRecord(0, 0, T0, orjson.dumps({"v": 1, "id": "t0", "type": "clock.tick"}))]
    late = {"v": 1, "id": "t1", "type": "clock.tick", "cluster": CLUSTER, "time": T0 + 86400}
    jump = InboxRecord(0, 1, T0 + 30 * 86400, orjson.dumps(late))
    folded = process_each(core, [*setup, jump])
    assert "older than the" in folded[1].run[0][1].error


def test_a_broker_time_past_year_9999_does_not_become_the_clock() -> None:
    """The core journals its config before an input, folded without admission: stamped
    with a broker timestamp past year 9999 (a CreateTime producer's int64 max) it set
    the clock there, and admission then rejected every later input ("time ... is not
    seconds since the Unix epoch") -- the cluster was wedged for good."""
    values = [
        {"type": "clock.tick"},
        {"type": "host.registered", "host": "h0", "gpus": 8},
        {"type": "budget.set", "allocation": "lab", "weight": 1},
        {"type": "workload.submitted", "workload": "w", "allocation": "lab", "gpus": 1},
    ]
    stamps = [2**63 / 1000, T0, T0, T0]
    records = [
        InboxRecord(
            0,
            i,
            stamp,
            orjson.dumps({"v": 1, "id": f"i{i}", "cluster": CLUSTER, "actor": ADMIN, **v}),
        )
        for i, (v, stamp) in enumerate(zip(values, stamps, strict=True))
    ]
    core = _core()
    folded = process_each(core, records)
    check_journal(core, folded)
    assert isinstance(folded[0].run[-1][1], ev.ClockRejected)
    assert [e.type for _, e in folded[-1].run] == ["workload.submitted", "workload.placed"]


# ---------------------------------------------------------------- atheris (optional)


def test_atheris_harness_runs_clean_for_a_bounded_number_of_inputs(tmp_path: Path) -> None:
    """fuzz/fuzz_core.py under libFuzzer for a few hundred inputs: no crash, no broken
    invariant. atheris is an optional extra (`pip install -e '.[fuzz]'`)."""
    pytest.importorskip("atheris")
    harness = ROOT / "fuzz" / "fuzz_core.py"
    corpus = tmp_path / "corpus"
    subprocess.run([sys.executable, str(harness), "--make-corpus", str(corpus)], check=True)
    run = subprocess.run(
        [
            sys.executable,
            str(harness),
            str(corpus),
            "-atheris_runs=400",
            "-timeout=30",
            "-rss_limit_mb=2048",
            f"-artifact_prefix={tmp_path}/",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Done 400" in run.stderr, run.stderr[-3000:]

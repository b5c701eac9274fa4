"""Bad input: each invalid request yields exactly one typed `*.rejected` that names the
offending value, and leaves the state as it was."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest

from domain import State, handle
from domain import events as ev
from domain.events import parse_input
from tests.domain.builders import Cluster, cluster, fingerprint

# principals: `root` is the admin; `boss` manages `lab`; `alice` is a member of lab/a
ADMINS = ("root",)


def _cluster() -> Cluster:
    c = Cluster(hosts=2, admins=ADMINS)
    c.budget("lab", 1, managers=("boss",))
    c.budget("lab/a", 1, members=("alice",))
    c.budget("lab/b", 1, members=("bob",))
    c.submit("run", "lab/a", gpus=2, min_runtime="1h", actor="alice")
    c.submit("gone", "lab/a", gpus=1, min_runtime="1h", actor="alice")
    c.finish("gone")
    c.submit("wait", "lab/a", gpus=16, min_runtime="1h", actor="alice")
    assert c.running() == {"run"} and c.pending() == {"wait"}
    assert c.rejections() == []
    return c


def submit(**over: Any) -> Callable[[Cluster], Any]:
    def make(c: Cluster) -> Any:
        fields = {
            "workload": "new",
            "allocation": "lab/a",
            "gpus": 1,
            "min_runtime": 900.0,
            "actor": "alice",
            **over,
        }
        return ev.WorkloadSubmitted(**c.envelope(**_env(fields)), **fields)

    return make


def _env(fields: dict[str, Any]) -> dict[str, Any]:
    return {k: fields.pop(k) for k in ("id", "time", "cluster", "actor") if k in fields}


def make(model: type, **fields: Any) -> Callable[[Cluster], Any]:
    def build(c: Cluster) -> Any:
        f = dict(fields)
        return model(**c.envelope(**_env(f)), **f)

    return build


def old(c: Cluster) -> Any:
    return ev.ClockTick(**c.envelope(time=c.now - c.state.config.window - 1))


def placed_as_input(c: Cluster) -> Any:
    return ev.WorkloadPlaced(
        **c.envelope(), workload="run", hosts={"h1": (0,)}, charged=True, protected_until=None
    )


def duplicate_id(c: Cluster) -> Any:
    first = c.inputs[-1].id
    return ev.ClockTick(**c.envelope(id=first))


# (build input, rejection type, fragment the error must contain)
CASES: list[tuple[str, Callable[[Cluster], Any], str, str]] = [
    ("unknown-allocation", submit(allocation="lab/zzz"), "workload.rejected", "'lab/zzz'"),
    ("close-match-hint", submit(allocation="lab/aa"), "workload.rejected", "did you mean lab/a"),
    ("non-leaf-allocation", submit(allocation="lab"), "workload.rejected", "'lab' is not a leaf"),
    ("name-with-newline", submit(name="a\nb"), "workload.rejected", "control or invisible"),
    ("name-with-bidi-override", submit(name="a\u202eb"), "workload.rejected", "bidi marks"),
    ("tag-with-newline", submit(tags=("x\ny",)), "workload.rejected", "tag 'x\\ny' has control"),
    ("gpus-zero", submit(gpus=0), "workload.rejected", "got 0"),
    ("gpus-negative", submit(gpus=-3), "workload.rejected", "got -3"),
    ("gpus-above-cluster", submit(gpus=17), "workload.rejected", "17 GPUs"),
    ("min-runtime-negative", submit(min_runtime=-5.0), "workload.rejected", "got -5"),
    ("min-runtime-above-cap", submit(min_runtime=9 * 3600.0), "workload.rejected", "9h"),
    ("min-runtime-nan", submit(min_runtime=math.nan), "workload.rejected", "nan"),
    ("expected-runtime-negative", submit(expected_runtime=-1.0), "workload.rejected", "-1"),
    ("empty-workload-id", submit(workload=""), "workload.rejected", "workload id is empty"),
    ("duplicate-workload-id", submit(workload="run"), "workload.rejected", "'run'"),
    ("ended-workload-id-reused", submit(workload="gone"), "workload.rejected", "'gone'"),
    ("submit-by-non-member", submit(actor="mallory"), "workload.rejected", "'mallory'"),
    ("submit-by-other-leafs-member", submit(actor="bob"), "workload.rejected", "'bob'"),
    (
        "budget-by-non-manager",
        make(ev.BudgetSet, allocation="lab/a", weight=5, actor="mallory"),
        "budget.rejected",
        "'mallory'",
    ),
    (
        "budget-by-leaf-member",
        make(ev.BudgetSet, allocation="lab/b", weight=5, actor="alice"),
        "budget.rejected",
        "'alice'",
    ),
    (
        "top-level-by-non-admin",
        make(ev.BudgetSet, allocation="other", weight=1, actor="boss"),
        "budget.rejected",
        "'other'",
    ),
    (
        "budget-negative-weight",
        make(ev.BudgetSet, allocation="lab/a", weight=-1, actor="boss"),
        "budget.rejected",
        "-1",
    ),
    (
        "budget-absurd-weight",  # shares of its siblings would underflow to 0
        make(ev.BudgetSet, allocation="lab/a", weight=1e308, actor="boss"),
        "budget.rejected",
        "from 0 to 1e+06",
    ),
    (
        "budget-infinite-weight",
        make(ev.BudgetSet, allocation="lab/a", weight=math.inf, actor="boss"),
        "budget.rejected",
        "inf",
    ),
    (
        "budget-invalid-path",
        make(ev.BudgetSet, allocation="lab//x", weight=1, actor="root"),
        "budget.rejected",
        "'lab//x'",
    ),
    (
        "budget-path-with-tab",
        make(ev.BudgetSet, allocation="lab/x\ty", weight=1, actor="boss"),
        "budget.rejected",
        "without spaces or control characters",
    ),
    (
        "host-name-with-a-comma",
        make(ev.HostRegistered, host="x,y", gpus=8, actor="root"),
        "host.rejected",
        "host name 'x,y' is not one word",
    ),
    (
        "host-name-with-brackets",
        make(ev.HostRegistered, host="z[1-2]", gpus=8, actor="root"),
        "host.rejected",
        "',', '[' or ']'",
    ),
    (
        "host-name-with-zero-width-space",
        make(ev.HostRegistered, host="h\u200bx", gpus=8, actor="root"),
        "host.rejected",
        "'h\\u200bx'",
    ),
    (
        "budget-path-with-space",
        make(ev.BudgetSet, allocation="lab/my team", weight=1, actor="boss"),
        "budget.rejected",
        "'lab/my team'",
    ),
    # sizes: ids are remembered for the window, so a megabyte id was a megabyte of memory
    ("huge-input-id", make(ev.ClockTick, id="i" * 300), "clock.rejected", "id of 300 characters"),
    (
        "huge-workload-id",
        submit(workload="w" * 1000),
        "workload.rejected",
        "workload of 1,000 characters; at most 256",
    ),
    ("too-many-tags", submit(tags=tuple(map(str, range(65)))), "workload.rejected", "65 tags"),
    ("huge-tag", submit(tags=("t" * 257,)), "workload.rejected", "a tag of 257 characters"),
    (
        "budget-without-weight-for-a-new-allocation",
        make(ev.BudgetSet, allocation="lab/zz", actor="boss", members=("x",)),
        "budget.rejected",
        "'lab/zz' does not exist yet: give its weight to create it",
    ),
    (
        "budget-missing-parent",
        make(ev.BudgetSet, allocation="nope/x", weight=1, actor="root"),
        "budget.rejected",
        "'nope'",
    ),
    (
        "budget-child-of-busy-leaf",
        make(ev.BudgetSet, allocation="lab/a/sub", weight=1, actor="boss"),
        "budget.rejected",
        "'lab/a' has 2 live workloads",
    ),
    (
        "budget-remove-unknown",
        make(ev.BudgetRemoved, allocation="lab/q", actor="boss"),
        "budget.rejected",
        "'lab/q'",
    ),
    (
        "budget-remove-busy-leaf",
        make(ev.BudgetRemoved, allocation="lab/a", actor="boss"),
        "budget.rejected",
        "2 live workloads",
    ),
    (
        "budget-remove-parent",
        make(ev.BudgetRemoved, allocation="lab", actor="root"),
        "budget.rejected",
        "has children",
    ),
    (
        "host-by-non-admin",
        make(ev.HostRegistered, host="h9", gpus=8, actor="boss"),
        "host.rejected",
        "'boss'",
    ),
    ("host-twice", make(ev.HostRegistered, host="h0", gpus=8), "host.rejected", "'h0'"),
    ("host-no-gpus", make(ev.HostRegistered, host="h9", gpus=0), "host.rejected", "got 0"),
    ("host-empty-name", make(ev.HostRegistered, host="", gpus=8), "host.rejected", "empty"),
    ("health-unknown-host", make(ev.HostHealth, host="h9", healthy=False), "host.rejected", "'h9'"),
    (
        "health-by-non-admin",
        make(ev.HostHealth, host="h0", healthy=False, actor="alice"),
        "host.rejected",
        "'alice'",
    ),
    ("duplicate-event-id", duplicate_id, "clock.rejected", "duplicate id"),
    (
        "cancel-unknown",
        make(ev.WorkloadCancelled, workload="ghost"),
        "workload.rejected",
        "'ghost'",
    ),
    (
        "cancel-ended",
        make(ev.WorkloadCancelled, workload="gone"),
        "workload.rejected",
        "'gone' has already ended",
    ),
    (
        "cancel-by-stranger",
        make(ev.WorkloadCancelled, workload="run", actor="mallory"),
        "workload.rejected",
        "'mallory'",
    ),
    (
        "finish-pending",
        make(ev.WorkloadFinished, workload="wait"),
        "workload.rejected",
        "'wait' is pending",
    ),
    (
        "finish-unknown",
        make(ev.WorkloadFinished, workload="ghost"),
        "workload.rejected",
        "'ghost'",
    ),
    (
        "finish-stale-attempt",
        make(ev.WorkloadFinished, workload="run", attempt=7),
        "workload.rejected",
        "attempt 7",
    ),
    (
        "config-bad-duration",
        make(ev.ConfigSet, config={"window": "soon"}),
        "config.rejected",
        "'soon'",
    ),
    ("config-unknown-key", make(ev.ConfigSet, config={"colour": 1}), "config.rejected", "'colour'"),
    (
        "config-unknown-policy",
        make(ev.ConfigSet, config={"ordering": "lottery"}),
        "config.rejected",
        "'lottery'",
    ),
    (
        "config-unknown-placement",
        make(ev.ConfigSet, config={"placement": "random"}),
        "config.rejected",
        "'random'",
    ),
    (
        "config-negative-hysteresis",
        make(ev.ConfigSet, config={"hysteresis": -1}),
        "config.rejected",
        "'hysteresis'",
    ),
    ("config-zero-window", make(ev.ConfigSet, config={"window": 0}), "config.rejected", "'window'"),
    # a window shorter than a bucket was one bucket long: 1s meant 15 minutes
    (
        "config-window-under-a-bucket",
        make(ev.ConfigSet, config={"window": "1s"}),
        "config.rejected",
        "bucket (15m) is longer than the window (1s)",
    ),
    (
        "config-huge-window",
        make(ev.ConfigSet, config={"window": 1e306}),
        "config.rejected",
        "'window'",
    ),
    (
        "config-tiny-bucket",
        make(ev.ConfigSet, config={"bucket": 0.001}),
        "config.rejected",
        "'bucket'",
    ),
    (
        "config-by-non-admin",
        make(ev.ConfigSet, config={}, actor="boss"),
        "config.rejected",
        "'boss'",
    ),
    ("decision-type-as-input", placed_as_input, "input.rejected", "workload.placed"),
    (
        "drained-as-input",
        make(ev.HostDrained, host="h0"),
        "input.rejected",
        "host.drained",
    ),
    (
        "rejection-type-as-input",
        make(ev.HostRejected, ref="x", error="fake"),
        "host.rejected",
        "fake",
    ),
    ("other-cluster", submit(cluster="elsewhere"), "workload.rejected", "'elsewhere'"),
    (
        "other-cluster-tick",
        make(ev.ClockTick, cluster="elsewhere"),
        "clock.rejected",
        "'elsewhere'",
    ),
    ("older-than-window", old, "clock.rejected", "older than the 7d window"),
    ("time-too-large", submit(time=1e306), "workload.rejected", "1e+306"),
]


@pytest.mark.parametrize(
    ("build", "rejection", "fragment"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_bad_input_is_rejected_and_changes_nothing(
    build: Callable[[Cluster], Any], rejection: str, fragment: str
) -> None:
    c = _cluster()
    before = fingerprint(c.state)
    seq = c.state.seq
    event = build(c)
    out = c.send(event)
    assert len(out) == 1, [e.type for e in out]
    (rejected,) = out
    assert rejected.type == rejection
    assert fragment in rejected.error, rejected.error
    if not event.type.endswith(".rejected"):  # an edge rejection keeps its own ref
        assert rejected.ref == event.id[:256]  # a huge id is kept in part
    assert rejected.cluster == "test"
    assert rejected.time == c.now  # stamped with the scheduler's time
    assert fingerprint(c.state) == before
    assert c.state.seq == seq + 1
    if build is not duplicate_id:  # a rejected id stays free for a corrected resend
        assert event.id not in c.state.seen_ids


def test_rejected_submission_does_not_reserve_its_workload_id() -> None:
    c = _cluster()
    c.send(submit(workload="fresh", gpus=0)(c))
    out = c.send(submit(workload="fresh", gpus=1)(c))
    assert out[0].type == "workload.submitted"
    assert "fresh" in c.running()


@pytest.mark.parametrize("first", [0, 1], ids=["from-0", "from-1"])
def test_cancelling_a_job_arrays_base_id_says_how_to_name_its_tasks(first: int) -> None:
    c = _cluster()
    for i in range(first, first + 3):
        c.send(submit(workload=f"arr_{i}")(c))
    (r,) = c.send(make(ev.WorkloadCancelled, workload="arr", actor="alice")(c))
    assert r.type == "workload.rejected"
    assert "it names a job array" in r.error and "'arr_[0-15]'" in r.error
    (r,) = c.send(make(ev.WorkloadCancelled, workload="ar", actor="alice")(c))
    assert "job array" not in r.error  # only a base with tasks gets the hint
    for model, verb in ((ev.WorkloadHeld, "hold"), (ev.WorkloadRequeueRequested, "requeue")):
        (r,) = c.send(make(model, workload="arr", actor="alice")(c))
        assert f"it names a job array: {verb} its tasks" in r.error  # the verb asked


def test_rejection_copies_what_was_rejected() -> None:
    c = _cluster()
    (r,) = c.send(submit(workload="x", allocation="lab/zzz", actor="alice", gpus=3)(c))
    assert (r.workload, r.allocation, r.actor, r.input_type, r.gpus) == (
        "x",
        "lab/zzz",
        "alice",
        "workload.submitted",
        3,
    )


def test_a_rejection_keeps_only_the_start_of_a_huge_name() -> None:
    c = _cluster()
    (r,) = c.send(submit(workload="w" * 100_000, id="j" * 100_000)(c))
    assert r.type == "workload.rejected"
    assert (len(r.ref), len(r.workload)) == (256, 256)


def test_a_budget_change_without_a_weight_keeps_the_schedulers_weight() -> None:
    """`allot budget set PATH --member ...`: the weight stays what the scheduler has,
    even if a weight change is still in flight behind the client's last read."""
    c = _cluster()
    c.budget("lab/a", 5)
    (out,) = c.send(make(ev.BudgetSet, allocation="lab/a", actor="boss", members=("x", "y"))(c))
    assert out.type == "budget.set" and out.weight is None
    node = c.state.tree.nodes["lab/a"]
    assert (node.weight, node.members) == (5.0, ("x", "y"))


def test_a_rejection_copies_no_absurd_gpu_count() -> None:
    """The error says what was asked; the field stays within what a consumer's 32-bit
    column holds (the audit store's did not, and stopped loading)."""
    c = _cluster()
    (r,) = c.send(submit(workload="x", allocation="lab/a", gpus=2**63 - 1)(c))
    assert r.type == "workload.rejected" and str(2**63 - 1) in r.error
    assert r.gpus is None


def test_open_cluster_lets_anyone_act_until_principals_are_named() -> None:
    c = Cluster(hosts=1)  # no admins, no managers, no members
    c.budget("lab/a", 1, actor="anyone")
    assert c.rejections() == []
    c.submit("w", "lab/a", actor="someone")
    assert c.placed("w") is not None


@pytest.mark.parametrize("time", [math.inf, -math.inf, math.nan, 1e306], ids=str)
def test_unusable_time_on_a_fresh_state_is_rejected_not_raised(time: float) -> None:
    state = State("c")
    out = handle(state, ev.HostRegistered(id="h", time=time, cluster="c", host="h0", gpus=8))
    assert [e.type for e in out] == ["host.rejected"]
    assert "time" in out[0].error and math.isfinite(out[0].time)
    assert state.hosts == {} and state.capacity == 0


def test_non_finite_time_on_a_running_state_is_stamped_with_scheduler_time() -> None:
    c = _cluster()
    out = c.send(ev.ClockTick(**c.envelope(time=math.nan)))
    assert out[0].type == "clock.tick" and out[0].time == c.now


# --------------------------------------------------------------------------------------
# parse_input: records that are not valid events become typed rejections, never raise

SUBMIT = {"type": "workload.submitted", "id": "r1", "time": 1.0, "workload": "w", "allocation": "a"}

RAW_CASES = [
    # a number or flag of the wrong JSON type is refused, not coerced (true was 1 GPU,
    # "30" thirty seconds; 2.0 is still two GPUs, see below)
    (
        "gpus-bool",
        {**SUBMIT, "gpus": True},
        "workload.rejected",
        "gpus: Input should be a valid integer",
    ),
    ("gpus-fraction", {**SUBMIT, "gpus": 2.5}, "workload.rejected", "(got 2.5)"),
    (
        "min-runtime-string",
        {**SUBMIT, "gpus": 1, "min_runtime": "30"},
        "workload.rejected",
        "min_runtime: Input should be a valid number (got '30')",
    ),
    # a count past 64 bits (JSON's 1e20, or an integer orjson reads as a float) used to be
    # accepted and crash the scheduler when its record was written, on every restart
    (
        "priority-1e20",
        {**SUBMIT, "gpus": 1, "priority": 1e20},
        "workload.rejected",
        "priority: Input should be less than or equal to 2147483647",
    ),
    (
        "priority-past-32-bits",  # allot submit refuses it; other writers meet the scheduler
        {**SUBMIT, "gpus": 1, "priority": 2**40},
        "workload.rejected",
        "priority: Input should be less than or equal to 2147483647",
    ),
    (
        "gpus-past-64-bits",
        {**SUBMIT, "gpus": -(2.0**70)},
        "workload.rejected",
        "gpus: Input should be greater than or equal to -9223372036854775808",
    ),
    (
        "report-attempt-past-64-bits",  # lax ("1" is attempt 1, as before) but bounded
        {"type": "workload.finished", "id": "r1", "time": 1.0, "workload": "w", "attempt": 10**20},
        "workload.rejected",
        "attempt: Input should be less than or equal to 9223372036854775807",
    ),
    ("resumable-two", {**SUBMIT, "gpus": 1, "resumable": 2}, "workload.rejected", "resumable"),
    ("resumable-text", {**SUBMIT, "gpus": 1, "resumable": "yes"}, "workload.rejected", "resumable"),
    (
        "host-gpus-string",
        {"type": "host.registered", "id": "r1", "time": 1.0, "host": "h", "gpus": "8"},
        "host.rejected",
        "gpus",
    ),
    # a version this scheduler has no upcaster to: a newer writer (or junk)
    ("newer-version", {**SUBMIT, "gpus": 1, "v": 99}, "workload.rejected", "version 99 of"),
    ("version-true", {**SUBMIT, "gpus": 1, "v": True}, "workload.rejected", "version True of"),
    ("version-string", {**SUBMIT, "gpus": 1, "v": "1"}, "workload.rejected", "version '1' of"),
    (
        "missing-field",
        {"type": "workload.submitted", "id": "r1", "time": 1.0, "allocation": "a", "gpus": 1},
        "workload.rejected",
        "workload: missing",
    ),
    (
        "wrong-type-gpus",
        {
            "type": "workload.submitted",
            "id": "r1",
            "time": 1.0,
            "workload": "w",
            "allocation": "a",
            "gpus": "lots",
        },
        "workload.rejected",
        "'lots'",
    ),
    (
        "wrong-type-time",
        {"type": "clock.tick", "id": "r1", "time": "yesterday"},
        "clock.rejected",
        "'yesterday'",
    ),
    ("missing-time", {"type": "clock.tick", "id": "r1"}, "clock.rejected", "time: missing"),
    (
        "wrong-type-bool",
        {"type": "host.health", "id": "r1", "time": 1.0, "host": "h0", "healthy": "maybe"},
        "host.rejected",
        "'maybe'",
    ),
    (
        "wrong-type-weight",
        {"type": "budget.set", "id": "r1", "time": 1.0, "allocation": "a", "weight": "heavy"},
        "budget.rejected",
        "'heavy'",
    ),
    (
        "config-not-object",
        {"type": "config.set", "id": "r1", "time": 1.0, "config": [1, 2]},
        "config.rejected",
        "config",
    ),
    (
        "unknown-type",
        {"type": "workload.exploded", "id": "r1", "time": 1.0},
        "input.rejected",
        "'workload.exploded'",
    ),
    ("no-type", {"id": "r1", "time": 1.0}, "input.rejected", "None"),
    ("type-not-string", {"type": ["x"], "id": "r1", "time": 1.0}, "input.rejected", "record"),
    ("type-object", {"type": {"a": 1}, "id": "r1"}, "input.rejected", "record"),
    (
        "decision-type",
        {"type": "workload.placed", "id": "r1", "time": 1.0, "workload": "w"},
        "input.rejected",
        "'workload.placed'",
    ),
    (
        "v0-bad-gpu-count",
        {
            "type": "workload.submitted",
            "v": 0,
            "id": "r1",
            "time": 1.0,
            "workload": "w",
            "allocation": "a",
            "gpu_count": "many",
        },
        "workload.rejected",
        "'many'",
    ),
    (
        "v0-bad-min-runtime",
        {
            "type": "workload.submitted",
            "v": 0,
            "id": "r1",
            "time": 1.0,
            "workload": "w",
            "allocation": "a",
            "gpu_count": 1,
            "min_runtime_minutes": "long",
        },
        "workload.rejected",
        "'long'",
    ),
]


@pytest.mark.parametrize(
    ("raw", "rejection", "fragment"),
    [case[1:] for case in RAW_CASES],
    ids=[case[0] for case in RAW_CASES],
)
def test_parse_input_rejects_without_raising(raw: dict, rejection: str, fragment: str) -> None:
    event = parse_input(raw, now=5.0)
    assert event.type == rejection
    assert fragment in event.error, event.error
    assert event.ref == "r1"
    # the edge's rejection is journaled as is (renumbered), and changes nothing
    c = _cluster()
    before = fingerprint(c.state)
    out = c.send(event)
    assert [e.type for e in out] == [rejection]
    assert out[0].id == f"test/{c.state.seq - 1}" and out[0].error == event.error
    assert fingerprint(c.state) == before


def test_parse_input_without_id_uses_placeholder_ref() -> None:
    event = parse_input({"type": "clock.tick"})
    assert event.type == "clock.rejected" and event.ref == "?"


def test_parse_input_clips_huge_fields() -> None:
    event = parse_input({"type": "x" * 10_000, "id": "i" * 10_000})
    assert event.type == "input.rejected"
    assert len(event.ref) <= 200 and len(event.error) < 1000


def test_parse_input_accepts_valid_records_and_ignores_unknown_fields() -> None:
    raw = {
        "type": "workload.submitted",
        "id": "r1",
        "time": 1.0,
        "workload": "w",
        "allocation": "lab/a",
        "gpus": 2,
        "min_runtime": 60,
        "colour": "blue",
    }
    event = parse_input(raw)
    assert isinstance(event, ev.WorkloadSubmitted)
    assert (event.gpus, event.min_runtime, event.v) == (2, 60.0, 1)
    assert not hasattr(event, "colour")


@pytest.mark.parametrize(
    ("at", "input_remembered", "ended_remembered"),
    [("59m", True, True), ("61m", False, True), ("71m", False, False)],
    ids=["inside-the-window", "input-past-the-window", "both-past-the-window"],
)
def test_ids_are_remembered_for_one_window_then_forgotten(
    at: str, input_remembered: bool, ended_remembered: bool
) -> None:
    """The dedup horizon (DESIGN §7): input ids and ended workload ids are kept for one
    usage window, so memory stays flat; a workload id is free again once forgotten."""
    c = cluster(hosts=1, window="1h").tree({"lab/a": 1})
    c.submit("run", "lab/a")  # at 0
    submit_id = c.inputs[-1].id
    c.at("10m").finish("run")
    c.at(at).tick()
    assert (submit_id in c.state.seen_ids) is input_remembered
    assert ("run" in c.state.ended) is ended_remembered
    # the orders hold exactly the remembered ids, oldest first
    assert list(c.state.seen_order) == list(c.state.seen_ids)
    assert list(c.state.ended_order) == list(c.state.ended)
    (again,) = c.submit("run", "lab/a")[:1]
    assert again.type == ("workload.rejected" if ended_remembered else "workload.submitted")


def test_a_whole_float_is_a_count_and_0_or_1_a_flag() -> None:
    """JSON has one number type (and some writers no booleans), and the inbox took 2.0
    and 1 before inputs were strict: old inboxes must re-derive as journaled."""
    event = parse_input({**SUBMIT, "gpus": 2.0, "priority": 3.0, "resumable": 1}, now=5.0)
    assert (event.type, event.gpus, event.priority) == ("workload.submitted", 2, 3)
    assert type(event.gpus) is int and event.resumable is True


def test_work_larger_than_the_cluster_is_told_what_to_do_instead() -> None:
    """The rejection 'asks for 24 GPUs but cluster X has 16 registered' named no next step: the
    submitter learns the most it may ask for, and whom to ask for more hosts."""
    c = _cluster()
    (r,) = c.send(submit(workload="big", allocation="lab/a", gpus=24)(c))
    assert r.error == (
        "asks for 24 GPUs but cluster 'test' has 16 registered; submit with at most 16 "
        f"GPUs, or ask an admin ({', '.join(ADMINS)}) to register more hosts"
    )
    empty = Cluster(hosts=0)
    empty.budget("lab/a", 1)
    (r,) = empty.send(submit(workload="any", allocation="lab/a", gpus=1)(empty))
    assert r.error == (
        "asks for 1 GPU but cluster 'test' has 0 registered; ask an admin to register "
        "hosts (`allot host register`)"
    )


def test_counts_of_one_read_in_the_singular() -> None:
    """'1 live workload', '1 GPU': not '1 live workloads', '1 GPUs'."""
    c = Cluster(hosts=0, admins=ADMINS)
    c.budget("lab/a", 1, members=("alice",))
    asks = c.submit("one", "lab/a", gpus=1, min_runtime="1h", actor="alice")
    assert c.rejections(asks)[0].error.startswith("asks for 1 GPU but cluster 'test' has 0")
    c.host("h0", 1)
    too_big = c.submit("two", "lab/a", gpus=2, min_runtime="1h", actor="alice")
    assert "submit with at most 1 GPU," in c.rejections(too_big)[0].error
    c.submit("run", "lab/a", gpus=1, min_runtime="1h", actor="alice")
    assert c.running() == {"run"}
    again = c.host("h0", 1)
    assert (
        c.rejections(again)[0].error == "host 'h0' is already registered with 1 GPU: nothing to do"
    )
    busy = "'lab/a' has 1 live workload;"
    removed = c.input(ev.BudgetRemoved, allocation="lab/a")
    assert c.rejections(removed)[0].error == f"{busy} let it finish or cancel it first"
    child = c.budget("lab/a/b", 1)
    assert c.rejections(child)[0].error.startswith(busy)
    assert child[0].error.endswith("let it finish or cancel it first")

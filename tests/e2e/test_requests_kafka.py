"""Requests sent to Kafka without --wait: a refusal is said at once when the login may
read the journal and a scheduler serves the cluster, as it is for a served --data
folder; otherwise the request is only sent, as before. Real processes, the session's
broker (the ACL case, a login that may not read the journal: tests/streams/test_security)."""

from __future__ import annotations

import uuid

import pytest

from tests.e2e.cli import allot
from tests.e2e.test_serve_kafka_start import _env, _Serve

pytestmark = pytest.mark.kafka


def test_a_refusal_on_kafka_is_said_without_wait_when_a_scheduler_serves(
    kafka_bootstrap: str,
) -> None:
    """`allot submit` to Kafka without --wait printed `Submitted workload ID` and exited 0
    for a submission the scheduler refused at once (more GPUs than the cluster has),
    where the same request to a served folder says the refusal, exit 1."""
    suffix = f".refusal-{uuid.uuid4().hex[:8]}"
    environ = {"ALLOT_KAFKA": kafka_bootstrap, "ALLOT_TOPIC_SUFFIX": suffix, "USER": "ops"}
    created = allot("topics", "create", env=environ)
    assert created.returncode == 0, created.stderr
    serve = _Serve(_env(**environ))
    try:
        serve.until("scheduler ready")
        for setup in (["host", "register", "n1", "8"], ["budget", "set", "lab", "1"]):
            done = allot(*setup, "--cluster", "c", "--wait", "60", env=environ)
            assert done.returncode == 0, (done.stdout, done.stderr)
        submit = ["submit", "-A", "lab", "-G", "24", "--min-runtime", "1h"]

        refused = allot(*submit, "--cluster", "c", env=environ)
        assert refused.returncode == 1, (refused.stdout, refused.stderr)
        first, said = refused.stdout.splitlines()
        workload = first.removeprefix("Submitted workload ")
        assert said == (
            f"Workload {workload} was rejected: asks for 24 GPUs but cluster 'c' has 8 "
            "registered; submit with at most 8 GPUs, or ask an admin (ops) to register "
            "more hosts"
        )
        cancel = allot("cancel", "01M8QRQ1Z9JVJGQCTGH70KCGA5", "--cluster", "c", env=environ)
        assert cancel.returncode == 1, (cancel.stdout, cancel.stderr)
        assert cancel.stdout.splitlines()[-1] == (
            "The cancel of workload 01M8QRQ1Z9JVJGQCTGH70KCGA5 was rejected: unknown workload "
            "'01M8QRQ1Z9JVJGQCTGH70KCGA5'; `allot queue` lists live ones"
        )

        # a cluster no scheduler serves (this one serves c only): sent, no verdict
        # awaited, and a note says so, as for a --data folder nobody serves
        unserved = allot(*submit, "--cluster", "elsewhere", env=environ)
        assert unserved.returncode == 0, (unserved.stdout, unserved.stderr)
        assert unserved.stdout.startswith("Submitted workload ")
        assert len(unserved.stdout.splitlines()) == 1
        assert unserved.stderr == (
            f"note: no scheduler serves cluster 'elsewhere' at kafka {kafka_bootstrap} now; "
            f"the request waits in allot.inbox{suffix} until one runs (`allot serve --kafka "
            f"{kafka_bootstrap}`)\n"
        )
        assert serve.stop() == 0, serve.text
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()
            serve.proc.wait()

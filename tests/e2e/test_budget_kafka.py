"""`allot budget set --add-member/--remove-member` through a real broker: the change is
resolved by `allot serve --kafka` on the lists it holds, and the read side shows it."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
import pytest

from tests.e2e.cli import allot
from tests.e2e.test_budget_log_sources import rows_and_undo
from tests.e2e.test_serve_kafka_start import _env, _Serve

pytestmark = pytest.mark.kafka


def test_members_added_and_removed_by_name_on_kafka(kafka_bootstrap: str, tmp_path: Path) -> None:
    suffix = f".members-{uuid.uuid4().hex[:8]}"
    environ = {"ALLOT_KAFKA": kafka_bootstrap, "ALLOT_TOPIC_SUFFIX": suffix}
    created = allot("topics", "create", env=environ)
    assert created.returncode == 0, created.stderr
    serve = _Serve(_env(**environ))
    try:
        serve.until("scheduler ready")

        def request(*args: str, actor: str = "pm") -> list[str]:
            done = allot(*args, "--cluster", "c", "--as", actor, "--wait", "60", env=environ)
            assert done.returncode == 0, (done.stdout, done.stderr)
            return done.stdout.splitlines()

        request("budget", "set", "lab", "1", "--manager", "pm", actor="ops")
        request("budget", "set", "lab/mid", "1", "--member", "bob,carol")
        said = request(
            "budget", "set", "lab/mid", "--add-member", "erin,bob", "--remove-member", "carol,zed"
        )
        assert said[-3:] == [
            "bob was already a member",
            "zed was not a member: nothing to remove",
            "Members now: bob, erin",
        ]
        # without --wait the verdict is waited for too: a refused change says why, exit 1
        refused = allot(
            "budget", "set", "lab/mid", "9", "--cluster", "c", "--as", "bob", env=environ
        )
        assert refused.returncode == 1, (refused.stdout, refused.stderr)
        assert refused.stdout.splitlines()[-1] == (
            "The budget change for lab/mid was rejected: 'bob' is not a manager of 'lab'; ask pm"
        )
        # who changed what, read from the journal topic with no `audit load`, as from the
        # audit database loaded from it: the same rows, the refusal among them
        from_kafka = allot("budget", "log", "--cluster", "c", env=environ)
        assert from_kafka.stdout.startswith(
            f"3 budget changes, 1 refused · from the journal (kafka {kafka_bootstrap} cluster c)"
        ), (from_kafka.stdout, from_kafka.stderr)
        db = tmp_path / "audit.duckdb"
        loaded = allot("audit", "load", "--cluster", "c", "--db", str(db), env=environ)
        assert loaded.returncode == 0, loaded.stderr
        from_db = allot("budget", "log", "--db", str(db), env=environ)
        assert rows_and_undo(from_kafka) == rows_and_undo(from_db)
        rows = [" ".join(line.split()[2:]) for line in from_kafka.stdout.splitlines()[2:]]
        assert rows[-1] == "bob lab/mid set refused 'bob' is not a manager of 'lab'; ask pm"
        assert rows[-2] == "pm lab/mid set +erin +bob (already) -carol -zed (not there) → bob,erin"
        assert from_kafka.stderr.splitlines()[0].endswith(
            "allot budget set lab/mid --member bob,carol --cluster c"
        )
        # the typo check reads the tree's records from the journal topic
        typo = allot("budget", "set", "lab/midd", "1", "--cluster", "c", "--as", "pm", env=environ)
        assert typo.returncode == 2, (typo.stdout, typo.stderr)
        assert "lab/midd does not exist, and lab/mid does: a typo? Nothing sent" in typo.stderr
        shares = allot("shares", "-l", "--json", "-A", "lab/mid", "--cluster", "c", env=environ)
        assert shares.returncode == 0, shares.stderr
        rows = orjson.loads(shares.stdout)["allocations"]
        assert [(r["path"], r["members"]) for r in rows] == [("lab/mid", ["bob", "erin"])]
        assert serve.stop() == 0, serve.text
    finally:
        if serve.proc.poll() is None:
            serve.proc.kill()
            serve.proc.wait()

"""deploy/systemd/allot-serve.service: the unit systemd accepts, and what it relies on
from the command it starts — run here as it is written there (its ExecStart and its
EnvironmentFile, with this test's broker, topic suffix and metrics port):

- SIGTERM (systemd's stop) ends it with exit 0 well inside TimeoutStopSec;
- a fatal error exits non-zero (so Restart=on-failure restarts it);
- with stderr connected to journald ($JOURNAL_STREAM), each line carries its syslog
  priority (`<3>error: ...`, `<6>...`), so `journalctl -p err` finds the errors.

Needs `systemd-analyze` (Debian's systemd package) and the session's broker."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from tests.e2e.cli import allot

ROOT = Path(__file__).resolve().parents[2]
SYSTEMD = ROOT / "deploy" / "systemd"
UNIT = SYSTEMD / "allot-serve.service"
ENV_FILE = SYSTEMD / "allot.env"


def unit_settings(path: Path = UNIT) -> dict[str, list[str]]:
    """`Section.Key` -> its values, in order (a key may repeat)."""
    out: dict[str, list[str]] = {}
    section = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, _, value = line.partition("=")
        out.setdefault(f"{section}.{key.strip()}", []).append(value.strip())
    return out


def env_file(path: Path = ENV_FILE) -> dict[str, str]:
    pairs = (
        line.split("=", 1)
        for line in path.read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    )
    return {k.strip(): v.strip() for k, v in pairs}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _seconds(text: str) -> float:
    from domain.durations import parse_duration

    return parse_duration(text)


def exec_start(metrics_port: int) -> list[str]:
    """The unit's ExecStart as this checkout runs it (its interpreter and allot), the
    metrics port swapped for a free one."""
    [line] = unit_settings()["Service.ExecStart"]
    binary, *args = shlex.split(line)
    assert Path(binary).name == "allot", binary
    port_at = args.index("--metrics-port") + 1
    args[port_at] = str(metrics_port)
    return [sys.executable, "-m", "allot.cli", *args]


def service_env(**overrides: str) -> dict[str, str]:
    """The service's environment: the unit's Environment= lines and its EnvironmentFile
    (the example), no $ALLOT_* from the caller."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("ALLOT_")}
    for assignment in unit_settings().get("Service.Environment", []):
        key, _, value = assignment.partition("=")
        env[key] = value
    env.update(env_file())
    env.update(overrides)
    return env


def test_systemd_accepts_the_unit(tmp_path: Path) -> None:
    """`systemd-analyze verify`: every key known and in its section, every value
    parsed (it said nothing of StartLimitIntervalSec under [Service] but ignored it)."""
    tool = shutil.which("systemd-analyze")
    if tool is None:
        pytest.fail("systemd-analyze is missing: it comes with Debian's `systemd` package")
    allot_script = Path(sys.executable).with_name("allot")
    if not allot_script.exists():
        allot_script = Path(shutil.which("allot") or sys.executable)
    [line] = unit_settings()["Service.ExecStart"]
    unit = tmp_path / UNIT.name
    # verify checks that ExecStart's binary exists: this machine's, not /opt/allot's
    unit.write_text(UNIT.read_text().replace(line.split()[0], str(allot_script)))
    result = subprocess.run([tool, "verify", str(unit)], capture_output=True, text=True)
    assert result.returncode == 0 and not result.stderr.strip(), result.stderr
    settings = unit_settings()
    assert settings["Service.Restart"] == ["on-failure"]
    assert settings["Service.KillSignal"] == ["SIGTERM"]
    assert settings["Service.EnvironmentFile"] == ["/etc/allot/allot.env"]


def test_the_env_file_names_only_what_allot_reads() -> None:
    """Every variable of the example environment is one allot reads (a typo'd name
    is silently ignored by the service, e.g. ALLOT_ADMIN for ALLOT_ADMINS)."""
    names = set(env_file())
    commented = {
        line.lstrip("#").split("=", 1)[0].strip()
        for line in ENV_FILE.read_text().splitlines()
        if line.startswith("#ALLOT_")
    }
    sources = "\n".join(
        p.read_text() for d in ("allot", "streams") for p in (ROOT / d).rglob("*.py")
    )
    unread = [n for n in sorted(names | commented) if f'"{n}"' not in sources]
    assert not unread, unread
    assert {"ALLOT_KAFKA", "ALLOT_CLUSTER", "ALLOT_ADMINS"} <= names


def _journal_stderr(path: Path) -> str:
    st = path.stat()
    return f"{st.st_dev}:{st.st_ino}"


def _start_unit_command(bootstrap: str, suffix: str, port: int, log: Path) -> subprocess.Popen:
    """The unit's ExecStart with its environment, stderr to `log` as journald's stream,
    run from `log`'s folder."""
    with log.open("wb") as stderr:
        return subprocess.Popen(
            exec_start(port),
            env=service_env(
                ALLOT_KAFKA=bootstrap,
                ALLOT_TOPIC_SUFFIX=suffix,
                JOURNAL_STREAM=_journal_stderr(log),
            ),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=stderr,
            cwd=log.parent,
        )


def _metrics_answer(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
                if b"allot_scheduler_recovering 0.0" in r.read():
                    return
        except OSError:
            pass
        time.sleep(0.2)
    pytest.fail(f"the scheduler never became ready:\n{log.read_text()}")


@pytest.mark.kafka
def test_the_unit_command_stops_cleanly_on_sigterm(kafka_bootstrap: str, tmp_path: Path) -> None:
    suffix = f".systemd-{uuid.uuid4().hex[:8]}"
    created = allot(
        "topics", "create", env={"ALLOT_KAFKA": kafka_bootstrap, "ALLOT_TOPIC_SUFFIX": suffix}
    )
    assert created.returncode == 0, created.stderr
    port = _free_port()
    log = tmp_path / "stderr"
    proc = _start_unit_command(kafka_bootstrap, suffix, port, log)
    try:
        _metrics_answer(port, proc, log)
        proc.send_signal(signal.SIGTERM)
        [stop_timeout] = unit_settings()["Service.TimeoutStopSec"]
        # systemd sends SIGKILL after TimeoutStopSec: the last snapshot would be lost
        assert proc.wait(timeout=_seconds(stop_timeout)) == 0, log.read_text()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = log.read_text().splitlines()
    assert any(line.startswith("<6>allot.worker: scheduler ready") for line in lines), lines
    assert any(line.startswith("<6>allot.worker: stopped") for line in lines), lines


@pytest.mark.kafka
def test_a_fatal_error_exits_non_zero_with_an_error_priority_line(
    kafka_bootstrap: str, tmp_path: Path
) -> None:
    """Topics nobody created (a typo'd suffix): Restart=on-failure needs the exit code,
    and `journalctl -p err` the line."""
    suffix = f".missing-{uuid.uuid4().hex[:8]}"
    log = tmp_path / "stderr"
    proc = _start_unit_command(kafka_bootstrap, suffix, _free_port(), log)
    try:
        assert proc.wait(timeout=120) != 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = log.read_text().splitlines()
    assert [line for line in lines if line.startswith("<3>error: no topic allot.inbox")], lines
    assert "Traceback" not in log.read_text()


@pytest.mark.parametrize("journald", [True, False], ids=["journald", "file"])
def test_a_crash_of_serve_under_journald_is_logged_at_crit_priority(
    tmp_path: Path, journald: bool
) -> None:
    """An unexpected exception (a bug, not a user error) after serve set up its logging:
    under journald each line of its traceback at crit, so `journalctl -p err` shows why
    systemd restarted the service; written to a file, Python's plain traceback."""
    crash = (
        "from allot.commands.serve import _log_to_stderr; _log_to_stderr();"
        "raise RuntimeError('a bug')"
    )
    stderr = tmp_path / "stderr"
    with stderr.open("w") as out:
        env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
        if journald:
            env["JOURNAL_STREAM"] = _journal_stderr(stderr)
        done = subprocess.run([sys.executable, "-c", crash], stderr=out, env=env, timeout=60)
    assert done.returncode == 1
    lines = stderr.read_text().splitlines()
    prefix = "<2>" if journald else ""
    assert lines[0] == f"{prefix}Traceback (most recent call last):", lines
    assert lines[-1] == f"{prefix}RuntimeError: a bug"
    assert all(line.startswith(prefix) for line in lines)
    assert journald or not any(line.startswith("<") for line in lines)

"""A real launcher for allot: runs each placed workload as a process on this machine,
following README's "How a real launcher consumes the journal", on either back end:

    python examples/launcher/local_launcher.py --data ./lab --as ops --state ./lab-launcher
    python examples/launcher/local_launcher.py --kafka HOST:PORT --as ops --state ./launcher

It runs the workload's tag `cmd=<shell command>` (no commas: --tag splits on them), else
`sleep <runtime>`, else `sleep infinity` (until preempted or cancelled), with
$ALLOT_ATTEMPT (a resumable command resumes from its own checkpoint), $ALLOT_HOSTS (the
placement, JSON) and $CUDA_VISIBLE_DEVICES (its first host's GPUs: every host is this
machine), its output in STATE/output/<workload>.<attempt>.log (kept after it ends). It
reports each exit as `workload.finished` (completed if 0, else failed, with
`exit_code`); stops what the journal preempted, cancelled or ended (SIGTERM, SIGKILL
after `preempt_grace`; nothing is reported); and when a file STATE/lost/HOST appears
(your node-health probe's stand-in; remove it once the host is back) it reports HOST
unhealthy (admins only: run it `--as` an admin), kills what ran there and reports it
`lost`. Commands outlive the launcher: a restart reads the journal whole, adopts them
from STATE (per attempt: pid, hosts, exit status, reported), reports what ended
meanwhile and stops what the journal ended. Report ids are the same when resent
(`launcher/<cluster>/<workload>/<attempt>`), so a resend is rejected, never applied.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, unquote

from allot.commands.common import TargetError, resolve_target
from allot.commands.executor import send_retrying
from streams.inbox import InboxRefused, make_request, open_inbox
from streams.sources import SourceError, journal_tail

POLL_S = 0.5
# runs the command, then writes its exit status where a restarted launcher finds it
WRAPPER = 'sh -c "$1"; echo $? > "$2.tmp" && mv "$2.tmp" "$2"'


def log(message: str) -> None:
    print(f"launcher: {message}", file=sys.stderr, flush=True)


def put(path: Path, text: str) -> None:
    """Write a file whole or not at all (the launcher may be killed at any moment)."""
    path.with_suffix(".tmp").write_text(text)
    path.with_suffix(".tmp").replace(path)


def pid_of(where: Path) -> int | None:
    with contextlib.suppress(FileNotFoundError):
        return int((where / "pid").read_text())
    return None


def kill(where: Path, sig: int) -> bool:
    """Signal the attempt's process group (0: only ask whether it still runs)."""
    pid = pid_of(where)
    with contextlib.suppress(ProcessLookupError):
        return pid is not None and os.killpg(pid, sig) is None
    return False


def command_of(submitted: dict[str, Any]) -> str:
    for tag in submitted.get("tags", []):
        if tag.startswith("cmd="):
            return tag[len("cmd=") :]
    runtime = submitted.get("runtime")
    return f"sleep {runtime:g}" if runtime is not None else "exec sleep infinity"


def gpus(hosts: dict[str, list[int]]) -> set[tuple[str, int]]:
    return {(host, index) for host, indices in hosts.items() for index in indices}


class Launcher:
    def __init__(self, target: Any, cluster: str, actor: str, state: Path) -> None:
        self.cluster, self.actor, self.state = cluster, actor, state
        self.inbox = open_inbox(target)
        self.journal = journal_tail(kafka=target.kafka, data=target.data, cluster=cluster)
        self.submitted: dict[str, dict[str, Any]] = {}  # workloads that have not ended
        self.running: dict[
            str, tuple[int, dict[str, list[int]]]
        ] = {}  # workload -> attempt, as journaled
        self.unhealthy: set[str] = set()
        self.grace = 0.0
        self.children: list[subprocess.Popen[bytes]] = []  # ours to reap
        self.stopping: dict[Path, float] = {}  # attempt folder -> when to SIGKILL
        self.stop = threading.Event()
        self.trouble = ""
        (state / "lost").mkdir(parents=True, exist_ok=True)

    def read_journal(self) -> bool:
        """Fold what the journal holds now; False when it could not be read whole."""
        try:
            lines, mark = self.journal.read()
        except SourceError as why:  # not written yet, broker down
            if str(why) != self.trouble:
                log(f"waiting for the journal: {why}")
            self.trouble = str(why)
            return False
        for line in lines:
            self.apply(json.loads(line))
        self.journal.advance(mark)
        return True

    def apply(self, r: dict[str, Any]) -> None:
        kind, wid = r.get("type"), r.get("workload")
        if kind == "config.set":
            self.grace = float(r["config"].get("preempt_grace", self.grace))
        elif kind == "host.health":
            (self.unhealthy.discard if r["healthy"] else self.unhealthy.add)(r["host"])
        elif kind == "workload.submitted":
            self.submitted[wid] = r
        elif kind == "workload.placed":
            self.running[wid] = (r["attempt"], r["hosts"])
        elif kind in ("workload.preempted", "workload.finished", "workload.cancelled"):
            self.running.pop(wid, None)
            if not r.get("requeued"):
                self.submitted.pop(wid, None)

    def folder(self, wid: str, attempt: int) -> Path:
        return self.state / "attempts" / quote(wid, safe="") / str(attempt)

    def reconcile(self) -> None:
        """Make the processes match the journal, and report what ended."""
        self.children = [child for child in self.children if child.poll() is None]
        lost = {marker.name for marker in (self.state / "lost").iterdir()}
        self.announce_lost(lost)
        held = self.stop_what_ended()
        for wid, (attempt, hosts) in list(self.running.items()):
            where = self.folder(wid, attempt)
            if (where / "reported").exists():
                continue  # the journal has not caught up with the report yet
            if lost & hosts.keys():
                where.mkdir(parents=True, exist_ok=True)
                kill(where, signal.SIGKILL)  # its processes died with the host
                self.report(where, wid, attempt, "lost", reason="its host was lost")
            elif not where.exists():
                if not held & gpus(hosts):
                    self.start(wid, attempt, hosts, where)
            elif ended := self.exit_status(where):
                self.report(where, wid, attempt, **ended)

    def announce_lost(self, lost: set[str]) -> None:
        """Report each lost host unhealthy before its attempts are reported lost, so the
        scheduler does not place the requeued work there again."""
        for host in sorted(lost - self.unhealthy):
            since = (self.state / "lost" / host).stat().st_mtime_ns
            request = make_request("host.health", cluster=self.cluster, actor=self.actor,
                                   host=host, healthy=False, reason="lost")  # fmt: skip
            self.send(request | {"id": f"launcher/{self.cluster}/{host}/lost@{since}"})
            self.unhealthy.add(host)  # until the journal says otherwise

    def stop_what_ended(self) -> set[tuple[str, int]]:
        """Stop the attempts the journal ended; the GPUs those still hold."""
        live = {(quote(w, safe=""), str(a)) for w, (a, _) in self.running.items()}
        held: set[tuple[str, int]] = set()
        for where in (self.state / "attempts").glob("*/*"):
            if (where.parent.name, where.name) in live:
                continue
            if kill(where, 0):
                if where not in self.stopping:
                    log(f"stopping {unquote(where.parent.name)} attempt {where.name}")
                    self.stopping[where] = time.monotonic() + self.grace
                    kill(where, signal.SIGTERM)
                elif time.monotonic() >= self.stopping[where]:
                    kill(where, signal.SIGKILL)
                held |= gpus(json.loads((where / "hosts").read_text()))
            else:
                self.stopping.pop(where, None)
                shutil.rmtree(where)
                with contextlib.suppress(OSError):
                    where.parent.rmdir()  # the workload's last attempt folder
        return held

    def start(self, wid: str, attempt: int, hosts: dict[str, list[int]], where: Path) -> None:
        command = command_of(self.submitted.get(wid, {}))
        first_host_gpus = ",".join(map(str, next(iter(hosts.values()))))
        env = os.environ | {"CUDA_VISIBLE_DEVICES": first_host_gpus, "ALLOT_WORKLOAD": wid,
                            "ALLOT_ATTEMPT": str(attempt), "ALLOT_HOSTS": json.dumps(hosts)}  # fmt: skip
        where.mkdir(parents=True)
        put(where / "hosts", json.dumps(hosts))
        # outlives the attempt folder: a failed job's output is what its user reads next
        log_file = self.state / "output" / f"{quote(wid, safe='')}.{attempt}.log"
        log_file.parent.mkdir(exist_ok=True)
        with log_file.open("ab") as output:
            child = subprocess.Popen(
                ["sh", "-c", WRAPPER, "allot-attempt", command, str(where / "exit")],
                env=env, stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True,  # outlives the launcher; killed as a group
            )  # fmt: skip
        put(where / "pid", str(child.pid))
        self.children.append(child)
        log(f"started {wid} attempt {attempt} on {hosts}: {command}")

    def exit_status(self, where: Path) -> dict[str, Any] | None:
        """How the attempt ended, or None while it runs."""
        with contextlib.suppress(FileNotFoundError):
            code = int((where / "exit").read_text())
            return {"outcome": "completed" if code == 0 else "failed", "exit_code": code}
        if kill(where, 0):
            return None  # killed by someone, or the launcher died before starting it:
        return {"outcome": "failed", "reason": "ended without an exit status"}

    def report(self, where: Path, wid: str, attempt: int, outcome: str, **extra: Any) -> None:
        request = make_request("workload.finished", cluster=self.cluster, actor=self.actor,
                               workload=wid, attempt=attempt, outcome=outcome, **extra)  # fmt: skip
        self.send(request | {"id": f"launcher/{self.cluster}/{wid}/{attempt}"})
        put(where / "reported", outcome)  # after the inbox took it: never lost
        log(f"reported {wid} attempt {attempt} {outcome} {extra}")

    def send(self, request: dict[str, Any]) -> None:
        try:  # retried while the inbox is down; one it may not write ends the launcher
            if not send_retrying(self.inbox, [request], self.stop, log):
                raise SystemExit(0)  # asked to stop while the inbox was down
        except InboxRefused as why:
            raise SystemExit(f"local_launcher: error: {why}") from None


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description="Run allot's placed workloads locally.")
    add = parser.add_argument
    add("--kafka", default=os.environ.get("ALLOT_KAFKA"), help="bootstrap HOST:PORT ($ALLOT_KAFKA)")
    add("--data", type=Path, help="the scheduler's --data folder (else $ALLOT_DATA)")
    add(
        "--cluster",
        default=os.environ.get("ALLOT_CLUSTER", "default"),
        help="cluster name ($ALLOT_CLUSTER, else default)",
    )
    add("--as", dest="actor", default=os.environ.get("USER", "launcher"),
        help="who reports (default $USER): an admin, to report lost hosts")  # fmt: skip
    add("--state", type=Path, default=Path("launcher-state"),
        help="its own record of attempts, output and lost/ (default ./launcher-state)")  # fmt: skip
    return parser


def main() -> None:
    args = _parser().parse_args()
    data = args.data or (None if args.kafka else os.environ.get("ALLOT_DATA"))
    try:
        target = resolve_target(args.kafka, data and Path(data))
        launcher = Launcher(target, args.cluster, args.actor, args.state)
    except (TargetError, SourceError) as why:  # no --data or --kafka, a wrong folder
        raise SystemExit(f"local_launcher: error: {why}") from None
    signal.signal(signal.SIGTERM, lambda *_: launcher.stop.set())
    log(f"cluster {args.cluster} on {target.label}, state in {args.state}")
    with contextlib.suppress(KeyboardInterrupt):
        while not launcher.stop.is_set():
            if launcher.read_journal():  # act only on the journal as a whole
                launcher.reconcile()
            launcher.stop.wait(POLL_S)
    launcher.journal.close()  # a Kafka tail keeps one consumer between polls
    launcher.inbox.close()  # the commands run on: a restart adopts them


if __name__ == "__main__":
    main()

"""A custom ordering policy runs without editing allot: named by import path."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson

TINY = Path(__file__).parent / "fixtures" / "tiny.yaml"

PLUGIN = '''
from domain.policies.ordering import Fifo


class NewestFirst(Fifo):
    """1. allocated first; 2. latest submit first; 3. workload id."""

    name = "newest-first"

    def queue_key(self, w):
        return (-w.submit_time,)
'''


def run(args: list[str], pythonpath: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "PYTHONPATH": f"{pythonpath}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    return subprocess.run(
        [sys.executable, "-m", "allot.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


def test_policy_by_import_path_orders_the_queue(tmp_path: Path) -> None:
    (tmp_path / "myplugin.py").write_text(PLUGIN)
    out = tmp_path / "out"
    result = run(
        [
            "simulate",
            str(TINY),
            "-p",
            "myplugin:NewestFirst",
            "-p",
            "fifo",
            "--out",
            str(out),
            "-q",
            "--no-report",
        ],
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    journal = (out / "myplugin:NewestFirst" / "journal.jsonl").read_bytes().splitlines()
    config = orjson.loads(journal[0])["config"]
    assert config["ordering"] == "myplugin:NewestFirst"
    placed = [orjson.loads(line) for line in journal if b'"workload.placed"' in line]
    assert placed and all(p["explain"]["policy"] == "newest-first" for p in placed)
    fifo = (out / "fifo" / "journal.jsonl").read_bytes()
    assert b"\n".join(journal) + b"\n" != fifo  # a different order gives different decisions


def test_a_broken_import_path_is_one_clear_error(tmp_path: Path) -> None:
    result = run(
        ["simulate", str(TINY), "-p", "nosuchmodule:Thing", "--out", str(tmp_path), "-q"], tmp_path
    )
    assert result.returncode == 2
    assert "cannot load ordering policy 'nosuchmodule:Thing'" in result.stderr
    assert "Traceback" not in result.stderr


def test_an_installed_packages_policy_is_found_by_its_entry_point_name(tmp_path: Path) -> None:
    """An entry point in group `allot.ordering` names a policy for every command that
    schedules; they are loaded when the command runs (after its arguments parsed), so
    `--help` and a mistyped flag start without them."""
    (tmp_path / "myplugin.py").write_text(PLUGIN)
    dist = tmp_path / "myplugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: myplugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[allot.ordering]\nnewest = myplugin:NewestFirst\n")
    out = tmp_path / "out"
    args = ["simulate", str(TINY), "-p", "newest", "--out", str(out), "-q", "--no-report"]
    result = run(args, tmp_path)
    assert result.returncode == 0, result.stderr
    journal = (out / "newest" / "journal.jsonl").read_bytes().splitlines()
    placed = [orjson.loads(line) for line in journal if b'"workload.placed"' in line]
    assert placed and all(p["explain"]["policy"] == "newest-first" for p in placed)

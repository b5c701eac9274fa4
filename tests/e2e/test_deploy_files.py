"""deploy/docker-compose.yml is not run here (no Docker engine), so its references are
checked instead: every file it mounts or loads exists, and Grafana's provisioned data
source is the one the dashboard names."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def compose() -> dict:
    return yaml.safe_load((DEPLOY / "docker-compose.yml").read_text())


def test_every_file_the_compose_file_uses_exists() -> None:
    spec = compose()
    sources = [c["file"] for c in spec["configs"].values() if "file" in c]
    for service in spec["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":", 1)[0]
            if source.startswith((".", "/")):
                sources.append(source)
    assert sources, "the compose file mounts no files?"
    missing = [s for s in sources if not (DEPLOY / s).exists()]
    assert not missing, missing


def test_prometheus_scrapes_the_service_that_serves_metrics() -> None:
    spec = compose()
    prom = yaml.safe_load((DEPLOY / "prometheus" / "prometheus.yml").read_text())
    targets = {
        t for job in prom["scrape_configs"] if job["job_name"] == "allot"
        for group in job["static_configs"] for t in group["targets"]
    }  # fmt: skip
    command = " ".join(spec["services"]["allot"]["command"])
    host, port = next(iter(targets)).split(":")
    assert host in spec["services"] and f"--metrics-port {port}" in command
    assert "--metrics-bind 0.0.0.0" in command  # reachable from the Prometheus container
    assert prom["rule_files"] == ["alerts.yml"]


def test_the_dashboard_uses_the_provisioned_data_source() -> None:
    provisioned = yaml.safe_load(
        (DEPLOY / "grafana" / "provisioning" / "datasources" / "prometheus.yml").read_text()
    )
    uids = {d["uid"] for d in provisioned["datasources"]}
    dashboard = json.loads((DEPLOY / "grafana" / "dashboards" / "allot.json").read_text())
    used = {
        target["datasource"]["uid"]
        for panel in dashboard["panels"]
        for target in panel.get("targets", [])
        if isinstance(target.get("datasource"), dict)
    }
    assert used and used <= uids, (used, uids)


def test_the_examples_ship_inside_the_package() -> None:
    """`allot demo` after `pip install .` (not -e), as the compose file's containers
    install it: the scenarios are found as package `allot.examples` (a link to
    examples/) and packed as package data; without it demo said the examples folder
    was missing."""
    import tomllib

    from setuptools import find_namespace_packages

    root = DEPLOY.parent
    settings = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = find_namespace_packages(where=str(root), **settings["packages"]["find"])
    assert "allot.examples" in found
    patterns = settings["package-data"]["*"]
    shipped = [p.name for p in (root / "allot" / "examples").iterdir() if p.is_file()]
    assert {"lab.yaml", "debug-flood.yaml"} <= set(shipped)
    assert all(any(Path(name).match(pat) for pat in patterns) for name in shipped), shipped


def _allot_command_line(service: dict) -> list[str]:
    """The `allot ...` a compose service finally execs (after installing the tree)."""
    import shlex

    script = service["command"][-1]
    return shlex.split(script.rsplit("exec ", 1)[1])


def test_the_compose_services_run_commands_allot_takes() -> None:
    """Each allot service's command parses with the CLI's own options (a renamed or
    removed flag would only show as a container restarting in a loop), and every
    ALLOT_* variable the services set is one allot reads."""
    import typer

    from allot.cli import app

    spec = compose()
    cli = typer.main.get_command(app)
    for name in ("topics", "allot"):
        argv = _allot_command_line(spec["services"][name])
        assert argv[0] == "allot", argv
        command, args = cli, argv[1:]
        # typer's click may be its own copy: walk groups by what they have
        while hasattr(command, "get_command"):  # e.g. `topics` then `create`
            sub = command.get_command(command.context_class(command), args[0])
            assert sub is not None, (name, args[0])
            command, args = sub, args[1:]
        command.make_context(" ".join(argv), args)  # raises on an unknown option or value
    sources = "\n".join(
        p.read_text() for d in ("allot", "streams") for p in (DEPLOY.parent / d).rglob("*.py")
    )
    env = spec["x-allot"]["environment"]
    unread = [k for k in env if k.startswith("ALLOT_") and f'"{k}"' not in sources]
    assert not unread, unread

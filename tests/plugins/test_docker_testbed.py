"""What can be checked of the docker testbed without a Docker engine: the compose file's syntax and
structure, pinned images, scripts under shellcheck, configs that parse, and the helper scripts."""

from __future__ import annotations

import csv
import importlib.util
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path
from types import ModuleType

import pytest

from tests.plugins import yaml_subset
from tests.plugins.conftest import REPO

DOCKER = REPO / "docker"
COMPOSE = DOCKER / "docker-compose.yml"


def compose() -> dict:
    doc = yaml_subset.load(COMPOSE.read_text())
    assert isinstance(doc, dict)
    return doc


def load_module(path: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_subset_reader_rejects_what_it_cannot_vouch_for() -> None:
    assert yaml_subset.load('a:\n  b: ["x", "y"]\n  c: 3\n  d:\n    - "p"\n') == {
        "a": {"b": ["x", "y"], "c": 3, "d": ["p"]}}
    for bad in ["a: &x 1\n", "a:\n\tb: 1\n", "a: 1\na: 2\n", "a: 'open\n", "a:\n  - b: 1\n"]:
        with pytest.raises(ValueError, match="line"):
            yaml_subset.load(bad)


def test_compose_file_agrees_with_pyyaml_when_available() -> None:
    ours = compose()
    system_python = shutil.which("python3", path="/usr/bin:/bin")
    if system_python is None:
        pytest.skip("no system python3")
    proc = subprocess.run([system_python, "-c", "import json,sys,yaml; print(json.dumps(yaml.safe_load(open(sys.argv[1]))))",
                           str(COMPOSE)], capture_output=True, text=True, timeout=30, check=False)
    if proc.returncode != 0:
        pytest.skip("no PyYAML in the system python")
    assert json.loads(proc.stdout) == ours


def test_compose_structure() -> None:
    doc = compose()
    services = doc["services"]
    roles = {name: svc["command"][0] for name, svc in services.items()}
    for role in ("namenode", "resourcemanager", "hiveserver2", "placement", "setup", "init", "tpcds"):
        assert role in roles.values(), role
    workers = [n for n, r in roles.items() if r == "worker"]
    assert len(workers) >= 3
    assert sorted(services[w]["environment"]["WORKER_INDEX"] for w in workers) == [str(i) for i in range(1, 4)]
    entry = (DOCKER / "scripts" / "entrypoint.sh").read_text()
    declared_volumes = set(doc["volumes"])
    for name, svc in services.items():
        assert re.fullmatch(r"[a-z0-9.-]+:\d+\.\d+\.\d+", svc["image"]), f"{name}: image not pinned"
        assert f"\n  {svc['command'][0]})" in entry, f"{name}: role {svc['command'][0]} not in entrypoint.sh"
        for dep in (svc.get("depends_on") or {}):
            assert dep in services, f"{name} depends on unknown {dep}"
        for vol in svc.get("volumes", []):
            assert vol.split(":")[0] in declared_volumes, f"{name}: undeclared volume {vol}"
    assert services["setup"]["build"]["dockerfile"] == "docker/Dockerfile"


def test_dockerfile_pins_every_base_image_and_release() -> None:
    text = (DOCKER / "Dockerfile").read_text()
    bases = re.findall(r"^FROM\s+(\S+)", text, flags=re.M) + re.findall(r"COPY --from=(\S+:\S+)", text)
    assert bases
    for image in bases:
        if ":" not in image:
            continue  # a stage name
        tag = image.split(":", 1)[1]
        assert tag != "latest" and re.search(r"\d", tag), image
    for arg in ("HADOOP_VERSION", "HIVE_VERSION", "TEZ_VERSION"):
        assert re.search(rf"^ARG {arg}=\d", text, flags=re.M), arg  # values: tests/plugins/test_hive_versions.py
    # every COPY source of the build context exists
    for src in re.findall(r"^COPY (?!--from)(\S+(?: \S+)*) \S+$", text, flags=re.M):
        for part in src.split():
            assert (REPO / part).exists(), part


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck not installed")
def test_scripts_pass_shellcheck() -> None:
    scripts = sorted((DOCKER / "scripts").glob("*.sh")) + [REPO / "scheduler_plugin" / "java" / "build.sh"]
    proc = subprocess.run(["shellcheck", *map(str, scripts)], capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stdout


@pytest.mark.parametrize("path", sorted((DOCKER / "conf").glob("*.xml")), ids=lambda p: p.name)
def test_testbed_configs_parse(path: Path) -> None:
    root = ET.parse(path).getroot()
    assert root.tag == "configuration"
    names = [p.findtext("name") for p in root.findall("property")]
    assert names and len(names) == len(set(names))


def test_primary_load_series_and_percentiles() -> None:
    from scheduler_plugin.testbed import primary as mod

    rows = [(0, "a", 0.2), (0, "a", 0.4), (300, "a", 1.5), (0, "b", 0.9), (600, "a", float("nan"))]
    assert mod.tenant_series(rows, "a") == [(0, pytest.approx(0.3)), (300, 1.0)]
    with pytest.raises(mod.PrimaryError, match="no samples"):
        mod.tenant_series(rows, "zz")
    assert mod.percentile([5, 1, 3, 2, 4], 0.5) == 3
    assert mod.percentile([5, 1, 3, 2, 4], 0.99) == 5


def test_docker_results_give_the_testbed_report(tmp_path: Path) -> None:
    """run-tpcds.sh's results (harvest hive result files, the primaries' latency rows) through the same
    report as ``harvest testbed report``: one record per run, its probe windows, the baseline before."""
    import os

    pytest.importorskip("matplotlib")
    from scheduler_plugin.testbed import report

    (tmp_path / "runs").mkdir()
    for name, queue, code, killed, duration, mtime in [("r1-q3", "constant-0", 0, 2, 10.0, 1000),
                                                      ("r1-q7", "default", 1, 0, 20.0, 1100)]:
        path = tmp_path / "runs" / f"{name}.json"
        path.write_text(json.dumps({"name": name, "exit_code": code, "duration_s": duration, "killed_attempts": killed,
                                    "failed_attempts": 0, "decision": {"queue": queue, "classes": [queue],
                                                                       "job_type": "short", "source": "service"}}))
        os.utime(path, (mtime, mtime))
    (tmp_path / "primary-latency-worker1.csv").write_text(
        "time,slot,cpu_target,requests,p50_ms,p99_ms,max_ms\n100,1,0.3,300,1.0,2.0,3.0\n900,2,0.3,300,1.2,2.5,3.0\n"
        "1020,3,0.5,300,2.0,5.0,6.0\n1140,4,0.5,300,3.0,8.0,9.0\n9999,5,0.5,300,50,90,99\n")
    assert report.main(["--hive-results", str(tmp_path), "--out", str(tmp_path / "report")]) == 0
    rows = list(csv.DictReader((tmp_path / "report" / "records.csv").open()))
    assert [(r["mode"], r["query"], r["queue"], r["killed_attempts"], r["primary_p50_ms"], r["primary_p99_ms"])
            for r in rows] == [("baseline", "", "", "", "1.0", "2.5"), ("harvest", "3", "constant-0", "2", "2.0", "5.0"),
                               ("harvest", "7", "default", "0", "3.0", "8.0")]
    assert "| harvest | 2 | 1 | 15.0 | 2 | 0 |" in (tmp_path / "report" / "report.md").read_text()


def test_every_harvest_command_in_the_testbed_parses() -> None:
    """The harvest invocations in the scripts and the Dockerfile use sub-commands and flags that exist."""
    import shlex

    from placement_service.cli import build_parser

    parser = build_parser()
    sources = sorted((DOCKER / "scripts").glob("*.sh")) + [DOCKER / "Dockerfile"]
    seen = 0
    for path in sources:
        text = path.read_text().replace("\\\n", " ")
        for line in text.splitlines():
            if line.strip().startswith("#"):
                continue
            m = re.search(r"(?:^|[\s;&|])harvest\s+(.*)", line)
            if not m:
                continue
            cmd = re.split(r"\s(?:&&|&|\|\||2>|>|\|)(?:\s|$)", m.group(1))[0]
            cmd = re.sub(r"\"\$\([^)]*\)\"|\$\{[^}]*\}|\$\([^)]*\)|\$[A-Za-z_]+", "1", cmd)
            try:
                parser.parse_args(shlex.split(cmd))
            except SystemExit:
                pytest.fail(f"{path.name}: 'harvest {cmd}' does not parse")
            seen += 1
    assert seen >= 8


def test_workers_measure_their_own_cgroup_and_the_service_gets_its_inputs() -> None:
    """Issue 12 item 8: inside a container psutil reads the host's totals, so each worker's agent is
    scoped to its container's cgroup; the service runs with the queue refresh, inventory and reimages."""
    doc = compose()
    workers = [svc for svc in doc["services"].values() if svc["command"][0] == "worker"]
    assert all(svc.get("cgroup") == "private" for svc in workers)
    worker = (DOCKER / "scripts" / "worker.sh").read_text()
    assert "--cgroup /sys/fs/cgroup" in worker
    serve = (DOCKER / "scripts" / "entrypoint.sh").read_text().split("  placement)")[1].split(";;")[0]
    for flag in ("--refresh-queues-command", "--inventory-file", "--reimages-file", "--rm-admin-user"):
        assert flag in serve, flag
    assert "service-inventory.csv" in (DOCKER / "scripts" / "setup.sh").read_text()

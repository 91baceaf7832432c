"""The base install is what a node needs: built as a wheel and installed alone in a fresh venv.

The agent, its CLI and the node scripts must work there; the service, the capacity solvers and the
simulator must say which extra to install instead of failing with a traceback.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from placement_service import __version__

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("sklearn", "scipy", "pyarrow", "highspy", "matplotlib", "distributed", "flask", "cheroot", "hdfs")


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def base_venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    work = tmp_path_factory.mktemp("base-install")
    built = _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                  "-w", str(work / "dist"), str(ROOT)])
    assert built.returncode == 0, built.stderr
    wheels = list((work / "dist").glob("harvest-*.whl"))
    assert len(wheels) == 1, wheels
    assert f"harvest-{__version__}-" in wheels[0].name
    venv = work / "venv"
    made = _run([sys.executable, "-m", "venv", str(venv)])
    assert made.returncode == 0, made.stderr
    installed = _run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", str(wheels[0])])
    assert installed.returncode == 0, installed.stderr
    return venv


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def test_the_base_install_has_none_of_the_server_stack(base_venv: Path) -> None:
    code = f"import importlib.util as u; print(','.join(m for m in {HEAVY!r} if u.find_spec(m)))"
    out = _run([str(base_venv / "bin" / "python"), "-c", code], cwd="/", env=_clean_env())
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"the base install pulled in: {out.stdout.strip()}"


def test_harvest_version_and_agent_help_in_the_base_install(base_venv: Path) -> None:
    harvest = str(base_venv / "bin" / "harvest")
    out = _run([harvest, "--version"], cwd="/", env=_clean_env())
    assert out.returncode == 0 and out.stdout.strip() == f"harvest {__version__}", out
    out = _run([harvest, "agent", "--help"], cwd="/", env=_clean_env())
    assert out.returncode == 0, out.stderr
    assert "--reserve-cores" in out.stdout
    for command in (["topology-map", "--help"], ["install-scripts", "--help"]):
        out = _run([harvest, *command], cwd="/", env=_clean_env())
        assert out.returncode == 0, (command, out.stderr)


def test_one_agent_cycle_in_the_base_install(base_venv: Path, tmp_path: Path) -> None:
    """The real agent process runs its loop and serves /metrics with its version."""
    log = tmp_path / "agent.log"
    with open(log, "w") as handle:
        proc = subprocess.Popen(
            [str(base_venv / "bin" / "harvest"), "-v", "agent", "--mode", "local", "--interval-s", "0.2",
             "--reserve-cores", "0.5", "--reserve-memory-mb", "256", "--state-dir", str(tmp_path / "state"),
             "--metrics-port", "0"],
            stdout=handle, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd="/", env=_clean_env(),
            start_new_session=True)
    try:
        port = None
        samples = 0.0
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            match = re.search(r"metrics on http://127\.0\.0\.1:(\d+)/metrics", log.read_text())
            if match:
                port = int(match.group(1))
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
                    text = answer.read().decode()
                found = re.search(r"^harvest_agent_samples_total (\S+)$", text, re.M)
                samples = float(found.group(1)) if found else 0.0
                if samples >= 1:
                    assert f'harvest_agent_build_info{{version="{__version__}"}} 1' in text
                    break
            time.sleep(0.2)
        assert port is not None, log.read_text()
        assert samples >= 1, log.read_text()
        assert (tmp_path / "state" / "node-label").exists() or (tmp_path / "state").is_dir()
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        rc = proc.wait(timeout=30)
    assert rc == 0, log.read_text()
    assert "Traceback" not in log.read_text()


@pytest.mark.parametrize(("argv", "extra"), [
    (["serve", "--data-dir", "/nonexistent"], "service"),
    (["sim", "schedule"], "sim"),
    (["whatif", "--help"], "sim"),
    (["ras", "solve"], "capacity"),
    (["cluster", "--utilization", "u.parquet", "--inventory", "i.parquet", "--out", "c.json"], "service"),
])
def test_server_side_commands_name_the_extra(base_venv: Path, tmp_path: Path, argv: list[str],
                                              extra: str) -> None:
    out = _run([str(base_venv / "bin" / "harvest"), *argv], cwd=str(tmp_path), env=_clean_env())
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert f"harvest[{extra}]" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr


@pytest.mark.parametrize(("module", "extra"), [
    ("placement_service.server", "service"),
    ("placement_service.capacity", "capacity"),
    ("placement_service.sim", "sim"),
])
def test_importing_a_server_only_package_names_the_extra(base_venv: Path, module: str, extra: str) -> None:
    out = _run([str(base_venv / "bin" / "python"), "-c", f"import {module}"], cwd="/", env=_clean_env())
    assert out.returncode == 1
    assert f"harvest[{extra}]" in out.stderr, out.stderr


def test_the_agent_and_its_forecast_policy_import_none_of_the_server_stack() -> None:
    """The forecast policy the agent shares with the simulator (``core/headroom_policy.py``) is numpy
    only: importing the agent's whole loop pulls none of the heavy modules, even where they are installed."""
    code = ("import sys, agent.runtime, agent.forecast, placement_service.core.headroom_policy; "
            f"print(','.join(m for m in {HEAVY!r} if m in sys.modules))")
    out = _run([sys.executable, "-c", code], cwd=str(ROOT))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"the agent imported: {out.stdout.strip()}"

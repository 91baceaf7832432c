"""The NM node-label script: exact output, stale / missing / malformed files, stdlib only."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.plugins.conftest import SCRIPTS

SCRIPT = SCRIPTS / "node_label.py"


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    # -I: isolated mode (no site-packages, no user paths): proves the script needs only the stdlib.
    return subprocess.run([sys.executable, "-I", str(SCRIPT), *args], capture_output=True, text=True,
                          env=env, timeout=30, check=False)


def write_label(state: Path, text: str, age_s: float = 0.0) -> None:
    path = state / "node-label"
    path.write_text(text)
    t = time.time() - age_s
    os.utime(path, (t, t))


def test_fresh_label_prints_exactly_one_partition_line(tmp_path: Path) -> None:
    write_label(tmp_path, "constant-2\n", age_s=5)
    proc = run("--state-dir", str(tmp_path))
    assert proc.returncode == 0
    assert proc.stdout == "NODE_PARTITION:constant-2\n"
    assert proc.stderr == ""


@pytest.mark.parametrize("age_s, max_age_s, fresh", [(700, None, False), (590, None, True), (61, "60", False),
                                                      (59, "60", True)])
def test_stale_file_prints_nothing_and_fails_so_yarn_keeps_its_label(
    tmp_path: Path, age_s: float, max_age_s: str | None, fresh: bool
) -> None:
    write_label(tmp_path, "periodic-0\n", age_s=age_s)
    args = ["--state-dir", str(tmp_path)] + (["--max-age-s", max_age_s] if max_age_s else [])
    proc = run(*args)
    if fresh:
        assert (proc.returncode, proc.stdout) == (0, "NODE_PARTITION:periodic-0\n")
    else:
        assert proc.returncode == 1
        assert proc.stdout == ""
        assert "stale" in proc.stderr


@pytest.mark.parametrize("content", ["", "\n", "constant-1\nperiodic-2\n", "Constant 1\n", "a/b\n"])
def test_malformed_label_file_is_not_used(tmp_path: Path, content: str) -> None:
    write_label(tmp_path, content)
    proc = run("--state-dir", str(tmp_path))
    assert proc.returncode == 1
    assert "NODE_PARTITION" not in proc.stdout
    assert "node-label" in proc.stderr


def test_missing_file_and_state_dir_from_environment(tmp_path: Path) -> None:
    env = {"HARVEST_STATE_DIR": str(tmp_path), "PATH": os.environ.get("PATH", "")}
    proc = run(env=env)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert "cannot read" in proc.stderr
    write_label(tmp_path, "unpredictable-3\n")
    assert run(env=env).stdout == "NODE_PARTITION:unpredictable-3\n"


def test_bad_arguments_exit_non_zero(tmp_path: Path) -> None:
    assert run("--max-age-s", "soon", "--state-dir", str(tmp_path)).returncode == 2
    assert run("--bogus").returncode == 2


def test_installed_copy_runs_by_its_own_shebang(tmp_path: Path) -> None:
    from placement_service.cli import main

    dest = tmp_path / "opt"
    assert main(["install-scripts", str(dest), "--python", sys.executable]) == 0
    installed = dest / "node_label.py"
    assert installed.read_text().splitlines()[0] == f"#!{sys.executable} -IS"
    assert os.access(installed, os.X_OK)
    state = tmp_path / "state"
    state.mkdir()
    write_label(state, "constant-7\n")
    proc = subprocess.run([str(installed), "--state-dir", str(state)], capture_output=True, text=True, timeout=30,
                          check=False)
    assert (proc.returncode, proc.stdout) == (0, "NODE_PARTITION:constant-7\n")


@pytest.mark.parametrize("opts", [["--state-dir={d}", "--max-age-s=600"], ["--state-dir {d} --max-age-s 600"]],
                         ids=["comma-split", "one-string"])
def test_arguments_as_the_nodemanager_passes_them(tmp_path: Path, opts: list[str]) -> None:
    # yarn.nodemanager.node-labels.provider.script.opts is split at commas by Configuration.getStrings.
    write_label(tmp_path, "periodic-4\n")
    proc = run(*[o.format(d=tmp_path) for o in opts])
    assert (proc.returncode, proc.stdout) == (0, "NODE_PARTITION:periodic-4\n")

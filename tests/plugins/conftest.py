"""Shared paths of the plugin tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "plugins"
SCRIPTS = REPO / "scheduler_plugin" / "scripts"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES


@pytest.fixture(scope="session")
def shim_classes(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The shim, its Hadoop stubs and its Java tests compiled once (``build.sh --compile-tests``)."""
    if shutil.which("javac") is None or shutil.which("java") is None:
        pytest.skip("needs a JDK (javac, java)")
    out = tmp_path_factory.mktemp("shim")
    proc = subprocess.run(["bash", str(REPO / "scheduler_plugin" / "java" / "build.sh"), "--compile-tests", "--out",
                           str(out)], capture_output=True, text=True, timeout=240, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return out / "classes"

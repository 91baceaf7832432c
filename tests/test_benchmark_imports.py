"""Every name a benchmark script imports from our packages exists (benchmarks are not run by the
suite, and most import inside functions, so a rename would otherwise break them silently)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[1] / "benchmarks").glob("*.py"))
OURS = ("placement_service", "agent", "scheduler_plugin")


@pytest.mark.parametrize("script", BENCHMARKS, ids=lambda p: p.name)
def test_benchmark_imports_resolve(script: Path) -> None:
    missing = []
    for node in ast.walk(ast.parse(script.read_text(), filename=str(script))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in OURS:
            module = importlib.import_module(node.module)
            for alias in node.names:
                if hasattr(module, alias.name):
                    continue
                try:
                    importlib.import_module(f"{node.module}.{alias.name}")
                except ImportError:
                    missing.append(f"{node.module}.{alias.name} (line {node.lineno})")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in OURS:
                    importlib.import_module(alias.name)
    assert not missing, f"{script.name} imports names that do not exist: {missing}"

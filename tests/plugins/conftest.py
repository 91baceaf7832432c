"""Shared paths of the plugin tests."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "plugins"
SCRIPTS = REPO / "scheduler_plugin" / "scripts"


@pytest.fixture
def fixtures() -> Path:
    return FIXTURES

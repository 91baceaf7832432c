"""A service that was built but never started closes cleanly and frees its data directory."""

from __future__ import annotations

from pathlib import Path

import pytest

from placement_service.server.config import build_config
from placement_service.server.service import PlacementService


@pytest.mark.parametrize("extra", [{}, {"capacity_url": "http://127.0.0.1:9", "cluster": "c1"}], ids=["plain", "capacity-link"])
def test_a_service_never_started_closes_and_releases_its_data_dir(tmp_path: Path, extra: dict[str, str]) -> None:
    flags = {"data_dir": str(tmp_path / "d"), **extra}
    PlacementService(build_config(env={}, flags=flags)).close()  # e.g. start-up failed after construction
    again = PlacementService(build_config(env={}, flags=flags))  # the lock was released
    again.start()
    again.close()

"""Real traces as tenants, on a small Azure excerpt bundled with the tests (see the fixture README)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from placement_service.sim.availability import AvailabilityConfig
from placement_service.sim.datacenter import Scaling, SimInputError
from placement_service.sim.real import real_sim_datacenter, real_trace_path
from placement_service.sim.run import run_availability

EXCERPT = Path(__file__).resolve().parents[1] / "fixtures" / "sim" / "azure_avg_10vms_7days.csv.gz"


def test_azure_excerpt_becomes_a_datacenter_of_the_requested_size() -> None:
    dc = real_sim_datacenter("azure", n_servers=60, path=EXCERPT)
    assert dc.n_tenants == 10  # one tenant per VM
    assert dc.n_servers >= 60
    assert dc.series.interval_s == 300.0 and dc.series.n_slots == 2016
    assert np.all(dc.tenant_servers() == dc.n_servers // 10)
    assert 0.0 < dc.average_utilization() < 1.0
    assert dc.reimages is not None  # from the generator's reimage model


def test_availability_runs_on_real_tenants() -> None:
    dc = real_sim_datacenter("azure", n_servers=60, path=EXCERPT)
    recs = run_availability(
        dc, levels=[0.3], replicas=[3], scaling=Scaling.LINEAR, runs=1, seed=0,
        config=AvailabilityConfig(days=3, history_days=3, blocks=500, accesses=2000),
    )
    assert {r["system"] for r in recs} == {"HDFS-Stock", "HDFS-H"}
    assert all(r["utilization"] == pytest.approx(0.3, abs=0.1) for r in recs)


def test_unknown_trace_and_missing_folder(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(SimInputError, match="unknown real trace"):
        real_trace_path("nope")
    monkeypatch.setenv("HARVEST_DATA_DIR", str(tmp_path))
    with pytest.raises(SimInputError, match="HARVEST_DATA_DIR"):
        real_trace_path("azure")

from __future__ import annotations

import numpy as np
import pytest

from placement_service.sim.availability import AvailabilityConfig, simulate_availability
from placement_service.sim.policy import HdfsSystem, make_placer, placement_grid
from tests.sim.conftest import make_dc


def _run(cpu: np.ndarray, system: HdfsSystem, replicas: int = 3, **kw: float):  # type: ignore[no-untyped-def]
    dc = make_dc(cpu, servers_per_tenant=3)
    peaks = {t: float(np.percentile(cpu[i], 99)) for i, t in enumerate(dc.series.tenants)}
    grid = placement_grid(dc, peaks, {t: float(i % 3) for i, t in enumerate(dc.series.tenants)})
    placer = make_placer(system, dc, grid, seed=0, block_size_mb=256.0)
    cfg = AvailabilityConfig(days=1.0, history_days=1.0, blocks=2000, accesses=20000, **kw)  # type: ignore[arg-type]
    rng = np.random.default_rng
    return simulate_availability(dc, dc.cpu, placer, system, replicas, cfg,
                                 create_rng=rng(0), place_rng=rng(1), access_rng=rng(2))


@pytest.mark.parametrize("system", list(HdfsSystem))
def test_idle_never_fails_and_all_busy_always_fails(system: HdfsSystem) -> None:
    idle = _run(np.full((9, 576), 0.2), system)
    assert idle.failed_accesses == 0 and idle.utilization == pytest.approx(0.2, abs=1e-6)
    busy = np.full((9, 576), 0.2)
    busy[:, 288:] = 0.9  # every tenant busy during the whole access window
    res = _run(busy, system)
    assert res.failed_access_pct == pytest.approx(100.0)


def test_threshold_is_one_minus_reserve() -> None:
    cpu = np.full((9, 576), 0.6)
    assert _run(cpu, HdfsSystem.H).failed_accesses == 0  # 60% < 66.7%
    assert _run(cpu, HdfsSystem.H, busy_cpu=0.5).failed_access_pct == pytest.approx(100.0)


def test_diverse_columns_survive_peaking_tenants() -> None:
    # three high-peak tenants (one grid column) are busy in the access window; the others never
    cpu = np.full((9, 576), 0.2)
    hot = [1, 4, 7]
    cpu[hot, :] = 0.5
    cpu[np.ix_(hot, np.arange(288, 576))] = 0.95
    h = _run(cpu, HdfsSystem.H)
    stock = _run(cpu, HdfsSystem.STOCK)
    assert h.failed_accesses == 0  # never two replicas in one peak column
    assert stock.failed_accesses >= h.failed_accesses

from __future__ import annotations

import numpy as np
import pytest

from placement_service.core.types import TenantSeries
from placement_service.sim.datacenter import Scaling, SimInputError, build_datacenter, scale_cpu
from tests.sim.conftest import daily_cpu, make_dc, make_inventory


@pytest.mark.parametrize("scaling", [Scaling.LINEAR, Scaling.ROOT])
@pytest.mark.parametrize("level", [0.15, 0.3, 0.55, 0.7])
def test_scale_hits_the_level(scaling: Scaling, level: float) -> None:
    dc = make_dc(daily_cpu(6, 2.0))
    cpu, param = scale_cpu(dc.cpu, dc.tenant_cores(), level, scaling)
    assert dc.average_utilization(cpu) == pytest.approx(level, abs=2e-3)
    assert cpu.min() >= 0.0 and cpu.max() <= 1.0
    if scaling is Scaling.ROOT:
        assert (param < 1.0) == (level > dc.average_utilization())


def test_linear_saturates_and_root_keeps_order() -> None:
    dc = make_dc(daily_cpu(6, 2.0))
    lin, _ = scale_cpu(dc.cpu, dc.tenant_cores(), 0.7, Scaling.LINEAR)
    root, _ = scale_cpu(dc.cpu, dc.tenant_cores(), 0.7, Scaling.ROOT)
    assert (lin >= 1.0).any()  # linear scaling saturates at 100%
    assert (root >= 1.0).sum() < (lin >= 1.0).sum()  # the root flattens instead
    # monotone maps keep every series' time order
    i = 1
    assert np.array_equal(np.argsort(root[i], kind="stable"), np.argsort(dc.cpu[i], kind="stable"))


def test_bad_levels_and_idle_series() -> None:
    dc = make_dc(daily_cpu(2, 1.0))
    with pytest.raises(SimInputError):
        scale_cpu(dc.cpu, dc.tenant_cores(), 1.2, Scaling.LINEAR)
    with pytest.raises(SimInputError):
        scale_cpu(np.zeros((2, 10), np.float32), np.ones(2), 0.3, Scaling.LINEAR)


def test_missing_tenant_and_nan_fill() -> None:
    cpu = np.array([[0.2, np.nan, 0.4], [np.nan, np.nan, np.nan]])
    series = TenantSeries(("a", "b"), 0.0, 300.0, cpu)
    inv = make_inventory(["a", "b"], 2)
    dc = build_datacenter("x", inv, series)
    assert dc.cpu[0, 1] == pytest.approx(0.3)  # the tenant's mean
    assert np.all(dc.cpu[1] == 0.0)  # no sample at all: idle
    assert list(dc.server_tenant) == [0, 0, 1, 1]
    with pytest.raises(SimInputError, match="no utilization series"):
        build_datacenter("x", make_inventory(["a", "c"], 1), series)

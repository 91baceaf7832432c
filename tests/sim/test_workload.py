from __future__ import annotations

import numpy as np
import pytest

from placement_service.core.dag import max_concurrency
from placement_service.core.types import Edge, Job
from placement_service.sim.workload import WorkloadConfig, build_workload, poisson_arrivals
from tests.sim.conftest import chain_job


def _jobs() -> list[Job]:
    diamond = Job("d", None, {"m1": 40, "m2": 20, "r": 10}, (Edge("m1", "r"), Edge("m2", "r")))
    return [chain_job("a", [100, 10]), chain_job("b", [30, 30, 30, 5]), diamond]


def test_container_scale_gives_the_offered_load() -> None:
    cfg = WorkloadConfig(offered_core_frac=0.1, mean_interarrival_s=300.0)
    wl = build_workload(_jobs(), cfg, np.random.default_rng(0), total_cores=10_000.0)
    # rounding task counts to integers moves the load a little
    assert wl.offered_core_s_per_s() == pytest.approx(1000.0, rel=0.05)
    for t in wl.templates:
        assert t.tasks.min() >= 1
        assert t.max_concurrency == max_concurrency(t.job)
        # topological order: every edge goes forward
        assert np.all(t.edge_src < t.edge_dst)


def test_critical_path_and_thresholds() -> None:
    cfg = WorkloadConfig(container_scale=1.0)
    wl = build_workload(_jobs(), cfg, np.random.default_rng(1), total_cores=100.0)
    diamond = wl.templates[2]
    order = list(diamond.job.vertices)
    ln = dict(zip(sorted(order, key=lambda v: (v == "r", v)), diamond.length_s, strict=True))
    assert diamond.critical_path_s == pytest.approx(max(ln["m1"], ln["m2"]) + ln["r"])
    cps = sorted(t.critical_path_s for t in wl.templates)
    assert cps[0] <= wl.short_max_s <= wl.long_min_s <= cps[-1]
    assert [int(x) for x in wl.templates[0].tasks] == [100, 10]


def test_poisson_arrivals_rate_and_determinism() -> None:
    wl = build_workload(_jobs(), WorkloadConfig(mean_interarrival_s=60.0), np.random.default_rng(0), total_cores=100.0)
    a = poisson_arrivals(wl, 30 * 86400.0, np.random.default_rng(1), np.random.default_rng(2))
    b = poisson_arrivals(wl, 30 * 86400.0, np.random.default_rng(1), np.random.default_rng(2))
    assert np.array_equal(a.time_s, b.time_s)
    n = a.time_s.shape[0]
    assert n == pytest.approx(30 * 86400 / 60, rel=0.03)
    assert np.all(np.diff(a.time_s) > 0) and a.time_s[-1] < 30 * 86400
    assert set(np.unique(a.template)) == {0, 1, 2}

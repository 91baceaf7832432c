from __future__ import annotations

import numpy as np
import pytest

from placement_service.core.types import ReimageEvents
from placement_service.sim.reimages import extend_reimages
from tests.sim.conftest import make_inventory

DAY_S = 86400.0


def test_year_keeps_each_server_rate_and_groups() -> None:
    inv = make_inventory(["a", "b"], 5)
    # one correlated event (s000-s002 within 10 minutes) and single events, in a 30-day window
    ts = np.array([1000.0, 1300.0, 1600.0, 5 * DAY_S, 20 * DAY_S])
    ev = ReimageEvents(ts, ("s000", "s001", "s002", "s007", "s009"))
    out = extend_reimages(ev, inv, 360.0, np.random.default_rng(0), window_start_s=0.0, window_s=30 * DAY_S)
    assert np.all(np.diff(out.time_s) >= 0) and out.time_s.max() < 360 * DAY_S
    counts = np.bincount(out.server, minlength=10)
    assert counts[[0, 1, 2, 7, 9]].tolist() == [12] * 5  # 12 windows of 30 days
    assert counts.sum() == 60
    # the correlated group stays together (within its 600 s spread, modulo the window wrap)
    t0 = np.sort(out.time_s[out.server == 0])
    t2 = np.sort(out.time_s[out.server == 2])
    gap = np.abs(t2 - t0)
    assert np.all((gap <= 600.0 + 1e-6) | (gap >= 30 * DAY_S - 600.0 - 1e-6))


def test_unknown_servers_ignored_and_empty() -> None:
    inv = make_inventory(["a"], 2)
    out = extend_reimages(ReimageEvents(np.array([5.0]), ("nope",)), inv, 30.0, np.random.default_rng(0))
    assert out.time_s.size == 0


def test_partial_last_window() -> None:
    inv = make_inventory(["a"], 1)
    ev = ReimageEvents(np.array([0.0, 10 * DAY_S]), ("s000", "s000"))
    out = extend_reimages(ev, inv, 45.0, np.random.default_rng(1), window_start_s=0.0, window_s=30 * DAY_S)
    assert 2 <= out.time_s.size <= 4
    assert out.time_s.max() < 45 * DAY_S
    with pytest.raises(Exception, match="longer than 0"):
        extend_reimages(ev, inv, 45.0, np.random.default_rng(1), window_start_s=0.0, window_s=0.0)


def test_a_trace_covering_the_span_is_used_as_is() -> None:
    inv = make_inventory(["a"], 3)
    ts = np.array([5.0, 100 * DAY_S, 300 * DAY_S, 400 * DAY_S])
    ev = ReimageEvents(ts, ("s000", "s001", "s002", "s000"))
    out = extend_reimages(ev, inv, 365.0, np.random.default_rng(0), window_start_s=0.0, window_s=365 * DAY_S)
    assert out.time_s.tolist() == [5.0, 100 * DAY_S, 300 * DAY_S]
    assert out.server.tolist() == [0, 1, 2]

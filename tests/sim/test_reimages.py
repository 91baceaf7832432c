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


def test_a_reimage_log_longer_than_the_utilization_window_is_used_as_it_is() -> None:
    # A year of reimages (one event a week per server, at different hours) next to a 28-day
    # utilization window: nothing is clipped to the window's end and nothing is replayed.
    inv = make_inventory(["a", "b"], 4)
    rng = np.random.default_rng(3)
    ts = np.sort(np.concatenate([np.arange(54) * 7 * DAY_S + rng.uniform(0, DAY_S, 54) for _ in range(8)]))
    servers = tuple(f"s{int(i):03d}" for i in rng.integers(0, 8, ts.size))
    ev = ReimageEvents(ts, servers)
    out = extend_reimages(ev, inv, 365.0, rng, window_start_s=0.0, window_s=28 * DAY_S)
    assert out.how == "as-is" and out.source_span_s >= 365 * DAY_S
    assert out.time_s.tolist() == ts[ts < 365 * DAY_S].tolist()  # the events themselves, at their instants
    assert np.max(np.bincount(np.round(out.time_s).astype(np.int64) // 3600)) <= 8  # no pile-up at one instant


def test_a_log_longer_than_the_window_but_shorter_than_the_span_is_bootstrapped_from_its_own_span() -> None:
    inv = make_inventory(["a"], 2)
    ts = np.arange(0.0, 90 * DAY_S, 3 * DAY_S)  # 90 days of events, one every 3 days
    ev = ReimageEvents(ts, tuple("s000" if i % 2 else "s001" for i in range(ts.size)))
    out = extend_reimages(ev, inv, 360.0, np.random.default_rng(0), window_start_s=0.0, window_s=28 * DAY_S)
    assert out.how == "bootstrap" and out.source_span_s == pytest.approx(90 * DAY_S)  # 87 days + one mean gap
    # the rate is the trace's own (one event per 3 days), not 87/28 times it
    assert out.time_s.size == pytest.approx(360 / 3, rel=0.05)
    assert len(np.unique(out.time_s)) == out.time_s.size


def test_the_durability_report_says_how_the_reimages_were_used() -> None:
    from placement_service.sim.report import SECTIONS

    recs = [
        {"replicas": 3, "system": s, "lost_blocks": 0, "blocks": 10, "reimage_source": "bootstrap",
         "reimage_source_days": 28.0}
        for s in ("HDFS-Stock", "HDFS-H")
    ]
    _, checks = SECTIONS["durability"]({"records": recs})
    assert "- reimages: bootstrapped from the trace's own 28.0-day span" in checks
    recs[0]["reimage_source"] = recs[1]["reimage_source"] = "as-is"
    recs[0]["reimage_source_days"] = recs[1]["reimage_source_days"] = 365.0
    assert "- reimages: the trace (365.0 days) used as it is" in SECTIONS["durability"]({"records": recs})[1]


def test_a_log_covering_the_horizon_whose_last_event_is_before_its_end_is_used_as_it_is() -> None:
    # Issue 39 finding 8: an imported yearly log (first reimage on day 2, last on day 358, a
    # 14-day utilization window) is the horizon's own reimages; it was bootstrapped because its span
    # (last event + one mean gap, 364.0 days) fell a day short of 365.
    inv = make_inventory(["a", "b"], 3)
    ts = np.linspace(2 * DAY_S, 358 * DAY_S, 60)
    ev = ReimageEvents(ts, tuple(f"s{i % 6:03d}" for i in range(ts.size)))
    out = extend_reimages(ev, inv, 365.0, np.random.default_rng(0), window_start_s=0.0, window_s=14 * DAY_S)
    assert out.how == "as-is"
    assert out.time_s[: ts.size].tolist() == ts.tolist()  # the log's own events at their own instants
    # the few days past the log's span continue it from its start (no empty tail, no pile-up)
    assert out.time_s.max() < 365 * DAY_S and np.all(np.diff(out.time_s) > 0)
    assert out.time_s.size <= ts.size + 1

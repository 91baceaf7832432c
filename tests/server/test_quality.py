"""Placement quality, the strict-mode switch, the decision log and heartbeats (server/quality.py)."""

from __future__ import annotations

import math

import pytest

from placement_service.server.metrics import Metrics
from placement_service.server.quality import (
    DecisionLog,
    Heartbeats,
    QualityTracker,
    StrictPolicy,
    StrictSwitch,
    diversity_of,
)


def test_diversity_of_a_block():
    good = diversity_of([0, 1, 2], [2, 0, 1], ["a", "b", "c"], relaxed=False)
    assert good.full and not good.relaxed
    same_row = diversity_of([0, 0, 2], [2, 0, 1], ["a", "b", "c"], relaxed=True)
    assert not same_row.rows and same_row.columns and not same_row.full
    outside = diversity_of([0, None, 2], [0, 1, 2], ["a", "b", "c"], relaxed=False)
    assert not outside.rows  # a replica outside the grid is not diverse
    four = diversity_of([0, 1, 2, 0], [0, 1, 2, 1], ["a", "b", "c", "d"], relaxed=False)
    assert four.full  # the 4th replica may share a row or column: only 3 exist


def test_tracker_shares_cover_only_the_window():
    t = QualityTracker(window=10)
    assert math.isnan(t.shares()["full"])
    bad = diversity_of([0, 0, 1], [0, 1, 2], ["a", "b", "c"], relaxed=True)
    good = diversity_of([0, 1, 2], [0, 1, 2], ["a", "b", "c"], relaxed=False)
    for _ in range(10):
        t.record(bad)
    for _ in range(5):
        t.record(good)
    s = t.shares()
    assert s["blocks"] == 10 and s["full"] == pytest.approx(0.5) and s["relaxed"] == pytest.approx(0.5)
    assert t.total_blocks == 15 and t.total_relaxed == 10


def test_strict_switch_has_hysteresis_and_waits_for_enough_blocks():
    sw = StrictSwitch(StrictPolicy(enter_below=0.9, leave_above=0.97, min_blocks=100), clock=lambda: 42.0)
    assert not sw.update({"blocks": 50, "full": 0.1})  # too few blocks to judge
    assert sw.update({"blocks": 100, "full": 0.85})
    assert "85.0%" in sw.reason and sw.changed_at == 42.0
    assert sw.update({"blocks": 100, "full": 0.95})  # between the thresholds: stays strict
    assert not sw.update({"blocks": 100, "full": 0.98})
    assert "allowed again" in sw.reason
    off = StrictSwitch(StrictPolicy(enabled=False))
    assert not off.update({"blocks": 1000, "full": 0.0})


@pytest.mark.parametrize("kw", [{"enter_below": 1.5}, {"enter_below": 0.9, "leave_above": 0.5},
                                {"min_blocks": 0}, {"leave_above": float("nan")}])
def test_strict_policy_rejects_bad_settings(kw):
    with pytest.raises(ValueError):
        StrictPolicy(**kw)


def test_decision_log_is_bounded_and_sampled():
    log = DecisionLog(capacity=3)
    for i in range(5):
        log.record(f"blk_{i}", {"targets": [f"n{i}"]})
    assert len(log) == 3 and log.get("blk_0") is None and log.get("blk_4")["targets"] == ["n4"]
    none = DecisionLog(capacity=10, sample=0.0)
    assert not none.record("blk_x", {}) and none.record("blk_y", {}, force=True)
    half = DecisionLog(capacity=10_000, sample=0.5, seed=3)
    kept = sum(half.record(f"b{i}", {}) for i in range(2000))
    assert 850 < kept < 1150


def test_heartbeats_report_ages_and_stalled_loops():
    now = [100.0]
    hb = Heartbeats(clock=lambda: now[0])
    hb.register("ingest", 1.0)
    hb.register("recluster", 3600.0)
    now[0] = 105.0
    hb.beat("recluster")
    assert hb.ages() == {"ingest": 5.0, "recluster": 0.0}
    assert hb.stalled() == {"ingest": 5.0}
    m = Metrics()
    m.add_collector(lambda: hb.export(m.set, "harvest_loop_heartbeat_age_seconds"))
    text = m.render()
    assert 'harvest_loop_heartbeat_age_seconds{loop="ingest"} 5' in text

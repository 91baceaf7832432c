"""Issue 37, finding 2: what the placement service keeps to explain itself is bounded in bytes.

25 token-less placements with 16,000 ``excluded`` names each grew the service by ~230 MB, kept for
good (every decision-log entry held the whole request; 10,000 entries by default). Now a request's
lists are bounded (``max_list_items``), the decision log is bounded in bytes (``decision_log_bytes``)
as well as entries, and a logged request keeps the first few excluded names and their count.
"""

from __future__ import annotations

import gc
import tracemalloc
from types import SimpleNamespace

from placement_service.server.insight import Insight
from placement_service.server.quality import DecisionLog
from tests.server.conftest import ServerProc


def _cfg(**over: object) -> SimpleNamespace:
    base: dict[str, object] = dict(placement_quality_window=100, placement_strict_auto=False, placement_strict_enter_below=0.9,
                placement_strict_leave_above=0.95, placement_strict_min_blocks=10, decision_log_size=10_000,
                decision_log_sample=1.0, decision_log_bytes=256 * 1024, seed=0, silent_after_s=60.0)
    base.update(over)
    return SimpleNamespace(**base)


def _replicas() -> list[dict[str, object]]:
    return [{"node": f"n{i}", "tenant": "t", "environment": "e", "class": "c", "grid_row": 0, "grid_column": i}
            for i in range(3)]


def test_hammered_decision_log_retains_at_most_its_byte_budget() -> None:
    budget = 256 * 1024
    insight = Insight(_cfg(decision_log_bytes=budget))
    gc.collect()
    tracemalloc.start()
    try:
        base, _ = tracemalloc.get_traced_memory()
        for k in range(100):  # 100 decisions of 2,000 excluded names: ~14 MB if requests were kept whole
            excluded = [f"node-{k:03d}-{i:05d}" for i in range(2_000)]
            insight.record_place(f"blk_{k}", {"writer": "", "replicas": 3, "excluded": excluded, "block_size": 1},
                                 _replicas(), False, "", False)
            del excluded
        gc.collect()
        retained, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert retained - base <= 2 * budget, f"retained {retained - base:,} bytes for a budget of {budget:,}"
    assert insight.decisions.bytes <= budget
    entry = insight.explain_place(block="blk_99")[0]  # the newest is kept and explains itself
    assert entry["request"]["excluded_total"] == 2_000 and len(entry["request"]["excluded"]) <= 32
    assert [r["node"] for r in entry["replicas"]] == ["n0", "n1", "n2"]


def test_byte_budget_evicts_the_oldest_and_refuses_an_entry_larger_than_the_budget() -> None:
    log = DecisionLog(capacity=1000, max_bytes=4096)
    for k in range(200):
        assert log.record(f"k{k}", {"v": "x" * 100})
    assert log.bytes <= 4096 and log.get("k199") is not None and log.get("k0") is None
    assert not log.record("huge", {"v": "x" * 10_000})
    assert log.get("huge") is None and log.bytes <= 4096


def test_a_placement_with_more_excluded_names_than_the_limit_is_refused(server: ServerProc) -> None:
    names = [f"x{i}" for i in range(16_000)]
    status, doc = server.call("POST", "/v1/blocks/place", {"replicas": 3, "excluded": names}, token=None)
    assert status == 400 and doc["error"]["field"] == "excluded", doc
    assert "10000" in doc["error"]["message"]
    status, doc = server.call("GET", "/metrics", token=None)
    assert "harvest_decision_log_bytes" in doc and "harvest_decision_log_entries" in doc

"""Reimages reported live (``POST /v1/reimages``): stored once, kept across restarts, and feeding the
grid rows' reimage rates in place of the static file for the tenants that have them."""

from __future__ import annotations

import time

import pytest

from placement_service.server.config import build_config
from placement_service.server.service import PlacementService
from tests.server.conftest import report, start_server


def test_reimages_are_stored_once_validated_and_survive_a_restart(tmp_path):
    srv = start_server(tmp_path / "data", "--compact-interval-s", "1")
    try:
        now = time.time()
        assert srv.call("POST", "/v1/reports", {"reports": [report("n1", "web", now, seq=1)]})[0] == 202
        ev = {"events": [{"node": "n1", "timestamp": now - 3600, "how": "detected"}]}
        assert srv.call("POST", "/v1/reimages", ev, token=None)[0] == 401
        status, doc = srv.call("POST", "/v1/reimages", ev)
        assert status == 202 and doc == {"stored": 1, "duplicates": 0}
        assert srv.call("POST", "/v1/reimages", ev)[1] == {"stored": 0, "duplicates": 1}  # agent retry
        for bad, field in [
            ({"events": [{"node": "ghost", "timestamp": now}]}, "events[0].node"),
            ({"events": [{"node": "n1", "timestamp": 1e17}]}, "events[0].timestamp"),
            ({"events": [{"node": "n1", "timestamp": now, "how": "maybe"}]}, "events[0].how"),
            ({"events": []}, "events"),
        ]:
            status, err = srv.call("POST", "/v1/reimages", bad)
            assert 400 <= status < 500 and err["error"]["field"] == field, (bad, err)
    finally:
        srv.stop()
    srv = start_server(tmp_path / "data", "--compact-interval-s", "1")
    try:
        rows = srv.call("GET", "/v1/reimages")[1]["reimages"]
        assert [(r["node"], r["tenant"], r["how"]) for r in rows] == [("n1", "web", "detected")]
    finally:
        srv.stop()


def test_live_reimages_set_the_rate_of_their_tenants(tmp_path):
    svc = PlacementService(build_config(env={}, flags={"data_dir": str(tmp_path / "d"), "reimage_window_days": 30}))
    svc.start()
    try:
        now = time.time()
        svc.ingest_and_wait([_report(f"a{i}", "a", now) for i in range(4)] + [_report("b0", "b", now)])
        new, known = svc.record_reimages([("a0", now - 86400, "detected"), ("a1", now - 2 * 86400, "declared"),
                                          ("a1", now - 40 * 86400, "declared")])  # the last is outside 30 days
        assert (new, known) == (3, 0)
        rates = svc.reimage_rates({"a": 4, "b": 1}, now)
        assert rates == {"a": pytest.approx(2 / 4)}  # 2 reimages / 4 servers / one 30-day month; b: none
    finally:
        svc.close()


def _report(node: str, tenant: str, ts: float):
    from placement_service.server.reports import parse_report_batch

    return parse_report_batch({"reports": [report(node, tenant, ts, seq=1)]}, time.time(), 300.0, 10)[0]


def test_a_reimage_both_in_the_file_and_reported_counts_once(tmp_path):
    """The co-busy placer's server choice reads each node's reimages seen: the reimages file's plus
    the reported ones. An agent reporting a reimage the operator's file already holds, or the agent and
    the operator both reporting one (the same node within ``SAME_REIMAGE_S``), is one reimage, not two."""
    now = time.time()
    inv = tmp_path / "inventory.csv"
    inv.write_text("server,tenant,environment,rack,cores,memory_mb,storage_gb\n"
                   "a0,a,a,/r0,8,16384,1000\na1,a,a,/r0,8,16384,1000\n")
    reimages = tmp_path / "reimages.csv"
    t_file = now - 10 * 86400
    reimages.write_text(f"timestamp,server\n{t_file:.0f},a0\n{t_file - 86400:.0f},a0\n")
    svc = PlacementService(build_config(env={}, flags={
        "data_dir": str(tmp_path / "d"), "inventory_file": str(inv), "reimages_file": str(reimages),
        "placement_cobusy": True, "placement_reimage_choices": 2}))
    svc.start()
    try:
        assert svc.record_reimages([
            ("a0", round(t_file), "detected"),  # the file's, to the second
            ("a0", round(t_file) + 600, "detected"),  # the file's, seen by the agent ten minutes later
            ("a0", now - 86400, "detected"),  # a new one
            ("a1", now - 86400, "detected"),  # a node the file has none of ...
            ("a1", now - 86400 + 300, "declared"),  # ... and its operator declaring the same reimage
        ]) == (5, 0)
        seen = svc.reimages_seen_by_node()
        assert seen["a0"] == 3.0 and seen["a1"] == 1.0, seen
    finally:
        svc.close()

"""The live service explains and watches itself (server/insight.py, quality.py): explained class
selection and placement, job-type thresholds from the job lengths seen, placement quality and the
strict-mode switch, the decision log, silent nodes and loop heartbeats. Real ``harvest serve``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import grpc
import numpy as np

from placement_service.proto_gen import harvest_pb2, harvest_pb2_grpc
from tests.server.conftest import ServerProc, grid_classes_file, report, start_server


def _start(tmp: Path, cells: dict[str, tuple[int, int]] | None, **settings: object) -> ServerProc:
    cfg = tmp / "cfg.json"
    cfg.write_text(json.dumps(settings))
    extra = ["--compact-interval-s", "1", "--recluster-interval-s", "0", "--config", str(cfg)]
    if cells is not None:
        extra += ["--classes-file", str(grid_classes_file(tmp, cells))]
    return start_server(tmp / "data", *extra)


def _register(srv: ServerProc, tenants: list[str], per_tenant: int = 3, age_s: float = 0.0) -> None:
    now = time.time() - age_s
    reps = [report(f"{t}-{k}", t, now, seq=1) for t in tenants for k in range(per_tenant)]
    assert srv.call("POST", "/v1/reports", {"reports": reps})[0] == 202


def _wait(cond, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.2)
    raise AssertionError("condition not met in time")


JOB = {"name": "q", "last_duration_s": 600.0, "vertices": {"Map 1": {"tasks": 10}}}


def test_select_explained_and_thresholds_learned_from_the_jobs_seen(tmp_path):
    srv = _start(tmp_path, {"a": (0, 0), "b": (1, 1), "c": (2, 2)}, selection_min_jobs=6)
    try:
        status, doc = srv.call("POST", "/v1/jobs/select?explain=1", JOB, token=None)
        assert status == 200, doc
        why = doc["explain"]
        assert why["classes"] == doc["classes"] and why["job_type"] == doc["job_type"] == "medium"
        assert {c["class"] for c in why["candidates"]} == {"constant-0", "constant-1", "constant-2"}
        chosen = [c for c in why["candidates"] if c["chosen"]]
        assert [c["class"] for c in chosen] == doc["classes"]
        assert why["settings"]["short_max_s"] == 300.0 and "configured" in why["settings_source"]
        status, plain = srv.call("POST", "/v1/jobs/select", JOB, token=None)
        assert status == 200 and "explain" not in plain
        status, bad = srv.call("POST", "/v1/jobs/select?explain=maybe", JOB, token=None)
        assert status == 400 and bad["error"]["field"] == "explain"
        # Six jobs of 60..360 s: the thresholds become their thirds once the view is rebuilt.
        lengths = [60.0 * k for k in range(1, 7)]
        for d in lengths:
            assert srv.call("POST", "/v1/jobs/select", {**JOB, "last_duration_s": d}, token=None)[0] == 200
        want = np.quantile(lengths + [600.0, 600.0], [1 / 3, 2 / 3])

        def learned() -> bool:
            w = srv.call("POST", "/v1/jobs/select?explain=1", {**JOB, "last_duration_s": None}, token=None)[1]
            return w["explain"]["settings_source"].startswith("thirds")
        _wait(learned)
        w = srv.call("POST", "/v1/jobs/select?explain=1", JOB, token=None)[1]["explain"]["settings"]
        assert w["short_max_s"] >= want[0] - 1e-6 and w["long_min_s"] >= want[1] - 1e-6
        assert w["long_min_s"] < 3600.0  # no longer the configured default
    finally:
        srv.stop()


def test_placement_explained_logged_and_quality_measured(tmp_path):
    srv = _start(tmp_path, {"a": (0, 0), "b": (1, 1), "c": (2, 2)})
    try:
        _register(srv, ["a", "b", "c"])
        _wait(lambda: srv.call("POST", "/v1/blocks/place", {"replicas": 3}, token=None)[0] == 200)
        status, doc = srv.call("POST", "/v1/blocks/place?block=blk_1001&explain=1", {"replicas": 3}, token=None)
        assert status == 200, doc
        reps = doc["explain"]["replicas"]
        assert [r["node"] for r in reps] == doc["targets"]
        assert sorted(r["grid_row"] for r in reps) == [0, 1, 2] and not doc["relaxed"]
        assert doc["decision"] == "blk_1001"
        funnel = doc["explain"]["rules"]
        assert [f["node"] for f in funnel] == doc["targets"] and all(not f["relaxed"] for f in funnel)
        third = {r["rule"]: r for r in funnel[2]["rules"]}
        assert third["not usable (busy or full)"]["left"] == 9  # 3 tenants x 3 nodes, all usable
        assert third["same environment"]["left"] == 3  # two environments already taken
        assert third["same grid row"]["left"] == 3 and third["same grid column"]["left"] == 3
        status, logged = srv.call("GET", "/v1/explain/place?block=blk_1001")
        assert status == 200 and [r["node"] for r in logged["decisions"][0]["replicas"]] == doc["targets"]
        assert srv.call("GET", "/v1/explain/place?block=blk_nope")[0] == 404
        node = doc["targets"][0]
        by_node = srv.call("GET", f"/v1/explain/place?node={node}")[1]["decisions"]
        assert by_node and all(any(r["node"] == node for r in e["replicas"]) for e in by_node)
        q = srv.call("GET", "/v1/placement/quality")[1]
        assert q["blocks_total"] >= 2 and q["shares"]["full"] == 1.0 and not q["strict_mode"]
        metrics = srv.call("GET", "/metrics")[1]
        assert 'harvest_placement_diverse_share{kind="full"} 1' in metrics
        assert 'harvest_loop_heartbeat_age_seconds{loop="compaction"}' in metrics
    finally:
        srv.stop()


def test_strict_mode_switches_on_when_diversity_drops_and_health_says_why(tmp_path):
    # Two tenants share a column: every 3-replica block must relax the column rule.
    srv = _start(tmp_path, {"a": (0, 0), "b": (1, 1), "c": (2, 1)}, placement_strict_min_blocks=10,
                 placement_strict_enter_below=0.9, placement_strict_leave_above=0.95)
    try:
        _register(srv, ["a", "b", "c"])
        _wait(lambda: srv.call("POST", "/v1/blocks/place", {"replicas": 3}, token=None)[0] == 200)
        status, first = srv.call("POST", "/v1/blocks/place?explain=1", {"replicas": 3}, token=None)
        assert status == 200 and first["relaxed"]
        relaxed = [r for f in first["explain"]["rules"] for r in f["relaxed"]]
        assert "same grid column" in relaxed  # two tenants share a column: the third replica relaxes it
        answers = [srv.call("POST", "/v1/blocks/place", {"replicas": 3}, token=None) for _ in range(14)]
        assert all(s == 200 and d["relaxed"] for s, d in answers[:8])  # blocks 3..10 (min_blocks 10)
        refused = [d for s, d in answers if s != 200]
        assert refused and "strict placement mode" in refused[-1]["error"]["message"]
        health = srv.call("GET", "/healthz")[1]
        assert health["placement"]["strict_mode"] and "threshold 90.0%" in health["placement"]["strict_reason"]
        assert "harvest_placement_strict_mode 1" in srv.call("GET", "/metrics")[1]
    finally:
        srv.stop()


def test_without_a_class_table_placement_says_so_and_silent_nodes_are_listed(tmp_path):
    srv = _start(tmp_path, None, silent_after_s=5)
    try:
        _register(srv, ["x", "y", "z"], per_tenant=1)
        _register(srv, ["old"], per_tenant=2, age_s=120)
        _wait(lambda: srv.call("POST", "/v1/blocks/place", {"replicas": 3}, token=None)[0] == 200)
        doc = srv.call("POST", "/v1/blocks/place", {"replicas": 3}, token=None)[1]
        assert "no class table yet" in doc["reason"]
        assert srv.call("GET", "/v1/placement/quality")[1]["blocks_total"] == 0  # not counted as diverse or not
        silent = srv.call("GET", "/v1/nodes/silent")[1]
        assert {n["node"] for n in silent["nodes"]} == {"old-0", "old-1"}
        assert all(n["silent_s"] >= 100 for n in silent["nodes"])
        assert srv.call("GET", "/healthz")[1]["silent_nodes"]["count"] == 2
    finally:
        srv.stop()


def test_re_replication_keeps_diversity_with_the_replicas_already_held(tmp_path):
    # A re-replication (HDFS asks for one more replica of a block whose survivors are on a-0 and b-0)
    # must land in the grid row, column and environment the survivors left free: tenant c. Before,
    # the shim could only pass the survivors as excluded nodes, so the service placed the replica as
    # if the block were new, anywhere (a-1, b-2, ...): the block lost its row and column diversity.
    srv = _start(tmp_path, {"a": (0, 0), "b": (1, 1), "c": (2, 2)})
    channel = grpc.insecure_channel(srv.grpc)
    try:
        _register(srv, ["a", "b", "c"])
        _wait(lambda: srv.call("POST", "/v1/blocks/place", {"replicas": 3}, token=None)[0] == 200)
        stub = harvest_pb2_grpc.PlacementStub(channel)
        for i in range(15):
            status, doc = srv.call("POST", f"/v1/blocks/place?block=blk_{i}&explain=1",
                                   {"replicas": 1, "chosen": ["a-0", "b-0"]}, token=None)
            assert status == 200 and len(doc["targets"]) == 1 and doc["targets"][0].startswith("c-"), doc
            assert not doc["relaxed"] and [r["node"] for r in doc["explain"]["chosen"]] == ["a-0", "b-0"]
            funnel = doc["explain"]["rules"]
            assert [f["replica"] for f in funnel] == [3] and funnel[0]["rules"][-1]["left"] == 3  # c's nodes
            reply = stub.ChooseTargets(harvest_pb2.ChooseTargetsRequest(replicas=1, chosen=["a-1", "c-2"]),
                                       timeout=10)
            assert list(reply.targets) and reply.targets[0].startswith("b-") and not reply.relaxed, reply
        # HDFS passes one holder (the copy's source) as the writer, known to the service or not
        for writer in ("a-0", "dn-without-agent"):
            status, doc = srv.call("POST", "/v1/blocks/place",
                                   {"writer": writer, "replicas": 1, "chosen": [writer, "b-0"]}, token=None)
            assert status == 200 and doc["targets"][0].startswith("c-" if writer == "a-0" else ("a-", "c-")), doc
        # a chosen node is never a target, even when asked for every node left
        status, doc = srv.call("POST", "/v1/blocks/place", {"replicas": 9, "chosen": ["a-0"]}, token=None)
        assert status == 200 and "a-0" not in doc["targets"] and len(doc["targets"]) == 8 and doc["short"]
        status, logged = srv.call("GET", "/v1/explain/place?block=blk_3")
        assert logged["decisions"][0]["request"]["chosen"] == ["a-0", "b-0"]
        q = srv.call("GET", "/v1/placement/quality")[1]
        assert q["shares"]["full"] == 1.0  # the whole block counted: survivors and the new replica
        # bad input names the field
        status, doc = srv.call("POST", "/v1/blocks/place", {"replicas": 1, "chosen": ["a-0", 7]}, token=None)
        assert status == 400 and doc["error"]["field"] == "chosen[1]", doc
        status, doc = srv.call("POST", "/v1/blocks/place", {"replicas": 1, "chosen": "a-0"}, token=None)
        assert status == 400 and doc["error"]["field"] == "chosen", doc
        status, doc = srv.call("POST", "/v1/blocks/place", {"replicas": 1, "chosen": [f"n{i}" for i in range(33)]},
                               token=None)
        assert status == 400 and doc["error"]["field"] == "chosen" and "at most 32" in doc["error"]["message"], doc
    finally:
        channel.close()
        srv.stop()

"""Re-clustering round trip on a real server: history in, class table out, labels pushed to a fake
ResourceManager, queue config written, decisions use the new classes, and a restart keeps them."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import numpy as np
import pytest

from placement_service.core.types import Pattern
from placement_service.proto_gen import harvest_pb2, harvest_pb2_grpc
from placement_service.traces.synth import synth_tenant_cpu
from tests.server.conftest import RECLUSTER_WAIT_S, TOKEN, ServerProc, report, start_server
from tests.server.fake_rm import FakeResourceManager

SLOT_S = 300
DAYS = 3


def ingest_history(server: ServerProc, n_tenants: int, nodes_per_tenant: int, seed: int) -> dict[str, str]:
    """Three days of synthetic per-pattern history; returns node -> tenant."""
    rng = np.random.default_rng(seed)
    n_slots = DAYS * 86400 // SLOT_S
    start = (int(time.time()) // SLOT_S - n_slots - 2) * SLOT_S
    patterns = [Pattern.PERIODIC, Pattern.CONSTANT, Pattern.UNPREDICTABLE]
    node_tenant = {}
    batch: list[dict[str, object]] = []
    for t in range(n_tenants):
        tenant = f"rc-{t}"
        cpu = synth_tenant_cpu(patterns[t % 3], n_slots, SLOT_S, rng, start_s=start)
        for k in range(nodes_per_tenant):
            node = f"rc-{t}-{k}"
            node_tenant[node] = tenant
            for j in range(n_slots):
                batch.append(report(node, tenant, start + j * SLOT_S + 7, cpu=float(cpu[j]) * 8.0, seq=j + 1))
                if len(batch) == 5000:
                    assert server.call("POST", "/v1/reports", {"reports": batch})[0] == 202
                    batch = []
    if batch:
        assert server.call("POST", "/v1/reports", {"reports": batch})[0] == 202
    return node_tenant


def test_recluster_round_trip_with_resource_manager_and_restart(tmp_path: Path) -> None:
    cs_file = tmp_path / "capacity-scheduler.xml"
    with FakeResourceManager(labels={"periodic-0": False}) as rm:
        args = ("--rm-url", rm.url, "--capacity-scheduler-file", str(cs_file), "--recluster-interval-s", "0")
        server = start_server(tmp_path / "data", *args, "--recluster-priority", "normal")
        try:
            node_tenant = ingest_history(server, n_tenants=9, nodes_per_tenant=2, seed=5)
            status, job = server.call("POST", "/v1/jobs/select",
                                      {"name": "q1", "last_duration_s": 60, "vertices": {"m": {"tasks": 4}}})
            assert status == 409  # no class table yet
            status, st = server.call("POST", "/v1/recluster?wait=1", timeout_s=RECLUSTER_WAIT_S)
            assert status == 200 and st["runs"] == 1 and st["failures"] == 0, st
            # What the run cost the child: pages it touched (it read and clustered the history) and
            # its peak memory, beside the wall time of each step.
            assert st["last_child"]["page_faults"] > 0 and st["last_child"]["peak_rss_mb"] > 10, st
            assert set(st["last_phases_s"]) == {"input", "child", "adopt"}, st
            status, table = server.call("GET", "/v1/classes")
            ids = {c["id"] for c in table["classes"]}
            assert table["version"] >= 1 and ids
            assert set(table["tenants"]) == set(node_tenant.values())
            assert set(table["grid"]) == set(node_tenant.values())
            # Labels: every class exists in the RM, the pre-existing one was not added twice.
            assert ids <= set(rm.labels)
            added = [b for m, p, b in rm.calls if p.endswith("add-node-labels")]
            assert all(i["name"] != "periodic-0" for b in added for i in b["nodeLabelInfo"])
            text = cs_file.read_text()
            for cid in ids:
                assert f"root.{cid}.default-node-label-expression" in text
            # Node answers carry the tenant's class over HTTP and gRPC.
            node = "rc-4-1"
            _, info = server.call("GET", f"/v1/nodes/{node}")
            assert info["class_id"] == table["tenants"][node_tenant[node]]["class"]
            with grpc.insecure_channel(server.grpc) as ch:
                stub = harvest_pb2_grpc.PlacementStub(ch)
                msg = harvest_pb2.NodeReport(**report(node, node_tenant[node], time.time(), seq=10_000))
                reply = next(iter(stub.Report(iter([msg]), metadata=(("authorization", f"Bearer {TOKEN}"),),
                                              timeout=10)))
                assert reply.class_id == info["class_id"] and reply.acked_seq == 10_000
            # Decisions use the new classes.
            status, job = server.call("POST", "/v1/jobs/select",
                                      {"name": "q1", "last_duration_s": 60, "vertices": {"m": {"tasks": 4}}})
            assert status == 200 and job["job_type"] == "short" and job["max_concurrency"] == 4
            assert job["classes"] and set(job["classes"]) <= ids
            if len(job["classes"]) == 1:
                assert job["queue"] == job["node_label"] == job["classes"][0]
            status, placed = server.call("POST", "/v1/blocks/place", {"writer": "rc-0-0", "replicas": 3})
            assert status == 200 and len(set(placed["targets"])) == 3
            tenants = {node_tenant[t] for t in placed["targets"]}
            assert len(tenants) == 3  # replicas spread over different tenants (grid cells / environments)
        finally:
            server.stop()
        # A restart rebuilds the class table and node labels from disk.
        server = start_server(tmp_path / "data", "--recluster-interval-s", "0")
        try:
            _, again = server.call("GET", "/v1/classes")
            assert again["version"] == table["version"] and again["tenants"] == table["tenants"]
            _, info2 = server.call("GET", f"/v1/nodes/{node}")
            assert info2["class_id"] == info["class_id"] and info2["last_seq"] == 10_000
        finally:
            server.stop()


def test_classes_file_is_served_until_the_first_reclustering(tmp_path: Path) -> None:
    import json

    doc = {
        "classes": [{"id": "constant-0", "pattern": "constant", "avg_cpu": 0.1, "peak_cpu": 0.2,
                     "current_cpu": 0.1, "servers": 1, "cores": 8.0, "tenants": ["cf-t"]}],
        "tenants": {"cf-t": {"class": "constant-0", "pattern": "constant"}},
    }
    path = tmp_path / "classes.json"
    path.write_text(json.dumps(doc))
    server = start_server(tmp_path / "data", "--classes-file", str(path), "--recluster-interval-s", "0")
    try:
        _, table = server.call("GET", "/v1/classes")
        assert [c["id"] for c in table["classes"]] == ["constant-0"] and table["version"] == 0
        assert server.call("POST", "/v1/reports", {"reports": [report("cf-1", "cf-t", time.time())]})[0] == 202
        assert server.call("GET", "/v1/nodes/cf-1")[1]["class_id"] == "constant-0"
        status, job = server.call("POST", "/v1/jobs/select",
                                  {"name": "j", "last_duration_s": None, "vertices": {"m": {"tasks": 2}}})
        assert status == 200 and job["classes"] == ["constant-0"] and job["queue"] == "constant-0"
    finally:
        server.stop()


def test_recluster_priority_of_the_child_process() -> None:
    """The initializer the re-clustering pool runs: SCHED_IDLE, nice 19, or untouched; one compute thread."""
    import multiprocessing
    import os

    from placement_service.server.recluster import _set_priority

    def probe(priority: str) -> tuple[int, int, str]:
        ctx = multiprocessing.get_context("spawn")
        with ctx.Pool(1, initializer=_set_priority, initargs=(priority,)) as pool:
            return pool.apply(_scheduler_nice_threads)

    base_nice = os.nice(0)
    idle = probe("idle")
    assert idle[0] == os.SCHED_IDLE and idle[2] == "1"
    low = probe("low")
    assert low[0] == os.SCHED_OTHER and low[1] == min(19, base_nice + 19)
    normal = probe("normal")
    assert normal[0] == os.SCHED_OTHER and normal[1] == base_nice


def _scheduler_nice_threads() -> tuple[int, int, str]:
    import os

    return os.sched_getscheduler(0), os.nice(0), os.environ.get("OMP_NUM_THREADS", "")


def test_bad_recluster_priority_is_named(tmp_path: Path) -> None:
    from placement_service.server.config import ConfigError, build_config

    with pytest.raises(ConfigError, match="recluster_priority.*idle, low, normal.*'fast'"):
        build_config(None, {"HARVEST_RECLUSTER_PRIORITY": "fast"}, {"data_dir": str(tmp_path)})


"""The testbed's CI smoke (issue 42, point 5) on real daemons: ``harvest testbed up`` with 2 workers
(HiveServer2 + Tez included), one TPC-DS query through ``harvest testbed run`` in the harvest mode,
which must succeed on the queue the router picked with 0 FAILED task attempts; then mode switches
(the agents advertise on the RM path, stock gives the NodeManagers their size back) and ``down``,
after which nothing is left running. The full run (3 workers, six queries, three modes) is a
benchmark, not a test (docs/testbed.md)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from placement_service.cli import main
from scheduler_plugin.testbed import cluster, procs, testbed
from tests.hadoop.conftest import IN_CI, RUNS, require_tools

pytestmark = [pytest.mark.hadoop, pytest.mark.timeout(1200)]


def _node_sizes(state: dict) -> list[tuple[int, int]]:
    return sorted(testbed.node_sizes(state).values())


def _wait(check: object, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return True
        time.sleep(1)
    return False


def test_up_one_query_routed_switch_modes_down_leaves_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    require_tools()
    d = RUNS / "testbed"
    if (d / testbed.STATE_FILE).exists():
        try:
            testbed.down(d, quiet=True)
        except Exception:  # noqa: BLE001 (a stale testbed of a killed run)
            pass
    d.mkdir(parents=True, exist_ok=True)
    state: dict = {}
    try:
        rc = main(["testbed", "up", "--workers", "2", "--dir", str(d)])
        if rc != 0:
            message = f"harvest testbed up failed: {capsys.readouterr().err[-3000:]}"
            if IN_CI:
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
        state = testbed.read_state(d)
        roles = sorted((p["role"], p["host"]) for p in state["processes"] if testbed.ours(p))
        assert roles == [("agent", "worker1"), ("agent", "worker2"), ("primary", "worker1"), ("primary", "worker2"),
                         ("service", "master")]
        assert cluster.status(Path(state["cluster_dir"]))["healthy"]
        # the agents advertise the harvestable share (capacity - primary - reserve), not the NM's 2048/4
        full = (testbed.NM_MEMORY_MB, testbed.NM_VCORES)
        assert _wait(lambda: all(size != full for size in _node_sizes(state)), 120), _node_sizes(state)
        # the agents report to the service as their worker's tenant, which the history's classes know
        classes = json.loads(Path(state["classes_file"]).read_text())["tenants"]
        assert _wait(lambda: all(testbed.service_node(state, h) for h in state["tenants"]), 60)
        for host, tenant in state["tenants"].items():
            node = testbed.service_node(state, host)
            assert node is not None and node["tenant"] == tenant, node
            assert node["class_id"] == classes[tenant]["class"], node
        # the primaries probe
        assert _wait(lambda: all(Path(p["latency_file"]).read_text().count("\n") >= 2
                                 for p in state["processes"] if p["role"] == "primary"), 60)
        # one query in the harvest mode, through the router, on the real HiveServer2 + Tez
        assert main(["testbed", "run", "--dir", str(d), "--queries", "52", "--rounds", "1", "--modes", "harvest",
                     "--scale", "0.01", "--baseline-s", "5"]) == 0, capsys.readouterr().err[-3000:]
        records = json.loads((d / "runs" / "records.json").read_text())["records"]
        (query,) = [r for r in records if r["mode"] == "harvest"]
        assert query["exit_code"] == 0 and query["failed_attempts"] == 0, query
        assert query["queue"] and query["queue"] != "default", query  # the router's queue, not the fallback
        # stock: no agents, the NodeManagers' own size back; pt: the agents again
        state = testbed.set_mode(d, "stock")
        assert not [p for p in state["processes"] if p["role"] == "agent"]
        assert _node_sizes(state) == [full, full]
        state = testbed.set_mode(d, "pt")
        assert sum(1 for p in state["processes"] if p["role"] == "agent" and testbed.ours(p)) == 2
        assert full not in _node_sizes(state)  # set_mode waited for the agents' sizes
    finally:
        if (d / testbed.STATE_FILE).exists():
            testbed.down(d, quiet=True)
    # nothing left: every PID of the testbed and of its cluster is gone
    records = testbed.read_state(d)["processes"]
    records += json.loads((Path(state.get("cluster_dir", d / "cluster")) / cluster.STATE_FILE).read_text())["processes"]
    assert records and all(procs.start_time(int(p["pid"])) is None for p in records), records
    assert os.getpid() not in [p["pid"] for p in records]

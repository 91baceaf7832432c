"""Class selection sends jobs only to classes whose nodes report (found on the testbed, 2026-11-29).

The testbed's classes are learnt from a history of 12 VMs; its two workers stand in for two tenants.
The router sent a TPC-DS query to a third class, whose tenants run no NodeManager: the Tez AM waited
in ACCEPTED for ever ("AM Partition = unpredictable-0; Partition Resource = <memory:0, vCores:0>").
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from tests.server.conftest import report, start_server

CLASSES = {
    "classes": [
        {"id": "constant-0", "pattern": "constant", "avg_cpu": 0.05, "peak_cpu": 0.10, "current_cpu": 0.05,
         "servers": 100, "cores": 800, "tenants": ["big"]},
        {"id": "periodic-0", "pattern": "periodic", "avg_cpu": 0.15, "peak_cpu": 0.30, "current_cpu": 0.10,
         "servers": 1, "cores": 8, "tenants": ["small"]},
    ],
    "tenants": {"big": {"class": "constant-0", "pattern": "constant"},
                "small": {"class": "periodic-0", "pattern": "periodic"}},
}


def test_jobs_go_only_to_classes_whose_nodes_report(tmp_path: Path) -> None:
    classes = tmp_path / "classes.json"
    classes.write_text(json.dumps(CLASSES))
    srv = start_server(tmp_path / "data", "--classes-file", str(classes))
    job = {"name": "q52", "last_duration_s": 30.0, "vertices": {"Map 1": {"tasks": 2}}}
    try:
        # Only the small class's node runs an agent: the big class is history, no NodeManager.
        assert srv.call("POST", "/v1/reports", {"reports": [report("w1", "small", time.time(), seq=1, cpu=1.0)]})[0] == 202
        chosen = set()
        deadline = time.monotonic() + 30  # the next tick takes the report into the classes' current CPU
        while time.monotonic() < deadline:
            status, sel = srv.call("POST", "/v1/jobs/select?explain=1", job, token=None)
            assert status == 200, sel
            live = {c["class"]: c["live"] for c in sel["explain"]["candidates"]}
            if live == {"constant-0": False, "periodic-0": True}:
                break
            time.sleep(0.2)
        assert live == {"constant-0": False, "periodic-0": True}, sel
        for _ in range(30):
            status, sel = srv.call("POST", "/v1/jobs/select", job, token=None)
            assert status == 200, sel
            chosen.update(sel["classes"])
        assert chosen == {"periodic-0"}, (chosen, sel)
    finally:
        srv.stop()

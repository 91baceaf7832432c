"""The policy view: inventory metadata reaches the placer, current CPU per class, queue choice."""

from __future__ import annotations

import time
from pathlib import Path

from placement_service.core.types import Job
from placement_service.server.config import build_config
from placement_service.server.policy import build_policy_view, class_current_cpu, load_static_inputs
from placement_service.server.reports import NodeReport

DOC = {
    "classes": [
        {"id": "constant-0", "pattern": "constant", "avg_cpu": 0.2, "peak_cpu": 0.3, "current_cpu": 0.2,
         "servers": 2, "cores": 32.0, "tenants": ["a"]},
        {"id": "periodic-0", "pattern": "periodic", "avg_cpu": 0.4, "peak_cpu": 0.8, "current_cpu": 0.4,
         "servers": 2, "cores": 32.0, "tenants": ["b"]},
    ],
    "tenants": {"a": {"class": "constant-0", "pattern": "constant"}, "b": {"class": "periodic-0", "pattern": "periodic"}},
}


def node(name: str, tenant: str, cpu: float, ts: float) -> NodeReport:
    return NodeReport(name, tenant, ts, cpu, 1.0, 16.0, 1000.0, False, 100.0)


def test_inventory_file_sets_environment_and_rack(tmp_path: Path) -> None:
    inv = tmp_path / "inventory.csv"
    inv.write_text("server,tenant,environment,rack,cores,memory_mb,storage_gb\n"
                   "n1,a,env-x,r1,16,1000,100\nn2,a,env-y,r2,16,1000,100\n")
    cfg = build_config(None, {}, {"inventory_file": str(inv)})
    static = load_static_inputs(cfg)
    assert static.node_environment == {"n1": "env-x", "n2": "env-y"}
    assert static.node_rack == {"n1": "r1", "n2": "r2"}
    now = time.time()
    view = build_policy_view(cfg, 1, DOC, {"n1": node("n1", "a", 1, now), "n2": node("n2", "a", 1, now)}, None,
                             static=static)
    assert view.placer is not None
    assert view.placer.inventory.environment == ("env-x", "env-y")
    assert view.placer.inventory.rack == ("r1", "r2")


def test_current_cpu_is_the_mean_of_recent_reports_per_class() -> None:
    from placement_service.core.types import ClassTable

    table = ClassTable.from_json(DOC)
    now = 1_800_000_000.0
    nodes = {"n1": node("n1", "a", 4.0, now), "n2": node("n2", "a", 8.0, now - 10),
             "n3": node("n3", "b", 16.0, now - 5000), "n4": node("n4", "zzz", 16.0, now)}
    assert class_current_cpu(table, nodes, now, 900.0) == {"constant-0": 0.375}


def test_single_class_gets_its_queue_and_label_and_no_fit_waits(tmp_path: Path) -> None:
    import numpy as np

    cfg = build_config(None, {}, {"data_dir": str(tmp_path)})
    view = build_policy_view(cfg, 3, DOC, {}, None)
    small = Job("j", 60.0, {"m": 2})
    decision = view.select(small)
    assert len(decision.selection.classes) == 1
    assert decision.queue == decision.node_label == decision.selection.classes[0]
    both = Job("j", 60.0, {"m": 40})  # more than one class can take (about 25 containers each) alone
    decision = view.select(both)
    assert set(decision.selection.classes) == {"constant-0", "periodic-0"}
    assert decision.queue == "default" and decision.node_label == ""
    huge = Job("j", 60.0, {"m": 10_000})
    decision = view.select(huge)
    assert decision.selection.classes == () and decision.queue is None
    assert view.selector is not None and np.isfinite(view.selector.headrooms(decision.selection.job_type)).all()

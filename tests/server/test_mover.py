"""The service's mover (``server/mover.py``) over an in-memory NameNode that keeps HDFS's contract:
a raised factor gets a replica where ``chooseTarget`` (the service's ``steer``) says, a lowered one
drops the replica ``chooseReplicaToDelete`` (the service's ``drop_for``) names, and nothing is ever
deleted below the factor. The real NameNode: tests/hadoop/test_mover_real.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from placement_service.core.placement import ReplicaPlacer
from placement_service.core.types import GridCell
from placement_service.server.hdfs_blocks import BlockReplicas, ReplicaMap
from placement_service.server.metrics import Metrics
from placement_service.server.mover import MoverSettings, ServiceMover
from tests.core.test_placement import make_inventory

TENANTS = [f"{p}{i}" for p in "ab" for i in range(9)]
CELLS = {t: GridCell(int(t[1:]) % 3, int(t[1:]) // 3) for t in TENANTS}


def _placer() -> ReplicaPlacer:
    rows = [(f"{t}-s{k}", t, f"env-{t}", "r0", 100.0) for t in TENANTS for k in range(2)]
    return ReplicaPlacer(make_inventory(rows), CELLS, seed=0)


class FakeNameNode:
    def __init__(self, files: dict[str, list[str]]) -> None:
        self.hosts = {p: list(h) for p, h in files.items()}
        self.factor = {p: len(h) for p, h in files.items()}
        self.fewest = min(len(h) for h in files.values())
        self.mover: ServiceMover | None = None
        self.nodes = [f"{t}-s{k}" for t in TENANTS for k in range(2)]

    def scan_into(self, roots: Any, out: ReplicaMap) -> None:
        for p in self.hosts:
            file = out.add_file(p)
            for b in self.blocks(p):
                out.add(file, b.block_id, b.size_bytes, b.replication, b.hosts)

    def blocks(self, path: str, replication: int | None = None) -> list[BlockReplicas]:
        return [BlockReplicas(path, hash(path) % 1000, 1 << 20, self.factor[path], tuple(self.hosts[path]))]

    def set_replication(self, path: str, replication: int) -> None:
        assert self.mover is not None
        self.factor[path] = replication
        hosts = self.hosts[path]
        while len(hosts) < replication:  # the redundancy monitor asks chooseTarget
            target = self.mover.steer(list(hosts), 1, list(hosts))
            hosts.append(target if target is not None else next(n for n in self.nodes if n not in hosts))
        while len(hosts) > replication:  # excess: chooseReplicaToDelete
            drop = self.mover.drop_for(list(hosts))
            hosts.remove(drop if drop is not None else hosts[0])
        self.fewest = min(self.fewest, min(len(h) for h in self.hosts.values()))


def _mover(tmp_path: Path, nn: FakeNameNode, busy: set[str], **settings: Any) -> ServiceMover:
    reports = {n: SimpleNamespace(tenant=n.split("-")[0], busy=n.split("-")[0] in busy) for n in nn.nodes}
    view = SimpleNamespace(private_placer=_placer, cobusy=SimpleNamespace(estimates=None))
    mover = ServiceMover(MoverSettings(mode=settings.pop("mode", "on"), poll_s=0.0, move_timeout_s=1.0,
                                       scan_in_child=False, **settings),
                         nn, tmp_path / "mover-journal.json", lambda: reports, lambda: view, Metrics())  # type: ignore[arg-type]
    nn.mover = mover
    return mover


def test_status_before_the_first_pass_has_the_contract_keys(tmp_path: Path) -> None:
    mover = _mover(tmp_path, FakeNameNode({"/f": ["a0-s0", "a8-s0"]}), set(), mode="off")
    doc = mover.status()
    assert doc["mode"] == "off" and doc["moves_total"] == 0 and doc["blocks_at_risk"] == 0
    assert doc["last_pass"] is None


def test_a_block_one_burst_from_unreadable_moves_its_busy_replica_to_an_idle_tenant(tmp_path: Path) -> None:
    nn = FakeNameNode({"/f": ["a0-s0", "a8-s0"], "/quiet": ["a1-s0", "a5-s0"]})
    mover = _mover(tmp_path, nn, busy={"a8"})
    summary = mover.run_pass()
    assert summary["blocks_at_risk"] == 1 and summary["moved"] == 1
    hosts = nn.hosts["/f"]
    assert "a0-s0" in hosts and len(hosts) == 2 and not any(h.startswith("a8-") for h in hosts), hosts
    assert nn.hosts["/quiet"] == ["a1-s0", "a5-s0"]
    assert nn.factor["/f"] == 2 and nn.fewest >= 2
    assert mover.status()["moves_total"] == 1 and not mover.status()["in_flight"]
    [entry] = list(mover.explained)
    assert entry["outcome"] == "moved" and entry["from"] == {"node": "a8-s0", "tenant": "a8"}
    assert json.loads((tmp_path / "mover-journal.json").read_text()) == {"in_flight": []}
    assert mover.metrics.counter("harvest_mover_moves_total", outcome="moved") == 1


def test_dry_run_plans_and_explains_but_touches_nothing(tmp_path: Path) -> None:
    nn = FakeNameNode({"/f": ["a0-s0", "a8-s0"]})
    mover = _mover(tmp_path, nn, busy={"a8"}, mode="dry-run")
    mover.run_pass()
    assert nn.hosts["/f"] == ["a0-s0", "a8-s0"] and nn.factor["/f"] == 2
    assert [e["outcome"] for e in mover.explained] == ["dry-run: not moved"]
    assert mover.status()["moves_total"] == 0 and mover.status()["blocks_at_risk"] == 1


def test_the_moves_per_hour_cap_defers_the_rest(tmp_path: Path) -> None:
    nn = FakeNameNode({f"/f{i}": [f"a0-s{i % 2}", f"a8-s{i % 2}"] for i in range(3)})
    mover = _mover(tmp_path, nn, busy={"a8"}, max_moves_per_hour=1)
    mover.run_pass()
    outcomes = sorted(e["outcome"].split(":")[0] for e in mover.explained)
    assert outcomes == ["deferred", "deferred", "moved"]
    assert sum(any(h.startswith("a8-") for h in hosts) for hosts in nn.hosts.values()) == 2


def test_a_journal_left_by_a_killed_service_is_finished_on_start(tmp_path: Path) -> None:
    # Killed after the factor went to 3 and the new replica arrived, before it was lowered.
    nn = FakeNameNode({"/f": ["a0-s0", "a8-s0", "a4-s0"]})
    job = {"path": "/f", "block_id": hash("/f") % 1000, "replication": 2, "holders": ["a0-s0", "a8-s0"],
           "old": "a8-s0", "new": "a4-s0", "old_tenant": "a8", "new_tenant": "a4", "reason": "watch",
           "started_s": 0.0, "phase": "raise"}
    (tmp_path / "mover-journal.json").write_text(json.dumps({"in_flight": [job]}))
    nn.factor["/f"] = 3
    mover = _mover(tmp_path, nn, busy=set())
    assert mover.status()["in_flight"]
    mover.recover()
    assert nn.factor["/f"] == 2 and sorted(nn.hosts["/f"]) == ["a0-s0", "a4-s0"]
    assert not mover.status()["in_flight"] and mover.status()["moves_total"] == 1
    assert [e["outcome"] for e in mover.explained] == ["recovered: moved"]


def test_a_damaged_journal_stops_the_start_with_the_file_named(tmp_path: Path) -> None:
    (tmp_path / "mover-journal.json").write_text("{not json")
    with pytest.raises(Exception, match="mover-journal.json"):
        _mover(tmp_path, FakeNameNode({"/f": ["a0-s0", "a8-s0"]}), set())



# ---------------------------------------------------------------- the contract on a real server


def test_serve_mover_contract_and_kill_switch(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tests.server.conftest import start_server

    helptext = subprocess.run([sys.executable, "-m", "placement_service.cli", "serve", "--help"],
                              capture_output=True, text=True, check=True).stdout
    assert "--mover {off,dry-run,on}" in helptext and "default off" in " ".join(helptext.split())
    srv = start_server(tmp_path / "data")
    try:
        status, doc = srv.call("GET", "/v1/mover", token=None)
        assert status == 200
        assert {k: doc[k] for k in ("mode", "moves_total", "blocks_at_risk", "last_pass")} == {
            "mode": "off", "moves_total": 0, "blocks_at_risk": 0, "last_pass": None}
        assert srv.call("PUT", "/v1/mover", {"mode": "on"}, token=None)[0] == 401
        status, doc = srv.call("PUT", "/v1/mover", {"mode": "on"})
        assert status == 409 and "mover_namenode_url" in doc["error"]["message"]
        status, doc = srv.call("PUT", "/v1/mover", {"mode": "fast"})
        assert status == 400 and doc["error"]["field"] == "mode"
        status, doc = srv.call("POST", "/v1/blocks/drop", {"replicas": ["a", "b", "c"]}, token=None)
        assert status == 200 and doc == {"drop": None}
        status, doc = srv.call("POST", "/v1/blocks/drop", {"replicas": "a"}, token=None)
        assert status == 400 and doc["error"]["field"] == "replicas"
    finally:
        srv.stop()


def test_mover_on_without_a_namenode_is_one_clear_line(tmp_path: Path) -> None:
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "placement_service.cli", "serve", "--data-dir", str(tmp_path / "d"),
                           "--http-port", "0", "--grpc-port", "0", "--mover", "on"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0 and "Traceback" not in done.stderr
    assert "mover_namenode_url" in done.stderr, done.stderr


def test_the_mover_is_described_as_in_the_service_and_off_by_default() -> None:
    from placement_service.server.config import ServiceConfig
    from placement_service.server.mover import DEFAULT_MOVER_MODE
    from placement_service.sim.systems import HdfsSystem, service_placement

    assert ServiceConfig().mover == DEFAULT_MOVER_MODE == "off"
    text = service_placement().describe(HdfsSystem.H_COBUSY_MOVER)
    assert "simulator only" not in text and "--mover on" in text and "off by default" in text

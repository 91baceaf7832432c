"""The launcher without daemons: plans, generated configuration, the CLI's errors, the running-cluster guard."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from placement_service.cli import main
from scheduler_plugin.testbed import cluster as testbed
from scheduler_plugin.testbed import procs, siteconf
from scheduler_plugin.testbed.versions import VERSIONS, resolve

REPO = Path(__file__).resolve().parents[2]


def _plan(tmp_path: Path, **kw: object) -> testbed.Plan:
    args: dict[str, object] = {"datanodes": 3, "nodemanagers": 2, "directory": tmp_path / "c", "isolate": False}
    args.update(kw)
    return testbed.make_plan("3.3.6", **args)  # type: ignore[arg-type]


def test_latest_is_the_newest_version_and_unknown_versions_are_refused() -> None:
    assert resolve("latest") == VERSIONS[-1]
    assert resolve("3.3.6") == "3.3.6"
    with pytest.raises(testbed.HarvestError, match="not one of 3.3.6"):
        resolve("3.2.1")


def test_workers_run_datanodes_and_nodemanagers_as_counted(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    assert [(h.name, h.datanode, h.nodemanager) for h in plan.workers] == [
        ("worker1", True, True), ("worker2", True, True), ("worker3", True, False)]
    info = testbed.describe(plan)
    assert [h["nodemanager"] is None for h in info["hosts"]] == [False, False, True]
    assert info["namenode"]["rpc"].startswith("127.0.0.1:") and info["version"] == "3.3.6"


def test_loopback_hosts_get_distinct_ports(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    ports = [p for h in plan.workers for p in h.ports.values()] + list(plan.master_ports.values())
    assert len(ports) == len(set(ports))


def test_overrides_expand_per_host_placeholders(tmp_path: Path) -> None:
    plan = _plan(tmp_path, overrides={("yarn-site", "x.state"): "{dir}/hosts/{host}/agent@{ip}"})
    files = siteconf.site_files(plan, plan.workers[1])
    assert files["yarn-site"]["x.state"] == f"{plan.dir}/hosts/worker2/agent@{plan.workers[1].ip}"
    assert files["hdfs-site"]["dfs.datanode.address"] == f"127.0.0.1:{plan.workers[1].ports['datanode']}"
    xml = siteconf.render(files["yarn-site"])
    assert "<name>x.state</name>" in xml and xml.startswith("<?xml")


def test_an_override_of_an_unknown_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(testbed.ClusterError, match="must be one of core-site"):
        _plan(tmp_path, overrides={("hbase-site", "k"): "v"})


def test_up_refuses_a_directory_holding_a_running_cluster(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    plan.dir.mkdir(parents=True)
    me = {"role": "namenode", "host": "master", "pid": os.getpid(), "start_time": procs.start_time(os.getpid()),
          "log": "x"}
    (plan.dir / testbed.STATE_FILE).write_text(json.dumps({"processes": [me]}))
    with pytest.raises(testbed.ClusterError, match=r"holds a running cluster \(namenode@master"):
        testbed.up(plan, assemble_missing=False)


def test_cli_errors_name_the_bad_argument(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hadoop", "up", "--version", "2.7.0", "--datanodes", "1", "--nodemanagers", "1",
                 "--dir", str(tmp_path)]) == 2
    assert "--version '2.7.0': not one of" in capsys.readouterr().err
    assert main(["hadoop", "up", "--version", "latest", "--datanodes", "1", "--nodemanagers", "1",
                 "--dir", str(tmp_path), "--set", "dfs.replication=2"]) == 2
    assert "expected FILE:KEY=VALUE" in capsys.readouterr().err
    assert main(["hadoop", "up", "--version", "latest", "--datanodes", "1", "--nodemanagers", "1",
                 "--dir", str(tmp_path), "--timeout-s", "nan"]) == 2
    assert "--timeout-s: must be a finite number" in capsys.readouterr().err
    assert main(["hadoop", "status", "--dir", str(tmp_path / "none")]) == 2
    assert "no cluster here" in capsys.readouterr().err


def test_the_docker_testbed_pins_a_version_the_suite_runs() -> None:
    dockerfile = (REPO / "docker" / "Dockerfile").read_text()
    pinned = re.search(r"^ARG HADOOP_VERSION=(\S+)", dockerfile, re.M)
    assert pinned and pinned.group(1) in VERSIONS, pinned


def test_status_and_down_of_a_stopped_cluster(tmp_path: Path) -> None:
    """A recorded daemon that is gone (same PID, another start time) is not ours: not alive, not killed."""
    d = tmp_path / "c"
    d.mkdir()
    ghost = {"role": "datanode", "host": "worker1", "pid": os.getpid(), "start_time": -1, "log": "x"}
    (d / testbed.STATE_FILE).write_text(json.dumps({"state": "running", "processes": [ghost],
                                                    "namenode": {"http": "127.0.0.1:1"},
                                                    "resourcemanager": {"http": "127.0.0.1:1"}, "hosts": []}))
    report = testbed.status(d)
    assert report["processes"][0]["alive"] is False and report["healthy"] is False
    assert "error" in report["namenode"]
    assert testbed.down(d, quiet=True) == {"dir": str(d.resolve()), "stopped": 0, "state": "stopped"}
    assert testbed.status(d)["state"] == "stopped"


def test_down_of_a_stopped_cluster_leaves_its_old_namespace_names_alone(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """A stopped cluster's namespace names are free for the next cluster: a second ``down`` of the old
    directory (as a test session does before clearing it) must not kill what runs there now."""
    from scheduler_plugin.testbed import netns

    touched: list[str] = []

    def namespace_pids(ns: str) -> list[int]:
        touched.append(ns)
        return []

    def remove(bridge: str | None, namespaces: list[str], veths: list[str]) -> list[str]:
        touched.extend(namespaces)
        return []

    monkeypatch.setattr(netns, "can_isolate", lambda: True)
    monkeypatch.setattr(netns, "namespace_pids", namespace_pids)
    monkeypatch.setattr(netns, "remove", remove)
    d = tmp_path / "c"
    d.mkdir()
    (d / testbed.STATE_FILE).write_text(json.dumps({"state": "stopped", "processes": [], "bridge": "hvb14",
                                                    "namespaces": ["hv14-worker1"], "veths": ["hv14v1"]}))
    assert testbed.down(d, quiet=True)["stopped"] == 0
    assert touched == []

"""Upgrade-domain hosts file, topology map and inventory reading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placement_service import HarvestError
from placement_service.cli import main
from placement_service.core.types import ClassTable
from scheduler_plugin.hosts_file import DomainMode, build_hosts_file
from scheduler_plugin.inventory import InventoryError, read_servers
from scheduler_plugin.topology_map import render_topology_map


def table(fixtures: Path) -> ClassTable:
    return ClassTable.from_json(json.loads((fixtures / "classes.json").read_text()))


def test_row_domains_follow_the_reimage_row(fixtures: Path) -> None:
    servers = read_servers(fixtures / "inventory.csv")
    grid = table(fixtures).grid
    assert grid is not None
    hosts = build_hosts_file(servers, grid, DomainMode.ROW, decommissioned=["dn6.example.com"])
    doc = json.loads(hosts.to_json())
    assert [e["hostName"] for e in doc] == [s.server for s in servers]
    by_host = {e["hostName"]: e for e in doc}
    assert by_host["dn1.example.com"] == {"hostName": "dn1.example.com", "upgradeDomain": "reimage-row-0"}
    assert by_host["dn5.example.com"]["upgradeDomain"] == "reimage-row-1"
    assert by_host["dn6.example.com"] == {"hostName": "dn6.example.com", "upgradeDomain": "reimage-row-2",
                                          "adminState": "DECOMMISSIONED"}
    cells = build_hosts_file(servers, grid, DomainMode.CELL)
    assert {e["upgradeDomain"] for e in cells.entries} == {"grid-r0c1", "grid-r1c2", "grid-r2c2"}


def test_servers_of_unclassified_tenants_stay_listed_without_domain(fixtures: Path) -> None:
    servers = read_servers(fixtures / "inventory.csv")
    grid = {k: v for k, v in (table(fixtures).grid or {}).items() if k != "ads"}
    hosts = build_hosts_file(servers, grid)
    assert hosts.unplaced_servers == ("dn5.example.com",)
    assert {"hostName": "dn5.example.com"} in hosts.entries
    with pytest.raises(HarvestError, match="not in the inventory"):
        build_hosts_file(servers, grid, decommissioned=["nope"])


def test_topology_map_from_inventory(fixtures: Path) -> None:
    text = render_topology_map(read_servers(fixtures / "inventory.csv", require_rack=True))
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert lines[0] == "dn1.example.com /dc1/r1"
    assert len(lines) == 6


def test_inventory_errors_name_file_row_and_column(tmp_path: Path) -> None:
    p = tmp_path / "inv.csv"
    p.write_text("server,rack\nx,r1\n")
    with pytest.raises(InventoryError, match=r"inv.csv: missing column\(s\) tenant"):
        read_servers(p)
    p.write_text("server,tenant,rack\nx,t,r1\ny,,r1\n")
    with pytest.raises(InventoryError, match=r"inv.csv: row 3: column 'tenant' is empty"):
        read_servers(p)
    p.write_text("server,tenant,rack\nx,t,r1\nx,t,r1\n")
    with pytest.raises(InventoryError, match="row 3: server 'x' already listed on row 2"):
        read_servers(p)


def test_cli_writes_files_atomically(fixtures: Path, tmp_path: Path) -> None:
    out = tmp_path / "hosts.json"
    assert main(["hosts-file", "--classes", str(fixtures / "classes.json"), "--inventory",
                 str(fixtures / "inventory.csv"), "--out", str(out)]) == 0
    assert len(json.loads(out.read_text())) == 6
    cs = tmp_path / "capacity-scheduler.xml"
    assert main(["capacity-scheduler", "--classes", str(fixtures / "classes.json"), "--weight", "cores",
                 "--out", str(cs)]) == 0
    assert "root.constant-0.default-node-label-expression" in cs.read_text()
    topo = tmp_path / "topology.map"
    assert main(["topology-map", "--inventory", str(fixtures / "inventory.csv"), "--out", str(topo)]) == 0
    assert list(tmp_path.iterdir()) and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_hosts_file_needs_a_grid(fixtures: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = json.loads((fixtures / "classes.json").read_text())
    del doc["grid"]
    classes = tmp_path / "classes.json"
    classes.write_text(json.dumps(doc))
    assert main(["hosts-file", "--classes", str(classes), "--inventory", str(fixtures / "inventory.csv")]) == 2
    assert "has no 'grid'" in capsys.readouterr().err

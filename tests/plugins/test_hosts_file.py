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
from scheduler_plugin.topology_map import build_topology_map, render_topology_map


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


def never_resolve(host: str) -> list[str]:
    raise AssertionError(f"{host} has an 'ip' column value and must not be resolved")


def test_topology_map_from_inventory_has_a_line_per_name_and_per_ip(fixtures: Path) -> None:
    text = render_topology_map(read_servers(fixtures / "inventory.csv", require_rack=True), never_resolve)
    lines = [ln for ln in text.splitlines() if not ln.startswith("#")]
    assert lines[0] == "dn1.example.com /dc1/r1"
    assert "10.0.0.1 /dc1/r1" in lines and "10.0.0.6 /dc1/r2" in lines
    assert len(lines) == 12


def test_topology_map_resolves_names_without_ip_and_warns_for_unresolvable(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    inv = tmp_path / "inv.csv"
    inv.write_text("server,tenant,rack,ip\nlocal-a,t,r1,\nghost,t,r2,\nfixed,t,r2,127.0.0.9\nv6,t,r3,::1\n")
    answers = {"local-a": ["127.0.0.2", "::2"]}

    def resolver(host: str) -> list[str]:
        if host not in answers:
            raise OSError(-2, "Name or service not known")
        return answers[host]

    topo = build_topology_map(read_servers(inv, require_rack=True), resolver)
    lines = [ln for ln in topo.text.splitlines() if not ln.startswith("#")]
    assert lines == ["local-a /r1", "ghost /r2", "fixed /r2", "v6 /r3",
                     "127.0.0.2 /r1", "::2 /r1", "127.0.0.9 /r2", "::1 /r3"]
    assert topo.unresolved == ["ghost"]
    assert "server 'ghost': name does not resolve" in caplog.text


def test_topology_map_leaves_out_an_address_shared_across_racks(tmp_path: Path) -> None:
    inv = tmp_path / "inv.csv"
    inv.write_text("server,tenant,rack,ip\na,t,r1,10.1.1.1\nb,t,r2,10.1.1.1\nc,t,r2,10.1.1.2\nd,t,r2,10.1.1.2\n")
    topo = build_topology_map(read_servers(inv, require_rack=True), never_resolve)
    assert topo.ambiguous == ["10.1.1.1"]
    assert "10.1.1.1" not in topo.text and "10.1.1.2 /r2" in topo.text


def test_topology_map_cli_resolves_a_real_local_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    inv = tmp_path / "inv.csv"
    # localhost resolves from /etc/hosts; a 64-character label fails in Python before any DNS query
    # (tests send no traffic outside 127.0.0.0/8).
    bad = "x" * 64 + ".invalid"
    inv.write_text(f"server,tenant,rack\nlocalhost,t,r1\n{bad},t,r2\n")
    out = tmp_path / "topology.map"
    assert main(["topology-map", "--inventory", str(inv), "--out", str(out)]) == 0
    text = out.read_text()
    assert "127.0.0.1 /r1" in text and f"{bad} /r2" in text
    assert "1 server(s) without an address line" in capsys.readouterr().err
    assert main(["topology-map", "--inventory", str(inv), "--out", str(out), "--no-resolve"]) == 0
    assert "127.0.0.1" not in out.read_text()


def test_inventory_ip_column_must_hold_addresses(tmp_path: Path) -> None:
    p = tmp_path / "inv.csv"
    p.write_text("server,tenant,rack,ip\nx,t,r1,10.0.0.300\n")
    with pytest.raises(InventoryError, match=r"inv.csv: row 2: column 'ip' is not an IP address for server 'x'"):
        read_servers(p)


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

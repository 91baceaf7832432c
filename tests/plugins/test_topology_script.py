"""Rack-awareness script contract: many hosts in, one path per host out, in order."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from placement_service.cli import main
from tests.plugins.conftest import FIXTURES, SCRIPTS

SCRIPT = SCRIPTS / "topology.py"


def run(mapping: Path | None, *hosts: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ.get("PATH", "")}
    if mapping is not None:
        env["HARVEST_TOPOLOGY_MAP"] = str(mapping)
    return subprocess.run([sys.executable, "-I", str(SCRIPT), *hosts], capture_output=True, text=True, env=env,
                          timeout=30, check=False)


def test_paths_in_argument_order_with_default_rack_for_unknown(tmp_path: Path) -> None:
    m = tmp_path / "topology.map"
    m.write_text("# comment\ndn1.example.com /dc1/r1\n10.0.0.2 /dc1/r2  # by address\n\ndn3 /r3\n")
    hosts = ["10.0.0.2", "dn1.example.com", "unknown", "DN1.EXAMPLE.COM", "dn1", "dn3.example.com", "10.0.0.22"]
    proc = run(m, *hosts)
    assert proc.returncode == 0
    assert proc.stdout.split() == ["/dc1/r2", "/dc1/r1", "/default-rack", "/dc1/r1", "/dc1/r1", "/r3",
                                   "/default-rack"]


def test_many_hosts_keep_their_order(tmp_path: Path) -> None:
    m = tmp_path / "topology.map"
    m.write_text("".join(f"h{i} /rack{i % 7}\n" for i in range(150)))
    hosts = [f"h{i}" for i in reversed(range(150))]
    out = run(m, *hosts).stdout.split()
    assert out == [f"/rack{int(h[1:]) % 7}" for h in hosts]


def test_missing_or_malformed_mapping_gives_default_rack_not_failure(tmp_path: Path) -> None:
    proc = run(tmp_path / "absent.map", "a", "b")
    assert (proc.returncode, proc.stdout.split()) == (0, ["/default-rack", "/default-rack"])
    bad = tmp_path / "bad.map"
    bad.write_text("dn1 /r1\ndn2 r2-without-slash\n")
    proc = run(bad, "dn1")
    assert proc.stdout.split() == ["/default-rack"]
    assert "bad.map:2" in proc.stderr


def test_no_arguments_prints_nothing(tmp_path: Path) -> None:
    proc = run(tmp_path / "absent.map")
    assert (proc.returncode, proc.stdout) == (0, "")


def test_answers_the_ip_addresses_the_namenode_passes(tmp_path: Path) -> None:
    """The NameNode resolves a DataNode's rack by its IP address (DatanodeManager passes getIpAddr())."""
    m = tmp_path / "topology.map"
    assert main(["topology-map", "--inventory", str(FIXTURES / "inventory.csv"), "--out", str(m)]) == 0
    proc = run(m, "10.0.0.3", "10.0.0.1", "10.0.0.6", "10.0.0.5", "10.0.0.99")
    assert proc.returncode == 0
    assert proc.stdout.split() == ["/dc1/r2", "/dc1/r1", "/dc1/r2", "/dc1/r1", "/default-rack"]


def test_ipv6_addresses_are_matched_whole(tmp_path: Path) -> None:
    m = tmp_path / "topology.map"
    m.write_text("fd00::1 /r1\nfd00 /r9\n")
    assert run(m, "fd00::1", "fd00::2").stdout.split() == ["/r1", "/default-rack"]

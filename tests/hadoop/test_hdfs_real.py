"""The block-placement shim and the topology script on a real NameNode and real DataNodes.

Each test runs once per version (``hadoop_cluster`` is parametrized); the cluster is shared, so the
tests leave it as they found it (service up, every DataNode live, nobody busy).
"""

from __future__ import annotations

import os
import time
import urllib.request
from pathlib import Path

import pytest

from tests.hadoop.conftest import FIGURES, WORKERS, HadoopCluster, report_nodes
from tests.hadoop.conftest import wait_for as _wait

pytestmark = [pytest.mark.hadoop, pytest.mark.timeout(900)]
BLOCK = 1024 * 1024


def _payload(blocks: int, seed: int) -> bytes:
    return bytes((seed + i) % 251 for i in range(256)) * (blocks * BLOCK // 256)


def _nn_log(cluster: HadoopCluster) -> str:
    return (Path(cluster.info["master"]["logs"]) / "namenode.log").read_text(errors="replace")


@pytest.mark.feature("shim: built against the real jars, loaded by the NameNode")
def test_shim_compiles_against_the_real_jars_and_the_namenode_loads_it(hadoop_cluster: HadoopCluster) -> None:
    assert hadoop_cluster.shim_jar.is_file()
    log = _nn_log(hadoop_cluster)
    assert "harvest block placement: asking " + hadoop_cluster.service.http in log, log[-3000:]


@pytest.mark.feature("shim: writes follow the service's targets")
def test_writes_follow_the_service_targets(hadoop_cluster: HadoopCluster) -> None:
    c = hadoop_cluster
    report_nodes(c, busy={"worker2"})
    try:
        c.webhdfs_put("/shim/follow.bin", _payload(8, 1))
        blocks = c.block_hosts("/shim/follow.bin")
    finally:
        report_nodes(c)
    assert len(blocks) == 8
    busy_ip = c.ip_of("worker2")
    usable = {c.ip_of(w) for w in WORKERS if w != "worker2"}
    # The stock policy would put a replica on worker2 (one of 4 DataNodes, 3 replicas) for 3 of 4
    # blocks; the service never names a busy node.
    shim_lines = [ln for ln in _nn_log(c).splitlines() if "harvest" in ln.lower()][-10:]
    for hosts in blocks:
        assert len(hosts) == 3 and busy_ip not in hosts and set(hosts) == usable, (blocks, shim_lines)
    status, answer = c.service.call("GET", "/v1/explain/place")
    assert status == 200 and answer["decisions"], answer


@pytest.mark.feature("shim: fallback with the service down")
def test_writes_succeed_through_the_fallback_with_the_service_down(hadoop_cluster: HadoopCluster) -> None:
    c = hadoop_cluster
    c.service.stop()
    try:
        blocks_n = 6
        started = time.monotonic()
        c.webhdfs_put("/shim/fallback.bin", _payload(blocks_n, 2))
        per_block_ms = (time.monotonic() - started) * 1000 / blocks_n
        blocks = c.block_hosts("/shim/fallback.bin")
        assert len(blocks) == blocks_n and all(len(h) == 3 for h in blocks), blocks
        _wait("the shim's WARN line", lambda: "harvest placement service unavailable" in _nn_log(c), 30)
        FIGURES[("write with the service down (stock fallback), per 1 MB block", c.version)] = (
            f"{per_block_ms:.0f} ms (load {os.getloadavg()[0]:.0f})")
    finally:
        c.service.start()
        report_nodes(c)


@pytest.mark.feature("topology script: every DataNode in its inventory rack")
def test_every_datanode_is_in_the_rack_the_inventory_gives(hadoop_cluster: HadoopCluster) -> None:
    c = hadoop_cluster
    out = c.run("hdfs", "dfsadmin", "-printTopology").stdout
    rack_of: dict[str, str] = {}
    rack = ""
    for line in out.splitlines():
        if line.startswith("Rack: "):
            rack = line.split(": ", 1)[1].strip()
        elif line.strip() and rack:
            rack_of[line.split()[0].rsplit(":", 1)[0]] = rack
    want = {c.ip_of(name): path for name, (_tenant, path) in WORKERS.items()}
    if c.info["network"] != "netns":  # every DataNode connects from 127.0.0.1: one address, one rack
        pytest.skip("DataNodes share 127.0.0.1 without network namespaces (not root)")
    assert rack_of == want, out


@pytest.mark.feature("shim: re-replication after a DataNode dies asks the service")
def test_re_replication_after_a_datanode_dies_asks_the_service(hadoop_cluster: HadoopCluster) -> None:
    c = hadoop_cluster
    c.webhdfs_put("/shim/rerepl.bin", _payload(3, 3), replication=2)
    blocks = c.block_hosts("/shim/rerepl.bin")
    victim_ip = blocks[0][0]
    victim = c.name_of_ip(victim_ip)
    c.stop(victim, "datanode", crash=True)
    try:
        # Dead after 2 x recheck (10 s) + 10 heartbeats (1 s); then the NameNode copies the blocks it
        # held from the surviving replica, asking the policy (and so the service) for the target.
        def rereplicated() -> bool:
            now = c.block_hosts("/shim/rerepl.bin")
            return all(len(h) == 2 and victim_ip not in h for h in now)

        _wait("re-replication off the dead DataNode", rereplicated, 150, 2)
        status, answer = c.service.call("GET", "/v1/explain/place")
        assert status == 200
        asked = [d for d in answer["decisions"] if d.get("chosen")]
        assert asked, answer["decisions"][-5:]
    finally:
        c.start(victim, "datanode")
        c.wait_healthy()


def test_webhdfs_answers_the_namenode_block_locations(hadoop_cluster: HadoopCluster) -> None:
    """The helper the tests above rely on reads the NameNode, not a cache of ours."""
    c = hadoop_cluster
    with urllib.request.urlopen(c.nn_url("/webhdfs/v1/?op=LISTSTATUS&user.name=root"), timeout=30) as resp:
        assert resp.status == 200

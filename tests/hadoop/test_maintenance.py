"""A busy DataNode goes IN_MAINTENANCE on a real NameNode and comes back (issue 36 point 3 and D5).

The NameNode reads the JSON combined hosts file (``CombinedHostFileManager``) listing the four
DataNodes from its start (``HadoopCluster.dfs_hosts``); the cluster's ``harvest serve`` is started
again with ``--dfs-hosts-file`` and ``hdfs dfsadmin -refreshNodes``, with the default cap (10 % of
the nodes: four DataNodes used to allow none, D5). worker3's agent reports busy: the NameNode puts it
in maintenance, a new file gets no replica on it and the NameNode stops listing it as a block
location; reported idle, it is back in service. Everything is put back as it was at the end (shared
cluster): the hosts file as it was and a ``-refreshNodes``.
"""

from __future__ import annotations

import json
import os
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.agent.procs import wait_until
from tests.hadoop.conftest import HadoopCluster, report_nodes


def _open(c: HadoopCluster, path: str) -> bytes:
    """WebHDFS OPEN: the NameNode redirects to the DataNode it picks as the read source."""
    query = urllib.parse.urlencode({"op": "OPEN", "user.name": "root"})
    with urllib.request.urlopen(c.nn_url(f"/webhdfs/v1{path}?{query}"), timeout=60) as resp:
        return resp.read()

pytestmark = [pytest.mark.hadoop, pytest.mark.timeout(1200)]
BUSY = "worker3"


def admin_states(c: HadoopCluster) -> dict[str, str]:
    """DataNode IP -> admin state, from the NameNode's JMX (``NameNodeInfo.LiveNodes``)."""
    live = json.loads(c.nn_jmx("Hadoop:service=NameNode,name=NameNodeInfo")["LiveNodes"])
    return {v["xferaddr"].rsplit(":", 1)[0]: v.get("adminState", "In Service") for v in live.values()}


def blocks_read(c: HadoopCluster, host: str) -> int:
    """The DataNode's own count of blocks it served (JMX ``DataNodeActivity``)."""
    conf = (c.dir / "conf" / host / "hdfs-site.xml").read_text()
    http = conf.split("<name>dfs.datanode.http.address</name><value>", 1)[1].split("</value>", 1)[0]
    with urllib.request.urlopen(f"http://{http}/jmx?qry=Hadoop:service=DataNode,name=DataNodeActivity-*",
                                timeout=30) as resp:
        return int(json.loads(resp.read())["beans"][0]["BlocksRead"])


@pytest.mark.feature("maintenance: a busy DataNode goes IN_MAINTENANCE (no new replica, no reads) and back")
def test_a_busy_datanode_goes_in_maintenance_and_comes_back(hadoop_cluster: HadoopCluster, tmp_path: Path) -> None:
    c = hadoop_cluster
    hosts = c.dfs_hosts
    original_hosts, original_args = hosts.read_text(), list(c.service.args)
    busy_ip = c.ip_of(BUSY)
    os.environ["HARVEST_MAINTENANCE_TICK_S"] = "1"  # read by the service at its start
    try:
        assert set(admin_states(c).values()) == {"In Service"}, admin_states(c)
        c.webhdfs_put("/maint/before.bin", bytes(range(256)) * 4096, replication=4)  # a replica on every node
        c.service.stop()
        c.service.args = [*original_args, "--dfs-hosts-file", str(hosts), "--refresh-nodes-command",
                          f"{Path(c.info['bin']) / 'hdfs'} dfsadmin -refreshNodes",
                          "--maintenance-enter-after-s", "0", "--maintenance-leave-after-s", "0"]
        c.service.start()

        def busy_now() -> bool:
            report_nodes(c, busy={BUSY})
            return admin_states(c).get(busy_ip) == "In Maintenance"

        assert wait_until(busy_now, 240, step_s=2.0), (admin_states(c), c.service.call("GET", "/healthz"))
        states = admin_states(c)
        assert sum(1 for s in states.values() if s != "In Service") == 1, states  # the cap: one of four
        c.webhdfs_put("/maint/during.bin", bytes(range(256)) * 8192, replication=3)
        during = c.block_hosts("/maint/during.bin")
        assert during and all(busy_ip not in h for h in during), during
        # not a read source: 20 WebHDFS reads of a block it holds, none served by it
        served = blocks_read(c, BUSY)
        for _ in range(20):
            _open(c, "/maint/before.bin")
        assert blocks_read(c, BUSY) == served, (served, blocks_read(c, BUSY))

        def idle_now() -> bool:
            report_nodes(c)
            return admin_states(c).get(busy_ip) == "In Service"

        assert wait_until(idle_now, 240, step_s=2.0), admin_states(c)
    finally:
        os.environ.pop("HARVEST_MAINTENANCE_TICK_S", None)
        report_nodes(c)
        c.service.stop()
        c.service.args = original_args
        c.service.start()
        if hosts.read_text() != original_hosts:
            hosts.write_text(original_hosts)
            c.run("hdfs", "dfsadmin", "-refreshNodes")
        report_nodes(c)
        wait_until(lambda: set(_live_states(c)) == {"In Service"}, 120, step_s=2.0)  # the next test's start


def _live_states(c: HadoopCluster) -> list[str]:
    try:
        return list(admin_states(c).values())
    except (OSError, KeyError, ValueError, IndexError):
        return []

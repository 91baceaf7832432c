"""A busy DataNode goes IN_MAINTENANCE on a real NameNode and comes back (issue 36 point 3 and D5).

The NameNode is restarted with the JSON combined hosts file (``CombinedHostFileManager``) listing the
four DataNodes, and the cluster's ``harvest serve`` with ``--dfs-hosts-file`` and ``hdfs dfsadmin
-refreshNodes``, with the default cap (10 % of the nodes: four DataNodes used to allow none, D5).
worker3's agent reports busy: the NameNode puts it in maintenance, a new file gets no replica on it and
the NameNode stops listing it as a block location; reported idle, it is back in service. Everything is
put back as it was at the end (shared cluster).
"""

from __future__ import annotations

import json
import os
import time
import urllib.parse
import urllib.request
from pathlib import Path

import pytest

from tests.agent.procs import wait_until
from tests.hadoop.conftest import WORKERS, HadoopCluster, report_nodes


def _open(c: HadoopCluster, path: str) -> bytes:
    """WebHDFS OPEN: the NameNode redirects to the DataNode it picks as the read source."""
    query = urllib.parse.urlencode({"op": "OPEN", "user.name": "root"})
    with urllib.request.urlopen(c.nn_url(f"/webhdfs/v1{path}?{query}"), timeout=60) as resp:
        return resp.read()

pytestmark = [pytest.mark.hadoop, pytest.mark.timeout(1200)]
BUSY = "worker3"
PROPS = {"dfs.namenode.hosts.provider.classname":
         "org.apache.hadoop.hdfs.server.blockmanagement.CombinedHostFileManager"}


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


def _restart_namenode(c: HadoopCluster) -> None:
    c.stop("master", "namenode")
    c.start("master", "namenode")
    ips = {c.ip_of(w) for w in WORKERS}
    assert wait_until(lambda: _live(c) >= ips, 180, step_s=2.0), "DataNodes did not register again"


def _live(c: HadoopCluster) -> set[str]:
    try:
        return set(admin_states(c))
    except (OSError, KeyError, ValueError, IndexError):  # a NameNode starting: no bean yet
        return set()


@pytest.mark.feature("maintenance: a busy DataNode goes IN_MAINTENANCE (no new replica, no reads) and back")
def test_a_busy_datanode_goes_in_maintenance_and_comes_back(hadoop_cluster: HadoopCluster, tmp_path: Path) -> None:
    c = hadoop_cluster
    site = c.dir / "conf" / "master" / "hdfs-site.xml"
    original_site, original_args = site.read_text(), list(c.service.args)
    hosts = tmp_path / "dfs.hosts.json"
    hosts.write_text(json.dumps([{"hostName": c.ip_of(w)} for w in WORKERS]))
    busy_ip = c.ip_of(BUSY)
    props = {**PROPS, "dfs.hosts": str(hosts)}
    extra = "".join(f"  <property><name>{k}</name><value>{v}</value></property>\n" for k, v in props.items())
    os.environ["HARVEST_MAINTENANCE_TICK_S"] = "1"  # read by the service at its start
    try:
        c.webhdfs_put("/maint/before.bin", bytes(range(256)) * 4096, replication=4)  # a replica on every node
        site.write_text(original_site.replace("</configuration>", extra + "</configuration>"))
        _restart_namenode(c)
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
        if site.read_text() != original_site:
            site.write_text(original_site)
            _restart_namenode(c)
        report_nodes(c)
        time.sleep(1)

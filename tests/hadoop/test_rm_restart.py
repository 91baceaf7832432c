"""The service's labels and queues and the agent survive the ResourceManager restarting (issue 36 point 3).

After a restart the NodeManagers register again and the RM holds each node at the NodeManager's
configured size (2,048 MB / 4 vcores here), not the size the agent wrote: the agent's check
(``rm_check_interval_s``) writes it again. The labels (the RM's node-label store) and the class queues
(``capacity-scheduler.xml``, read at start) are the service's again without a new push.
"""

from __future__ import annotations

import time
import urllib.error
from pathlib import Path

import pytest

from placement_service.server.yarn_rm import ResourceManagerClient
from scheduler_plugin.capacity_scheduler import read_queue_states
from tests.agent.procs import wait_until
from tests.hadoop.agent_node import AgentNode
from tests.hadoop.conftest import CLASSES, HadoopCluster

pytestmark = [pytest.mark.hadoop, pytest.mark.timeout(900)]
CLASS_IDS = [c["id"] for c in CLASSES["classes"]]


def rm_up(c: HadoopCluster) -> bool:
    try:
        return c.rm_get("/ws/v1/cluster/info")["clusterInfo"]["state"] == "STARTED"
    except (OSError, urllib.error.URLError, KeyError, ValueError):
        return False


@pytest.mark.feature("agent and service survive an RM restart (size written again, labels and queues kept)")
def test_agent_and_service_survive_an_rm_restart(hadoop_cluster: HadoopCluster, tmp_path: Path) -> None:
    c = hadoop_cluster
    client = ResourceManagerClient(f"http://{c.info['resourcemanager']['http']}", timeout_s=30, admin_user="root")
    node = AgentNode(c, "worker1", tmp_path)
    try:
        assert wait_until(lambda: node.explain().get("yarn", {}).get("applied") is not None, 60, step_s=0.5)
        applied = node.explain()["yarn"]["applied"]
        size = (applied["memory_mb"], applied["vcores"])
        assert size != (2048, 4)  # the agent's size, not the NodeManager's

        def held() -> tuple[int, int] | None:
            rec = node.rm_node()
            return None if rec is None else (int(rec["totalResource"]["memory"]), int(rec["totalResource"]["vCores"]))

        assert wait_until(lambda: held() == size, 30, step_s=0.5), (held(), size)
        c.stop("master", "resourcemanager")
        started = time.monotonic()
        c.start("master", "resourcemanager")
        assert wait_until(lambda: rm_up(c), 180, step_s=1.0), "the ResourceManager did not come back"
        assert wait_until(lambda: held() is not None, 120, step_s=0.5), "worker1 did not register again"
        # the agent writes its size again (its check, every 5 s here, or its next change of size)
        assert wait_until(lambda: held() == size or held() == tuple(
            (node.explain()["yarn"]["applied"] or {}).values()), 90, step_s=0.5), (held(), size, node.explain()["yarn"])
        rewrites = node.metric("yarn_rewrites_total")
        sys_s = time.monotonic() - started
        # labels and queues: the service's, as before the restart
        assert set(CLASS_IDS) <= client.cluster_labels()
        in_file = read_queue_states((c.dir / "conf" / "master" / "capacity-scheduler.xml").read_text())
        assert set(client.queue_states()) == set(in_file), (client.queue_states(), in_file)
        status, health = c.service.call("GET", "/healthz")
        assert status == 200 and health["status"] in ("ok", "degraded"), health
        print(f"RM restart: agent's size back {sys_s:.1f} s after the restart began ({rewrites:g} rewrites)")
    finally:
        node.close()
        c.wait_healthy()

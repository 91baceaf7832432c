"""Issue 36 D1 on the real ResourceManager: a re-clustering that adds and drops classes leaves the RM's
queues equal to the file. First the failure itself (a file without a RUNNING queue: the whole
``-refreshQueues`` is refused), then the service's queue lifecycle (``server/queues.py``): the dropped
class's queue STOPPED and DRAINING while a job runs in it, the new class's queue loaded at once, the
dropped one removed by a later refresh once drained. The cluster's own queues are put back at the end.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from placement_service.server.health import Health
from placement_service.server.metrics import Metrics
from placement_service.server.queues import QueueSync
from placement_service.server.yarn_rm import ResourceManagerClient
from scheduler_plugin.capacity_scheduler import read_queue_states, render_capacity_scheduler
from tests.agent.procs import wait_until
from tests.hadoop.conftest import CLASSES, HadoopCluster

pytestmark = [pytest.mark.hadoop, pytest.mark.timeout(1200)]
CLASS_IDS = [c["id"] for c in CLASSES["classes"]]


def rm_queues(client: ResourceManagerClient) -> dict[str, str]:
    return client.queue_states()


def equal_to_file(client: ResourceManagerClient, path: Path) -> bool:
    in_file = read_queue_states(path.read_text())
    in_rm = rm_queues(client)
    return set(in_file) == set(in_rm) and all((st == "RUNNING") == (in_rm[q] == "RUNNING") for q, st in in_file.items())


@pytest.mark.feature("queues: a re-clustering that adds and drops classes leaves the RM's queues equal to the file")
def test_dropping_a_class_follows_the_queue_lifecycle(hadoop_cluster: HadoopCluster, tmp_path: Path) -> None:
    c = hadoop_cluster
    path = c.dir / "conf" / "master" / "capacity-scheduler.xml"
    refresh = f"{Path(c.info['bin']) / 'yarn'} rmadmin -refreshQueues"
    client = ResourceManagerClient(f"http://{c.info['resourcemanager']['http']}", timeout_s=30, admin_user="root")
    assert wait_until(lambda: set(CLASS_IDS) <= set(rm_queues(client)), 90, step_s=1.0), rm_queues(client)
    original = path.read_text()
    health = Health(Metrics())
    status = {"queue_refreshes": 0, "queue_refresh_error": ""}
    sync = QueueSync(path, refresh, 180.0, client, health, Metrics(), status, check_interval_s=3600)
    weights = {cid: 1.0 for cid in CLASS_IDS}
    job = None
    try:
        # 1. The failure (what the service did before): a file without a RUNNING queue is refused whole.
        path.write_text(render_capacity_scheduler(["constant-0", "unpredictable-0"]))
        done = subprocess.run(refresh.split(), capture_output=True, text=True, timeout=180, check=False)
        assert done.returncode != 0 and "stopped state" in (done.stderr + done.stdout), done.stderr[-2000:]
        assert "periodic-0" in rm_queues(client)
        path.write_text(original)

        # 2. A job runs in periodic-0 (pending is enough: the queue holds an application).
        job = subprocess.Popen([str(Path(c.info["bin"]) / "hadoop"), "sleep", "-Dmapreduce.job.queuename=periodic-0",
                                "-m", "1", "-r", "0", "-mt", "600000"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)

        def app_in_queue() -> str | None:
            apps = (c.rm_get("/ws/v1/cluster/apps?states=NEW_SAVING,SUBMITTED,ACCEPTED,RUNNING").get("apps") or {})
            found = [a["id"] for a in apps.get("app") or [] if str(a["queue"]).endswith("periodic-0")]
            return found[0] if found else None

        assert wait_until(lambda: app_in_queue() is not None, 180, step_s=1.0)
        app = app_in_queue()

        # 3. Re-clustering: periodic-0 dropped, constant-1 new (its label pushed first, as the service does).
        client.push(["constant-0", "constant-1", "unpredictable-0"], {})
        sync.apply(["constant-0", "constant-1", "unpredictable-0"], weights, "test: re-clustering")
        assert health.snapshot()["status"] == "ok", (health.snapshot(), status)
        queues = rm_queues(client)
        assert queues["constant-1"] == "RUNNING" and queues["periodic-0"] == "DRAINING", queues
        assert equal_to_file(client, path) and status["stopped_queues"] == ["periodic-0"]

        # 4. Still draining: a check changes nothing. The job ends: the next check removes the queue.
        sync.tick()
        assert "periodic-0" in rm_queues(client)
        c.run("yarn", "application", "-kill", str(app), timeout_s=180)
        assert wait_until(lambda: rm_queues(client).get("periodic-0") == "STOPPED", 120, step_s=1.0), rm_queues(client)
        sync.tick()
        assert "periodic-0" not in rm_queues(client) and equal_to_file(client, path), rm_queues(client)
        assert health.snapshot()["status"] == "ok" and status["stopped_queues"] == []
    finally:
        if job is not None and job.poll() is None:
            job.kill()
            job.wait()
        # the cluster's classes again: constant-1 is stopped (no application) and removed next
        sync.apply(CLASS_IDS, weights, "test: restore")
        for _ in range(3):
            if equal_to_file(client, path) and set(rm_queues(client)) == {"default", *CLASS_IDS}:
                break
            time.sleep(2)
            sync.tick()
    assert set(rm_queues(client)) == {"default", *CLASS_IDS} and equal_to_file(client, path)

"""Node labels and class queues on a real ResourceManager and real NodeManagers, with a MapReduce job."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hadoop.conftest import CLASSES, REPO, HadoopCluster
from tests.hadoop.conftest import wait_for as _wait

pytestmark = [pytest.mark.hadoop, pytest.mark.timeout(900)]
CLASS_IDS = [c["id"] for c in CLASSES["classes"]]
#: The agent writes the label file; here the test does, on the hosts named.
HOST_LABELS = {"worker1": "constant-0", "worker3": "periodic-0"}


def _cluster_labels(c: HadoopCluster) -> set[str]:
    doc = c.rm_get("/ws/v1/cluster/get-node-labels")
    info = doc.get("nodeLabelInfo") or doc.get("nodeLabelsInfo", {}).get("nodeLabelInfo") or []
    if isinstance(info, dict):
        info = [info]
    return {item["name"] for item in info}


def _node_labels(c: HadoopCluster) -> dict[str, set[str]]:
    nodes = (c.rm_get("/ws/v1/cluster/nodes").get("nodes") or {}).get("node") or []
    return {n["nodeHostName"]: set(n.get("nodeLabels") or []) for n in nodes}


def _apps(c: HadoopCluster) -> list[dict[str, object]]:
    return list((c.rm_get("/ws/v1/cluster/apps").get("apps") or {}).get("app") or [])


def _queues(c: HadoopCluster) -> set[str]:
    info = c.rm_get("/ws/v1/cluster/scheduler")["scheduler"]["schedulerInfo"]
    names: set[str] = set()
    todo = [info]
    while todo:
        q = todo.pop()
        names.add(q.get("queueName", ""))
        todo.extend(((q.get("queues") or {}).get("queue")) or [])
    return names


@pytest.fixture(scope="session")
def queues(hadoop_cluster: HadoopCluster) -> HadoopCluster:
    """The operator's path (hadoop-conf/README.md, step 3): labels added, then the generated
    capacity-scheduler.xml written and loaded with ``yarn rmadmin -refreshQueues``."""
    c = hadoop_cluster
    missing = [cid for cid in CLASS_IDS if cid not in _cluster_labels(c)]
    if missing:
        c.run("yarn", "rmadmin", "-addToClusterNodeLabels", ",".join(f"{cid}(exclusive=false)" for cid in missing))
    classes = c.dir.parent / "classes.json"
    done = subprocess.run([sys.executable, "-m", "placement_service.cli", "capacity-scheduler", "--classes",
                           str(classes), "--out", str(c.dir / "conf" / "master" / "capacity-scheduler.xml")],
                          capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.returncode == 0, done.stderr
    c.run("yarn", "rmadmin", "-refreshQueues")
    return c


@pytest.fixture(scope="session")
def labelled(queues: HadoopCluster) -> HadoopCluster:
    """Label files written as the agent would; wait until the NodeManagers' script reports them."""
    c = queues
    for host, label in HOST_LABELS.items():
        state = c.dir / "hosts" / host / "agent"
        state.mkdir(parents=True, exist_ok=True)
        (state / "node-label").write_text(label + "\n")

    def reported() -> bool:
        now = _node_labels(c)
        return all(now.get(c.ip_of(h)) == {label} for h, label in HOST_LABELS.items())

    _wait("the NodeManagers' node-label script to report", reported, 90)
    return c


# Found on the real RM (both versions): the service used to publish labels and queues only when it
# adopted a re-clustering result, never the class table it starts with; it now publishes that too.
@pytest.mark.feature("node labels: the service pushes class labels to the RM")
def test_the_service_pushes_its_class_labels_to_the_rm(hadoop_cluster: HadoopCluster) -> None:
    c = hadoop_cluster
    _wait("labels", lambda: set(CLASS_IDS) <= _cluster_labels(c), 30)
    status, answer = c.service.call("GET", "/v1/recluster")
    assert status == 200 and answer["resource_manager"]["pushes"] >= 1, answer


@pytest.mark.feature("node labels: the NM script provider reports them")
def test_the_nodemanager_script_reports_the_agent_label(labelled: HadoopCluster) -> None:
    now = _node_labels(labelled)
    assert now[labelled.ip_of("worker1")] == {"constant-0"}
    assert now[labelled.ip_of("worker2")] == set()  # no label file: the DEFAULT partition


@pytest.mark.feature("queues: the generated capacity-scheduler.xml loads (refreshQueues)")
def test_the_generated_capacity_scheduler_loads(queues: HadoopCluster) -> None:
    c = queues
    xml = (c.dir / "conf" / "master" / "capacity-scheduler.xml").read_text()
    assert all(f"root.{cid}." in xml for cid in CLASS_IDS), xml[:2000]
    assert set(CLASS_IDS) | {"default"} <= _queues(c)
    info = c.rm_get("/ws/v1/cluster/scheduler")["scheduler"]["schedulerInfo"]
    by_name = {q["queueName"]: q for q in info["queues"]["queue"]}
    assert by_name["periodic-0"].get("defaultNodeLabelExpression") == "periodic-0", by_name["periodic-0"]


@pytest.mark.feature("node labels: a MapReduce job in a class queue runs only on that partition")
def test_a_job_routed_to_a_class_queue_runs_only_on_that_partition(labelled: HadoopCluster) -> None:
    c = labelled
    _wait("the class queues", lambda: set(CLASS_IDS) <= _queues(c), 60)
    before = {a["id"] for a in _apps(c)}
    c.run("hadoop", "sleep", "-Dmapreduce.job.queuename=periodic-0", "-m", "2", "-r", "0", "-mt", "500",
          timeout_s=600)
    new = [a for a in _apps(c) if a["id"] not in before]
    assert len(new) == 1, new
    app = new[0]["id"]
    state = c.rm_get(f"/ws/v1/cluster/apps/{app}")["app"]
    assert state["finalStatus"] == "SUCCEEDED" and state["queue"].endswith("periodic-0"), state
    ran_on = {h["name"] for h in c.info["hosts"]
              if h["nodemanager"] and (Path(h["logs"]) / "containers" / app).is_dir()}
    assert ran_on == {"worker3"}, ran_on

"""Contract tests (issue 36 point 4): the same requests to the suite's fakes and to the real daemons,
compared. A disagreement fails, and the fake is the one to fix.

- The fake ResourceManager (``tests/agent/fakes.py``, which ``tests/server/fake_rm.py`` sits on)
  and the real one: status, the body's shape (the fields the agent and the service read, with their
  types) and the effect. The fake is made the same version as the real RM; node ids and labels are
  the real cluster's.
- The shim's Hadoop stubs (``scheduler_plugin/java/src/test/java/org/apache/hadoop``): ``javap`` of
  each stub class against the class the version's NameNode loads (its jars): the same declaration
  and every member the stub declares, as the real class declares it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scheduler_plugin.testbed.versions import assemble
from tests.agent.fakes import FakeResourceManager
from tests.hadoop.conftest import REPO, HadoopCluster, require_tools
from tests.plugins.test_java_stubs import STUB_ONLY, declaration_head, stub_classes

pytestmark = [pytest.mark.hadoop, pytest.mark.timeout(600)]


def call(base: str, method: str, path: str, body: Any = None) -> tuple[int, Any]:
    req = urllib.request.Request(base + path, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    req.add_header("Accept", "application/json")
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            status = resp.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, json.loads(raw) if raw.strip() else None
    except ValueError:
        return status, raw.decode(errors="replace")


def shape(doc: Any) -> Any:
    """The structure of a JSON answer: keys and value types, lists by their first element."""
    if isinstance(doc, dict):
        return {k: shape(v) for k, v in doc.items()}
    if isinstance(doc, list):
        return [shape(doc[0])] if doc else []
    return type(doc).__name__


def covers(real: Any, fake: Any, where: str = "") -> list[str]:
    """Where the fake's shape is not part of the real one's (a key the real RM lacks, another type)."""
    if isinstance(fake, dict):
        if not isinstance(real, dict):
            return [f"{where or '/'}: real {type(real).__name__}, fake object"]
        return [d for k, v in fake.items() for d in
                (covers(real[k], v, f"{where}/{k}") if k in real else [f"{where}/{k}: not in the real answer"])]
    if isinstance(fake, list):
        if not isinstance(real, list):
            return [f"{where}: real {real}, fake list"]
        return covers(real[0], fake[0], f"{where}[0]") if fake and real else []
    numbers = {"int", "float"}
    return [] if real == fake or {real, fake} <= numbers else [f"{where}: real {real}, fake {fake}"]


@pytest.fixture
def pair(hadoop_cluster: HadoopCluster) -> Iterator[tuple[HadoopCluster, FakeResourceManager, str]]:
    """The real RM, a fake of the same version with the same node, and that node's id."""
    c = hadoop_cluster
    nodes = c.rm_get("/ws/v1/cluster/nodes")["nodes"]["node"]
    node = next(n for n in nodes if n["nodeHostName"] == c.ip_of("worker2"))
    total = node["totalResource"]
    fake = FakeResourceManager(version=c.version)
    fake.scheduler.add_node(node["id"], int(total["memory"]), int(total["vCores"]))
    labels = c.rm_get("/ws/v1/cluster/get-node-labels")  # the same labels on both (one label is an object)
    items = labels.get("nodeLabelInfo", []) if isinstance(labels, dict) else []
    for item in [items] if isinstance(items, dict) else items:
        fake.labels[str(item["name"])] = str(item.get("exclusivity")).lower() == "true"
    try:
        yield c, fake, str(node["id"])
    finally:
        fake.close()
        # the real node back at its size (-1: no over-commit timeout armed)
        call(f"http://{c.info['resourcemanager']['http']}", "POST",
             f"/ws/v1/cluster/nodes/{urllib.parse.quote(str(node['id']), safe='')}/resource",
             {"resource": {"memory": int(total["memory"]), "vCores": int(total["vCores"])}, "overCommitTimeout": -1})


def size(doc: Any) -> tuple[int, int]:
    total = doc["node"]["totalResource"]
    return int(total["memory"]), int(total["vCores"])


def both(pair: tuple[HadoopCluster, FakeResourceManager, str], method: str, path: str,
         body: Any = None) -> tuple[tuple[int, Any], tuple[int, Any]]:
    c, fake, _ = pair
    return call(f"http://{c.info['resourcemanager']['http']}", method, path, body), call(fake.url, method, path, body)


@pytest.mark.feature("fakes: the fake RM answers cluster info and node records as the real one")
def test_cluster_info_and_node_record(pair: tuple[HadoopCluster, FakeResourceManager, str]) -> None:
    _, _, node_id = pair
    (rs, real), (fs, fake) = both(pair, "GET", "/ws/v1/cluster/info")
    assert rs == fs == 200
    assert covers(shape(real), shape(fake)) == [], (real, fake)
    assert real["clusterInfo"]["hadoopVersion"] == fake["clusterInfo"]["hadoopVersion"]
    path = f"/ws/v1/cluster/nodes/{urllib.parse.quote(node_id, safe='')}"
    (rs, real), (fs, fake) = both(pair, "GET", path)
    assert rs == fs == 200
    assert covers(shape(real), shape(fake)) == [], (real, fake)
    assert size(real) == size(fake)
    (rs, _), (fs, _) = both(pair, "GET", "/ws/v1/cluster/nodes/no-such-node%3A1")
    assert rs == fs == 404


@pytest.mark.feature("fakes: node resource updates (unwrapped, wrapped, no admin check) as the real RM")
def test_node_resource_bodies_and_their_effect(pair: tuple[HadoopCluster, FakeResourceManager, str]) -> None:
    _, _, node_id = pair
    quoted = urllib.parse.quote(node_id, safe="")
    path = f"/ws/v1/cluster/nodes/{quoted}"
    (rs, _), (fs, _) = both(pair, "POST", f"{path}/resource",
                            {"resource": {"memory": 1536, "vCores": 3}, "overCommitTimeout": -1})
    assert rs == fs == 200
    (_, real), (_, fake) = both(pair, "GET", path)
    assert size(real) == size(fake) == (1536, 3)
    # the same fields wrapped in their root element: 200, and the node at 0 MB / 0 vcores (3.3.6)
    (rs, _), (fs, _) = both(pair, "POST", f"{path}/resource",
                            {"resourceOption": {"resource": {"memory": 1024, "vCores": 2}, "overCommitTimeout": -1}})
    (_, real), (_, fake) = both(pair, "GET", path)
    assert (rs, size(real)) == (fs, size(fake)), (real, fake)


@pytest.mark.feature("fakes: node labels (admin user, unwrapped body, wrapped ignored) as the real RM")
def test_node_label_calls(pair: tuple[HadoopCluster, FakeResourceManager, str]) -> None:
    label = "contract-0"
    body = {"nodeLabelInfo": [{"name": label, "exclusivity": False}]}
    wrapped = {"nodeLabelsInfo": {"nodeLabelInfo": [{"name": label, "exclusivity": False}]}}
    (rs, _), (fs, _) = both(pair, "POST", "/ws/v1/cluster/add-node-labels?user.name=root", wrapped)
    assert rs == fs, (rs, fs)
    (_, real), (_, fake) = both(pair, "GET", "/ws/v1/cluster/get-node-labels")

    def names(doc: Any) -> set[str]:
        inner = doc.get("nodeLabelsInfo", doc) if isinstance(doc, dict) else {}
        items = inner.get("nodeLabelInfo", []) if isinstance(inner, dict) else []
        return {i["name"] for i in ([items] if isinstance(items, dict) else items)}

    assert (label in names(real)) == (label in names(fake)), (real, fake)
    (rs, _), (fs, _) = both(pair, "POST", "/ws/v1/cluster/add-node-labels?user.name=root", body)
    assert rs == fs == 200
    (_, real), (_, fake) = both(pair, "GET", "/ws/v1/cluster/get-node-labels")
    assert label in names(real) and label in names(fake)
    assert covers(shape(real), shape(fake)) == [], (real, fake)
    (rs, _), (fs, _) = both(pair, "POST", "/ws/v1/cluster/add-node-labels?user.name=root", body)  # again
    assert rs == fs, (rs, fs)


@pytest.mark.feature("fakes: the scheduler's queue states as the real RM reports them")
def test_scheduler_queue_states(pair: tuple[HadoopCluster, FakeResourceManager, str]) -> None:
    (rs, real), (fs, fake) = both(pair, "GET", "/ws/v1/cluster/scheduler")
    assert rs == fs == 200
    info = real["scheduler"]["schedulerInfo"]
    queues = info["queues"]["queue"]
    leaf = next(q for q in queues if q["queueName"] == "default")
    fake_leaf = fake["scheduler"]["schedulerInfo"]["queues"]["queue"][0]
    assert covers(shape(leaf), shape(fake_leaf)) == [], (leaf, fake_leaf)
    assert leaf["state"] == fake_leaf["state"] == "RUNNING"


# ---------------------------------------------------------------- the shim's stubs


def javap_all(classpath: str, classes: list[str]) -> dict[str, tuple[str, list[str]]]:
    """``javap -protected`` of several classes in one JVM: class -> (declaration, members)."""
    done = subprocess.run(["javap", "-protected", "-cp", classpath, *classes], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    blocks: list[list[str]] = []
    for line in done.stdout.splitlines():
        if line.startswith("Compiled from"):
            blocks.append([])
        elif line.strip() and line.strip() != "}":
            blocks[-1].append(line.strip())
    assert len(blocks) == len(classes), done.stdout[-3000:]
    return {cls: (block[0].rstrip(" {"), block[1:]) for cls, block in zip(classes, blocks, strict=True)}


@pytest.mark.feature("fakes: the shim's Hadoop stubs declare what the real classes declare")
def test_shim_stubs_match_the_real_classes(hadoop_version: str, tmp_path: Path) -> None:
    require_tools()
    if shutil.which("javap") is None:
        pytest.skip("needs javap")
    build = subprocess.run(["bash", str(REPO / "scheduler_plugin" / "java" / "build.sh"), "--compile-tests",
                            "--out", str(tmp_path)], capture_output=True, text=True, timeout=300, check=False)
    assert build.returncode == 0, build.stdout + build.stderr
    classes = stub_classes()
    stubs = javap_all(str(tmp_path / "classes"), classes)
    real = javap_all(f"{assemble(hadoop_version).lib}/*", classes)
    problems = []
    for cls in classes:
        (stub_decl, stub_members), (real_decl, real_members) = stubs[cls], real[cls]
        if declaration_head(stub_decl, cls) != declaration_head(real_decl, cls):
            problems.append(f"{cls}: stub '{declaration_head(stub_decl, cls)}', Hadoop {hadoop_version} "
                            f"'{declaration_head(real_decl, cls)}'")
        problems += [f"{cls}: not in Hadoop {hadoop_version}: {m}" for m in stub_members
                     if m not in real_members and m not in STUB_ONLY.get(cls, set())]
    assert not problems, "\n".join(problems)

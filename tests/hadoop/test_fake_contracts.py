"""Contract tests (issue 36 point 4): the same requests to the suite's fakes and to the real daemons,
compared. A disagreement fails, and the fake is the one to fix.

- The fake ResourceManager (``tests/agent/fakes.py``, which ``tests/server/fake_rm.py`` sits on)
  and the real one: status, the body's shape (the fields the agent and the service read, with their
  types) and the effect. The fake is made the same version as the real RM; node ids and labels are
  the real cluster's.
- The fake scheduler (``tests/agent/fake_scheduler.py``, what the agent tests' RM runs): a real
  sleep job on one NodeManager and a ``FakeMapReduceJob`` on a ``FakeScheduler`` node of the same
  size, driven through the same steps (allocate, shrink with ``overCommitTimeout`` 0, signal a
  container through the RM, grow back): the same containers held, the same ones preempted, the same
  attempts counted killed and failed, the same end state.
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


# ---------------------------------------------------------------- the fake scheduler


def nm_containers(c: HadoopCluster, host: str) -> dict[str, dict[str, Any]]:
    """The NodeManager's containers (``GET /ws/v1/node/containers``), id -> record."""
    with urllib.request.urlopen(f"http://{c.host(host)['nodemanager_http']}/ws/v1/node/containers",
                                timeout=30) as resp:
        doc = json.loads(resp.read())
    items = (doc.get("containers") or {}).get("container") or []
    return {str(x["id"]): x for x in ([items] if isinstance(items, dict) else items)}


def seq(container_id: str) -> tuple[int, int]:
    """(application attempt, container number) of ``container_<ts>_<app>_<attempt>_<n>``."""
    parts = container_id.split("_")
    return int(parts[-2]), int(parts[-1])


def held(containers: list[tuple[str, int, int]]) -> list[tuple[bool, int, int]]:
    """What a node holds, in allocation order: (is the AM, MB, vcores) per container."""
    return [(seq(cid)[1] == 1, mb, vc) for cid, mb, vc in sorted(containers, key=lambda x: seq(x[0]))]


def set_size(url: str, node_id: str, memory_mb: int, vcores: int, timeout_ms: int) -> tuple[int, Any]:
    return call(url, "POST", f"/ws/v1/cluster/nodes/{urllib.parse.quote(node_id, safe='')}/resource",
                {"resource": {"memory": memory_mb, "vCores": vcores}, "overCommitTimeout": timeout_ms})


@pytest.mark.feature("fakes: the fake scheduler preempts, signals and counts attempts as the real RM and MapReduce")
def test_fake_scheduler_follows_the_real_rm(hadoop_cluster: HadoopCluster, tmp_path: Path) -> None:
    """A 3-map sleep job on worker1 alone, and the same job on the fake scheduler, step by step:
    1. both nodes at the NodeManager's 2,048 MB / 4 vcores: the same containers held (dominant calculator);
    2. shrunk to the AM + one map with ``overCommitTimeout`` 0: the same ones preempted (the newest,
       never the AM), the rest kept;
    3. the surviving map signalled through the RM (``FORCEFUL_SHUTDOWN``): the same answer;
    4. grown back: the job succeeds on both, with the same killed and failed attempt counts."""
    from tests.agent.fake_scheduler import DOMINANT_CALCULATOR, SUCCESS, FakeMapReduceJob
    from tests.hadoop.agent_node import set_node_size
    from tests.hadoop.test_agent_rm import counter, submit_sleep_job

    c = hadoop_cluster
    host = "worker1"
    rm = f"http://{c.info['resourcemanager']['http']}"
    nodes = c.rm_get("/ws/v1/cluster/nodes")["nodes"]["node"]
    node_id = str(next(n for n in nodes if n["nodeHostName"] == c.ip_of(host))["id"])
    # Both at 2,048 MB / 8 vcores (an earlier test's agent may have written another size). At the
    # NodeManager's 4 vcores the real RM ran one map at a time beside the AM (the Capacity Scheduler's
    # limits on a one-node cluster), which the fake does not model.
    size = (2048, 8)
    assert set_size(rm, node_id, *size, -1)[0] == 200
    fake = FakeResourceManager(version=c.version, calculator=DOMINANT_CALCULATOR)
    sched = fake.scheduler
    sched.add_node(node_id, *size)
    others = [h["name"] for h in c.info["hosts"] if h["nodemanager"] and h["name"] != host]
    sizes: dict[str, tuple[int, int]] = {}
    job = None
    try:
        for other in others:  # the job's containers go to worker1 only
            sizes[other] = set_node_size(c, other, 0, 0)
        # 45 s maps: at load 30+ the maps' JVMs start many seconds apart, and shorter maps did not all run at once
        job = submit_sleep_job(c, maps=3, map_ms=45_000, log=tmp_path / "job.log")

        def running() -> dict[str, dict[str, Any]]:
            return {k: v for k, v in nm_containers(c, host).items() if v["state"] == "RUNNING"}

        # 1. allocation: the AM, then as many maps as fit both memory and vcores
        assert wait_for_maps(running, 3, 120), (running(), (tmp_path / "job.log").read_text()[-3000:])
        real = running()
        first = sorted(real, key=seq)
        am = next(x for x in real.values() if seq(x["id"])[1] == 1)
        maps = [x for x in real.values() if seq(x["id"])[1] != 1]
        fake_job = FakeMapReduceJob(sched, 1, maps=3, map_memory_mb=int(maps[0]["totalMemoryNeededMB"]),
                                    map_vcores=int(maps[0]["totalVCoresNeeded"]),
                                    am_memory_mb=int(am["totalMemoryNeededMB"]))
        sched.node_heartbeat(node_id)  # the AM
        sched.node_heartbeat(node_id)  # its maps
        real_held = held([(k, int(v["totalMemoryNeededMB"]), int(v["totalVCoresNeeded"])) for k, v in real.items()])
        fake_held = held([(x.container_id, x.memory_mb, x.vcores) for x in sched.running(node_id)])
        assert real_held == fake_held, (real_held, fake_held)

        # 2. shrink to the AM and one map, preempting at once
        keep_mb = int(am["totalMemoryNeededMB"]) + int(maps[0]["totalMemoryNeededMB"])
        keep_vcores = int(am["totalVCoresNeeded"]) + int(maps[0]["totalVCoresNeeded"])
        (rs, _), (fs, _) = (set_size(rm, node_id, keep_mb, keep_vcores, 0),
                            set_size(fake.url, node_id, keep_mb, keep_vcores, 0))
        assert rs == fs == 200, (rs, fs)
        assert wait_for_maps(running, 1, 60, exactly=True), running()
        real_kept = [first.index(cid) for cid in sorted(running(), key=seq)]
        fake_first = sorted((x.container_id for x in sched.finished + sched.running(node_id)), key=seq)
        fake_kept = [fake_first.index(x.container_id) for x in sorted(sched.running(node_id),
                                                                        key=lambda x: seq(x.container_id))]
        assert real_kept == fake_kept, (real_kept, fake_kept)

        # 3. the surviving map signalled through the RM
        real_map = next(cid for cid in running() if seq(cid)[1] != 1)
        fake_map = next(x.container_id for x in sched.running(node_id) if not x.is_am)
        real_sig = call(rm, "POST", f"/ws/v1/cluster/containers/{real_map}/signal/FORCEFUL_SHUTDOWN")
        fake_sig = call(fake.url, "POST", f"/ws/v1/cluster/containers/{fake_map}/signal/FORCEFUL_SHUTDOWN")
        assert (real_sig[0], real_sig[1] is None) == (fake_sig[0], fake_sig[1] is None), (real_sig, fake_sig)
        assert wait_for_maps(lambda: {k: v for k, v in running().items() if k == real_map}, 0, 60, exactly=True)

        # 4. back to full size: both jobs run to the end
        (rs, _), (fs, _) = set_size(rm, node_id, *size, -1), set_size(fake.url, node_id, *size, -1)
        assert rs == fs == 200, (rs, fs)
        assert job.wait(timeout=600) == 0, (tmp_path / "job.log").read_text()[-4000:]
        for _ in range(20):
            if fake_job.state != "RUNNING":
                break
            sched.node_heartbeat(node_id)
            for x in sched.running(node_id):
                if not x.is_am:
                    sched.complete(x.container_id, SUCCESS)
        output = (tmp_path / "job.log").read_text()
        real_end = ("SUCCEEDED" if "completed successfully" in output else "FAILED",
                    counter(output, "Killed map tasks"), counter(output, "Failed map tasks"))
        assert real_end == (fake_job.state, fake_job.killed_attempts, fake_job.failed_attempts), output[-4000:]
    finally:
        if job is not None and job.poll() is None:
            job.kill()
            job.wait()
        set_size(rm, node_id, *size, -1)
        for other, (memory_mb, vcores) in sizes.items():
            set_node_size(c, other, memory_mb, vcores)
        fake.close()


def wait_for_maps(running: Any, count: int, timeout_s: float, *, exactly: bool = False) -> bool:
    """Until ``running()`` holds ``count`` map containers (at least, or ``exactly``)."""
    from tests.hadoop.conftest import wait_for

    def enough() -> bool:
        n = sum(1 for cid in running() if seq(cid)[1] != 1)
        return n == count if exactly else n >= count

    try:
        wait_for(f"{count} map container(s)", enough, timeout_s, interval_s=0.2)
    except AssertionError:
        return False
    return True

"""The psutil sampler on real processes: who is secondary, the per-pid cache, the process-tree scope."""

from __future__ import annotations

import os

import pytest

from agent.sampler import PsutilSampler, _container_from_cgroups
from tests.agent.procs import wait_until

DATANODE = "org.apache.hadoop.hdfs.server.datanode.DataNode"


def test_secondary_processes_are_those_with_container_id(node):
    primary = node.primary()
    a = node.container("container_1_0001_01_000001", memory_mb=30, burn=True)
    b = node.container("container_1_0001_01_000002", memory_mb=10)
    sampler = PsutilSampler(scope_root_pid=node.pid)
    wait_until(lambda: False, 0.3)
    sample = sampler.sample()
    by_pid = {p.pid: p for p in sample.processes}
    assert set(by_pid) == {a.pid, b.pid}  # the primary and the supervisor are not secondary
    assert primary.pid not in by_pid
    assert by_pid[a.pid].container_id == "container_1_0001_01_000001"
    assert by_pid[a.pid].memory_mb > 30 and by_pid[b.pid].memory_mb > 10
    assert by_pid[a.pid].pgid == a.pid  # own session, as YARN launches containers
    wait_until(lambda: False, 0.5)
    second = sampler.sample()
    burner = next(p for p in second.processes if p.pid == a.pid)
    assert burner.cpu_cores > 0.05  # burning, even on a busy shared machine
    # the node is the supervisor's tree: its totals cover the containers and the primary
    assert second.node_memory_mb >= sum(p.memory_mb for p in second.processes)
    assert second.node_cpu_cores >= burner.cpu_cores - 1e-6


def test_environment_is_read_once_per_process(node):
    node.container("container_1_0001_01_000001")
    sampler = PsutilSampler(scope_root_pid=node.pid)
    sampler.sample()
    reads = sampler.environ_reads
    for _ in range(3):
        sampler.sample()
    assert sampler.environ_reads == reads  # no new processes: no environment read
    node.container("container_1_0001_01_000002")
    sample = sampler.sample()
    assert 1 <= sampler.environ_reads - reads <= 3  # just the newcomers
    assert len({p.container_id for p in sample.processes}) == 2


def test_exited_container_disappears_without_error(node):
    child = node.container("container_1_0001_01_000001", memory_mb=5)
    sampler = PsutilSampler(scope_root_pid=node.pid)
    assert len(sampler.sample().processes) == 1
    os.killpg(child.pid, 9)
    assert wait_until(lambda: not child.alive(), 10)
    assert sampler.sample().processes == ()


def test_datanode_is_matched_by_pattern_and_not_secondary(node):
    env = {k: v for k, v in os.environ.items() if k != "CONTAINER_ID"}
    code = "import sys, time\nprint('ready', flush=True)\ntime.sleep(3600)\n"
    datanode = node._spawn(code, [DATANODE], env)
    sampler = PsutilSampler(scope_root_pid=node.pid, datanode_pattern=DATANODE)
    (proc,) = sampler.sample().processes
    assert proc.pid == datanode.pid and proc.datanode and proc.container_id is None


def test_nodemanager_is_matched_by_pattern_as_a_hadoop_daemon(node):
    env = {k: v for k, v in os.environ.items() if k != "CONTAINER_ID"}
    code = "import sys, time\nprint('ready', flush=True)\ntime.sleep(3600)\n"
    nodemanager = node._spawn(code, ["org.apache.hadoop.yarn.server.nodemanager.NodeManager"], env)
    sampler = PsutilSampler(scope_root_pid=node.pid, datanode_pattern=DATANODE,
                            daemon_patterns=["org.apache.hadoop.yarn.server.nodemanager.NodeManager"])
    (proc,) = sampler.sample().processes
    assert proc.pid == nodemanager.pid and proc.hadoop_daemon
    assert not proc.datanode and proc.container_id is None
    assert PsutilSampler(scope_root_pid=node.pid).sample().processes == ()  # no pattern: plain primary


def test_whole_node_mode_excludes_the_agent_itself():
    sampler = PsutilSampler()
    wait_until(lambda: False, 0.2)
    sample = sampler.sample()
    assert sample.node_memory_mb > 0 and sample.agent_memory_mb > 0
    assert 0 <= sample.node_cpu_cores <= (os.cpu_count() or 1) + 0.5


def test_secondary_by_cgroup_prefix_takes_the_leaf_as_container_id():
    with open("/proc/self/cgroup") as handle:
        paths = [line.split(":", 2)[2] for line in handle.read().splitlines()]
    deep = [p for p in paths if p.strip("/").count("/") >= 1]
    if not deep:
        pytest.skip("this machine's processes sit in root cgroups")
    parent, leaf = deep[0].rstrip("/").rsplit("/", 1)
    assert _container_from_cgroups(os.getpid(), (parent + "/",)) == leaf
    assert _container_from_cgroups(os.getpid(), ("/no-such-slice/",)) is None

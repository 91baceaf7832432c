"""YARN adapter against fake ResourceManager / NodeManager servers and a fake ``yarn`` CLI on PATH."""

from __future__ import annotations

import os
import time

import pytest

from agent.executor import YarnSync
from agent.metrics import Metrics
from agent.statefiles import Throttle
from agent.yarn import YarnClient, YarnError, dynamic_resources_xml, parse_dynamic_resources
from tests.agent.fakes import YARN_NODE_ID, FakeResourceManager, fake_yarn_cli, read_calls
from tests.agent.procs import wait_until

NODE = YARN_NODE_ID


@pytest.fixture
def yarn_on_path(tmp_path, monkeypatch):
    path, log = fake_yarn_cli(str(tmp_path))
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    return log


def client(rm, nm, sleeps=None) -> YarnClient:
    return YarnClient(rm.url, nm.url, yarn_bin="yarn", timeout_s=2, retries=3, backoff_s=0.2,
                      sleep=(sleeps.append if sleeps is not None else time.sleep))


def test_node_resource_rest_body_and_path_follow_hadoop(rm, nm, yarn_on_path):
    assert client(rm, nm).update_node_resource(NODE, 6144, 3, -1) == "rest"
    (post,) = rm.posts()
    assert post["path"] == "/ws/v1/cluster/nodes/worker-1.example%3A8041/resource"
    assert post["body"] == {"resource": {"memory": 6144, "vCores": 3}, "overCommitTimeout": -1}
    assert post["headers"].get("Content-Type") == "application/json"
    assert rm.node_resources[NODE] == {"memory": 6144, "vCores": 3}
    assert read_calls(yarn_on_path) == []


def test_hadoop_32_answers_404_so_the_cli_is_used_from_then_on(rm, nm, yarn_on_path):
    rm.mode = "404"
    yarn = client(rm, nm)
    assert yarn.update_node_resource(NODE, 4096, 2, 1000) == "cli"
    assert yarn.update_node_resource(NODE, 2048, 1, 1000) == "cli"
    assert len(rm.posts()) == 1  # REST tried once only
    assert read_calls(yarn_on_path) == [["rmadmin", "-updateNodeResource", NODE, "4096", "2", "1000"],
                                        ["rmadmin", "-updateNodeResource", NODE, "2048", "1", "1000"]]


def test_a_node_the_rm_does_not_know_is_an_error_not_a_switch_to_the_cli(rm, nm, yarn_on_path):
    # Seen on a real 3.3.6 while the NodeManager was away: 404 with a NotFoundException for the node.
    # Taking it for "no such REST call" (Hadoop 3.2) moved the agent to a JVM start per write for good.
    rm.gone_nodes.add(NODE)
    yarn = client(rm, nm)
    with pytest.raises(YarnError, match="is not found"):
        yarn.update_node_resource(NODE, 4096, 2, 0)
    assert yarn.resource_rest and read_calls(yarn_on_path) == []
    rm.gone_nodes.clear()
    assert yarn.update_node_resource(NODE, 4096, 2, 0) == "rest"


def test_signal_rest_then_cli_fallback(rm, nm, yarn_on_path):
    cid = "container_e17_1410901177871_0001_01_000005"
    assert client(rm, nm).signal_container(cid) == "rest"
    assert rm.posts()[-1]["path"] == f"/ws/v1/cluster/containers/{cid}/signal/FORCEFUL_SHUTDOWN"
    assert rm.signals == [(cid, "FORCEFUL_SHUTDOWN")]
    rm.mode = "404"
    assert client(rm, nm).signal_container(cid) == "cli"
    assert read_calls(yarn_on_path) == [["container", "-signal", cid, "FORCEFUL_SHUTDOWN"]]


def test_writes_retry_with_exponential_backoff(rm, nm):
    rm.fail_next = 2
    sleeps: list[float] = []
    assert client(rm, nm, sleeps).update_node_resource(NODE, 1024, 1, -1) == "rest"
    assert len(rm.posts()) == 3 and sleeps == [0.2, 0.4]
    rm.fail_next = 5
    sleeps.clear()
    with pytest.raises(YarnError, match="3 attempts"):
        client(rm, nm, sleeps).update_node_resource(NODE, 1024, 1, -1)
    assert sleeps == [0.2, 0.4]


def test_failing_cli_is_an_error(rm, nm, tmp_path, monkeypatch):
    bad = tmp_path / "bad"
    bad.mkdir()
    fake_yarn_cli(str(bad), exit_code=1)
    monkeypatch.setenv("PATH", f"{bad}{os.pathsep}{os.environ['PATH']}")
    rm.mode = "404"
    with pytest.raises(YarnError, match="exited 1"):
        client(rm, nm).update_node_resource(NODE, 1024, 1, -1)


def test_nm_containers_and_node_id_follow_nodemanager_rest(rm, nm):
    yarn = client(rm, nm)
    assert yarn.node_id() == NODE
    assert yarn.containers() == {}
    nm.empty_style = "object"
    assert yarn.containers() == {}
    nm.add("container_1326121700862_0006_01_000001", 1, 2048)
    nm.add("container_1326121700862_0006_01_000003", 2, 4096, state="DONE")
    got = yarn.containers()
    assert got["container_1326121700862_0006_01_000001"].cores == 1
    assert got["container_1326121700862_0006_01_000001"].memory_mb == 2048
    assert got["container_1326121700862_0006_01_000003"].state == "DONE"


def test_nm_unreachable_is_a_yarn_error(rm):
    yarn = YarnClient(rm.url, "http://127.0.0.1:1", timeout_s=0.5)
    with pytest.raises(YarnError):
        yarn.containers()


def test_sync_skips_writes_that_change_nothing_and_keeps_dynamic_resources_xml(rm, nm, tmp_path):
    xml = tmp_path / "dynamic-resources.xml"
    xml.write_text(dynamic_resources_xml({"other:8041": (1000, 1)}))
    metrics = Metrics()
    sync = YarnSync(client(rm, nm), lambda: NODE, -1, str(xml), metrics, Throttle(60))
    try:
        sync.want(4096, 2)
        assert wait_until(lambda: sync.applied() == (4096, 2), 10)
        for _ in range(5):
            sync.want(4096, 2)
        time.sleep(0.2)
        assert len(rm.posts()) == 1
        assert metrics.get("yarn_writes_skipped_total") == 5
        sync.want(2048, 1)
        assert wait_until(lambda: sync.applied() == (2048, 1), 10)
        assert len(rm.posts()) == 2
    finally:
        sync.stop()
    text = xml.read_text()
    assert "<name>yarn.resource.dynamic.nodes</name>" in text
    assert f"<name>yarn.resource.dynamic.{NODE}.memory</name>" in text
    assert f"<name>yarn.resource.dynamic.{NODE}.vcores</name>" in text
    assert parse_dynamic_resources(text) == {"other:8041": (1000, 1), NODE: (2048, 1)}


def test_sync_with_rm_down_counts_errors_logs_once_and_retries_later(nm, tmp_path, caplog):
    metrics = Metrics()
    dead = YarnClient("http://127.0.0.1:1", nm.url, timeout_s=0.3, retries=2, backoff_s=0.01)
    sync = YarnSync(dead, lambda: NODE, -1, None, metrics, Throttle(60))
    try:
        with caplog.at_level("WARNING", logger="agent.executor"):
            for _ in range(4):
                sync.want(4096, 2)
                assert wait_until(lambda: sync.last_error is not None, 5)
                time.sleep(0.1)
        assert metrics.get("errors_total", kind="yarn_node_resource") >= 3
        warnings = [r for r in caplog.records if "yarn_node_resource" in r.getMessage()]
        assert len(warnings) == 1
        assert sync.applied() is None
    finally:
        sync.stop()


def test_sync_writes_the_size_again_after_the_nodemanager_re_registered(rm, nm):
    """On a real 3.3.6 a NodeManager restart put the node back at the NM's configured total (4096 MB /
    4 vcores) and the agent, believing its size applied, skipped every write of it."""
    rm.scheduler.add_node(NODE, 8192, 8)
    metrics = Metrics()
    sync = YarnSync(client(rm, nm), lambda: NODE, -1, None, metrics, Throttle(60), check_interval_s=0.0)
    try:
        sync.want(3000, 3)
        assert wait_until(lambda: sync.applied() == (3000, 3), 10)
        assert rm.get(f"/ws/v1/cluster/nodes/{NODE}")[1]["node"]["totalResource"] == {"memory": 3000, "vCores": 3}
        rm.reregister(NODE, 8192, 8)
        assert rm.get(f"/ws/v1/cluster/nodes/{NODE}")[1]["node"]["totalResource"] == {"memory": 8192, "vCores": 8}
        assert wait_until(lambda: (sync.want(3000, 3), rm.node_resources[NODE])[1] == {"memory": 3000, "vCores": 3},
                          10, step_s=0.05)
        assert rm.scheduler.nodes[NODE].memory_mb == 3000 and sync.rewrites == 1
        assert metrics.get("yarn_rewrites_total") == 1
        posts = len(rm.posts())
        for _ in range(5):  # the RM holds our size again: reads, no writes
            sync.want(3000, 3)
            time.sleep(0.05)
        assert len(rm.posts()) == posts
    finally:
        sync.stop()


def test_sync_writes_the_size_again_after_a_re_registration_on_hadoop_321(nm, tmp_path, monkeypatch):
    """Issue 36 D4: 3.2.1's RM node record has no ``totalResource``; the check failed every minute and
    the node stayed at the NodeManager's full size. The size comes from used + available there."""
    rm = FakeResourceManager(mode="404")
    try:
        fake_yarn_cli(str(tmp_path), rm_url=rm.url)
        monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
        rm.scheduler.add_node(NODE, 8192, 8)
        metrics = Metrics()
        sync = YarnSync(client(rm, nm), lambda: NODE, -1, None, metrics, Throttle(60), check_interval_s=0.0)
        try:
            sync.want(3000, 3)
            assert wait_until(lambda: sync.applied() == (3000, 3), 30)
            assert "totalResource" not in rm.get(f"/ws/v1/cluster/nodes/{NODE}")[1]["node"]
            rm.reregister(NODE, 8192, 8)
            assert wait_until(lambda: (sync.want(3000, 3), rm.scheduler.nodes[NODE].memory_mb)[1] == 3000,
                              30, step_s=0.05)
            assert (rm.scheduler.nodes[NODE].memory_mb, rm.scheduler.nodes[NODE].vcores) == (3000, 3)
            assert sync.rewrites == 1 and metrics.get("errors_total", kind="yarn_node_read") == 0
            assert rm.cli_calls[-1] == ["rmadmin", "-updateNodeResource", NODE, "3000", "3", "-1"]
        finally:
            sync.stop()
    finally:
        rm.close()


def test_node_total_reads_the_rm_node_answer(rm, nm):
    rm.scheduler.add_node(NODE, 4096, 4)
    assert client(rm, nm).node_total(NODE) == (4096, 4)
    with pytest.raises(YarnError):
        client(rm, nm).node_total("nosuch:1")

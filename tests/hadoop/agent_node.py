"""A real worker host of the suite's cluster as the agent sees it: its NodeManager, a primary tenant and
``harvest agent --mode yarn`` (for test_agent_rm.py, test_rm_restart.py and
benchmarks/bench_agent_rm_real.py).

The machine is shared, so the agent measures one process tree (``--scope-root-pid``): the worker's
NodeManager is stopped and started again, with the command the launcher recorded (same network
namespace, configuration and log), as the child of a supervisor process (``tests.agent.procs.Node``),
beside the primary tenant (a process that allocates ``spike_mb`` on SIGUSR1). Every container the
NodeManager launches is in that tree. ``close`` stops all of it and starts the NodeManager again the
launcher's way, so the session's cluster is as it was.
"""

from __future__ import annotations

import json
import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Any

from scheduler_plugin.testbed import cluster as testbed
from tests.agent.agent_proc import AgentProcess
from tests.agent.procs import Child, Node, wait_until
from tests.hadoop.conftest import HadoopCluster

# What the agent lends (the NodeManager itself is configured with 2,048 MB / 4 vcores; the agent's
# advertised size replaces that in the RM): a 3,072 MB / 8-core server with a 1,024 MB / 2-core reserve.
CAPACITY_MEMORY_MB = 3072
RESERVE_MEMORY_MB = 1024


class AgentNode:
    def __init__(self, cluster: HadoopCluster, host: str, tmp: Path, *, spike_mb: int = 700,
                 nodemanager_in_tree: bool = True, **agent_settings: str) -> None:
        """``nodemanager_in_tree=False`` leaves the launcher's NodeManager where it is: the agent then
        sees the NM's containers (REST) but none of their processes, so every kill goes through the RM."""
        self.cluster, self.host, self.tmp, self.spike_mb = cluster, host, tmp, spike_mb
        state = json.loads((cluster.dir / testbed.STATE_FILE).read_text())
        self.record = next(p for p in state["processes"] if p["host"] == host and p["role"] == "nodemanager")
        info = cluster.host(host)
        self.nm_url = f"http://{info['nodemanager'].rsplit(':', 1)[0]}:{self._nm_http_port()}"
        self.rm_url = f"http://{cluster.info['resourcemanager']['http']}"
        self.node = Node()
        self.nm_pid: int | None = None
        self.primary: Child | None = None
        self.agent: AgentProcess | None = None
        self.owns_nodemanager = nodemanager_in_tree
        try:
            if nodemanager_in_tree:
                testbed.stop_daemon(cluster.dir, host, "nodemanager")
                self.start_nodemanager()
            self.primary = self.node.primary(spike_mb=spike_mb)
            self.node_id = self.wait_registered()
            settings = {"mode": "yarn", "interval-s": "0.5", "scope-root-pid": str(self.node.pid),
                        "capacity-cores": "8", "reserve-cores": "2",
                        "capacity-memory-mb": str(CAPACITY_MEMORY_MB), "reserve-memory-mb": str(RESERVE_MEMORY_MB),
                        "rm-url": self.rm_url, "nm-url": self.nm_url, "state-dir": str(tmp / "agent-state"),
                        "cooldown-s": "5", "advertise-hold-s": "5", "rm-check-interval-s": "5",
                        "yarn-bin": str(Path(cluster.info["bin"]) / "yarn"), **agent_settings}
            args = [x for k, v in settings.items() for x in (f"--{k}", v)]
            self.agent = AgentProcess(args, str(tmp / "agent.log"))
        except BaseException:
            self.close()
            raise

    def _nm_http_port(self) -> int:
        conf = (self.cluster.dir / "conf" / self.host / "yarn-site.xml").read_text()
        key = "<name>yarn.nodemanager.webapp.address</name><value>"
        return int(conf.split(key, 1)[1].split("</value>", 1)[0].rsplit(":", 1)[1])

    # -- the NodeManager under the supervisor ------------------------------------------------------
    def start_nodemanager(self) -> int:
        sup = self.node.supervisor
        assert sup.stdin is not None and sup.stdout is not None
        out = os.path.join(tempfile.mkdtemp(prefix="nm-", dir=self.tmp), "nodemanager.out")
        env = {**os.environ, **self.record["env"]}
        with self.node._lock:
            sup.stdin.write(json.dumps({"argv": self.record["cmd"], "env": env, "out": out}) + "\n")
            sup.stdin.flush()
            self.nm_pid = int(sup.stdout.readline())
        return self.nm_pid

    def stop_nodemanager(self) -> None:
        if self.nm_pid is not None:
            try:
                os.killpg(self.nm_pid, signal.SIGKILL)
            except OSError:
                pass
            self.nm_pid = None

    def rm_node(self) -> dict[str, Any] | None:
        nodes = (self.cluster.rm_get("/ws/v1/cluster/nodes").get("nodes") or {}).get("node") or []
        ip = self.cluster.ip_of(self.host)
        return next((n for n in nodes if n["nodeHostName"] == ip and n["state"] == "RUNNING"), None)

    def wait_registered(self, timeout_s: float = 120) -> str:
        assert wait_until(lambda: self.rm_node() is not None, timeout_s, step_s=0.5), (
            f"the NodeManager of {self.host} did not register with the RM")
        node = self.rm_node()
        assert node is not None
        return str(node["id"])

    # -- the agent ---------------------------------------------------------------------------------
    def explain(self) -> dict[str, Any]:
        assert self.agent is not None
        return self.agent.explain()

    def metric(self, name: str) -> float:
        assert self.agent is not None
        return self.agent.metric(name)

    def spike(self) -> float:
        assert self.primary is not None
        return Node.spike(self.primary)

    def calm(self) -> None:
        """The primary frees its memory (the process goes; a new one waits for the next spike)."""
        assert self.primary is not None
        os.killpg(self.primary.pid, signal.SIGKILL)
        self.primary = self.node.primary(spike_mb=self.spike_mb)

    def close(self) -> None:
        if self.agent is not None:
            self.agent.stop()
            self.agent = None
        self.stop_nodemanager()
        self.node.cleanup()
        if not self.owns_nodemanager:
            return
        try:
            testbed.start_daemon(self.cluster.dir, self.host, "nodemanager")
        except testbed.ClusterError:
            pass
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and self.rm_node() is None:
            time.sleep(1)


def verbose_hadoop(cluster: HadoopCluster, tmp: Path) -> Path:
    """``bin/hadoop`` of the cluster, but with MapReduce's job client at INFO: the launcher's client
    logs WARN only, and the job's counters (``Killed map tasks=N``) are INFO lines."""
    original = (Path(cluster.info["bin"]) / "hadoop").read_text()
    conf = original.split("-Dlog4j.configuration=file:", 1)[1].split(" ", 1)[0]
    props = tmp / "log4j-job-info.properties"
    props.write_text(Path(conf).read_text() + "log4j.logger.org.apache.hadoop.mapreduce.Job=INFO\n")
    script = tmp / "hadoop-verbose"
    script.write_text(original.replace(f"-Dlog4j.configuration=file:{conf}", f"-Dlog4j.configuration=file:{props}"))
    script.chmod(0o755)
    return script


def set_node_size(cluster: HadoopCluster, host: str, memory_mb: int, vcores: int) -> tuple[int, int]:
    """Set another worker's size in the RM (overCommitTimeout -1: nothing preempted); returns the old one.
    The tests empty the other NodeManagers so that the job's containers land on the agent's host."""
    import json as _json
    import urllib.parse
    import urllib.request

    ip = cluster.ip_of(host)
    nodes = (cluster.rm_get("/ws/v1/cluster/nodes").get("nodes") or {}).get("node") or []
    node = next(n for n in nodes if n["nodeHostName"] == ip)
    old = (int(node["totalResource"]["memory"]), int(node["totalResource"]["vCores"]))
    url = (f"http://{cluster.info['resourcemanager']['http']}/ws/v1/cluster/nodes/"
           f"{urllib.parse.quote(str(node['id']), safe='')}/resource")
    body = {"resource": {"memory": memory_mb, "vCores": vcores}, "overCommitTimeout": -1}
    req = urllib.request.Request(url, data=_json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        assert resp.status == 200
    return old

"""Fake YARN daemons on 127.0.0.1 that answer as the real ones do, and a fake ``yarn`` CLI.

- ``FakeResourceManager``: cluster info, node resource, container signal and node-label calls (see
  its docstring); its scheduler is ``tests.agent.fake_scheduler.FakeScheduler``.
- ``FakeNodeManager``: ``GET /ws/v1/node/info`` and ``GET /ws/v1/node/containers`` (NodeManagerRest
  shapes); linked to a fake RM it runs that RM's containers for its node as real processes.
- ``fake_yarn_cli`` writes an executable that records its argv, one JSON line per call.
"""

from __future__ import annotations

import json
import os
import re
import signal
import stat
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

from tests.agent.fake_scheduler import (
    DEFAULT_CALCULATOR,
    DOMINANT_CALCULATOR,
    EXIT_SIGKILL,
    EXIT_SIGTERM,
    SUCCESS,
    FakeMapReduceJob,
    FakeScheduler,
    version_tuple,
)

SIGNALS = ("OUTPUT_THREAD_DUMP", "GRACEFUL_SHUTDOWN", "FORCEFUL_SHUTDOWN")
YARN_NODE_ID = "worker-1.example:8041"  # the NodeManager's node id in the YARN-mode tests


class _Server:
    def __init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, code: int, body: Any = None) -> None:
                raw = isinstance(body, bytes)  # an HTML page, as Jetty answers a path no servlet has
                data = body if raw else (b"" if body is None else json.dumps(body).encode())
                self.send_response(code)
                self.send_header("Content-Type", "text/html" if raw else "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                owner.record("GET", self.path, None)
                self._answer(*owner.get(self.path))

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body = json.loads(raw) if raw else None
                except ValueError:
                    body = {"__malformed__": raw.decode(errors="replace")}
                owner.record("POST", self.path, body, dict(self.headers))
                self._answer(*owner.post(self.path, body))

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                pass

        self.requests: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self.port = self._httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)
        self._thread.start()

    def record(self, method: str, path: str, body: Any, headers: dict[str, str] | None = None) -> None:
        with self.lock:
            self.requests.append({"method": method, "path": path, "body": body, "headers": headers or {}})

    def get(self, path: str) -> tuple[int, Any]:
        return 404, {"RemoteException": {"message": f"no {path}"}}

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        return 404, {"RemoteException": {"message": f"no {path}"}}

    def posts(self, prefix: str = "") -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests if r["method"] == "POST" and r["path"].startswith(prefix)]

    def close(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


class FakeResourceManager(_Server):
    """The RM's REST calls the agent and the service make, answering as a real 3.3.6 (or 3.2.1) does.

    - ``GET /ws/v1/cluster/info``: ``clusterInfo.hadoopVersion`` / ``resourceManagerVersion``;
    - ``GET /ws/v1/cluster/nodes/{id}``: ``node.totalResource``; ``reregister`` (a NodeManager
      restart) puts the node back at the NM's configured total, as a real 3.3.6 did;
    - ``POST .../nodes/{id}/resource``: the unwrapped ``{"resource": {...}, "overCommitTimeout": ms}``
      applies; a body wrapped in ``{"resourceOption": {...}}`` answers 200 and sets the node to 0 MB /
      0 vcores; no admin check (any ``user.name`` or none). A registered node (``scheduler``) then
      follows ``FakeScheduler``: sticky timeout, no-op on an equal size, newest-first PREEMPTED kills;
    - ``POST .../containers/{id}/signal/{command}``: the container ends with 143 / 137 (a *failed*
      attempt for MapReduce);
    - labels: ``add-node-labels`` / ``replace-node-to-labels`` need ``?user.name=`` of an admin (401
      "dr.who" otherwise); the unwrapped ``{"nodeLabelInfo": [...]}`` (or one object) adds, the
      wrapped ``{"nodeLabelsInfo": {...}}`` answers 200 and adds nothing;
    - ``mode="404"`` (Hadoop 3.2.1): the node-resource and signal calls answer 404 and
      ``clusterInfo`` says 3.2.1; ``fail_next`` makes the next N POSTs answer 503.
    """

    def __init__(self, mode: str = "rest", *, version: str | None = None,
                 calculator: str = DEFAULT_CALCULATOR, labels: dict[str, bool] | None = None,
                 admin_users: frozenset[str] | None = None, labels_wrapped_get: bool = False) -> None:
        self.mode = mode
        self.fail_next = 0
        self.node_resources: dict[str, dict[str, int]] = {}
        self.signals: list[tuple[str, str]] = []
        self.scheduler = FakeScheduler(version or ("3.2.1" if mode == "404" else "3.3.6"), calculator)
        self.labels: dict[str, bool] = dict(labels or {})  # name -> exclusivity
        self.node_labels: dict[str, list[str]] = {}
        self.admin_users = admin_users  # None: any named user is an admin (yarn.admin.acl = *)
        self.labels_wrapped_get = labels_wrapped_get
        # Capacity Scheduler queues: name -> RUNNING | DRAINING | STOPPED, as loaded at start (one
        # default queue) and by ``rmadmin -refreshQueues`` from ``capacity_scheduler_file``.
        self.capacity_scheduler_file: str | None = None
        self.queues: dict[str, str] = {"default": "RUNNING"}
        self.queue_apps: dict[str, int] = {}  # running applications per queue
        self.fail_scheduler_reads = 0  # the next N GET .../scheduler answer 503
        self.gone_nodes: set[str] = set()  # nodes the RM does not know now (NodeManager away)
        self.cli_calls: list[list[str]] = []
        self.cli_times: list[float] = []  # time.monotonic() of each cli call, when the RM carried it out
        super().__init__()

    def get(self, path: str) -> tuple[int, Any]:
        route = urlsplit(path).path
        if route == "/ws/v1/cluster/info":
            version = self.scheduler.version
            return 200, {"clusterInfo": {
                "id": self.scheduler.cluster_ts, "startedOn": self.scheduler.cluster_ts, "state": "STARTED",
                "haState": "ACTIVE", "resourceManagerVersion": version,
                "resourceManagerBuildVersion": f"{version} from fake by harvest",
                "hadoopVersion": version, "hadoopBuildVersion": f"{version} from fake by harvest"}}
        node = re.fullmatch(r"/ws/v1/cluster/nodes/([^/]+)", route)
        if node:
            node_id = unquote(node.group(1))
            sim = self.scheduler.nodes.get(node_id)
            total = ({"memory": sim.memory_mb, "vCores": sim.vcores} if sim is not None
                     else self.node_resources.get(node_id))
            if total is None:
                return 404, {"RemoteException": {"exception": "NotFoundException",
                                                 "message": f"nodeId, {node_id}, is not found"}}
            if version_tuple(self.scheduler.version) < (3, 3):
                # 3.2.1's NodeInfo has no totalResource (issue 36 D4): used + available instead
                used_mb, used_vcores = sim.used() if sim is not None else (0, 0)
                return 200, {"node": {"id": node_id, "state": "RUNNING", "numContainers": 0,
                                      "usedMemoryMB": used_mb, "availMemoryMB": total["memory"] - used_mb,
                                      "usedVirtualCores": used_vcores,
                                      "availableVirtualCores": total["vCores"] - used_vcores}}
            return 200, {"node": {"id": node_id, "state": "RUNNING", "totalResource": dict(total)}}
        if route == "/ws/v1/cluster/scheduler":
            if self.fail_scheduler_reads > 0:
                self.fail_scheduler_reads -= 1
                return 503, {"RemoteException": {"message": "service unavailable"}}
            with self.lock:
                queues = [{"type": "capacitySchedulerLeafQueueInfo", "queueName": q, "state": st,
                           "numApplications": self.queue_apps.get(q, 0)} for q, st in self.queues.items()]
            return 200, {"scheduler": {"schedulerInfo": {
                "type": "capacityScheduler", "capacity": 100.0, "usedCapacity": 0.0, "maxCapacity": 100.0,
                "queueName": "root", "queues": {"queue": queues}}}}
        if route == "/ws/v1/cluster/get-node-labels":
            # real 3.2.1 and 3.3.6 (tests/hadoop/test_fake_contracts.py): unwrapped, one label as an object,
            # {"nodeLabelInfo":[{"name":"x","exclusivity":"false"}]}; {} when empty
            items = [{"name": n, "exclusivity": str(e).lower()} for n, e in sorted(self.labels.items())]
            if not items:
                return 200, {}
            inner = {"nodeLabelInfo": items[0] if len(items) == 1 else items}
            return 200, ({"nodeLabelsInfo": inner} if self.labels_wrapped_get else inner)
        return 404, {"RemoteException": {"message": f"no {path}"}}

    def reregister(self, node_id: str, memory_mb: int, vcores: int) -> None:
        """The NodeManager restarted: the RM holds its configured total again (and no sticky timeout)."""
        if node_id in self.scheduler.nodes:
            self.scheduler.nodes[node_id].registered = (memory_mb, vcores)
            self.scheduler.reregister(node_id)
        self.node_resources[node_id] = {"memory": memory_mb, "vCores": vcores}

    def _admin(self, path: str) -> tuple[int, Any] | None:
        """The real RM's answer without an admin (3.2.1, ``yarn.admin.acl`` = yarn)."""
        split = urlsplit(path)
        users = parse_qs(split.query).get("user.name", [])
        user = users[0] if users else "dr.who"
        if not users or (self.admin_users is not None and user not in self.admin_users):
            return 401, {"RemoteException": {
                "exception": "AuthorizationException",
                "message": f"User {user} not authorized for post to .../{split.path.rsplit('/', 1)[-1]} ",
                "javaClassName": "org.apache.hadoop.security.authorize.AuthorizationException"}}
        return None

    def _labels_post(self, route: str, path: str, body: Any) -> tuple[int, Any]:
        refused = self._admin(path)
        if refused:
            return refused
        if route.endswith("add-node-labels"):
            items = body.get("nodeLabelInfo") if isinstance(body, dict) else None
            if isinstance(items, dict):
                items = [items]
            try:
                new = {str(i["name"]): bool(i.get("exclusivity", True)) for i in items or []}
            except (KeyError, TypeError):
                return 400, {"RemoteException": {"message": f"bad body {body!r}"}}
            # a label that exists with the same exclusivity is a no-op (200 on a real 3.3.6, checked by
            # tests/hadoop/test_fake_contracts.py); another exclusivity is refused
            dup = sorted(n for n in set(new) & set(self.labels) if new[n] != self.labels[n])
            if dup:
                return 400, {"RemoteException": {"message": f"Exclusivity of label={dup[0]} cannot be modified"}}
            self.labels.update(new)  # a wrapped body has no top-level nodeLabelInfo: adds nothing
            return 200, None
        entries = body.get("nodeToLabels") if isinstance(body, dict) else None
        if isinstance(entries, dict):
            entries = [entries]
        try:
            mapping = {str(e["nodeId"]): [str(x) for x in e["nodeLabels"]] for e in entries or []}
        except (KeyError, TypeError):
            return 400, {"RemoteException": {"message": f"bad body {body!r}"}}
        unknown = sorted({x for v in mapping.values() for x in v} - set(self.labels))
        if unknown:
            return 400, {"RemoteException": {"message": f"Label {unknown[0]} does not exist"}}
        self.node_labels.update(mapping)
        return 200, None

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        if self.fail_next > 0:
            self.fail_next -= 1
            return 503, {"RemoteException": {"message": "service unavailable"}}
        route = urlsplit(path).path
        if route == "/fake/yarn-cli":
            code, out, err = self.cli(list(body["argv"]))
            return 200, {"exit": code, "stdout": out, "stderr": err}
        if route in ("/ws/v1/cluster/add-node-labels", "/ws/v1/cluster/replace-node-to-labels"):
            return self._labels_post(route, path, body)
        node = re.fullmatch(r"/ws/v1/cluster/nodes/([^/]+)/resource", route)
        sig = re.fullmatch(r"/ws/v1/cluster/containers/([^/]+)/signal/([A-Z_]+)", route)
        if self.mode == "404" and (node or sig):  # 3.2.1 has no such call: Jetty's HTML error page
            return 404, (b"<html><head><title>Error 404 Not Found</title></head><body><h2>HTTP ERROR 404</h2>"
                         b"<p>Problem accessing " + route.encode() + b". Reason: Not Found</p></body></html>")
        if node:
            node_id = unquote(node.group(1))
            if node_id in self.gone_nodes:  # RMWebServices.getRMNode: NotFoundException, as JSON
                return 404, {"RemoteException": {"exception": "NotFoundException",
                                                 "message": f"java.lang.Exception: nodeId, {node_id}, is not found",
                                                 "javaClassName": "org.apache.hadoop.yarn.webapp.NotFoundException"}}
            if isinstance(body, dict) and set(body) == {"resourceOption"}:
                resource, timeout = {"memory": 0, "vCores": 0}, -1  # what the real RM does with it
            else:
                ok = (isinstance(body, dict) and set(body) == {"resource", "overCommitTimeout"}
                      and isinstance(body["resource"], dict) and set(body["resource"]) == {"memory", "vCores"}
                      and all(isinstance(v, int) for v in body["resource"].values())
                      and isinstance(body["overCommitTimeout"], int))
                if not ok:
                    return 400, {"RemoteException": {"message": f"bad body {body!r}"}}
                resource, timeout = dict(body["resource"]), body["overCommitTimeout"]
            self._set_node_resource(node_id, resource, timeout)
            return 200, {"resourceInfo": {"memory": resource["memory"], "vCores": resource["vCores"]}}
        if sig:
            if sig.group(2) not in SIGNALS:
                return 400, {"RemoteException": {"message": "bad command"}}
            self._signal(sig.group(1), sig.group(2))
            return 200, None
        return 404, None

    def _set_node_resource(self, node_id: str, resource: dict[str, int], timeout_ms: int) -> None:
        self.node_resources[node_id] = resource
        if node_id in self.scheduler.nodes:
            self.scheduler.update_node_resource(node_id, resource["memory"], resource["vCores"], timeout_ms)

    def _signal(self, container_id: str, command: str) -> None:
        self.signals.append((container_id, command))
        exit_status = {"GRACEFUL_SHUTDOWN": EXIT_SIGTERM, "FORCEFUL_SHUTDOWN": EXIT_SIGKILL}.get(command)
        if exit_status is not None:
            self.scheduler.complete(container_id, exit_status)

    def refresh_queues(self) -> tuple[int, str, str]:
        """``yarn rmadmin -refreshQueues`` as a real 3.2.1 / 3.3.6 RM answers it: all or nothing. A queue
        the file drops must be STOPPED in the RM ("not yet in stopped state" otherwise), and every label
        a queue may access must exist; a queue configured STOPPED with running applications is
        DRAINING until they finish (``finish_apps``)."""
        from scheduler_plugin.capacity_scheduler import PREFIX

        def refused(message: str) -> tuple[int, str, str]:
            return 255, "", f"refreshQueues: java.io.IOException: Failed to re-init queues : {message}\n"

        import xml.etree.ElementTree as ET
        try:
            with open(self.capacity_scheduler_file or "") as handle:
                root = ET.fromstring(handle.read())
        except (OSError, ET.ParseError) as exc:
            return refused(f"cannot read the configuration: {exc}")
        props = {(p.findtext("name") or "").strip(): (p.findtext("value") or "").strip() for p in root.iter("property")}
        names = [q.strip() for q in props.get(f"{PREFIX}.root.queues", "").split(",") if q.strip()]
        with self.lock:
            for key, value in props.items():
                if key.endswith(".accessible-node-labels"):
                    for label in (x.strip() for x in value.split(",")):
                        if label not in ("", "*") and label not in self.labels:
                            return refused(f"NodeLabelManager doesn't include label = {label}, please check.")
            for q, state in self.queues.items():
                if q not in names and state != "STOPPED":
                    return refused(f"root.{q} cannot be deleted from the capacity scheduler configuration, as "
                                   f"the queue is not yet in stopped state. Current State : {state}")
            new = {}
            for q in names:
                if props.get(f"{PREFIX}.root.{q}.state", "RUNNING").upper() == "STOPPED":
                    new[q] = "DRAINING" if self.queue_apps.get(q, 0) > 0 else "STOPPED"
                else:
                    new[q] = "RUNNING"
            self.queues = new
        return 0, "", ""

    def finish_apps(self, queue: str) -> None:
        """The queue's applications finished: a DRAINING queue becomes STOPPED."""
        with self.lock:
            self.queue_apps[queue] = 0
            if self.queues.get(queue) == "DRAINING":
                self.queues[queue] = "STOPPED"

    def cli(self, argv: list[str]) -> tuple[int, str, str]:
        """The ``yarn`` command against this RM (``fake_yarn_cli(rm_url=...)``): exit status, stdout,
        stderr. ``rmadmin -updateNodeResource`` and ``container -signal`` work on every version (they
        are how 3.2.1 is driven)."""
        with self.lock:
            self.cli_calls.append(list(argv))
            self.cli_times.append(time.monotonic())
        if argv[:2] == ["rmadmin", "-updateNodeResource"] and len(argv) in (5, 6):
            node_id, memory_mb, vcores = argv[2], int(argv[3]), int(argv[4])
            timeout_ms = int(argv[5]) if len(argv) == 6 else -1
            self._set_node_resource(node_id, {"memory": memory_mb, "vCores": vcores}, timeout_ms)
            return 0, "", ""
        if argv == ["rmadmin", "-refreshQueues"]:
            return self.refresh_queues()
        if argv[:2] == ["container", "-signal"] and len(argv) == 4:
            self._signal(argv[2], argv[3])
            return 0, "", ""
        return 255, "", f"fake yarn: unsupported command {argv!r}\n"


class FakeNodeManager(_Server):
    """The NM's REST view; with ``rm`` it runs the RM's containers for its node (see ``heartbeat``)."""

    def __init__(self, node_id: str = "worker-1.example:8041", *, rm: FakeResourceManager | None = None,
                 launcher: Callable[[str], Any] | None = None, task_s: float = 3600.0) -> None:
        self.node_id = node_id
        self.containers: list[dict[str, Any]] = []
        self.empty_style = "null"  # how an empty node answers: {"containers": null} or {}
        self.rm = rm
        self.launcher = launcher  # container id -> a procs.Child (a real process), or None
        self.task_s = task_s
        self.processes: dict[str, Any] = {}
        self.heartbeats = 0
        super().__init__()

    def add(self, container_id: str, vcores: int, memory_mb: int, state: str = "RUNNING") -> None:
        self.containers.append(self._entry(container_id, vcores, memory_mb, state))

    def _entry(self, container_id: str, vcores: int, memory_mb: int, state: str) -> dict[str, Any]:
        return {
            "nodeId": self.node_id, "totalMemoryNeededMB": memory_mb, "totalVCoresNeeded": vcores,
            "state": state, "diagnostics": "",
            "containerLogsLink": f"http://{self.node_id.split(':')[0]}:8042/node/containerlogs/{container_id}/u1",
            "user": "u1", "id": container_id, "exitCode": -1000, "executionType": "GUARANTEED",
            "containerLogFiles": ["stdout", "stderr", "syslog"],
        }

    def _listed(self) -> list[dict[str, Any]]:
        listed = list(self.containers)
        if self.rm is not None:
            listed += [self._entry(c.container_id, c.vcores, c.memory_mb, "RUNNING")
                       for c in self.rm.scheduler.running(self.node_id)]
        return listed

    def heartbeat(self) -> None:
        """One NM heartbeat: report exits, stop what the RM took back, launch what it granted.

        1. a launched container whose process is gone ended on the node (a local kill): exit 143;
        2. a container past ``task_s`` finished its task: its process is stopped, exit 0;
        3. a container the RM completed (preempted, signalled) has its process group killed;
        4. the RM preempts what is due and hands out new containers, which are launched.
        """
        assert self.rm is not None
        sched = self.rm.scheduler
        self.heartbeats += 1
        for cid, child in list(self.processes.items()):
            c = sched.container(cid)
            if c is None:
                continue
            if c.state == "RUNNING" and child is not None and not child.alive():
                sched.complete(cid, EXIT_SIGTERM)
            elif c.state == "RUNNING" and time.monotonic() - c.allocated_s >= self.task_s:
                _stop(child)
                sched.complete(cid, SUCCESS)
            if c.state != "RUNNING":
                _stop(child)
                del self.processes[cid]
        for c in sched.node_heartbeat(self.node_id):
            self.processes[c.container_id] = self.launcher(c.container_id) if self.launcher else None

    def get(self, path: str) -> tuple[int, Any]:
        if path == "/ws/v1/node/info":
            return 200, {"nodeInfo": {"id": self.node_id, "nodeHostName": self.node_id.split(":")[0],
                                      "nodeHealthy": True}}
        if path == "/ws/v1/node/containers":
            listed = self._listed()
            if not listed:
                return 200, ({"containers": None} if self.empty_style == "null" else {"containers": {}})
            return 200, {"containers": {"container": listed}}
        return 404, None


def _stop(child: Any) -> None:
    if child is None:
        return
    try:
        os.killpg(child.pid, signal.SIGKILL)
    except OSError:
        pass


class HeartbeatLoop:
    """Calls ``FakeNodeManager.heartbeat`` every ``interval_s`` on a thread (YARN's NM heartbeat)."""

    def __init__(self, nm: FakeNodeManager, interval_s: float) -> None:
        self.nm, self.interval_s = nm, interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> HeartbeatLoop:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.nm.heartbeat()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


class FakeYarnCluster:
    """RM + one NM running real container processes under ``node`` + the NM heartbeat, for one test."""

    def __init__(self, node: Any, *, memory_mb: int, vcores: int, version: str = "3.3.6",
                 calculator: str = DOMINANT_CALCULATOR, heartbeat_s: float = 0.1, task_s: float = 3600.0,
                 node_id: str = YARN_NODE_ID) -> None:
        # 3.2 has neither the node-resource nor the signal REST call (404): the yarn command drives it
        mode = "404" if version_tuple(version) < (3, 3) else "rest"
        self.rm = FakeResourceManager(mode, version=version, calculator=calculator)
        self.rm.scheduler.add_node(node_id, memory_mb, vcores)
        self.nm = FakeNodeManager(node_id, rm=self.rm, launcher=lambda cid: node.container(cid, wait=False),
                                  task_s=task_s)
        self.loop = HeartbeatLoop(self.nm, heartbeat_s).start()
        self._apps = 0

    def submit(self, maps: int, **job: Any) -> FakeMapReduceJob:
        self._apps += 1
        return FakeMapReduceJob(self.rm.scheduler, self._apps, maps, **job)

    def close(self) -> None:
        self.loop.stop()
        self.nm.close()
        self.rm.close()


def fake_yarn_cli(directory: str, exit_code: int = 0, rm_url: str | None = None,
                  delay_s: float = 0.0) -> tuple[str, str]:
    """Write ``directory/yarn`` recording argv to ``directory/yarn-calls.jsonl``; returns both paths.

    With ``rm_url`` (a ``FakeResourceManager``) the command is also carried out there, as the real
    ``yarn`` talks to the real RM (``FakeResourceManager.cli``), and exits with the RM's status and
    message; ``delay_s`` stands for the JVM start before it does (1.1-2.9 s per ``yarn rmadmin`` on
    a real 3.2.1)."""
    log = os.path.join(directory, "yarn-calls.jsonl")
    path = os.path.join(directory, "yarn")
    forward = ""
    if rm_url is not None:
        forward = (f"import time, urllib.request\ntime.sleep({delay_s!r})\n"
                   f"req = urllib.request.Request({rm_url + '/fake/yarn-cli'!r}, "
                   f"data=json.dumps({{'argv': sys.argv[1:]}}).encode(), method='POST')\n"
                   f"out = json.loads(urllib.request.urlopen(req, timeout=30).read())\n"
                   f"sys.stdout.write(out.get('stdout', '')); sys.stderr.write(out.get('stderr', ''))\n"
                   f"sys.exit(out['exit'])\n")
    with open(path, "w") as handle:
        handle.write(f"#!{sys.executable}\nimport json, sys\n"
                     f"open({log!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
                     f"{forward}sys.exit({exit_code})\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path, log


def read_calls(log: str) -> list[list[str]]:
    if not os.path.exists(log):
        return []
    with open(log) as handle:
        return [json.loads(line) for line in handle if line.strip()]

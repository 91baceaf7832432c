"""YARN adapter: ResourceManager node-resource and signal calls, NodeManager container list.

REST shapes (Hadoop's ResourceManagerRest / NodeManagerRest documents):

- ``POST {rm}/ws/v1/cluster/nodes/{nodeId}/resource`` with
  ``{"resource": {"memory": MB, "vCores": N}, "overCommitTimeout": ms}``;
- ``POST {rm}/ws/v1/cluster/containers/{id}/signal/{GRACEFUL_SHUTDOWN|FORCEFUL_SHUTDOWN}``;
- ``GET {nm}/ws/v1/node/containers`` -> ``{"containers": {"container": [{"id", "state", ...}]}}``;
- ``GET {nm}/ws/v1/node/info`` -> ``{"nodeInfo": {"id": "host:port", ...}}``;
- ``GET {rm}/ws/v1/cluster/info`` -> ``{"clusterInfo": {"hadoopVersion": "3.3.6", ...}}``;
- ``GET {rm}/ws/v1/cluster/nodes/{nodeId}`` -> ``{"node": {"totalResource": {"memory", "vCores"}, ...}}``
  (3.3+; 3.2.1 has no ``totalResource``: ``usedMemoryMB`` + ``availMemoryMB`` and ``usedVirtualCores``
  + ``availableVirtualCores`` give the size).

The node-resource body is sent **unwrapped**: on a real 3.3.6 the same fields wrapped in
``{"resourceOption": {...}}`` answer 200 and set the node to 0 MB / 0 vcores. The RM applies this
call for any ``user.name`` (or none): it enforces no admin check, so operators must firewall the RM
web port or run Kerberos + SPNEGO.

Hadoop 3.2 answers 404 to both POSTs; only then (never on other errors) the client falls back, for
the rest of its life, to the ``yarn`` command, a ~2 s JVM start per call:
``yarn rmadmin -updateNodeResource <node> <memMB> <vcores> <timeout>`` and
``yarn container -signal <id> FORCEFUL_SHUTDOWN``. Writes are retried with exponential backoff on
connection errors and 5xx answers.
"""

from __future__ import annotations

import json
import logging
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from agent.attribute import Allocation

logger = logging.getLogger(__name__)


class YarnError(Exception):
    """A YARN call failed after its retries (not a user error: the loop counts it and goes on)."""


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    body: bytes


class YarnClient:
    def __init__(
        self,
        rm_url: str,
        nm_url: str,
        *,
        yarn_bin: str = "yarn",
        timeout_s: float = 2.0,
        retries: int = 3,
        backoff_s: float = 0.2,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rm_url = rm_url.rstrip("/")
        self.nm_url = nm_url.rstrip("/")
        self.yarn_bin = yarn_bin
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self._sleep = sleep
        self.resource_rest = True  # False after the RM answered 404 (Hadoop 3.2): use the CLI
        self.signal_rest = True

    # -- HTTP ------------------------------------------------------------------------------------
    def _http(self, method: str, url: str, body: Any = None, timeout_s: float | None = None) -> HttpAnswer:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(url, data=data, method=method,
                                         headers={"Accept": "application/json",
                                                  "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=timeout_s or self.timeout_s) as answer:
                return HttpAnswer(answer.status, answer.read())
        except urllib.error.HTTPError as exc:
            return HttpAnswer(exc.code, exc.read() if exc.fp else b"")

    def _write(self, url: str, body: Any) -> HttpAnswer:
        """POST with retries: connection errors and 5xx are retried, other answers returned."""
        delay = self.backoff_s
        last: str = ""
        for attempt in range(1, self.retries + 1):
            try:
                answer = self._http("POST", url, body)
                if answer.status < 500:
                    return answer
                last = f"HTTP {answer.status}"
            except (urllib.error.URLError, OSError) as exc:
                last = str(getattr(exc, "reason", exc))
            if attempt < self.retries:
                self._sleep(delay)
                delay *= 2
        raise YarnError(f"POST {url} failed after {self.retries} attempts: {last}")

    def _run(self, argv: list[str]) -> None:
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise YarnError(f"{' '.join(argv)} failed: {exc}") from None
        if done.returncode != 0:
            raise YarnError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()[-300:]}")

    # -- ResourceManager -----------------------------------------------------------------------
    def _post_rest(self, url: str, body: object, what: str) -> bool:
        """POST ``url``; True when the RM took it, False when it has no such REST call (404, Hadoop 3.2)."""
        answer = self._write(url, body)
        if answer.status == 404 and b"RemoteException" in answer.body:
            # the call exists but its object does not (e.g. "nodeId, h:p, is not found" while the
            # NodeManager is away): an error to retry, not a reason to switch to the CLI for good
            raise YarnError(f"POST {url} answered HTTP 404: {answer.body[:200]!r}")
        if answer.status == 404:
            logger.info("ResourceManager has no %s REST call (404); using the yarn command", what)
            return False
        if answer.status >= 400:
            raise YarnError(f"POST {url} answered HTTP {answer.status}: {answer.body[:200]!r}")
        return True

    def update_node_resource(self, node_id: str, memory_mb: int, vcores: int, overcommit_timeout_ms: int) -> str:
        """Set what the RM may hand out on the node; returns "rest" or "cli" (the path used)."""
        if self.resource_rest:
            url = f"{self.rm_url}/ws/v1/cluster/nodes/{urllib.parse.quote(node_id, safe='')}/resource"
            body = {"resource": {"memory": int(memory_mb), "vCores": int(vcores)},
                    "overCommitTimeout": int(overcommit_timeout_ms)}
            if self._post_rest(url, body, "node-resource"):
                return "rest"
            self.resource_rest = False
        self._run([self.yarn_bin, "rmadmin", "-updateNodeResource", node_id, str(int(memory_mb)),
                   str(int(vcores)), str(int(overcommit_timeout_ms))])
        return "cli"

    def signal_container(self, container_id: str, command: str = "FORCEFUL_SHUTDOWN") -> str:
        if self.signal_rest:
            url = f"{self.rm_url}/ws/v1/cluster/containers/{container_id}/signal/{command}"
            if self._post_rest(url, None, "container-signal"):
                return "rest"
            self.signal_rest = False
        self._run([self.yarn_bin, "container", "-signal", container_id, command])
        return "cli"

    def hadoop_version(self, timeout_s: float | None = None) -> str:
        """``GET {rm}/ws/v1/cluster/info`` -> ``clusterInfo.hadoopVersion`` (else ``resourceManagerVersion``)."""
        data = self._get_json(f"{self.rm_url}/ws/v1/cluster/info", timeout_s)
        info = data.get("clusterInfo") if isinstance(data, dict) else None
        version = (info or {}).get("hadoopVersion") or (info or {}).get("resourceManagerVersion")
        if not isinstance(version, str) or not version:
            raise YarnError("ResourceManager /ws/v1/cluster/info has no clusterInfo.hadoopVersion")
        return version

    def node_total(self, node_id: str, timeout_s: float | None = None) -> tuple[int, int]:
        """``GET {rm}/ws/v1/cluster/nodes/{id}`` -> the node's size as (memory MB, vcores).

        ``node.totalResource`` on 3.3+; 3.2's record has none, so there the size is used + available
        (``usedMemoryMB + availMemoryMB``, ``usedVirtualCores + availableVirtualCores``; available goes
        negative on an over-committed node, so the sum stays the size)."""
        data = self._get_json(f"{self.rm_url}/ws/v1/cluster/nodes/{urllib.parse.quote(node_id, safe='')}",
                              timeout_s)
        node = data.get("node") if isinstance(data, dict) else None
        if not isinstance(node, dict):
            raise YarnError("ResourceManager node answer has no node record")
        try:
            total = node.get("totalResource")
            if isinstance(total, dict):
                return int(total["memory"]), int(total["vCores"])
            return (int(node["usedMemoryMB"]) + int(node["availMemoryMB"]),
                    int(node["usedVirtualCores"]) + int(node["availableVirtualCores"]))
        except (KeyError, TypeError, ValueError):
            raise YarnError("ResourceManager node answer has neither node.totalResource nor "
                            "usedMemoryMB/availMemoryMB and usedVirtualCores/availableVirtualCores") from None

    # -- NodeManager ---------------------------------------------------------------------------
    def _get_json(self, url: str, timeout_s: float | None) -> Any:
        try:
            answer = self._http("GET", url, timeout_s=timeout_s)
        except (urllib.error.URLError, OSError) as exc:
            raise YarnError(f"GET {url} failed: {getattr(exc, 'reason', exc)}") from None
        if answer.status != 200:
            raise YarnError(f"GET {url} answered HTTP {answer.status}")
        try:
            return json.loads(answer.body or b"null")
        except ValueError:
            raise YarnError(f"GET {url} answered malformed JSON") from None

    def node_id(self, timeout_s: float | None = None) -> str:
        data = self._get_json(f"{self.nm_url}/ws/v1/node/info", timeout_s)
        try:
            return str(data["nodeInfo"]["id"])
        except (KeyError, TypeError):
            raise YarnError("NodeManager /ws/v1/node/info has no nodeInfo.id") from None

    def containers(self, timeout_s: float | None = None) -> dict[str, Allocation]:
        """The NM's containers by id (an empty node answers ``{"containers": null}`` or ``{}``)."""
        data = self._get_json(f"{self.nm_url}/ws/v1/node/containers", timeout_s)
        block = (data or {}).get("containers") if isinstance(data, dict) else None
        items = (block or {}).get("container") if isinstance(block, dict) else None
        if isinstance(items, dict):  # one container: some Jersey versions drop the list
            items = [items]
        out: dict[str, Allocation] = {}
        for item in items or []:
            try:
                out[str(item["id"])] = Allocation(float(item.get("totalVCoresNeeded", 0)),
                                                  float(item.get("totalMemoryNeededMB", 0)),
                                                  str(item.get("state", "RUNNING")))
            except (KeyError, TypeError, ValueError):
                logger.debug("skipping malformed NM container entry %r", item)
        return out


def dynamic_resources_xml(entries: dict[str, tuple[int, int]]) -> str:
    """``dynamic-resources.xml`` for ``yarn rmadmin -refreshNodesResources``.

    ``entries``: node id -> (memory MB, vcores). Property names: ``yarn.resource.dynamic.nodes``
    (comma-separated node ids), ``yarn.resource.dynamic.<node>.memory`` and ``.vcores``.
    """
    from xml.sax.saxutils import escape

    props = [("yarn.resource.dynamic.nodes", ",".join(sorted(entries)))]
    for node in sorted(entries):
        memory_mb, vcores = entries[node]
        props.append((f"yarn.resource.dynamic.{node}.memory", str(memory_mb)))
        props.append((f"yarn.resource.dynamic.{node}.vcores", str(vcores)))
    body = "".join(f"  <property>\n    <name>{escape(k)}</name>\n    <value>{escape(v)}</value>\n  </property>\n"
                   for k, v in props)
    return f'<?xml version="1.0"?>\n<configuration>\n{body}</configuration>\n'


def parse_dynamic_resources(text: str) -> dict[str, tuple[int, int]]:
    """Inverse of ``dynamic_resources_xml`` (so other nodes' entries in a shared file are kept)."""
    import xml.etree.ElementTree as ET

    props: dict[str, str] = {}
    for prop in ET.fromstring(text).iter("property"):
        props[(prop.findtext("name") or "").strip()] = (prop.findtext("value") or "").strip()
    out: dict[str, tuple[int, int]] = {}
    for node in filter(None, (n.strip() for n in props.get("yarn.resource.dynamic.nodes", "").split(","))):
        try:
            out[node] = (int(props[f"yarn.resource.dynamic.{node}.memory"]),
                         int(props[f"yarn.resource.dynamic.{node}.vcores"]))
        except (KeyError, ValueError):
            continue
    return out

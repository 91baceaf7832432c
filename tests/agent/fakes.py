"""Fake YARN daemons on 127.0.0.1 that follow Hadoop's documented REST shapes, and a fake ``yarn`` CLI.

- ResourceManager: ``POST /ws/v1/cluster/nodes/{nodeId}/resource`` with exactly
  ``{"resource": {"memory": int, "vCores": int}, "overCommitTimeout": int}`` (answers
  ``{"resourceInfo": {...}}``), ``POST /ws/v1/cluster/containers/{id}/signal/{command}``. In
  ``mode="404"`` both answer 404 as Hadoop 3.2.1 does; ``fail_next`` makes the next N answers 503.
- NodeManager: ``GET /ws/v1/node/info`` and ``GET /ws/v1/node/containers`` (NodeManagerRest shapes).
- ``fake_yarn_cli`` writes an executable that records its argv, one JSON line per call.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

SIGNALS = ("OUTPUT_THREAD_DUMP", "GRACEFUL_SHUTDOWN", "FORCEFUL_SHUTDOWN")



YARN_NODE_ID = "worker-1.example:8041"  # the NodeManager's node id in the YARN-mode tests

class _Server:
    def __init__(self) -> None:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def _answer(self, code: int, body: Any = None) -> None:
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
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
    def __init__(self, mode: str = "rest") -> None:
        self.mode = mode
        self.fail_next = 0
        self.node_resources: dict[str, dict[str, int]] = {}
        self.signals: list[tuple[str, str]] = []
        super().__init__()

    def post(self, path: str, body: Any) -> tuple[int, Any]:
        if self.fail_next > 0:
            self.fail_next -= 1
            return 503, {"RemoteException": {"message": "service unavailable"}}
        node = re.fullmatch(r"/ws/v1/cluster/nodes/([^/]+)/resource", path)
        sig = re.fullmatch(r"/ws/v1/cluster/containers/([^/]+)/signal/([A-Z_]+)", path)
        if self.mode == "404" and (node or sig):
            return 404, {"RemoteException": {"exception": "NotFoundException", "message": "not found"}}
        if node:
            ok = (isinstance(body, dict) and set(body) == {"resource", "overCommitTimeout"}
                  and isinstance(body["resource"], dict) and set(body["resource"]) == {"memory", "vCores"}
                  and all(isinstance(v, int) for v in body["resource"].values())
                  and isinstance(body["overCommitTimeout"], int))
            if not ok:
                return 400, {"RemoteException": {"message": f"bad body {body!r}"}}
            from urllib.parse import unquote

            self.node_resources[unquote(node.group(1))] = dict(body["resource"])
            return 200, {"resourceInfo": {"memory": body["resource"]["memory"],
                                          "vCores": body["resource"]["vCores"]}}
        if sig:
            if sig.group(2) not in SIGNALS:
                return 400, {"RemoteException": {"message": "bad command"}}
            self.signals.append((sig.group(1), sig.group(2)))
            return 200, None
        return 404, None


class FakeNodeManager(_Server):
    def __init__(self, node_id: str = "worker-1.example:8041") -> None:
        self.node_id = node_id
        self.containers: list[dict[str, Any]] = []
        self.empty_style = "null"  # how an empty node answers: {"containers": null} or {}
        super().__init__()

    def add(self, container_id: str, vcores: int, memory_mb: int, state: str = "RUNNING") -> None:
        self.containers.append({
            "nodeId": self.node_id, "totalMemoryNeededMB": memory_mb, "totalVCoresNeeded": vcores,
            "state": state, "diagnostics": "",
            "containerLogsLink": f"http://{self.node_id.split(':')[0]}:8042/node/containerlogs/{container_id}/u1",
            "user": "u1", "id": container_id, "exitCode": -1000, "executionType": "GUARANTEED",
            "containerLogFiles": ["stdout", "stderr", "syslog"],
        })

    def get(self, path: str) -> tuple[int, Any]:
        if path == "/ws/v1/node/info":
            return 200, {"nodeInfo": {"id": self.node_id, "nodeHostName": self.node_id.split(":")[0],
                                      "nodeHealthy": True}}
        if path == "/ws/v1/node/containers":
            if not self.containers:
                return 200, ({"containers": None} if self.empty_style == "null" else {"containers": {}})
            return 200, {"containers": {"container": list(self.containers)}}
        return 404, None


def fake_yarn_cli(directory: str, exit_code: int = 0) -> tuple[str, str]:
    """Write ``directory/yarn`` recording argv to ``directory/yarn-calls.jsonl``; returns both paths."""
    log = os.path.join(directory, "yarn-calls.jsonl")
    path = os.path.join(directory, "yarn")
    with open(path, "w") as handle:
        handle.write(f"#!{sys.executable}\nimport json, sys\n"
                     f"open({log!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
                     f"sys.exit({exit_code})\n")
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path, log


def read_calls(log: str) -> list[list[str]]:
    if not os.path.exists(log):
        return []
    with open(log) as handle:
        return [json.loads(line) for line in handle if line.strip()]

"""A local stand-in for the YARN ResourceManager's node-label REST endpoints (Hadoop 3.x JSON shapes).

It answers like the RM: labels must be added before nodes use them, adding an existing label fails,
and a body in the wrong shape is refused, so a client that gets the shapes wrong fails the tests.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class FakeResourceManager:
    def __init__(self, labels: dict[str, bool] | None = None, wrapped: bool = True) -> None:
        """``wrapped=False`` answers ``get-node-labels`` without the root element (older releases)."""
        self.wrapped = wrapped
        self.labels: dict[str, bool] = dict(labels or {})  # name -> exclusivity
        self.node_labels: dict[str, list[str]] = {}
        self.requests: list[tuple[str, str, Any]] = []
        rm = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def _send(self, status: int, doc: Any) -> None:
                raw = json.dumps(doc).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            def _fail(self, message: str) -> None:
                self._send(400, {"RemoteException": {"exception": "BadRequestException", "message": message}})

            def do_GET(self) -> None:  # noqa: N802
                rm.requests.append(("GET", self.path, None))
                if self.path == "/ws/v1/cluster/get-node-labels":
                    items = [{"name": n, "exclusivity": e} for n, e in sorted(rm.labels.items())]
                    inner = {"nodeLabelInfo": items[0] if len(items) == 1 else items}
                    self._send(200, {"nodeLabelsInfo": inner} if rm.wrapped else inner)
                else:
                    self._send(404, {})

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length", "0"))
                try:
                    body = json.loads(self.rfile.read(length))
                except ValueError:
                    return self._fail("malformed JSON")
                rm.requests.append(("POST", self.path, body))
                if self.path == "/ws/v1/cluster/add-node-labels":
                    try:
                        items = body["nodeLabelsInfo"]["nodeLabelInfo"]
                        new = {str(i["name"]): bool(i["exclusivity"]) for i in items}
                    except (KeyError, TypeError):
                        return self._fail("expected {nodeLabelsInfo: {nodeLabelInfo: [{name, exclusivity}]}}")
                    dup = sorted(set(new) & set(rm.labels))
                    if dup:
                        return self._fail(f"Node label={dup[0]} already exists")
                    rm.labels.update(new)
                    return self._send(200, {})
                if self.path == "/ws/v1/cluster/replace-node-to-labels":
                    try:
                        entries = body["nodeToLabelsEntryList"]["nodeToLabels"]
                        mapping = {str(e["nodeId"]): [str(x) for x in e["nodeLabels"]] for e in entries}
                    except (KeyError, TypeError):
                        return self._fail("expected {nodeToLabelsEntryList: {nodeToLabels: [{nodeId, nodeLabels}]}}")
                    unknown = sorted({x for v in mapping.values() for x in v} - set(rm.labels))
                    if unknown:
                        return self._fail(f"Label {unknown[0]} does not exist")
                    rm.node_labels.update(mapping)
                    return self._send(200, {})
                self._send(404, {})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self) -> FakeResourceManager:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

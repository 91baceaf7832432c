"""Counters and gauges, rendered as Prometheus text on ``/metrics``; ``/explain`` as JSON.

The HTTP server is the standard library's (one thread per request, bound to 127.0.0.1 by default)
so the agent stays small.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from placement_service import __version__

logger = logging.getLogger(__name__)

PREFIX = "harvest_agent_"

HELP: dict[str, tuple[str, str]] = {
    "samples_total": ("counter", "Samples taken"),
    "stale_samples_total": ("counter", "Ticks decided on a stale or missing sample (harvested nothing)"),
    "kills_total": ("counter", "Containers killed to make the reserve whole"),
    "kill_signals_total": ("counter", "Signals sent to container processes, by signal"),
    "errors_total": ("counter", "Errors by kind (the loop carries on)"),
    "reports_total": ("counter", "Reports created"),
    "reports_acked_total": ("counter", "Reports acknowledged by the placement service"),
    "report_buffer_dropped_total": ("counter", "Buffered reports dropped (buffer full, oldest first)"),
    "reports_rejected_total": ("counter", "Reports the service refused as malformed (dropped)"),
    "report_buffer_depth": ("gauge", "Reports waiting on disk for the placement service"),
    "yarn_writes_total": ("counter", "Node-resource writes sent to YARN, by path (rest, cli)"),
    "yarn_writes_skipped_total": ("counter", "Node-resource writes skipped because nothing changed"),
    "capacity_cores": ("gauge", "Cores the node lends"),
    "capacity_memory_mb": ("gauge", "MB the node lends"),
    "reserve_cores": ("gauge", "Cores kept for the primary to spike into"),
    "reserve_memory_mb": ("gauge", "MB kept for the primary"),
    "primary_cores": ("gauge", "Primary tenant cores (rounded up)"),
    "primary_memory_mb": ("gauge", "Primary tenant MB (rounded up)"),
    "secondary_cores": ("gauge", "Secondary footprint, cores"),
    "secondary_memory_mb": ("gauge", "Secondary footprint, MB"),
    "containers": ("gauge", "Secondary containers on the node"),
    "harvestable_cores": ("gauge", "Advertised harvestable cores"),
    "harvestable_memory_mb": ("gauge", "Advertised harvestable MB"),
    "reserve_deficit_cores": ("gauge", "How far primary + secondary eat into the reserve, cores"),
    "reserve_deficit_memory_mb": ("gauge", "How far primary + secondary eat into the reserve, MB"),
    "busy": ("gauge", "DataNode busy flag"),
    "stale": ("gauge", "1 when the last decision was taken on a stale sample"),
    "tick_seconds": ("gauge", "Duration of the last tick"),
    "agent_cpu_cores": ("gauge", "The agent's own CPU use"),
    "agent_memory_mb": ("gauge", "The agent's own RSS"),
    "build_info": ("gauge", "Always 1; the label says which release of the agent runs here"),
}


def _label_text(labels: tuple[tuple[str, str], ...]) -> str:
    if not labels:
        return ""
    inner = ",".join(f'{k}="{v}"' for k, v in labels)
    return "{" + inner + "}"


class Metrics:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._values: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        self.set("build_info", 1.0, version=__version__)

    def inc(self, name: str, value: float = 1.0, **labels: str) -> None:
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._values[key] = self._values.get(key, 0.0) + value

    def set(self, name: str, value: float, **labels: str) -> None:
        with self._lock:
            self._values[(name, tuple(sorted(labels.items())))] = float(value)

    def get(self, name: str, **labels: str) -> float:
        with self._lock:
            return self._values.get((name, tuple(sorted(labels.items()))), 0.0)

    def total(self, name: str) -> float:
        with self._lock:
            return sum(v for (n, _), v in self._values.items() if n == name)

    def render(self) -> str:
        with self._lock:
            items = sorted(self._values.items())
        lines: list[str] = []
        seen: set[str] = set()
        for (name, labels), value in items:
            if name not in seen:
                kind, text = HELP.get(name, ("gauge", name))
                lines.append(f"# HELP {PREFIX}{name} {text}")
                lines.append(f"# TYPE {PREFIX}{name} {kind}")
                seen.add(name)
            lines.append(f"{PREFIX}{name}{_label_text(labels)} {value:g}")
        return "\n".join(lines) + "\n"


class MetricsServer:
    """Serves ``/metrics`` (Prometheus text), ``/explain`` (JSON) and ``/healthz``."""

    def __init__(self, host: str, port: int, metrics: Metrics, explain: Callable[[], dict[str, Any]]) -> None:
        metrics_ref, explain_ref = metrics, explain

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    body, ctype, code = metrics_ref.render().encode(), "text/plain; version=0.0.4", 200
                elif path == "/explain":
                    body, ctype, code = json.dumps(explain_ref(), indent=2).encode(), "application/json", 200
                elif path == "/healthz":
                    body, ctype, code = b"ok\n", "text/plain", 200
                else:
                    body, ctype, code = b"not found\n", "text/plain", 404
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
                logger.debug("metrics: " + format, *args)

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="agent-metrics", daemon=True)

    def start(self) -> MetricsServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

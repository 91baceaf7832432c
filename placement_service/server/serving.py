"""One way to serve HTTP, for every service of the project (``harvest serve``, ``harvest ras serve``,
anything later): a new service calls these and gets every protection by construction.

- ``read_token_file``: the bearer token, refused at start when the file is empty, blank, not
  printable ASCII or more than one word (an empty token would accept ``Authorization: Bearer ``);
- ``lock_data_dir`` (``lockfile.py``): one process per data directory, the second exits 2 naming the
  holder's pid;
- ``HttpLimits``: request head, body, per-list item counts, worker threads, timeouts, connection cap;
- ``create_json_app``: a Flask app with the body limit, per-route metrics, ``WWW-Authenticate`` on
  401, and every error (the application's, Werkzeug's, an unexpected exception) in the one JSON shape
  ``{"error": {"message": str, "field": str | null}}`` (``http_common.py``);
- ``start_http``: the hardened cheroot server of ``wsgi.py`` (never Werkzeug's development server),
  its connection gauges in the service's metrics;
- ``serve_until_signal``: the banner line, SIGTERM / SIGINT stop the server, then the caller's
  clean-up runs.

Query parameters and list fields are parsed with ``http_common.query_float`` / ``query_int`` /
``query_name`` / ``check_list``: finite, in range, named in the error.
"""

from __future__ import annotations

import dataclasses
import logging
import signal
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from flask import Flask

from placement_service.server.config import ConfigError
from placement_service.server.http_common import install_common
from placement_service.server.lockfile import DataDirLockedError, lock_data_dir, unlock_data_dir
from placement_service.server.metrics import Metrics
from placement_service.server.wsgi import HarvestWSGIServer

logger = logging.getLogger(__name__)

__all__ = ["DataDirLockedError", "HttpLimits", "create_json_app", "lock_data_dir", "read_token_file",
           "serve_until_signal", "start_http", "unlock_data_dir"]


@dataclasses.dataclass(frozen=True)
class HttpLimits:
    """What one HTTP service accepts (the placement service takes them from its configuration)."""

    threads: int = 16  # worker threads (a request is served by one)
    timeout_s: float = 10.0  # socket timeout in a request, and for a connection that sent no request yet
    idle_timeout_s: float = 60.0  # idle keep-alive connections are closed after this
    max_connections: int = 1024  # also bounded by the file-handle limit (wsgi.handle_budget)
    max_header_bytes: int = 64 * 1024  # request line + headers; more: 431 / 414
    max_body_bytes: int = 8 * 1024 * 1024  # more: 413 (also for chunked bodies)
    max_list_items: int = 10_000  # items of any one list in a request body (names, ids, servers)


def read_token_file(path: Path | None) -> str | None:
    """The bearer token in ``path`` (``None``: no token, mutating calls are open; say so in the log).

    Raises ``ConfigError`` naming the file when it cannot be read, is empty or blank, is not
    printable ASCII (an HTTP header / gRPC metadata value) or holds more than one word.
    """
    if path is None:
        return None
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"token file {path}: {exc.strerror or exc}") from None
    try:
        token = raw.decode("ascii").strip()
    except UnicodeDecodeError as exc:
        raise ConfigError(f"token file {path}: the token must be printable ASCII "
                          f"(an HTTP header / gRPC metadata value); byte {exc.start} is not") from None
    if not token:
        raise ConfigError(f"token file {path} is empty")
    if not token.isprintable() or any(ch.isspace() for ch in token):
        raise ConfigError(f"token file {path}: the token must be one line of printable ASCII without spaces")
    return token


def create_json_app(name: str, metrics: Metrics, limits: HttpLimits) -> Flask:
    """A Flask app with the body limit, per-route metrics and the JSON error shape installed."""
    app = Flask(name)
    app.config["MAX_CONTENT_LENGTH"] = limits.max_body_bytes
    app.config["HARVEST_LIMITS"] = limits
    install_common(app, metrics)
    return app


def start_http(app: Any, host: str, port: int, limits: HttpLimits, metrics: Metrics | None = None, *,
               ssl_context: Any = None, on_health: Callable[[str | None, str], None] | None = None,
               ) -> HarvestWSGIServer:
    """The hardened server (``wsgi.py``), bound (``port`` 0: any free port, see ``.port``)."""
    http = HarvestWSGIServer(
        app, host, port, threads=limits.threads, timeout_s=limits.timeout_s, idle_timeout_s=limits.idle_timeout_s,
        max_connections=limits.max_connections, max_header_bytes=limits.max_header_bytes,
        max_body_bytes=limits.max_body_bytes, ssl_context=ssl_context, on_health=on_health,
    )
    http.prepare()
    if metrics is not None:
        metrics.add_collector(lambda: {"harvest_http_connections": float(http.live_connections),
                                       "harvest_http_connections_refused": float(http.refused_total),
                                       "harvest_http_connections_evicted": float(http.evicted_total)})
    return http


def serve_until_signal(http: HarvestWSGIServer, banner: str, on_signal: Callable[[], None] | None = None) -> None:
    """Print ``banner`` (one line, the address first: scripts and tests read it), serve until SIGTERM
    or SIGINT, then return (the caller closes its state)."""

    def _on_signal(signum: int, frame: object) -> None:
        del frame
        logger.info("signal %d: shutting down", signum)
        if on_signal is not None:
            on_signal()
        threading.Thread(target=http.stop, daemon=True).start()

    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    print(banner, flush=True)
    http.serve()

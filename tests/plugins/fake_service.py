"""A stand-in placement service on 127.0.0.1 for the router and shim tests (real HTTP, real sockets)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Responder = Callable[[str, dict[str, Any]], tuple[int, Any, float]]  # path, body -> status, answer, delay_s


@dataclass
class FakeService:
    url: str
    requests: list[tuple[str, dict[str, Any], dict[str, str]]] = field(default_factory=list)


@contextmanager
def fake_service(responder: Responder) -> Iterator[FakeService]:
    state = FakeService("")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server API)
            length = int(self.headers.get("Content-Length", "0"))
            raw = self.rfile.read(length)
            try:
                body = json.loads(raw or b"null")
            except ValueError:
                body = {"_raw": raw.decode(errors="replace")}
            state.requests.append((self.path, body, dict(self.headers)))
            status, answer, delay_s = responder(self.path, body)
            if delay_s:
                time.sleep(delay_s)
            data = answer.encode() if isinstance(answer, str) else json.dumps(answer).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except OSError:
                pass  # the client gave up (timeout test)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def closed_port_url() -> str:
    """A URL on 127.0.0.1 where nothing listens (bound, then released)."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return f"http://127.0.0.1:{port}"

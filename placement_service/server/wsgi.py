"""The HTTP server: cheroot's threaded WSGI server, hardened for a hostile or unlucky network.

What cheroot gives as it is: a fixed pool of worker threads, a per-socket timeout, and keep-alive
connections parked in a selector between requests (an idle keep-alive costs a descriptor, not a
thread). What it does not, and this module adds (each verified by ``tests/server/test_wsgi.py``):

1. **A worker only for a complete request head.** Stock cheroot hands every accepted connection to
   a worker at once, so a few hundred sockets that never send a byte hold every worker for the
   socket timeout each, and so do a few that send half a request line and stop (half-open). Here
   a connection waits in the selector until the kernel holds a complete request head (``MSG_PEEK``
   for the blank line; for TLS, a complete record: the whole ClientHello, or the first record of a
   request), re-checked every 50 ms; a connection still incomplete after ``timeout_s`` is closed.
2. **TLS handshakes run in the workers.** Stock cheroot's TLS adapter handshakes inside ``accept``
   on the single acceptor thread (with the socket timeout), so one client that never sends its
   ClientHello stops every other connection for that long. Here the socket is wrapped with
   ``do_handshake_on_connect=False`` and the worker handshakes once the first bytes arrive.
3. **A connection cap, refusals that answer, idle sockets give way.** At ``max_connections``
   (bounded by the process's file-handle limit minus a reserve for the log, Parquet and SQLite) a
   new connection first evicts the oldest connection that has not completed a request head for
   ``EVICT_AFTER_S`` (an idle or half-open socket: a real client sends its head at once); when there
   is none, it gets an immediate ``503`` in the service's JSON error shape and is closed. So a few
   hundred idle sockets cannot keep other clients out, even at a low file-handle limit. When ``accept`` itself fails
   for want of descriptors (EMFILE / ENFILE), the acceptor frees a spare descriptor it keeps for
   this, accepts, answers 503 and closes, so clients see a refusal rather than a hang; the ``http``
   health problem says so until an accept succeeds again.
4. **Lingering close.** An answer sent before the request body was read (413, 401) reaches the
   client: the worker stops writing and drains what the client still sends (at most 2 s) before
   closing, instead of resetting the connection under the client's feet.
5. **Deadlines by state.** A connection that has not completed a request is closed after
   ``timeout_s``; an idle keep-alive one after ``idle_timeout_s``; a read or write stalled inside a
   request after ``timeout_s`` (the socket timeout).
6. **Errors in the JSON shape.** Errors cheroot answers itself (headers over
   ``max_header_bytes`` -> 431, request line too long -> 414, malformed request -> 400, timeout ->
   408) use ``{"error": {"message", "field"}}`` like the application's; a chunked body (no
   Content-Length, so Flask cannot check it up front) is cut at ``max_body_bytes`` with a 413.
"""

from __future__ import annotations

import errno
import io
import json
import logging
import os
import resource
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any

from cheroot import connections, server, wsgi
from cheroot.errors import socket_errors_to_ignore
from cheroot.makefile import MakeFile

logger = logging.getLogger(__name__)

_PEEK = socket.MSG_PEEK | socket.MSG_DONTWAIT
_OUT_OF_HANDLES = {errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM}
_RETRY_ACCEPT = {errno.EAGAIN, errno.EWOULDBLOCK, errno.EINTR, errno.ECONNABORTED, errno.EPROTO}
HANDLE_RESERVE = 64  # descriptors kept for the log, Parquet, SQLite, gRPC and the re-clustering pipes
EVICT_AFTER_S = 1.0  # at the connection cap, a connection without a complete request head this old gives way


def json_error(status: str, message: str, field: str | None = None, retry_after_s: int | None = None) -> bytes:
    """A complete ``HTTP/1.1`` response in the service's error shape; closes the connection."""
    body = json.dumps({"error": {"message": message, "field": field}}).encode()
    head = [f"HTTP/1.1 {status}", "Content-Type: application/json", f"Content-Length: {len(body)}",
            "Connection: close"]
    if retry_after_s is not None:
        head.append(f"Retry-After: {retry_after_s}")
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body


class _JsonErrorRequest(server.HTTPRequest):
    """cheroot's own error answers, in the service's JSON error shape (point 6)."""

    def simple_response(self, status: Any, msg: Any = "") -> None:
        status = str(status)
        code = status[:3]
        message = msg.decode("latin-1") if isinstance(msg, bytes) else str(msg or status[4:])
        field: str | None = None
        if code == "413" and "header" in message.lower():
            status, field = "431 Request Header Fields Too Large", "headers"
            message = (f"headers: the request headers exceed {self.server.max_request_header_size} bytes")
        elif code == "414":
            field = "path"
        elif code == "413":
            field = "body"
        self.close_connection = True
        try:
            self.conn.wfile.write(json_error(status, message, field))
        except OSError as ex:
            if ex.args and ex.args[0] not in socket_errors_to_ignore:
                raise


class _Connection(server.HTTPConnection):
    RequestHandlerClass = _JsonErrorRequest
    tls_pending = False
    served = False  # completed at least one request (then it is an idle keep-alive)
    _counted = False

    def communicate(self) -> bool:
        if self.tls_pending:
            self.tls_pending = False
            try:
                self.socket.do_handshake()  # in a worker thread, under the socket timeout (point 2)
            except (ssl.SSLError, OSError) as exc:
                logger.debug("TLS handshake with %s failed: %s", self.remote_addr, exc)
                return False
        keep = bool(super().communicate())
        if keep:
            self.served = True
        else:
            self._drain_before_close()
        return keep

    def _drain_before_close(self, max_s: float = 2.0, max_bytes: int = 64 << 20) -> None:
        """Lingering close: an answer sent before the body was read (413, 401) would be lost to the
        TCP reset that closing with unread input causes, so stop writing and read what the client
        still sends (bounded in time and bytes) before the socket is closed."""
        sock = self.socket
        if isinstance(sock, ssl.SSLSocket):
            return
        try:
            sock.shutdown(socket.SHUT_WR)
            sock.settimeout(0.2)
            deadline = time.monotonic() + max_s
            total = 0
            while time.monotonic() < deadline and total < max_bytes:
                data = sock.recv(1 << 16)
                if not data:
                    break
                total += len(data)
        except OSError:
            pass

    def close(self) -> None:
        if self._counted:
            self._counted = False
            srv = self.server
            if isinstance(srv, HarvestWSGIServer):
                srv.connection_closed()
        super().close()


class _Manager(connections.ConnectionManager):
    """Accepts into the selector (point 1), wraps TLS lazily (point 2), caps connections (point 3)."""

    server: HarvestWSGIServer

    def _from_server_socket(self, server_socket: socket.socket) -> None:
        srv = self.server
        try:
            sock, addr = server_socket.accept()
        except TimeoutError:
            return None
        except OSError as exc:
            if exc.errno in _OUT_OF_HANDLES:
                srv.out_of_handles(server_socket, exc)
            elif exc.errno not in _RETRY_ACCEPT:
                logger.warning("accept failed: %s", exc)
            return None
        srv.handles_ok()
        if srv.live_connections >= srv.max_connections and not self._evict_silent():
            srv.refuse(sock, f"too many connections (at most {srv.max_connections}); retry later")
            return None
        os.set_inheritable(sock.fileno(), False)
        sock.settimeout(srv.timeout)
        tls_pending = False
        ssl_env: dict[str, str] = {}
        if srv.ssl_context is not None:
            sock = srv.ssl_context.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
            ssl_env = {"wsgi.url_scheme": "https", "HTTPS": "on"}
            tls_pending = True
        conn = srv.ConnectionClass(srv, sock, MakeFile)
        if isinstance(addr, tuple) and len(addr) >= 2:
            conn.remote_addr, conn.remote_port = addr[0], addr[1]
        conn.ssl_env = ssl_env
        conn.tls_pending = tls_pending
        conn._counted = True
        srv.connection_opened()
        self.put(conn)  # to a worker once it has bytes to read
        return None

    def _evict_silent(self) -> bool:
        """Selector thread, at the cap: close the oldest connection that has had no complete request
        head for :data:`EVICT_AFTER_S` (never a served keep-alive one, never one in a worker)."""
        srv = self.server
        cutoff = time.time() - EVICT_AFTER_S
        silent = [(conn.last_used, fd, conn) for fd, conn in self._selector.connections  # type: ignore[attr-defined]
                  if conn is not srv and not conn.served and conn.last_used < cutoff]
        waiting = [(conn.last_used, -1, conn) for conn in srv._waiting if conn.last_used < cutoff]
        if not silent and not waiting:
            return False
        _, fd, victim = min(silent + waiting, key=lambda t: t[0])
        if fd >= 0:
            self._selector.unregister(fd)  # type: ignore[attr-defined]
        else:
            srv._waiting.remove(victim)
        victim.close()
        srv.evicted_total += 1
        return True

    def _expire(self, threshold: float) -> None:
        del threshold
        self.server.recheck_waiting()
        now = time.time()
        fresh_before = now - self.server.timeout
        idle_before = now - self.server.idle_timeout_s
        expired = [
            (fd, conn) for fd, conn in self._selector.connections  # type: ignore[attr-defined]
            if conn is not self.server and conn.last_used < (idle_before if conn.served else fresh_before)
        ]
        for fd, conn in expired:
            self._selector.unregister(fd)  # type: ignore[attr-defined]
            conn.close()


class HarvestWSGIServer(wsgi.Server):
    """``cheroot.wsgi.Server`` with the additions of the module docstring."""

    ConnectionClass = _Connection

    def __init__(self, app: Callable[..., Any], host: str, port: int, *, threads: int = 16,
                 timeout_s: float = 10.0, idle_timeout_s: float = 60.0, max_connections: int = 1024,
                 max_header_bytes: int = 64 * 1024, max_body_bytes: int = 8 << 20,
                 ssl_context: ssl.SSLContext | None = None,
                 on_health: Callable[[str | None, str], None] | None = None) -> None:
        super().__init__((host, port), limit_chunked_body(app, max_body_bytes), numthreads=threads, max=threads, request_queue_size=1024,
                         timeout=max(1, int(timeout_s)), shutdown_timeout=5)
        self.timeout = timeout_s  # type: ignore[assignment]
        self.idle_timeout_s = idle_timeout_s
        self.max_connections = min(max_connections, handle_budget())
        self.max_request_header_size = max_header_bytes
        self.keep_alive_conn_limit = self.max_connections
        self.ssl_context = ssl_context
        self.live_connections = 0
        self.refused_total = 0
        self.evicted_total = 0  # silent connections closed to let a new one in at the cap
        self._count_lock = threading.Lock()
        self._on_health = on_health
        self._handles_short = False
        self._spare_fd: int | None = None
        self._last_log_s = 0.0
        self._waiting: list[Any] = []  # connections with an incomplete head (selector thread only)
        self.expiration_interval = 0.05

    # -- lifecycle ----------------------------------------------------------------------------------
    def prepare(self) -> None:
        super().prepare()
        stock: Any = getattr(self, "_connections")  # noqa: B009 - set by the base prepare()
        setattr(self, "_connections", _Manager(self))  # noqa: B010
        stock._selector.close()
        self._spare_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)

    @property
    def port(self) -> int:
        return int(self.bind_addr[1])

    def error_log(self, msg: str = "", level: int = 20, traceback: bool = False) -> None:
        logger.log(level, "http: %s", msg, exc_info=traceback)

    # -- complete heads only (point 1) --------------------------------------------------------------
    def process_conn(self, conn: Any) -> None:
        """Selector thread (or a worker with buffered input): to a worker once the head is complete."""
        if self._head_ready(conn):
            super().process_conn(conn)
        else:
            self._waiting.append(conn)

    def recheck_waiting(self) -> None:
        """Selector thread, every ``expiration_interval``: dispatch completed heads, close the stale."""
        if not self._waiting:
            return
        waiting, self._waiting = self._waiting, []
        too_old = time.time() - self.timeout
        for conn in waiting:
            if self._head_ready(conn):
                super().process_conn(conn)
            elif conn.last_used < too_old:
                conn.close()
            else:
                self._waiting.append(conn)

    def _head_ready(self, conn: Any) -> bool:
        if conn.rfile.has_data():
            return True
        try:  # the raw socket's recv, also under an SSLSocket (which refuses flags)
            data = socket.socket.recv(conn.socket, self.max_request_header_size + 1024, _PEEK)
        except BlockingIOError:
            return False
        except OSError:
            return True  # let the worker see the error and close
        if not data:
            return True  # EOF: the worker closes it
        if isinstance(conn.socket, ssl.SSLSocket):
            if len(data) < 5:
                return False
            return len(data) >= 5 + int.from_bytes(data[3:5], "big") or data[0] not in (0x14, 0x15, 0x16, 0x17)
        return b"\r\n\r\n" in data or b"\n\n" in data or len(data) > self.max_request_header_size

    # -- connection accounting (point 3) ------------------------------------------------------------
    def connection_opened(self) -> None:
        with self._count_lock:
            self.live_connections += 1

    def connection_closed(self) -> None:
        with self._count_lock:
            self.live_connections -= 1

    def refuse(self, sock: socket.socket, message: str) -> None:
        """Answer 503 without blocking the acceptor, then close (TLS listeners just close)."""
        self.refused_total += 1
        try:
            if self.ssl_context is None:
                sock.setblocking(False)
                sock.send(json_error("503 Service Unavailable", message, None, retry_after_s=1))
        except OSError:
            pass
        finally:
            sock.close()
        now = time.monotonic()
        if now - self._last_log_s > 10.0:
            self._last_log_s = now
            logger.warning("http: refusing connections: %s (%d refused so far)", message, self.refused_total)

    def out_of_handles(self, server_socket: socket.socket, exc: OSError) -> None:
        """``accept`` failed for want of descriptors: free the spare one, accept, refuse, re-arm."""
        cause = errno.errorcode.get(exc.errno or 0, str(exc.errno))
        reason = f"out of file handles ({cause}): {exc.strerror}"
        if not self._handles_short:
            self._handles_short = True
            if self._on_health is not None:
                self._on_health(reason, cause)
        if self._spare_fd is not None:
            os.close(self._spare_fd)
            self._spare_fd = None
            try:
                sock, _ = server_socket.accept()
            except OSError:
                sock = None
            if sock is not None:
                self.refuse(sock, f"{reason}; retry later")
            try:
                self._spare_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                self._spare_fd = None
        if self._spare_fd is None:
            time.sleep(0.05)  # nothing to accept with: do not spin on the readable listener

    def handles_ok(self) -> None:
        if self._spare_fd is None:
            try:
                self._spare_fd = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC)
            except OSError:
                return
        if self._handles_short:
            self._handles_short = False
            if self._on_health is not None:
                self._on_health(None, "")


def limit_chunked_body(app: Callable[..., Any], max_bytes: int) -> Callable[..., Any]:
    """WSGI middleware for requests without a Content-Length (chunked): Flask's
    ``MAX_CONTENT_LENGTH`` cannot check them up front and would silently cut the body at the limit,
    so read the body here (at most ``max_bytes + 1``) and answer 413 in the JSON shape past it."""

    def wrapped(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if not environ.get("CONTENT_LENGTH") and environ.get("wsgi.input_terminated"):
            body = environ["wsgi.input"].read(max_bytes + 1)
            if len(body) > max_bytes:
                payload = json.dumps({"error": {
                    "message": f"body: the chunked request body exceeds {max_bytes} bytes", "field": "body",
                }}).encode()
                start_response("413 Request Entity Too Large", [
                    ("Content-Type", "application/json"), ("Content-Length", str(len(payload))),
                ])
                return [payload]
            environ["wsgi.input"] = io.BytesIO(body)
            environ["CONTENT_LENGTH"] = str(len(body))
        return app(environ, start_response)

    return wrapped


def handle_budget() -> int:
    """Connections the process can hold: its file-handle limit minus :data:`HANDLE_RESERVE`."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return 1 << 20
    return max(8, int(soft) - HANDLE_RESERVE)


def make_ssl_context(cert_file: str, key_file: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert_file, key_file)
    return ctx

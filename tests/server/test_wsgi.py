"""The HTTP server under hostile or unlucky clients (``server/wsgi.py``), on real processes.

Silent sockets (plain and TLS) must not delay other clients; cheroot's own errors use the JSON
error shape; at the file-handle limit the service refuses with 503 and recovers by itself.
"""

from __future__ import annotations

import http.client
import json
import resource
import shutil
import socket
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.server.conftest import TOKEN, ServerProc, report, start_server


def _host_port(url: str) -> tuple[str, int]:
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    return host, int(port)


def _timed_get(url: str, path: str = "/healthz", ctx: ssl.SSLContext | None = None) -> tuple[float, int]:
    host, port = _host_port(url)
    start = time.monotonic()
    conn: http.client.HTTPConnection
    if ctx is not None:
        conn = http.client.HTTPSConnection(host, port, timeout=30, context=ctx)
    else:
        conn = http.client.HTTPConnection(host, port, timeout=30)
    try:
        conn.request("GET", path)
        status = conn.getresponse().status
    finally:
        conn.close()
    return time.monotonic() - start, status


def _idle_sockets(url: str, n: int) -> list[socket.socket]:
    host, port = _host_port(url)
    out = []
    for _ in range(n):
        s = socket.create_connection((host, port), timeout=10)
        out.append(s)
    return out


@pytest.fixture(scope="module")
def tls_files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    d = tmp_path_factory.mktemp("tls")
    cert, key = d / "cert.pem", d / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    return cert, key


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory: pytest.TempPathFactory, tls_files: tuple[Path, Path]) -> Iterator[ServerProc]:
    cert, key = tls_files
    srv = start_server(tmp_path_factory.mktemp("tls-srv") / "data", "--tls-cert-file", str(cert),
                       "--tls-key-file", str(key))
    try:
        yield srv
    finally:
        srv.stop()


def test_silent_tls_socket_does_not_block_other_https_clients(tls_server: ServerProc,
                                                               tls_files: tuple[Path, Path]) -> None:
    ctx = ssl.create_default_context(cafile=str(tls_files[0]))
    silent = _idle_sockets(tls_server.http, 1)  # connects, never sends a ClientHello
    try:
        time.sleep(0.3)
        elapsed, status = _timed_get(tls_server.http, ctx=ctx)
        assert status == 200
        assert elapsed < 2.0, f"HTTPS request took {elapsed:.1f} s behind a silent TLS socket"
    finally:
        for s in silent:
            s.close()


def test_hundreds_of_idle_and_half_open_sockets_do_not_delay_others(
        server: ServerProc, tls_server: ServerProc, tls_files: tuple[Path, Path]) -> None:
    ctx = ssl.create_default_context(cafile=str(tls_files[0]))
    for srv, client_ctx in ((server, None), (tls_server, ctx)):
        idle = _idle_sockets(srv.http, 300)  # more than the 16 worker threads, many times over
        # Half-open: a partial start (half a request line; the first bytes of a TLS record), then silence.
        partial = b"\x16\x03\x01\x02\x00\x01" if client_ctx is not None else b"POST /v1/rep"
        for s in idle[:40]:
            s.send(partial)
        try:
            time.sleep(0.3)
            worst = 0.0
            for _ in range(5):
                elapsed, status = _timed_get(srv.http, ctx=client_ctx)
                assert status == 200
                worst = max(worst, elapsed)
            assert worst < 2.0, f"{srv.http}: a request took {worst:.1f} s behind 300 idle sockets"
        finally:
            for s in idle:
                s.close()


def test_stock_cheroot_handshakes_on_the_accept_thread(tls_files: tuple[Path, Path]) -> None:
    """Why ``server/wsgi.py`` exists: with cheroot's own TLS adapter, one silent socket stops every
    other HTTPS client for the socket timeout (the handshake runs where connections are accepted).
    If this starts failing, cheroot fixed it and the override can go."""
    from cheroot import wsgi
    from cheroot.ssl.builtin import BuiltinSSLAdapter

    def app(environ: Any, start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Length", "2")])
        return [b"ok"]

    stock = wsgi.Server(("127.0.0.1", 0), app, numthreads=4, timeout=2)
    stock.ssl_adapter = BuiltinSSLAdapter(str(tls_files[0]), str(tls_files[1]))
    stock.prepare()
    thread = threading.Thread(target=stock.serve, daemon=True)
    thread.start()
    url = f"https://127.0.0.1:{stock.bind_addr[1]}"
    try:
        silent = _idle_sockets(url, 1)
        time.sleep(0.2)
        elapsed, status = _timed_get(url, "/", ctx=ssl.create_default_context(cafile=str(tls_files[0])))
        silent[0].close()
        assert status == 200
        assert elapsed >= 1.5, f"stock cheroot answered in {elapsed:.2f} s: it no longer handshakes on accept"
    finally:
        stock.stop()


def _raw_request(url: str, data: bytes) -> tuple[int, dict[str, Any]]:
    host, port = _host_port(url)
    with socket.create_connection((host, port), timeout=10) as s:
        try:
            s.sendall(data)
        except OSError:
            pass
        buf = b""
        while True:
            try:
                chunk = s.recv(65536)
            except OSError:
                break
            if not chunk:
                break
            buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    assert b"application/json" in head, head
    return status, json.loads(body)


def test_huge_header_and_chunked_body_over_the_limit_answer_json(server: ServerProc) -> None:
    huge = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n"
    status, doc = _raw_request(server.http, huge)
    assert status == 431 and doc["error"]["field"] == "headers"
    # 9 MiB in 1 MiB chunks without Content-Length (max_body_bytes is 8 MiB).
    chunk = b"x" * (1 << 20)
    body = b"".join(b"%x\r\n" % len(chunk) + chunk + b"\r\n" for _ in range(9)) + b"0\r\n\r\n"
    req = (b"POST /v1/reports HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + TOKEN.encode()
           + b"\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" + body)
    status, doc = _raw_request(server.http, req)
    assert status == 413 and doc["error"]["field"] == "body"


def _limit_nofile(n: int) -> Any:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))
    return apply


def _served_sockets(url: str, n: int) -> list[socket.socket]:
    """Up to ``n`` keep-alive connections that each completed one request (refused ones are closed)."""
    out = []
    for s in _idle_sockets(url, n):
        try:
            s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            head = s.recv(65536)
        except OSError:
            head = b""
        if head.startswith(b"HTTP/1.1 200"):
            out.append(s)
        else:
            s.close()
    return out


def test_silent_sockets_give_way_to_new_clients_at_the_connection_cap(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "data", preexec_fn=_limit_nofile(128))  # cap: 128 - 64 = 64 connections
    silent: list[socket.socket] = []
    try:
        silent = _idle_sockets(srv.http, 100)
        for s in silent[:20]:
            s.send(b"GET /heal")  # half-open: part of a request line, then nothing
        time.sleep(1.5)  # older than wsgi.EVICT_AFTER_S
        for _ in range(5):
            status, doc = _raw_request(srv.http, b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            assert status == 200, doc
        assert srv.metric("harvest_http_connections_evicted") >= 1
    finally:
        for s in silent:
            s.close()
        srv.stop()


def _post_on(conn: http.client.HTTPConnection, path: str, body: Any) -> tuple[int, Any]:
    conn.request("POST", path, body=json.dumps(body).encode(),
                 headers={"Authorization": f"Bearer {TOKEN}", "Content-Type": "application/json"})
    resp = conn.getresponse()
    return resp.status, json.loads(resp.read())


def test_file_handle_limit_refuses_with_503_and_recovers(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "data", "--compact-interval-s", "1", preexec_fn=_limit_nofile(192))
    held: list[socket.socket] = []
    try:
        host, port = _host_port(srv.http)
        keep = http.client.HTTPConnection(host, port, timeout=10)  # opened before the flood
        now = time.time()
        assert _post_on(keep, "/v1/reports", {"reports": [report("fd-a", "fd-t", now, seq=1)]})[0] == 202

        # 1. HTTP flood of keep-alive clients (each served once, so none gives way): past the
        # connection cap new connections get a JSON 503 at once.
        held = _served_sockets(srv.http, 200)
        status, doc = _raw_request(srv.http, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 503 and "connections" in doc["error"]["message"]
        for s in held:
            s.close()
        held = []
        deadline = time.monotonic() + 10
        while srv.call("GET", "/healthz")[0] != 200:
            assert time.monotonic() < deadline, "HTTP did not recover after the flood ended"
            time.sleep(0.2)

        # 2. Exhaust the process's descriptors through the gRPC port (not capped by the HTTP server).
        gh, gp = srv.grpc.rsplit(":", 1)
        for _ in range(400):
            try:
                held.append(socket.create_connection((gh, int(gp)), timeout=5))
            except OSError:
                break
        time.sleep(2.5)  # a compaction tick (1 s) must now fail to open the next log segment
        # Ingest on the open connection keeps working (the current segment stays open) ...
        status, _ = _post_on(keep, "/v1/reports", {"reports": [report("fd-a", "fd-t", now + 1, seq=2)]})
        assert status == 202
        # ... storing the log cannot: flush answers 503 naming the cause, health says why.
        status, doc = _post_on(keep, "/v1/flush", {})
        assert status == 503 and "EMFILE" in doc["error"]["message"], doc
        # A new connection at the limit is refused with 503, not left hanging.
        status, doc = _raw_request(srv.http, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        assert status == 503, doc
        keep.request("GET", "/healthz")
        resp = keep.getresponse()
        health = json.loads(resp.read())
        assert resp.status == 503 and health["status"] == "unhealthy"
        assert "EMFILE" in json.dumps(health["problems"])

        # 3. Free the descriptors: everything recovers without a restart.
        for s in held:
            s.close()
        held = []
        deadline = time.monotonic() + 20
        while True:
            status, doc = srv.call("GET", "/healthz")
            if status == 200 and doc["status"] == "ok":
                break
            assert time.monotonic() < deadline, f"not recovered: {doc}"
            time.sleep(0.3)
        assert srv.call("POST", "/v1/flush")[0] == 200
        assert srv.call("POST", "/v1/reports", {"reports": [report("fd-a", "fd-t", now + 2, seq=3)]})[0] == 202
        status, doc = srv.call("GET", "/v1/tenants/fd-t/samples?since=0")
        assert status == 200 and sum(s["reports"] for s in doc["samples"]) == 3
        keep.close()
    finally:
        for s in held:
            s.close()
        srv.stop()

"""Fault suite figures for docs/reliability.md: each fault injected into real ``harvest serve``
processes, then what survived (reports acknowledged vs stored, orphans, refusals, latencies).

    .venv/bin/python -m benchmarks.bench_service_faults            # every fault, ~2 minutes
    .venv/bin/python -m benchmarks.bench_service_faults --only kill9_ingest --rounds 5

Disk full needs root (a 4 MiB tmpfs); without it that row says "skipped".
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import random
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from benchmarks.bench_service_common import TOKEN, Server, load_average, now_utc, start_server

Row = dict[str, Any]


def call(url: str, method: str, path: str, body: Any = None, timeout_s: float = 30.0,
         ctx: ssl.SSLContext | None = None) -> tuple[int, Any]:
    u = urlparse(url)
    conn: http.client.HTTPConnection
    if ctx is not None:
        conn = http.client.HTTPSConnection(u.hostname, u.port, timeout=timeout_s, context=ctx)
    else:
        conn = http.client.HTTPConnection(u.hostname, u.port, timeout=timeout_s)
    try:
        data = None if body is None else json.dumps(body).encode()
        conn.request(method, path, body=data, headers={"Authorization": f"Bearer {TOKEN}",
                                                       "Content-Type": "application/json"})
        resp = conn.getresponse()
        text = resp.read()
        try:
            return resp.status, json.loads(text)
        except ValueError:
            return resp.status, text.decode(errors="replace")
    finally:
        conn.close()


def rep(node: str, tenant: str, ts: float, seq: int, cpu: float = 2.0) -> dict[str, Any]:
    return {"node": node, "tenant": tenant, "timestamp": ts, "primary_cpu_cores": cpu, "primary_memory_mb": 1024.0,
            "capacity_cores": 8.0, "capacity_memory_mb": 16384.0, "busy": False, "free_storage_gb": 500.0,
            "seq": seq}


def count(srv: Server, tenant: str) -> int:
    status, doc = call(srv.http, "GET", f"/v1/tenants/{tenant}/samples?since=0")
    if status == 404:
        return 0
    return sum(s["reports"] for s in doc["samples"])


def kill9(srv: Server) -> None:
    srv.proc.send_signal(signal.SIGKILL)
    srv.proc.wait()


# -- faults ------------------------------------------------------------------------------------
def kill9_ingest(tmp: Path, rounds: int, rng: random.Random) -> Row:
    """Four clients post 50-report batches (one tenant per batch); kill -9 after 1-3 s; restart;
    every acknowledged batch must be stored exactly once, others all or nothing; replays dedup."""
    data = tmp / "data"
    acked: dict[str, list[dict[str, Any]]] = {}
    sent: dict[str, list[dict[str, Any]]] = {}
    for r in range(rounds):
        srv = start_server(data, "--compact-interval-s", "1")
        stop = threading.Event()

        def client(w: int, r: int = r, srv: Server = srv, stop: threading.Event = stop) -> None:
            i = 0
            while not stop.is_set():
                tenant = f"k{r}-{w}-{i}"
                batch = [rep(f"{tenant}-n{k}", tenant, time.time() - k, seq=1) for k in range(50)]
                sent[tenant] = batch
                try:
                    status, _ = call(srv.http, "POST", "/v1/reports", {"reports": batch}, timeout_s=10)
                except (OSError, http.client.HTTPException):
                    return
                if status == 202:
                    acked[tenant] = batch
                i += 1

        threads = [threading.Thread(target=client, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        time.sleep(1.0 + 2.0 * rng.random())
        kill9(srv)
        stop.set()
        for t in threads:
            t.join()
    srv = start_server(data)
    try:
        stored = lost = doubled = partial = 0
        for tenant, batch in sent.items():
            n = count(srv, tenant)
            stored += n
            if tenant in acked:
                lost += max(0, len(batch) - n)
                doubled += max(0, n - len(batch))
            elif n not in (0, len(batch)):
                partial += 1
        replay_stored = 0
        for batch in list(acked.values())[:200]:
            replay_stored += call(srv.http, "POST", "/v1/reports", {"reports": batch})[1]["stored"]
    finally:
        srv.stop()
    n_acked = sum(len(b) for b in acked.values())
    return {"fault": f"kill -9 during ingest ({rounds} kills, 4 clients)", "acknowledged": n_acked,
            "stored": stored, "lost": lost, "doubled": doubled,
            "detail": f"{partial} unacknowledged batches stored partly; {replay_stored} of "
                      f"{sum(len(b) for b in list(acked.values())[:200])} replayed reports stored again",
            "survived": lost == 0 and doubled == 0 and partial == 0 and replay_stored == 0}


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as fh:
                    if int(fh.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except OSError:
                pass
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def kill9_recluster(tmp: Path, rounds: int, rng: random.Random) -> Row:
    orphans = 0
    acked = stored = 0
    for r in range(rounds):
        data = tmp / f"rc{r}"
        srv = start_server(data, "--recluster-priority", "normal", "--recluster-interval-s", "0")
        start = time.time() - 3 * 86400
        reps = [rep(f"o{t}-n", f"orph-{t}", start + 300 * k, seq=k + 1, cpu=1.0 + (t * k) % 5)
                for t in range(12) for k in range(0, 864, 2)]
        status, doc = call(srv.http, "POST", "/v1/reports", {"reports": reps})
        acked += doc["stored"] if status == 202 else 0
        call(srv.http, "POST", "/v1/recluster")
        child = 0
        deadline = time.monotonic() + 60
        while not child and time.monotonic() < deadline:
            for c in _children(srv.proc.pid):
                try:
                    if "numpy" in Path(f"/proc/{c}/maps").read_text():
                        child = c
                except OSError:
                    pass
            time.sleep(0.05)
        time.sleep(0.5 * rng.random())
        kill9(srv)
        time.sleep(3.0)
        if child and _alive(child):
            orphans += 1
            os.kill(child, signal.SIGKILL)
        srv = start_server(data)
        stored += sum(count(srv, f"orph-{t}") for t in range(12))
        srv.stop()
    return {"fault": f"kill -9 during re-clustering ({rounds} kills)", "acknowledged": acked, "stored": stored,
            "lost": acked - stored if stored <= acked else 0, "doubled": max(0, stored - acked),
            "detail": f"{orphans} orphaned re-clustering children after 3 s", "survived": orphans == 0
            and stored == acked}


def disk_full(tmp: Path, rounds: int, rng: random.Random) -> Row:
    del rounds, rng
    mnt = tmp / "fs"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        return {"fault": "disk full (4 MiB tmpfs)", "detail": "skipped: cannot mount a tmpfs", "survived": None}
    try:
        srv = start_server(mnt / "data", "--compact-interval-s", "1")
        now = time.time()
        acked = refused = 0
        status, doc = call(srv.http, "POST", "/v1/reports", {"reports": [rep(f"d{i}", "full", now, 1) for i in range(1000)]})
        acked += doc["stored"]
        call(srv.http, "POST", "/v1/flush")
        filler = mnt / "filler"
        with open(filler, "wb") as fh:
            try:
                while True:
                    fh.write(b"\0" * 65536)
                    fh.flush()
            except OSError:
                pass
        t0 = time.monotonic()
        refusal_s = []
        for i in range(5):
            t = time.monotonic()
            status, doc = call(srv.http, "POST", "/v1/reports", {"reports": [rep(f"d{k}", "full", now, 2 + i)
                                                                             for k in range(100)]})
            refusal_s.append(time.monotonic() - t)
            refused += 100 if status == 503 else 0
            acked += doc["stored"] if status == 202 else 0
        health = call(srv.http, "GET", "/healthz")
        filler.unlink()
        while call(srv.http, "GET", "/healthz")[0] != 200:
            time.sleep(0.1)
        recovered_s = time.monotonic() - t0
        status, doc = call(srv.http, "POST", "/v1/reports", {"reports": [rep(f"d{k}", "full", now, 10) for k in range(1000)]})
        acked += doc["stored"] if status == 202 else 0
        srv.stop()
        srv = start_server(mnt / "data")
        stored = count(srv, "full")
        srv.stop()
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
    return {"fault": "disk full (4 MiB tmpfs), then space freed", "acknowledged": acked, "stored": stored,
            "lost": max(0, acked - stored), "doubled": max(0, stored - acked),
            "detail": f"{refused} reports refused with 503 in {max(refusal_s) * 1000:.0f} ms at most; /healthz "
                      f"{health[0]} ({health[1]['problems'].get('report_log', {}).get('cause', '?')}); "
                      f"healthy again {recovered_s:.1f} s after the fault began, no restart",
            "survived": stored == acked and health[0] == 503}


def damaged_state(tmp: Path, rounds: int, rng: random.Random) -> Row:
    """Truncated Parquet day + lost SQLite WAL + corrupt middle log frame, on one data dir."""
    del rounds, rng
    data = tmp / "data"
    srv = start_server(data, "--compact-interval-s", "3600")
    day = 86400.0
    base = (int(time.time() // day) - 2) * day + 3600
    old = [rep(f"dm{i}", "dmg", base + 60 * i, 1) for i in range(20)]
    new = [rep(f"dm{i}", "dmg", base + day + 60 * i, 2) for i in range(30)]
    acked = 0
    for batch in (old, new):
        acked += call(srv.http, "POST", "/v1/reports", {"reports": batch})[1]["stored"]
        call(srv.http, "POST", "/v1/flush")
    frames = [[rep(f"fr{i}", f"frm-{k}", time.time() - 5, k + 1) for i in range(5)] for k in range(3)]
    for batch in frames:
        acked += call(srv.http, "POST", "/v1/reports", {"reports": batch})[1]["stored"]
    kill9(srv)
    first_day = sorted((data / "history").glob("day=*"))[0]
    victim = next(first_day.glob("seg-*.parquet"))
    victim.write_bytes(victim.read_bytes()[: victim.stat().st_size // 2])
    for name in ("state.sqlite-wal", "state.sqlite-shm"):
        (data / name).unlink(missing_ok=True)
    seg = max((p for p in (data / "log").glob("seg-*.log") if p.stat().st_size), default=None)
    assert seg is not None, sorted((data / "log").iterdir())
    raw = bytearray(seg.read_bytes())
    first_len = int.from_bytes(raw[0:4], "little")
    raw[8 + first_len + 8 + 20] ^= 0xFF
    seg.write_bytes(bytes(raw))
    srv = start_server(data)
    try:
        health = call(srv.http, "GET", "/healthz")[1]
        served = count(srv, "dmg") + sum(count(srv, f"frm-{k}") for k in range(3))
        replay = sum(call(srv.http, "POST", "/v1/reports", {"reports": b})[1]["stored"] for b in (old, new))
        after = count(srv, "dmg")
    finally:
        srv.stop()
    expected_lost = len(old) + len(frames[1])  # the truncated day and the corrupt frame
    return {"fault": "truncated Parquet day + deleted state.sqlite-wal + corrupt middle log frame",
            "acknowledged": acked, "stored": served, "lost": acked - served, "doubled": 0,
            "detail": f"loss = exactly the damaged file ({len(old)}) and frame ({len(frames[1])}); status "
                      f"{health['status']}, {len(health['quarantined_files'])} file quarantined; replaying "
                      f"{len(old) + len(new)} reports stored {replay} (count {after})",
            "survived": acked - served == expected_lost and replay == 0 and health["status"] == "degraded"}


def two_servers(tmp: Path, rounds: int, rng: random.Random) -> Row:
    del rounds, rng
    data = tmp / "data"
    first = start_server(data)
    try:
        batch = [rep(f"tw{i}", "two", time.time(), 1) for i in range(200)]
        acked = call(first.http, "POST", "/v1/reports", {"reports": batch})[1]["stored"]
        done = subprocess.run([sys.executable, "-m", "placement_service.cli", "serve", "--data-dir", str(data),
                               "--http-port", "0", "--grpc-port", "0"], capture_output=True, text=True, timeout=60)
        named = f"pid {first.proc.pid}" in done.stderr
    finally:
        first.stop()
    srv = start_server(data)
    stored = count(srv, "two")
    srv.stop()
    return {"fault": "second harvest serve on the same data dir", "acknowledged": acked, "stored": stored,
            "lost": acked - stored, "doubled": 0,
            "detail": f"second exits {done.returncode}, holder pid named: {named}",
            "survived": done.returncode == 2 and named and stored == acked}


def sockets(tmp: Path, rounds: int, rng: random.Random) -> Row:
    """300 idle sockets + 20 half-open ones (a partial request line, then silence), plain and TLS;
    /healthz latency of another client meanwhile."""
    del rounds, rng
    cert, key = tmp / "cert.pem", tmp / "key.pem"
    have_tls = shutil.which("openssl") is not None and subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
        capture_output=True).returncode == 0
    parts = []
    ok = True
    for tls in ([False, True] if have_tls else [False]):
        extra = ("--tls-cert-file", str(cert), "--tls-key-file", str(key)) if tls else ()
        srv = start_server(tmp / f"sock-{tls}", *extra)
        ctx = ssl.create_default_context(cafile=str(cert)) if tls else None
        u = urlparse(srv.http)
        held = []
        try:
            for i in range(320):
                s = socket.create_connection((u.hostname, u.port), timeout=10)
                if i >= 300:
                    s.send(b"\x16\x03\x01" if tls else b"GET /heal")  # half-open: a partial start
                held.append(s)
            lat = []
            for _ in range(50):
                t = time.monotonic()
                status, _ = call(srv.http, "GET", "/healthz", ctx=ctx)
                lat.append(time.monotonic() - t)
                ok = ok and status == 200
            lat.sort()
            parts.append(f"{'TLS' if tls else 'plain'}: p50 {lat[25] * 1000:.1f} / max {lat[-1] * 1000:.1f} ms")
            ok = ok and lat[-1] < 2.0
        finally:
            for s in held:
                s.close()
            srv.stop()
    return {"fault": "300 idle + 20 half-open sockets (plain and TLS)", "detail": "; ".join(parts)
            + " for 50 other requests", "survived": ok}


FAULTS: dict[str, Callable[[Path, int, random.Random], Row]] = {
    "kill9_ingest": kill9_ingest, "kill9_recluster": kill9_recluster, "disk_full": disk_full,
    "damaged_state": damaged_state, "two_servers": two_servers, "sockets": sockets,
}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--only", choices=sorted(FAULTS), action="append", help="run only this fault (repeatable)")
    p.add_argument("--rounds", type=int, default=3, help="kills per kill -9 fault")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args()
    rng = random.Random(args.seed)
    print(f"fault suite {now_utc()}, load {load_average()}", flush=True)
    print("| fault | acknowledged | stored | lost | doubled | survived | detail |")
    print("|---|---|---|---|---|---|---|")
    for name in args.only or list(FAULTS):
        with tempfile.TemporaryDirectory(prefix=f"fault-{name}-") as tmp:
            t0 = time.monotonic()
            row = FAULTS[name](Path(tmp), args.rounds, rng)
            took = time.monotonic() - t0
        survived = {True: "yes", False: "**no**", None: "skipped"}[row.get("survived")]
        print(f"| {row['fault']} | {row.get('acknowledged', '-')} | {row.get('stored', '-')} | {row.get('lost', '-')} "
              f"| {row.get('doubled', '-')} | {survived} | {row['detail']} ({took:.0f} s) |", flush=True)
    print(f"load after {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

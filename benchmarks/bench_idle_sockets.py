"""Idle and half-open sockets against every HTTP service at a low file-handle limit (issue 37, item 6).

Each service runs in its own process with ``RLIMIT_NOFILE`` 256; 300 sockets connect and stay silent
(20 of them send half a request line), then other clients ask ``GET /healthz`` one after another
(a new connection each, client timeout 5 s). Reported per service: answers 200 / 503 / timeouts and
latency p50 / max; the same clients without the idle sockets as the baseline of the same run; and,
for comparison, the capacity app on Werkzeug's development server (what ``harvest ras serve`` ran
before), with fewer clients (each one that times out costs 5 s).

    .venv/bin/python -m benchmarks.bench_idle_sockets            # ~1-2 min
"""

from __future__ import annotations

import argparse
import http.client
import json
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_service_common import ROOT, TOKEN, load_average, now_utc
from tests.readiness import NotReady, ready_line

NOFILE = 256


def _limit() -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (NOFILE, NOFILE))


def _start(cmd: list[str], banner: str, log: Path) -> tuple[subprocess.Popen[str], str]:
    with open(log, "a") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, cwd=ROOT, preexec_fn=_limit)
    try:
        line = ready_line(proc, banner, 180)
    except NotReady as exc:
        proc.kill()
        raise RuntimeError(f"{cmd[3:5]} did not start: {exc}: {log.read_text()[-1500:]}") from None
    url = next(w for w in line.split() if w.startswith("http"))
    return proc, url


def _wait_healthy(url: str) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            status, doc = _get(url, 10)
            if status == 200 and doc.get("plan_version", 1) >= 1:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{url} not healthy")


def _get(url: str, timeout_s: float) -> tuple[int, Any]:
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout_s)
    try:
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def _clients(url: str, n: int, timeout_s: float = 5.0) -> dict[str, Any]:
    lat, outcome = [], {"200": 0, "503": 0, "other": 0, "timeout": 0}
    for _ in range(n):
        t0 = time.monotonic()
        try:
            status, _ = _get(url, timeout_s)
            outcome["200" if status == 200 else "503" if status == 503 else "other"] += 1
        except OSError:
            outcome["timeout"] += 1
        lat.append(time.monotonic() - t0)
        time.sleep(0.05)
    lat.sort()
    return {**outcome, "p50_ms": round(1000 * lat[len(lat) // 2], 1), "max_ms": round(1000 * lat[-1], 1),
            "within_1s": sum(x <= 1.0 for x in lat)}


def _attack(url: str, n_idle: int = 300, n_half: int = 20) -> list[socket.socket]:
    host, port = url.split("://", 1)[1].rsplit(":", 1)
    held = []
    for i in range(n_idle):
        try:
            s = socket.create_connection((host, int(port)), timeout=5)
        except OSError:
            continue
        if i < n_half:
            try:
                s.send(b"GET /heal")
            except OSError:
                pass
        held.append(s)
    return held


def _measure(name: str, proc: subprocess.Popen[str], url: str, n: int) -> dict[str, Any]:
    try:
        _wait_healthy(url)
        base = _clients(url, n)
        held = _attack(url)
        time.sleep(1.5)  # the idle sockets are now older than a client's head would ever be
        try:
            under = _clients(url, n)
        finally:
            for s in held:
                s.close()
        return {"service": name, "baseline": base, "idle_300": under, "sockets_opened": len(held)}
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()


def werkzeug_capacity(inventory: str, reservations: str, data_dir: str) -> None:
    """The capacity app on Werkzeug's threaded development server (the state before issue 37)."""
    from werkzeug.serving import make_server

    from placement_service.capacity.ras import io
    from placement_service.capacity.ras.api import create_app
    from placement_service.capacity.ras.loop import CapacityLoop, LoopConfig
    from placement_service.capacity.ras.store import CapacityStore
    from placement_service.server.metrics import Metrics

    region = io.read_inventory(inventory)
    loop = CapacityLoop(region, io.load_json(reservations), CapacityStore(Path(data_dir) / "capacity.sqlite"),
                        LoopConfig(budget_s=5, interval_s=0))
    loop.solve_now()
    http = make_server("127.0.0.1", 0, create_app(loop, TOKEN, Metrics()), threaded=True)
    print(f"werkzeug capacity: http://127.0.0.1:{http.socket.getsockname()[1]}", flush=True)
    http.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clients", type=int, default=50)
    ap.add_argument("--werkzeug-clients", type=int, default=10)
    ap.add_argument("--werkzeug-child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.werkzeug_child:
        werkzeug_capacity(*args.werkzeug_child)
        return
    print(f"# bench_idle_sockets, {now_utc()}, load {load_average()}, RLIMIT_NOFILE {NOFILE}")
    tmp = Path(tempfile.mkdtemp(prefix="bench-idle-"))
    (tmp / "token").write_text(TOKEN)
    region = tmp / "region"
    subprocess.run([sys.executable, "-m", "placement_service.cli", "ras", "generate", "--servers", "400",
                    "--reservations", "10", "--msbs", "4", "--hardware", "2", "--out-dir", str(region)],
                   check=True, capture_output=True, cwd=ROOT)  # fmt: skip
    py = [sys.executable, "-m", "placement_service.cli"]
    results = []
    proc, url = _start([*py, "serve", "--data-dir", str(tmp / "placement"), "--http-port", "0", "--grpc-port", "0",
                        "--token-file", str(tmp / "token")], "harvest serve:", tmp / "placement.log")
    results.append(_measure("placement (harvest serve)", proc, url, args.clients))
    print(json.dumps(results[-1]), flush=True)
    cap = [*py, "ras", "serve", "--inventory", str(region / "inventory.csv"), "--reservations",
           str(region / "reservations.json"), "--http-port", "0", "--token-file", str(tmp / "token"),
           "--budget-s", "5", "--interval-s", "0"]
    proc, url = _start([*cap, "--data-dir", str(tmp / "capacity")], "harvest ras serve:", tmp / "capacity.log")
    results.append(_measure("capacity (harvest ras serve)", proc, url, args.clients))
    print(json.dumps(results[-1]), flush=True)
    proc, url = _start([sys.executable, "-m", "benchmarks.bench_idle_sockets", "--werkzeug-child",
                        str(region / "inventory.csv"), str(region / "reservations.json"), str(tmp / "wz")],
                       "werkzeug capacity:", tmp / "wz.log")  # fmt: skip
    results.append(_measure("capacity app on werkzeug (before)", proc, url, args.werkzeug_clients))
    print(json.dumps(results[-1]), flush=True)
    print(f"# load after {load_average()}")


if __name__ == "__main__":
    main()

"""The placement service's memory under token-less placement calls with long lists (issue 37, finding 2).

Against a real ``harvest serve`` (30 reporting nodes), one keep-alive client:

1. the attack of the issue: 25 ``POST /v1/blocks/place`` with 16,000 ``excluded`` names each;
2. filling the decision log: 11,000 placements with 200 excluded names each (more than its 10,000
   entries).

Resident memory (``VmRSS``) after a warm-up, after 1 and after 2; the decision log's own gauge
(``harvest_decision_log_bytes``, budget ``decision_log_bytes``, default 16 MiB). ``--baseline TREE``
runs the same against another checkout (e.g. ``/work/main`` before the change) in the same run.

    .venv/bin/python -m benchmarks.bench_decision_log_memory --baseline /work/main     # ~3 min
"""

from __future__ import annotations

import argparse
import http.client
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.bench_service_common import ROOT, TOKEN, Server, load_average, now_utc, start_server


def _client(server: Server) -> http.client.HTTPConnection:
    host, port = server.http.split("://", 1)[1].rsplit(":", 1)
    return http.client.HTTPConnection(host, int(port), timeout=60)


def _call(conn: http.client.HTTPConnection, method: str, path: str, body: Any = None,
          token: bool = False) -> tuple[int, bytes]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {TOKEN}"
    conn.request(method, path, body=None if body is None else json.dumps(body).encode(), headers=headers)
    resp = conn.getresponse()
    return resp.status, resp.read()


def _metric(conn: http.client.HTTPConnection, name: str) -> float | None:
    _, text = _call(conn, "GET", "/metrics")
    for line in text.decode().splitlines():
        if line.startswith(f"{name} "):
            return float(line.split()[1])
    return None


def run(tree: Path, label: str, fill: int) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-dlog-"))
    server = start_server(tmp / "data", tree=tree)
    try:
        conn = _client(server)
        now = time.time()
        reps = [{"node": f"n{i:02d}", "tenant": f"t{i % 6}", "timestamp": now, "primary_cpu_cores": 1.0,
                 "primary_memory_mb": 1024.0, "capacity_cores": 8.0, "capacity_memory_mb": 16384.0, "busy": False,
                 "free_storage_gb": 500.0, "seq": 1} for i in range(30)]  # fmt: skip
        assert _call(conn, "POST", "/v1/reports", {"reports": reps}, token=True)[0] == 202
        for _ in range(200):
            _call(conn, "POST", "/v1/blocks/place", {"replicas": 3, "block_size": 1 << 20})
        rss0 = server.memory_mb()["rss_mb"]
        statuses: dict[int, int] = {}
        t0 = time.monotonic()
        for k in range(25):
            names = [f"attack-{k:02d}-{i:05d}.example.internal" for i in range(16_000)]
            status, _ = _call(conn, "POST", "/v1/blocks/place", {"replicas": 3, "excluded": names})
            statuses[status] = statuses.get(status, 0) + 1
        attack_s = time.monotonic() - t0
        rss1 = server.memory_mb()["rss_mb"]
        t0 = time.monotonic()
        for k in range(fill):
            names = [f"fill-{k:05d}-{i:03d}.example.internal" for i in range(200)]
            _call(conn, "POST", f"/v1/blocks/place?block=blk_{k}", {"replicas": 3, "excluded": names})
        fill_s = time.monotonic() - t0
        mem = server.memory_mb()
        return {"tree": label, "rss_after_warmup_mb": rss0, "attack_answers": statuses,
                "attack_growth_mb": round(rss1 - rss0, 1), "attack_s": round(attack_s, 1),
                "fill_placements": fill, "fill_growth_mb": round(mem["rss_mb"] - rss0, 1),
                "peak_rss_mb": mem["peak_rss_mb"], "fill_s": round(fill_s, 1),
                "decision_log_bytes": _metric(conn, "harvest_decision_log_bytes"),
                "decision_log_entries": _metric(conn, "harvest_decision_log_entries")}
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--baseline", type=Path, help="another checkout to run the same against (before)")
    ap.add_argument("--fill", type=int, default=11_000)
    args = ap.parse_args()
    print(f"# bench_decision_log_memory, {now_utc()}, load {load_average()}")
    print(json.dumps(run(ROOT, "this tree", args.fill)), flush=True)
    if args.baseline:
        print(json.dumps(run(args.baseline, str(args.baseline), args.fill)), flush=True)
    print(f"# load after {load_average()}")


if __name__ == "__main__":
    main()

"""The mover's cost on the service (server/mover.py) at 5,000 tenants / 15,000 nodes / 10M blocks, and
``ChooseTargets`` p99 with and without it running, side by side in one run.

    .venv/bin/python benchmarks/bench_mover_service.py --blocks 10000000 --duration-s 20

Steps: (1) a NameNode stand-in answering the WebHDFS calls the mover makes (``LISTSTATUS``,
``GET_BLOCK_LOCATIONS``, ``GETFILESTATUS``, ``SETREPLICATION``) for ``--blocks`` blocks of 3
replicas in files of ``--blocks-per-file``, in its own process; a raised or lowered factor asks the
service for the new replica and the one to drop exactly as the shim does (``POST /v1/blocks/place``
with the holders as ``chosen``, ``POST /v1/blocks/drop``), so the moves really run; (2) ``harvest
serve`` with a class table of ``--tenants`` tenants on the 3x3 grid and ``--nodes`` nodes, a
``--busy-frac`` of the tenants busy, the mover off; (3) ``ChooseTargets`` at ``--rate`` for
``--duration-s`` with the mover off (baseline), (4) the mover in dry-run (``PUT /v1/mover``), passes
back to back: the first pass timed (its thread's CPU, wall time, the server's RSS before and
after), then ``ChooseTargets`` while passes run, (5) the mover on: ``ChooseTargets`` while passes
run and moves are made (moves per hour: those made in that window, default cap 600 an hour), (6) off
again and a last baseline window.

The stand-in is not HDFS: a real NameNode answers these calls from its block map, and a real move
copies a block (seconds, tests/hadoop/test_mover_real.py); here a move costs the service what it
costs the service (the calls and the waits), nothing more.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.bench_service_common import (
    TOKEN,
    Server,
    load_average,
    now_utc,
    read_result,
    release,
    start_loadgen,
)
from benchmarks.bench_service_common import start_server as _start_server

FILE_BYTES_PER_BLOCK = 128 << 20


# ---------------------------------------------------------------- the NameNode stand-in


class Namespace:
    """``files`` files of ``per_file`` blocks; block ``b`` of file ``f`` on 3 distinct nodes drawn
    from a stream seeded by (seed, f); changed blocks kept apart."""

    def __init__(self, files: int, per_file: int, nodes: int, seed: int, service: str) -> None:
        self.files, self.per_file, self.nodes, self.seed, self.service = files, per_file, nodes, seed, service
        self.factor: dict[int, int] = {}
        self.changed: dict[tuple[int, int], list[str]] = {}
        self.lock = threading.Lock()

    def hosts(self, f: int) -> list[list[str]]:
        rng = np.random.default_rng([self.seed, f])
        picks = rng.integers(0, self.nodes, (self.per_file, 3))
        out = [[f"node-{int(x):05d}" for x in row] for row in picks]
        with self.lock:
            for (ff, b), h in self.changed.items():
                if ff == f:
                    out[b] = list(h)
        return out

    def locations(self, f: int) -> bytes:
        parts = []
        for b, hosts in enumerate(self.hosts(f)):
            locs = ",".join(f'{{"ipAddr":"{h}"}}' for h in hosts)
            parts.append(f'{{"block":{{"blockId":{f * self.per_file + b},"numBytes":{FILE_BYTES_PER_BLOCK}}},'
                         f'"locations":[{locs}]}}')
        return ('{"LocatedBlocks":{"locatedBlocks":[' + ",".join(parts) + "]}}").encode()

    def set_replication(self, f: int, factor: int) -> None:
        """Like the NameNode with the shim: every block of the file gets or drops a replica, the
        service naming the target (``chosen`` = holders) and the one to drop."""
        blocks = self.hosts(f)
        for b, hosts in enumerate(blocks):
            hosts = list(hosts)
            while len(hosts) < factor:
                doc = _post(self.service, "/v1/blocks/place", {"replicas": 1, "chosen": hosts, "excluded": hosts,
                                                                "block_size": FILE_BYTES_PER_BLOCK})
                hosts.append(doc["targets"][0])
            while len(hosts) > factor:
                drop = _post(self.service, "/v1/blocks/drop", {"replicas": hosts})["drop"]
                hosts.remove(drop if drop in hosts else hosts[-1])
            if hosts != blocks[b]:
                with self.lock:
                    self.changed[(f, b)] = hosts
        self.factor[f] = factor


def _post(base: str, path: str, body: Any) -> Any:
    req = urllib.request.Request(base + path, data=json.dumps(body).encode(), method="POST")
    req.add_header("Content-Type", "application/json")
    req.add_header("Authorization", f"Bearer {TOKEN}")
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def _serve_namenode(port_out: Any, files: int, per_file: int, nodes: int, seed: int, service: Any) -> None:
    ns: Namespace | None = None

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: Any) -> None:
            return

        def _answer(self, body: bytes) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _route(self) -> None:
            nonlocal ns
            if ns is None:
                ns = Namespace(files, per_file, nodes, seed, service.value.decode())
            url = urllib.parse.urlparse(self.path)
            op = urllib.parse.parse_qs(url.query)["op"][0]
            path = url.path.removeprefix("/webhdfs/v1")
            if op == "LISTSTATUS":
                entries = [{"pathSuffix": f"f{f:06d}", "type": "FILE", "length": per_file * FILE_BYTES_PER_BLOCK,
                            "replication": ns.factor.get(f, 3)} for f in range(files)]
                self._answer(json.dumps({"FileStatuses": {"FileStatus": entries}}).encode())
                return
            f = int(path.rsplit("/f", 1)[1])
            if op == "GET_BLOCK_LOCATIONS":
                self._answer(ns.locations(f))
            elif op == "GETFILESTATUS":
                self._answer(json.dumps({"FileStatus": {"replication": ns.factor.get(f, 3)}}).encode())
            elif op == "SETREPLICATION":
                ns.set_replication(f, int(urllib.parse.parse_qs(url.query)["replication"][0]))
                self._answer(b'{"boolean":true}')

        do_GET = do_PUT = _route

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port_out.value = server.server_address[1]
    server.serve_forever()


# ---------------------------------------------------------------- the service


def classes_doc(tenants: int) -> dict[str, Any]:
    """Nine classes, one per grid cell; tenant t in cell (t mod 3, t div 3 mod 3)."""
    names = [f"tenant-{t:05d}" for t in range(tenants)]
    cell = {n: (t % 3, (t // 3) % 3) for t, n in enumerate(names)}
    classes = []
    for r in range(3):
        for c in range(3):
            members = [n for n in names if cell[n] == (r, c)]
            classes.append({"id": f"constant-{r}{c}", "pattern": "constant", "avg_cpu": 0.3, "peak_cpu": 0.5,
                            "current_cpu": 0.3, "servers": 3 * len(members), "cores": 48 * len(members),
                            "tenants": members})
    return {"classes": classes,
            "tenants": {n: {"class": f"constant-{cell[n][0]}{cell[n][1]}", "pattern": "constant"} for n in names},
            "grid": {n: {"reimage_row": cell[n][0], "peak_column": cell[n][1]} for n in names}}


def call(server: Server, method: str, path: str, body: Any = None) -> Any:
    req = urllib.request.Request(server.http + path, method=method,
                                 data=None if body is None else json.dumps(body).encode())
    req.add_header("Authorization", f"Bearer {TOKEN}")
    req.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(req, timeout=1200) as resp:
        return json.loads(resp.read())


def report_nodes(server: Server, tenants: int, nodes: int, busy_frac: float) -> None:
    now = time.time()
    busy_tenants = int(tenants * busy_frac)
    for lo in range(0, nodes, 5000):
        reps = [{"node": f"node-{i:05d}", "tenant": f"tenant-{i % tenants:05d}", "timestamp": now,
                 "primary_cpu_cores": 4.0, "primary_memory_mb": 4096.0, "capacity_cores": 16.0,
                 "capacity_memory_mb": 65536.0, "busy": i % tenants < busy_tenants, "free_storage_gb": 8000.0}
                for i in range(lo, min(lo + 5000, nodes))]
        call(server, "POST", "/v1/reports", {"reports": reps})


def choose_targets(server: Server, rate: float, duration_s: float, nodes: int) -> dict[str, Any]:
    proc = start_loadgen("choose-targets", server, "--rate", str(rate), "--duration-s", str(duration_s),
                         "--nodes", str(nodes), "--warmup-s", "1")
    try:
        result = read_result(proc)
    finally:
        release(proc)
    return {k: result[k] for k in ("ok", "errors", "latency")}


def _p99(result: dict[str, Any]) -> float:
    return float(result["latency"]["p99_ms"])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--tenants", type=int, default=5000)
    p.add_argument("--nodes", type=int, default=15000)
    p.add_argument("--blocks", type=int, default=10_000_000)
    p.add_argument("--blocks-per-file", type=int, default=100,
                   help="a move raises a whole file's factor: every block of it is re-replicated and dropped")
    p.add_argument("--busy-frac", type=float, default=0.1, help="share of the tenants busy now")
    p.add_argument("--duration-s", type=float, default=20.0)
    p.add_argument("--rate", type=float, default=1000.0, help="ChooseTargets per second")
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", help="write the JSON result here too")
    args = p.parse_args()

    files = max(1, args.blocks // args.blocks_per_file)
    service_url = multiprocessing.Array("c", 256)
    port = multiprocessing.Value("i", 0)
    nn = multiprocessing.Process(target=_serve_namenode, args=(port, files, args.blocks_per_file, args.nodes,
                                                               args.seed, service_url), daemon=True)
    nn.start()
    while port.value == 0:
        time.sleep(0.05)
    tmp = Path(tempfile.mkdtemp(prefix="bench-mover-"))
    (tmp / "classes.json").write_text(json.dumps(classes_doc(args.tenants)))
    server = _start_server(tmp / "data", "--classes-file", str(tmp / "classes.json"), "--mover", "off",
                           "--mover-namenode-url", f"http://127.0.0.1:{port.value}", "--mover-paths", "/bench",
                           "--mover-watch-every-s", "1", "--mover-move-timeout-s", "30")
    service_url.value = server.http.encode()
    out: dict[str, Any] = {"when": now_utc(), "tenants": args.tenants, "nodes": args.nodes,
                           "blocks": files * args.blocks_per_file, "files": files, "busy_frac": args.busy_frac,
                           "rate": args.rate, "duration_s": args.duration_s}
    try:
        report_nodes(server, args.tenants, args.nodes, args.busy_frac)
        out["baseline_before"] = {"load": load_average(), **choose_targets(server, args.rate, args.duration_s,
                                                                            args.nodes)}
        rss_before = server.memory_mb()
        cpu_before = server.cpu_s()
        call(server, "PUT", "/v1/mover", {"mode": "dry-run"})  # scan and plan, no move
        t0 = time.monotonic()
        while call(server, "GET", "/v1/mover")["last_pass"] is None:
            time.sleep(0.5)
        first = call(server, "GET", "/v1/mover")
        out["first_pass"] = {**first["last_pass"], "wall_to_status_s": round(time.monotonic() - t0, 1),
                             "server_cpu_s": round(server.cpu_s() - cpu_before, 1), "rss_before": rss_before,
                             "rss_after": server.memory_mb(), "load": load_average()}
        out["with_passes"] = {"load": load_average(), **choose_targets(server, args.rate, args.duration_s,
                                                                        args.nodes)}
        call(server, "PUT", "/v1/mover", {"mode": "on"})  # passes and moves
        moves0, t_moves = call(server, "GET", "/v1/mover")["moves_total"], time.monotonic()
        out["with_moves"] = {"load": load_average(), **choose_targets(server, args.rate, args.duration_s,
                                                                       args.nodes)}
        status = call(server, "GET", "/v1/mover")
        hours = (time.monotonic() - t_moves) / 3600.0
        made = status["moves_total"] - moves0
        out["moves"] = {"made": made, "seconds": round(hours * 3600, 1), "per_hour": round(made / hours),
                        "cap_per_hour": status["settings"]["max_moves_per_hour"], "last_pass": status["last_pass"],
                        "rss": server.memory_mb()}
        call(server, "PUT", "/v1/mover", {"mode": "off"})
        out["baseline_after"] = {"load": load_average(), **choose_targets(server, args.rate, args.duration_s,
                                                                           args.nodes)}
    finally:
        server.stop()
        nn.terminate()
    line = json.dumps(out)
    print(line)
    if args.out:
        Path(args.out).write_text(line + "\n")
    print(f"ChooseTargets p99 ms: off {_p99(out['baseline_before']):.2f} / passes {_p99(out['with_passes']):.2f} / "
          f"passes and moves {_p99(out['with_moves']):.2f} / "
          f"off {_p99(out['baseline_after']):.2f}; first pass over {out['blocks']:,} blocks: "
          f"{out['first_pass']['cpu_s']} s CPU, {out['first_pass']['seconds']} s wall, RSS "
          f"{out['first_pass']['rss_before']['rss_mb']} -> {out['first_pass']['rss_after']['rss_mb']} MB; "
          f"moves {out['moves']['made']} ({out['moves']['per_hour']}/h, cap {out['moves']['cap_per_hour']}/h); "
          f"load {load_average()}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

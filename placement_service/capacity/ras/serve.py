"""``harvest ras serve``: the region's capacity service (async solver, emergency path, Online Mover,
elastic sets pushed to each cluster's placement service, revocations). Adapter: arguments, threads,
the HTTP server and the push client; the decisions live in ``loop.py``.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from placement_service.capacity import CapacityError
from placement_service.validate import finite_float

logger = logging.getLogger(__name__)


def add_parser(sub: Any) -> None:
    p = sub.add_parser(
        "serve", help="run the region's capacity service (async solver, Online Mover, elastic sets, revocations)",
        description="Long-running capacity service: re-solves every --interval-s within --budget-s from the "
                    "previous plan and publishes only plans the independent checker accepts; grants emergency "
                    "requests at once; replaces failed servers (signalled by placement services or the "
                    "operator API) from the shared buffer or elastic servers; pushes each cluster's elastic "
                    "set (versioned, retried) with pending revocations to that cluster's placement service.",
    )  # fmt: skip
    p.add_argument("--inventory", required=True, help="inventory .csv/.parquet (optional column 'cluster': "
                                                      "which cluster an elastic server is lent to)")  # fmt: skip
    p.add_argument("--reservations", required=True, help="R.json: the region's reservation requests")
    p.add_argument("--data-dir", default="capacity-data", help="state directory (SQLite, WAL)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--http-port", type=int, default=8480, help="0: any free port (printed at start)")
    p.add_argument("--token-file", help="bearer token that mutating calls must present (also sent to clusters)")
    p.add_argument("--cluster", action="append", default=[], metavar="NAME=URL",
                   help="a cluster's placement service, e.g. c1=http://127.0.0.1:8470 (repeatable)")
    p.add_argument("--budget-s", type=finite_float, default=10.0, help="time budget of one async solve (s)")
    p.add_argument("--interval-s", type=finite_float, default=300.0, help="re-solve this often (s); 0: on demand only")
    p.add_argument("--ack-timeout-s", type=finite_float, default=60.0,
                   help="hand a revoked server over after this long without the agent's acknowledgement")
    p.add_argument("--push-interval-s", type=finite_float, default=0.5, help="retry failed pushes this often (s)")
    p.set_defaults(func=run)


def parse_clusters(values: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for v in values:
        name, sep, url = v.partition("=")
        if not sep or not name or not url.startswith(("http://", "https://")):
            raise SystemExit(f"--cluster: expected NAME=http://host:port, got {v!r}")
        out[name] = url.rstrip("/")
    return out


def http_pusher(urls: dict[str, str], token: str | None, timeout_s: float = 5.0) -> Any:
    """``push(cluster, body) -> accepted version``: PUT /v1/harvestable on the cluster's placement service."""

    def push(cluster: str, body: dict[str, Any]) -> int:
        url = urls.get(cluster)
        if url is None:
            raise RuntimeError(f"no --cluster {cluster}=URL given; its elastic set is kept until one is")
        req = urllib.request.Request(f"{url}/v1/harvestable", data=json.dumps(body).encode(), method="PUT",
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 (operator-given URL)
                doc = json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{url}: HTTP {exc.code}: {exc.read()[:200]!r}") from None
        return int(doc.get("version", body["version"]))

    return push


def run(args: argparse.Namespace) -> int:
    """Start the capacity service on the project's one serving layer (``server/serving.py``): the
    data-dir lock, the token check, the hardened HTTP server and its limits, as ``harvest serve``."""
    # Before any thread starts: importing it writes HiGHS's banner to stderr now (capacity/highs.py),
    # not while the solver thread runs beside the line this command prints on stdout.
    from placement_service.capacity import highs  # noqa: F401
    from placement_service.capacity.ras import io
    from placement_service.capacity.ras.api import create_app
    from placement_service.capacity.ras.loop import CapacityLoop, LoopConfig, run_pusher, run_solver
    from placement_service.capacity.ras.store import CapacityStore
    from placement_service.server import serving
    from placement_service.server.metrics import Metrics

    region = io.read_inventory(args.inventory)
    doc = io.load_json(args.reservations)
    io.parse_requests(doc, str(args.reservations))  # bad input exits 2 here, before anything is stored
    token = serving.read_token_file(Path(args.token_file) if args.token_file else None)
    if token is None:
        logger.warning("no --token-file: mutating endpoints accept requests without a token")
    urls = parse_clusters(args.cluster)
    data_dir = Path(args.data_dir)
    if data_dir.exists() and not data_dir.is_dir():
        raise CapacityError(f"--data-dir {data_dir}: not a directory")
    data_dir.mkdir(parents=True, exist_ok=True)
    lock_fd = serving.lock_data_dir(data_dir, "harvest ras serve")  # before touching anything in it
    try:
        store = CapacityStore(data_dir / "capacity.sqlite")
        try:
            cfg = LoopConfig(budget_s=args.budget_s, interval_s=args.interval_s, ack_timeout_s=args.ack_timeout_s,
                             push_interval_s=args.push_interval_s)  # fmt: skip
            loop = CapacityLoop(region, doc, store, cfg)
            missing = sorted(set(loop.clusters()) - set(urls))
            if missing:
                logger.warning("clusters %s in the inventory have no --cluster URL: their sets wait", missing)
            stop = threading.Event()
            metrics = Metrics()
            limits = serving.HttpLimits()
            http = serving.start_http(create_app(loop, token, metrics, limits), args.host, args.http_port, limits,
                                      metrics)  # fmt: skip
            threads = [
                threading.Thread(target=run_solver, args=(loop, stop), name="ras-solver", daemon=True),
                threading.Thread(target=run_pusher, args=(loop, stop, http_pusher(urls, token)), name="ras-pusher",
                                 daemon=True),
            ]  # fmt: skip
            for t in threads:
                t.start()

            def _stop() -> None:
                stop.set()
                loop.changed.set()

            try:
                serving.serve_until_signal(http, f"harvest ras serve: http://{args.host}:{http.port} data "
                                                 f"{args.data_dir} clusters {sorted(urls)}", _stop)  # fmt: skip
            finally:
                _stop()
                for t in threads:
                    t.join(timeout=5)
        finally:
            store.close()
    finally:
        serving.unlock_data_dir(lock_fd)
    return 0

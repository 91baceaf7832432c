"""``harvest serve``: run the placement service (HTTP/JSON + gRPC) on one data directory."""

from __future__ import annotations

import argparse
import logging
from typing import Any

logger = logging.getLogger(__name__)


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "serve",
        help="run the placement service (HTTP/JSON + gRPC)",
        description=(
            "Run the placement service: agents report over gRPC (Placement.Report) or HTTP "
            "(POST /v1/reports); jobs and blocks get their classes and replica targets. Settings come "
            "from --config (JSON), then HARVEST_<SETTING> environment variables, then these flags."
        ),
    )
    p.add_argument("--data-dir", help="directory for the report log, Parquet history and SQLite state")
    p.add_argument("--http-port", type=int, help="HTTP port (0 = any free port)")
    p.add_argument("--grpc-port", type=int, help="gRPC port (0 = any free port)")
    p.add_argument("--token-file", help="file holding the bearer token that mutating calls must present")
    p.add_argument("--host", help="address to bind (default 127.0.0.1)")
    p.add_argument("--config", help="JSON file of settings (see docs/service.md)")
    p.add_argument("--tls-cert-file", help="PEM certificate: serve HTTPS and gRPC over TLS")
    p.add_argument("--tls-key-file", help="PEM private key for --tls-cert-file")
    p.add_argument("--rm-url", help="YARN ResourceManager web address, e.g. http://rm:8088 (push labels)")
    p.add_argument("--rm-admin-user",
                   help="user.name sent on ResourceManager label calls; must be in yarn.admin.acl, else the "
                        "RM answers 401 (default: yarn)")
    p.add_argument("--classes-file", help="classes.json to serve until the first re-clustering")
    p.add_argument("--inventory-file", help="inventory (CSV/Parquet): environment and rack of each node")
    p.add_argument("--reimages-file", help="reimage events (CSV/Parquet): reimage rates for the 3x3 grid rows")
    p.add_argument("--capacity-scheduler-file", help="write capacity-scheduler.xml here after re-clustering")
    p.add_argument("--refresh-queues-command",
                   help='command run after --capacity-scheduler-file changed, so YARN loads the new queues, '
                        'e.g. "yarn rmadmin -refreshQueues" (default: none)')
    p.add_argument("--dfs-hosts-file",
                   help="the NameNode's JSON dfs.hosts file: busy DataNodes are put IN_MAINTENANCE there "
                        "(no writes, no reads) and taken out when idle (docs/hadoop.md, HDFS)")
    p.add_argument("--dfs-hosts-base-file", help="hosts entries to keep in --dfs-hosts-file (e.g. the "
                   "'harvest hosts-file' output with upgrade domains); default: one entry per known node")
    p.add_argument("--refresh-nodes-command",
                   help='command run after --dfs-hosts-file changed, e.g. "hdfs dfsadmin -refreshNodes"')
    p.add_argument("--maintenance-enter-after-s", type=float, help="busy this long before entering (default 60)")
    p.add_argument("--maintenance-leave-after-s", type=float, help="idle this long before leaving (default 300)")
    p.add_argument("--maintenance-max-enter-per-min", type=int, help="nodes entering per minute (default 2)")
    p.add_argument("--maintenance-max-fraction", type=float,
                   help="nodes in maintenance plus silent nodes, at most this fraction of the known "
                        "nodes, rounded down but at least 1 (default 0.1; 0 turns maintenance off)")
    p.add_argument("--maintenance-expiry-s", type=float,
                   help="maintenanceExpireTimeInMS horizon, renewed while busy (default 3600)")
    m = p.add_argument_group("the mover (HDFS-H-cobusy-mover over a real HDFS; docs/service.md, \"The mover\")")
    m.add_argument("--mover", choices=("off", "dry-run", "on"),
                   help="move replicas of blocks at risk: off, dry-run (plan and explain only) or on "
                        "(default off; PUT /v1/mover switches it at run time)")
    m.add_argument("--mover-namenode-url", help="the NameNode's WebHDFS address, e.g. http://namenode:9870")
    m.add_argument("--mover-hdfs-user", help="WebHDFS user allowed to set replication (default hdfs)")
    m.add_argument("--mover-paths", help="comma-separated HDFS directories to watch (default /)")
    m.add_argument("--mover-watch-every-s", type=float, help="seconds between passes (default 3600)")
    m.add_argument("--mover-max-moves-per-hour", type=int, help="moves started in any hour (default 600)")
    m.add_argument("--mover-mb-per-server-hour", type=float,
                   help="MB each primary tenant sends and receives per hour, per server it has (default 512)")
    m.add_argument("--mover-move-timeout-s", type=float,
                   help="wait this long for a new replica before rolling a move back (default 300)")
    p.add_argument("--recluster-interval-s", type=float, help="seconds between re-clusterings (0 = on demand)")
    p.add_argument("--recluster-priority", choices=("idle", "low", "normal"),
                   help="CPU priority of the re-clustering process: idle (default; only on idle CPU, so it "
                        "never slows requests but waits while the machine is saturated), low (nice 19) or normal")
    p.add_argument("--placement-cobusy", action=argparse.BooleanOptionalAction, default=None,
                   help="HDFS-H-cobusy (setting placement_cobusy, default on; --no-placement-cobusy: off): every "
                        "re-clustering (daily by default) also fits how "
                        "likely each pair of tenants is to be busy in the same slot (CPU above busy_profile_cpu) "
                        "and stores it with the class table; a block's further replicas go to the tenants least "
                        "likely busy together with its others, every grid rule kept. Until usable estimates are "
                        "stored, placement falls back to busy-hour profiles (placement_busy_hours) or the paper's "
                        "HDFS-H; GET /v1/placement/quality reports the mode in force and why")
    p.add_argument("--compact-interval-s", type=float, help="seconds between log compactions")
    p.add_argument("--slot-s", type=int, help="history slot length in seconds (default 300)")
    p.add_argument("--capacity-url", help="capacity service (harvest ras serve) that lends elastic servers, "
                                          "e.g. http://127.0.0.1:8480; needs --cluster")
    p.add_argument("--cluster", help="this cluster's name in the capacity service's inventory")
    p.add_argument("--capacity-silent-after-s", type=float,
                   help="signal a node to the capacity service as failed after this long without a report (0: off)")
    p.set_defaults(func=_serve)


def _watch_gc(metrics: Any) -> None:
    """Export garbage-collection pauses (they stop every thread) as a histogram per generation.

    The collector can run inside any allocation, including one made while a thread holds a lock
    (the metrics lock, a logging handler's lock): the callback therefore only appends to a deque
    (no lock, no logging) and the pauses are turned into metrics when ``/metrics`` is scraped.
    """
    import collections
    import gc
    import time

    started: list[float] = []
    pauses: collections.deque[tuple[str, float]] = collections.deque(maxlen=100_000)

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.perf_counter()]
        elif started:
            pauses.append((str(info.get("generation", -1)), time.perf_counter() - started.pop()))

    def drain() -> dict[str, float]:
        longest = 0.0
        while pauses:
            generation, pause_s = pauses.popleft()
            metrics.observe("harvest_gc_pause_seconds", pause_s, generation=generation)
            longest = max(longest, pause_s)
        if longest > 0.05:
            logger.warning("a garbage collection took %.0f ms", longest * 1000)
        return {}

    metrics.add_collector(drain)
    gc.callbacks.append(callback)


def _serve(args: argparse.Namespace) -> int:
    import gc
    import os
    import sys
    from pathlib import Path

    from placement_service.server import serving
    from placement_service.server.config import build_config
    from placement_service.server.grpc_api import GrpcServer
    from placement_service.server.http_api import create_app
    from placement_service.server.service import PlacementService
    from placement_service.server.wsgi import make_ssl_context

    flags = {k: getattr(args, k, None) for k in (
        "data_dir", "http_port", "grpc_port", "token_file", "host", "tls_cert_file", "tls_key_file", "rm_url",
        "rm_admin_user", "classes_file", "inventory_file", "reimages_file", "capacity_scheduler_file",
        "refresh_queues_command",
        "recluster_interval_s", "recluster_priority", "compact_interval_s", "slot_s", "placement_cobusy",
        "dfs_hosts_file", "dfs_hosts_base_file", "refresh_nodes_command", "maintenance_enter_after_s",
        "maintenance_leave_after_s", "maintenance_max_enter_per_min", "maintenance_max_fraction",
        "maintenance_expiry_s",
        "capacity_url", "cluster", "capacity_silent_after_s",
        "mover", "mover_namenode_url", "mover_hdfs_user", "mover_paths", "mover_watch_every_s",
        "mover_max_moves_per_hour", "mover_mb_per_server_hour", "mover_move_timeout_s",
    )}
    cfg = build_config(Path(args.config) if args.config else None, os.environ, flags)
    package_logger = logging.getLogger("placement_service")
    if package_logger.getEffectiveLevel() > logging.INFO:
        package_logger.setLevel(logging.INFO)  # a service logs its decisions and recoveries at INFO
    token = cfg.read_token()
    if token is None:
        logger.warning("no --token-file: mutating endpoints accept requests without a token")
    service = PlacementService(cfg)
    service.start()
    # Latency tails: hand the GIL over every 1 ms (default 5 ms) so a background thread (compaction,
    # policy rebuild) delays a request by at most about that; and move the start-up objects out of
    # the garbage collector's way (the service also freezes each rebuilt policy view) so that
    # collections only ever walk young objects. Collector thresholds stay at their small defaults:
    # many tiny pauses rather than a few long ones.
    sys.setswitchinterval(0.001)
    gc.collect()
    gc.freeze()
    _watch_gc(service.metrics)

    grpc_creds = None
    ssl_context = None
    if cfg.tls_cert_file is not None and cfg.tls_key_file is not None:
        import grpc

        grpc_creds = grpc.ssl_server_credentials([(cfg.tls_key_file.read_bytes(), cfg.tls_cert_file.read_bytes())])
        ssl_context = make_ssl_context(str(cfg.tls_cert_file), str(cfg.tls_key_file))
    grpc_server = GrpcServer(service, token, cfg.host, cfg.grpc_port, grpc_creds)
    grpc_server.start()
    app = create_app(service, token)

    def _http_health(reason: str | None, cause: str) -> None:
        if reason is None:
            service.health.clear("http")
        else:
            service.health.set("http", f"new HTTP connections refused: {reason}", cause)

    http = serving.start_http(app, cfg.host, cfg.http_port, cfg.http_limits(), service.metrics,
                              ssl_context=ssl_context, on_health=_http_health)
    scheme = "https" if ssl_context else "http"
    try:
        serving.serve_until_signal(http, f"harvest serve: {scheme}://{cfg.host}:{http.port} grpc "
                                         f"{cfg.host}:{grpc_server.port} data {cfg.data_dir}")
    finally:
        grpc_server.stop()
        service.close()
    return 0

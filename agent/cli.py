"""``harvest agent``: run the node agent; ``harvest agent explain``: show the numbers behind its decision.

    harvest agent --mode local|yarn --interval-s 1 --reserve-cores C --reserve-memory-mb M
        [--capacity-cores N] [--capacity-memory-mb MB] --state-dir DIR [--service ADDRESS]
        [--metrics-port P] [--config FILE]
    harvest agent explain --metrics-port P     (or the same --config / environment)
    harvest agent report-reimage [--at TIME] --state-dir DIR [--node N] [--service-http URL]
        (declare that this node was reimaged; the running agent reports it, or it is sent now)

Every setting is also a TOML key in ``--config`` and an environment variable ``HARVEST_AGENT_<KEY>``;
precedence is file < environment < flags.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def register(subparsers: Any) -> None:
    from agent.config import add_flags

    parser = subparsers.add_parser(
        "agent",
        help="node agent: keep the primary tenant's reserve, tell YARN what is harvestable",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", nargs="?", choices=("run", "explain", "report-reimage"), default="run",
                        help="run the agent (default), print a running agent's /explain, or declare that "
                             "this node was reimaged (queued in the state dir until the service takes it)")
    parser.add_argument("--at", metavar="TIME",
                        help="report-reimage: when (ISO 8601 or epoch seconds; default: now)")
    parser.add_argument("--config", metavar="FILE", help="TOML file with any of the settings below")
    add_flags(parser)
    parser.set_defaults(func=handle)


def _explain(args: argparse.Namespace) -> int:
    import urllib.error
    import urllib.request

    from agent import ConfigError
    from agent.config import read_toml

    file_values = read_toml(args.config) if args.config else {}
    port = args.metrics_port or os.environ.get("HARVEST_AGENT_METRICS_PORT") or file_values.get("metrics_port")
    host = args.metrics_host or os.environ.get("HARVEST_AGENT_METRICS_HOST") or file_values.get(
        "metrics_host", "127.0.0.1")
    if not port:
        raise ConfigError("'explain' needs the agent's metrics_port (flag --metrics-port or the config file)")
    from placement_service.validate import parse_int

    url = f"http://{host}:{parse_int(port, 'metrics_port', minimum=1, maximum=65535)}/explain"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            data = json.load(answer)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ConfigError(f"no agent answers at {url}: {getattr(exc, 'reason', exc)}") from None
    print(json.dumps(data, indent=2))
    return 0


def _report_reimage(args: argparse.Namespace) -> int:
    import time

    from agent import ConfigError
    from agent.config import config_from_args
    from agent.reimage import ReimageEvent, ReimageSender, ReimageWatch

    at = time.time()
    if args.at:
        import numpy as np

        try:
            at = float(args.at)
        except ValueError:
            try:
                at = float(np.datetime64(args.at.rstrip("Zz"), "s").astype("int64"))
            except ValueError:
                raise ConfigError(f"--at: expected ISO 8601 or epoch seconds, got {args.at!r}") from None
    if not (0 < at <= time.time() + 300):
        raise ConfigError(f"--at: {args.at!r} is not a past time")
    config = config_from_args(args)
    watch = ReimageWatch(config.node, config.state_dir, [])
    watch.queue(ReimageEvent(config.node, at, "declared"))
    print(f"queued a reimage of {config.node} at {at:.0f} in {watch.pending_path}")
    if config.service_http:
        try:
            n = ReimageSender(watch, config.service_http, config.token_file).flush_once()
            print(f"reported {n} pending reimage(s) to {config.service_http}")
        except Exception as exc:
            print(f"not reported now ({exc}); the running agent retries", file=sys.stderr)
    return 0


def handle(args: argparse.Namespace) -> int:
    if args.action == "explain":
        return _explain(args)
    if args.action == "report-reimage":
        return _report_reimage(args)

    import signal
    import threading

    from agent.config import config_from_args
    from agent.runtime import Agent

    config = config_from_args(args)
    agent = Agent(config).start()
    stop = threading.Event()

    def _stop(signum: int, frame: Any) -> None:
        del signum, frame
        stop.set()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    if agent.server is not None:
        print(f"harvest agent: metrics on http://{config.metrics_host}:{agent.server.port}/metrics",
              file=sys.stderr, flush=True)
    try:
        agent.run(stop)
    finally:
        agent.close()
    return 0

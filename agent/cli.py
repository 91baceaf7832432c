"""``harvest agent``: run the node agent; ``harvest agent explain``: show the numbers behind its decision.

    harvest agent --mode local|yarn --interval-s 1 --reserve-cores C --reserve-memory-mb M
        [--capacity-cores N] [--capacity-memory-mb MB] --state-dir DIR [--service ADDRESS]
        [--metrics-port P] [--config FILE]
    harvest agent explain --metrics-port P     (or the same --config / environment)

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
    parser.add_argument("action", nargs="?", choices=("run", "explain"), default="run",
                        help="run the agent (default) or print a running agent's /explain")
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
    url = f"http://{host}:{int(port)}/explain"
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            data = json.load(answer)
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise ConfigError(f"no agent answers at {url}: {getattr(exc, 'reason', exc)}") from None
    print(json.dumps(data, indent=2))
    return 0


def handle(args: argparse.Namespace) -> int:
    if args.action == "explain":
        return _explain(args)

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

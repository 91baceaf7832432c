"""The ``harvest`` command: one entry point, sub-commands registered by each package.

Each module in ``_COMMAND_MODULES`` exposes ``register(subparsers)``; it adds its sub-commands with
``set_defaults(func=handler)`` where ``handler(args) -> int`` returns the exit status. Handlers import
heavy dependencies lazily so that ``harvest --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Callable, Sequence

from placement_service import HarvestError, __version__
from placement_service.extras import MissingExtraError, missing_module_message

# (module, the sub-commands it registers). A module whose package needs an extra that is not
# installed (placement_service.extras) still gets its sub-commands, as stubs that say which extra.
_COMMAND_MODULES: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("placement_service.traces.cli", ("generate", "convert-real", "check-traces")),
    ("placement_service.traces.cli_import", ("import",)),  # an operator's own exports
    ("placement_service.core.cli_cluster", ("cluster",)),
    ("placement_service.core.cli_decide", ("select", "place")),
    ("placement_service.server.cli", ("serve",)),
    ("placement_service.sim.cli", ("sim",)),  # sim schedule|durability|availability
    ("placement_service.sim.cli_whatif", ("whatif",)),  # trace files -> report.md
    ("placement_service.capacity.ras.cli", ("ras",)),  # ras solve|serve|explain|generate
    ("placement_service.capacity.flux.cli", ("flux",)),  # flux generate|model|plan|check|execute|ledger|to-ras
    ("agent.cli", ("agent",)),
    ("scheduler_plugin.cli", ("route", "hive", "capacity-scheduler", "hosts-file", "topology-map",
                              "install-scripts")),
    ("scheduler_plugin.testbed.cli", ("hadoop",)),  # hadoop up|down|status (a real test cluster)
    ("scheduler_plugin.testbed.cli_testbed", ("testbed",)),  # testbed up|run|report|down (cluster + tenants)
    ("placement_service.demo", ("demo",)),
)


def _missing_extra_stub(message: str) -> Callable[[argparse.Namespace], int]:
    def handler(args: argparse.Namespace) -> int:
        print(f"harvest {args.command}: error: {message}", file=sys.stderr)
        return 2

    return handler


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harvest",
        description=(
            "Harvest spare CPU, memory and disk of primary tenants' servers for Hadoop batch work. "
            "Run 'harvest <command> --help' for each command."
        ),
    )
    parser.add_argument("--version", action="version", version=f"harvest {__version__}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more logging (-vv for debug)")
    subparsers = parser.add_subparsers(dest="command", metavar="<command>")
    for name, commands in _COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except (MissingExtraError, ModuleNotFoundError) as exc:
            message = str(exc) if isinstance(exc, MissingExtraError) else missing_module_message(exc)
            if message is None:
                raise
            for command in commands:
                stub = subparsers.add_parser(command, help=f"(not installed) {message}", add_help=False,
                                             prefix_chars="\x01")  # every word is an argument
                stub.add_argument("rest", nargs="*", help=argparse.SUPPRESS)
                stub.set_defaults(func=_missing_extra_stub(message))
            continue
        module.register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # a usage error (argparse printed one line): exit status 2, as for bad input
        if exc.code in (0, None):
            raise  # --help
        return 2
    level = logging.WARNING - 10 * min(args.verbose, 2)
    logging.basicConfig(level=level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except HarvestError as exc:
        print(f"harvest {args.command}: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:  # an optional package of an extra that is not installed
        message = missing_module_message(exc)
        if message is None:
            raise
        print(f"harvest {args.command}: error: {message}", file=sys.stderr)
        return 2
    except OSError as exc:  # a file named on the command line cannot be read or written
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"harvest {args.command}: error: {where}{exc.strerror or exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())

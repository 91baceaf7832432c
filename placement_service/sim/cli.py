"""``harvest sim schedule|durability|availability|report``: the simulator from the command line.

Inputs: the trace files (``--utilization``, ``--inventory``, ``--reimages``: the data contracts of
``DESIGN.md``), or ``--generate N`` for an in-process generated datacenter of N servers, or
``--real azure|planetlab`` for the public traces grouped into tenants. Each experiment writes
``OUT/results.json``, ``OUT/results.csv`` and ``OUT/*.png``.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Any, TypeVar

from placement_service import HarvestError
from placement_service.core.mover import (
    MOVE_BUDGET_MB_PER_SERVER_DAY,
    MOVE_EVERY_DAYS,
    MOVE_MAX_FRAC_PER_DAY,
    WATCH_EVERY_HOURS,
    MoveConfig,
    mover_config,
)
from placement_service.core.placement import (
    COBUSY_NEW_MAX_TURNOVER,
    COBUSY_NEW_TARGET,
    COBUSY_RISK_TARGET,
    COBUSY_SPREAD,
    REIMAGE_CHOICES,
    REPAIR_CHOICES,
)
from placement_service.core.types import PolicyError
from placement_service.sim.agent_nodes import AgentSettings
from placement_service.validate import finite_float, output_file

logger = logging.getLogger(__name__)


class SimUsageError(HarvestError):
    """Bad command-line arguments for ``harvest sim``."""


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _ints(text: str) -> list[int]:
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None


def _inputs(p: argparse.ArgumentParser, reimages_required: bool = False) -> None:
    g = p.add_argument_group("datacenter (trace files, or --generate, or --real)")
    g.add_argument("--utilization", help="utilization samples (Parquet/CSV: timestamp, server, tenant, cpu)")
    g.add_argument("--inventory", help="inventory (server, tenant, environment, rack, cores, memory_mb, storage_gb)")
    g.add_argument(
        "--reimages", help="reimage events (timestamp, server)" + (
            " (without it: synthetic reimages from the generator's model, said in the output)"
            if reimages_required else "")
    )
    g.add_argument("--generate", type=int, metavar="N", help="generate a datacenter of N servers in-process")
    g.add_argument("--generate-seed", type=int, default=1, help="seed of the generated datacenter (default 1)")
    g.add_argument("--generate-days", type=finite_float, default=30.0, help="days of generated traces (default 30)")
    g.add_argument("--reimage-days", type=finite_float, default=None,
                   help="days of generated reimages (e.g. 365 for durability; default: --generate-days)")
    g.add_argument("--real", choices=["azure", "planetlab"], help="public CPU traces grouped into tenants")
    g.add_argument("--real-servers", type=int, default=5000, help="servers of the real-trace datacenter")
    g.add_argument("--name", help="datacenter name in the results (default from the input)")
    g.add_argument("--interval-s", type=finite_float, default=None,
                   help="--utilization: seconds between samples of the series (default: inferred from the "
                        "timestamps; give it when the inferred interval is wrong)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--seed", type=int, default=0, help="base seed of the named random streams (default 0)")
    p.add_argument("--runs", type=int, default=3, help="runs per point (default 3)")
    p.add_argument("--history-days", type=finite_float, default=7.0, help="days of history the policy learns from")


AGENT = AgentSettings()


def _systems_help() -> str:
    """``--systems`` help from ``sim.policy``'s one description per system and where it runs."""
    from placement_service.sim.systems import HdfsSystem, service_placement

    svc = service_placement()
    return ("comma list of: " + "; ".join(f"{x.value}: {svc.describe(x)}" for x in HdfsSystem)
            + " (default: HDFS-Stock,HDFS-H; docs/policy.md)")


def register(subparsers: Any) -> None:
    sim = subparsers.add_parser("sim", help="trace-driven simulator: scheduling, durability, availability")
    sub = sim.add_subparsers(dest="sim_command", metavar="<experiment>")

    p = sub.add_parser("schedule", help="YARN-PT vs YARN-H (and YARN-Stock): job time, killed tasks")
    _inputs(p)
    p.add_argument("--levels", type=_floats, default=[0.2, 0.3, 0.4, 0.5, 0.6], help="utilization levels")
    p.add_argument("--scaling", choices=["linear", "root"], default="linear")
    p.add_argument("--days", type=finite_float, default=30.0, help="simulated days after the history (default 30)")
    p.add_argument("--jobs", metavar="DIR",
                   help="a folder of job JSON files (the format of 'harvest select --job') to draw arrivals from "
                        "(default: the 99 bundled TPC-DS DAGs)")
    p.add_argument("--systems", default="YARN-PT,YARN-H,YARN-H-forecast",
                   help="comma list of YARN-Stock, YARN-PT, YARN-PT-spread, YARN-H, YARN-PT-forecast, "
                        "YARN-H-forecast (default: YARN-PT,YARN-H,YARN-H-forecast)")
    p.add_argument("--step-s", type=finite_float, default=60.0, help="time step (s)")
    p.add_argument("--workers", type=int, default=1,
                   help="processes simulating (system, level, run) points side by side (default 1; the records are "
                        "the same for any number)")
    p.add_argument("--reserve-frac", type=finite_float, default=1 / 3, help="cores kept for the primary (default 1/3)")
    p.add_argument("--offered-core-frac", type=finite_float, default=0.05, help="batch load as a fraction of all cores")
    p.add_argument("--length-scale", type=finite_float, default=5.0, help="task length multiplier")
    p.add_argument("--interarrival-s", type=finite_float, default=300.0, help="mean job inter-arrival time (s)")
    p.add_argument("--max-wait-s", type=finite_float, default=1800.0,
                   help="YARN-H job without a class waits this long, then runs anywhere (inf: forever)")
    p.add_argument("--pt-server-choice", choices=["fill", "proportional"], default="fill")
    p.add_argument("--reselect-after-s", type=finite_float, default=1800.0,
                   help="YARN-H job starved this long asks class selection again (0: never, as the paper)")
    p.add_argument("--forecast-horizon-s", type=finite_float, default=3600.0,
                   help="*-forecast systems: how far ahead the headroom forecast looks (default 3600 s)")
    p.add_argument("--forecast-quantile", type=finite_float, default=0.9,
                   help="*-forecast systems: quantile of the history's forward peaks per hour of day (default 0.9)")
    p.add_argument("--no-forecast-spill", action="store_true",
                   help="*-forecast systems: never use cores the forecast says the primary will take back "
                        "(default: use them last)")
    p.add_argument("--agent-max-kills", type=int, default=AGENT.max_kills_per_round,
                   help="node agent: most containers killed per agent tick (default: the agent's, "
                        f"{AGENT.max_kills_per_round}; a large number means no cap)")
    p.add_argument("--agent-cooldown-s", type=finite_float, default=AGENT.cooldown_s,
                   help=f"node agent: after a kill the advertised cores do not grow for this long "
                        f"(default: the agent's, {AGENT.cooldown_s:g} s; 0: no cool-down)")
    p.add_argument("--agent-tick-s", type=finite_float, default=AGENT.tick_s,
                   help=f"node agent: seconds between decisions (default {AGENT.tick_s:g})")
    p.set_defaults(func=_schedule)

    p = sub.add_parser("durability", help="HDFS-Stock vs HDFS-H: blocks lost in a year of reimages")
    _inputs(p, reimages_required=True)
    p.add_argument("--replicas", type=_ints, default=[3, 4])
    p.add_argument("--blocks", type=int, default=4_000_000)
    p.add_argument("--days", type=finite_float, default=365.0)
    p.add_argument("--step-s", type=finite_float, default=3600.0)
    p.add_argument("--repair-blocks-per-hour", type=finite_float, default=30.0)
    p.add_argument("--block-size-mb", type=finite_float, default=256.0)
    p.add_argument("--place-every-s", type=finite_float, default=None,
                   help="HDFS-H and its variants place the new blocks of this many seconds in one batch call, each "
                        "still written at its own step (default: one call per --step-s; harvest whatif uses a day)")
    p.add_argument("--workers", type=int, default=1,
                   help="processes simulating points side by side (default 1; the records are the same for any number)")
    p.add_argument("--systems", default="HDFS-Stock,HDFS-H", help=_systems_help())
    _mover_options(p, "the simulated days")
    p.set_defaults(func=_durability)

    p = sub.add_parser("availability", help="HDFS-Stock vs HDFS-H: failed accesses vs utilization")
    _inputs(p)
    p.add_argument("--levels", type=_floats, default=[0.2, 0.3, 0.4, 0.5, 0.6])
    p.add_argument("--replicas", type=_ints, default=[3, 4])
    p.add_argument("--scaling", choices=["linear", "root"], default="linear")
    p.add_argument("--days", type=finite_float, default=21.0, help="days of accesses after the history")
    p.add_argument("--blocks", type=int, default=200_000)
    p.add_argument("--accesses", type=int, default=1_000_000)
    p.add_argument("--reserve-frac", type=finite_float, default=1 / 3)
    p.add_argument("--busy-cpu", type=finite_float, default=None, help="busy threshold (default 1 - reserve)")
    p.add_argument("--block-size-mb", type=finite_float, default=256.0)
    p.add_argument("--workers", type=int, default=1,
                   help="processes simulating points side by side (default 1; the records are the same for any number)")
    p.add_argument("--systems", default="HDFS-Stock,HDFS-H", help=_systems_help())
    _mover_options(p, "the access window")
    p.set_defaults(func=_availability)

    p = sub.add_parser("report", help="Markdown report (and figures) from results directories")
    p.add_argument("results", nargs="+", help="directories holding results.json")
    p.add_argument("--out", required=True, type=output_file, help="Markdown file to write (e.g. docs/results.md)")
    p.add_argument("--figures", help="directory for the figures (default: next to the Markdown)")
    p.set_defaults(func=_report)

    sim.set_defaults(func=lambda args: (sim.print_help(), 2)[1])


def load_input(args: argparse.Namespace) -> Any:
    """The ``SimDatacenter`` named by the input flags."""
    from placement_service.sim import datacenter as dcm

    given = [x for x in (args.utilization or args.inventory, args.generate, args.real) if x]
    if len(given) != 1:
        raise SimUsageError("give exactly one of --utilization/--inventory, --generate N or --real")
    if args.interval_s is not None and not args.utilization:
        raise SimUsageError("--interval-s applies to --utilization files (generated and real traces have their own)")
    if args.generate:
        from placement_service.traces.generate import generate_datacenter

        gen = generate_datacenter(
            args.generate, seed=args.generate_seed, days=args.generate_days, reimage_days=args.reimage_days
        )
        return dcm.from_generated(gen, args.name or f"generated-{args.generate}-s{args.generate_seed}")
    if args.real:
        from placement_service.sim.real import real_sim_datacenter

        return real_sim_datacenter(args.real, n_servers=args.real_servers, seed=args.generate_seed)
    if not (args.utilization and args.inventory):
        raise SimUsageError("--utilization and --inventory go together")
    return dcm.load_datacenter(args.utilization, args.inventory, args.reimages, name=args.name,
                               interval_s=args.interval_s)


def load_jobs(folder: str) -> list[Any]:
    """Every ``*.json`` job of ``folder`` (sorted by name), each checked by the core's job parser."""
    from placement_service.core.dag import parse_job

    path = Path(folder)
    if not path.is_dir():
        raise SimUsageError(f"--jobs {folder}: not a folder of job JSON files")
    files = sorted(path.glob("*.json"))
    if not files:
        raise SimUsageError(f"--jobs {folder}: no *.json job files")
    jobs = []
    for f in files:
        try:
            doc = json.loads(f.read_text())
        except (OSError, ValueError) as exc:
            raise SimUsageError(f"{f}: cannot read the job JSON: {exc}") from None
        jobs.append(parse_job(doc, source=str(f)))
    return jobs


E = TypeVar("E", bound=StrEnum)


def _systems(text: str, kind: type[E]) -> list[E]:
    """The ``--systems`` comma list as members of ``kind`` (YarnSystem or HdfsSystem)."""
    names = [s.strip() for s in text.split(",") if s.strip()]
    known = [m.value for m in kind]
    unknown = [s for s in names if s not in known]
    if unknown or not names:
        raise SimUsageError(
            f"--systems: unknown system(s) {', '.join(unknown) or '(none given)'}; "
            f"expected a comma list of {', '.join(known)}"
        )
    return [kind(s) for s in names]


def _check_runs(args: argparse.Namespace) -> None:
    if args.runs < 1:
        raise SimUsageError(f"--runs must be >= 1, got {args.runs}")
    if args.workers < 1:
        raise SimUsageError(f"--workers must be >= 1, got {args.workers}")


def _show_progress() -> None:
    """One line on stderr per finished run (``[k/n] ... (wall s)``), also without ``-v``: a sweep
    over a 5,000-server month takes minutes and should not look stuck."""
    run_logger = logging.getLogger("placement_service.sim.run")
    if run_logger.getEffectiveLevel() <= logging.INFO or any(isinstance(h, _Progress) for h in run_logger.handlers):
        return
    handler = _Progress()
    handler.setFormatter(logging.Formatter("harvest sim: %(message)s"))
    run_logger.addHandler(handler)
    run_logger.setLevel(logging.INFO)
    run_logger.propagate = False


class _Progress(logging.StreamHandler):  # type: ignore[type-arg]
    """The progress handler (a class of its own so that it is installed once per process); writes
    to whatever ``sys.stderr`` is at the time, as the tests' captured streams change."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


@functools.cache
def _code_version() -> str | None:
    """The checkout's commit (``+dirty`` when it has local changes), so a result says which code made
    it; None outside a git checkout. Cached: first called when a run starts, so a commit made while
    it runs is not credited with its result."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "--short=10", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return head + ("+dirty" if dirty else "") if head else None


def _finish(out: Path, experiment: str, dc: Any, settings: dict[str, Any], records: list[Any], t0: float) -> int:
    from placement_service.sim.figures import figures_for
    from placement_service.sim.results import write_results

    settings = {**settings, "servers": dc.n_servers, "tenants": dc.n_tenants, "wall_s": time.perf_counter() - t0,
                "finished": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "code": _code_version()}
    doc = write_results(out, experiment, dc.name, settings, records)
    paths = figures_for(doc, out, title=f"{experiment}: {dc.name}")
    print(json.dumps({"results": str(out / "results.json"), "figures": [str(p) for p in paths],
                      "summary": doc["summary"]}, indent=1, default=str))
    return 0


def _schedule(args: argparse.Namespace, *, dc: Any = None, shared: Any = None) -> int:
    """``harvest sim schedule``; ``dc`` / ``shared``: a datacenter already loaded from these flags and
    the scaled series and clusterings shared with other sweeps (``harvest whatif``)."""
    from placement_service.sim.datacenter import Scaling
    from placement_service.sim.run import run_schedule
    from placement_service.sim.schedule import ScheduleConfig, ServerChoice, YarnSystem
    from placement_service.sim.workload import WorkloadConfig

    _check_runs(args)
    _show_progress()
    try:
        systems = _systems(args.systems, YarnSystem)
        config = ScheduleConfig(
            days=args.days, history_days=args.history_days, step_s=args.step_s, reserve_frac=args.reserve_frac,
            pt_server_choice=ServerChoice(args.pt_server_choice), h_max_wait_s=args.max_wait_s,
            h_reselect_after_s=args.reselect_after_s, forecast_horizon_s=args.forecast_horizon_s,
            forecast_quantile=args.forecast_quantile, forecast_spill=not args.no_forecast_spill,
            agent=AgentSettings(
                max_kills_per_round=args.agent_max_kills, cooldown_s=args.agent_cooldown_s, tick_s=args.agent_tick_s
            ),
            workload=WorkloadConfig(
                mean_interarrival_s=args.interarrival_s, length_scale=args.length_scale,
                offered_core_frac=args.offered_core_frac,
            ),
        )
    except ValueError as exc:
        raise SimUsageError(str(exc)) from None
    t0 = time.perf_counter()
    _code_version()
    dc = dc if dc is not None else load_input(args)
    records = run_schedule(
        dc, levels=args.levels, scaling=Scaling(args.scaling), runs=args.runs, seed=args.seed, config=config,
        systems=systems, jobs=load_jobs(args.jobs) if args.jobs else None, workers=args.workers, shared=shared,
    )
    settings = {k: v for k, v in vars(args).items() if k != "func"}
    return _finish(Path(args.out), "schedule", dc, settings, records, t0)


def _mover_options(p: argparse.ArgumentParser, window: str) -> None:
    c = p.add_argument_group("HDFS-H-cobusy and HDFS-H-cobusy-mover (docs/policy.md, core/cobusy.py)")
    c.add_argument("--cobusy-risk-target", type=finite_float, default=COBUSY_RISK_TARGET,
                   help="re-replications: a tenant whose estimated probability of being busy together with the "
                        "surviving replicas' tenants is at most this is good enough, and the new replica goes to any "
                        "such tenant (moves take the lowest estimate; new blocks: --cobusy-new-target); 0: repairs take the lowest too, "
                        "which converges blocks onto the quietest few tenants and costs durability at scale "
                        f"(default {COBUSY_RISK_TARGET:g})")
    c.add_argument("--cobusy-spread", type=finite_float, default=COBUSY_SPREAD,
                   help="the spread bound: every co-busy choice (new blocks, re-replications, moves) passes over a "
                        "tenant that took more than this many times its servers' share of its grid cell's choices, "
                        "while a tenant under the bound keeps the block under the risk target; it spreads the quiet "
                        "tenants' replicas (shorter re-replication backlogs at scale) at some cost in availability "
                        f"(2: HDFS's considerLoad factor; 0: off; default {COBUSY_SPREAD:g})")
    c.add_argument("--cobusy-new-target", type=finite_float, default=COBUSY_NEW_TARGET,
                   help="new blocks: a tenant that keeps the block's estimated probability of all its replicas' "
                        "tenants busy at once at most this is as good as the lowest, and the replica goes to any "
                        "such tenant, as --cobusy-risk-target does for re-replications; it spreads new blocks over "
                        f"more tenants (default {COBUSY_NEW_TARGET:g}: the lowest estimate)")
    c.add_argument("--cobusy-new-max-turnover", type=finite_float, default=COBUSY_NEW_MAX_TURNOVER,
                   help="--cobusy-new-target applies only while at most this share of the tenants never busy in the "
                        "first half of the estimates' history were busy in its second half (the history predicts "
                        "itself); otherwise new blocks take the lowest estimate (1: always apply; "
                        f"default {COBUSY_NEW_MAX_TURNOVER:g})")
    c.add_argument("--reimage-choices", type=int, default=REIMAGE_CHOICES,
                   help="co-busy placements put a replica on the server with the fewest reimages seen (the "
                        "history's, then the simulated ones) of this many random usable servers of the chosen "
                        f"tenant; the tenant is chosen as before (1: uniform, as HDFS-H; default {REIMAGE_CHOICES})")
    c.add_argument("--repair-choices", type=int, default=REPAIR_CHOICES,
                   help="re-replications: of this many random tenants among those that keep the block under the "
                        "risk target, the one whose servers were reimaged least often (reimages seen per server); "
                        "fewer re-replications, but repairs crowd onto the rarely reimaged tenants "
                        f"(1: uniform; default {REPAIR_CHOICES})")
    m = p.add_argument_group("HDFS-H-cobusy-mover (docs/policy.md, core/mover.py)")
    m.add_argument("--move-every-days", type=finite_float, default=MOVE_EVERY_DAYS,
                   help=f"refit the co-busy estimates on the trailing --history-days and move replicas every this many "
                        f"days of {window} (default {MOVE_EVERY_DAYS:g})")
    m.add_argument("--move-risk-max", type=finite_float, default=MoveConfig.risk_max,
                   help="estimated probability that all of a block's replicas are busy at once above which it moves "
                        f"(default {MoveConfig.risk_max:g})")
    m.add_argument("--move-max-frac", type=finite_float, default=MOVE_MAX_FRAC_PER_DAY,
                   help=f"at most this share of the blocks moves per day of {window}, spread over the passes "
                        f"(default {MOVE_MAX_FRAC_PER_DAY:g})")
    m.add_argument("--move-budget-gb", type=finite_float, default=MOVE_BUDGET_MB_PER_SERVER_DAY / 1024.0,
                   help="each primary tenant sends and receives at most this many GB of moved replicas a day per "
                        "server it has (the copy's read and write; daily passes and the watch share it; 0: no moves; "
                        f"default {MOVE_BUDGET_MB_PER_SERVER_DAY / 1024.0:g}, docs/policy.md)")
    m.add_argument("--watch-every-hours", type=finite_float, default=WATCH_EVERY_HOURS,
                   help="between the passes, every this many hours, blocks with every live replica but one on a "
                        "tenant busy at that hour move a busy replica to a tenant that is not (core.mover.move_busy_now); "
                        f"0: no watch (default {WATCH_EVERY_HOURS:g})")


def _move_config(args: argparse.Namespace) -> MoveConfig:
    """The mover's per-pass settings from its options, and the co-busy risk target checked (both
    before any input is read)."""
    for opt in ("cobusy_risk_target", "cobusy_new_target"):
        if not 0.0 <= getattr(args, opt) < 1.0:
            raise SimUsageError(f"--{opt.replace('_', '-')} must be in [0, 1), got {getattr(args, opt):g}")
    if not 0.0 <= args.cobusy_new_max_turnover <= 1.0:
        raise SimUsageError(f"--cobusy-new-max-turnover must be in [0, 1], got {args.cobusy_new_max_turnover:g}")
    if not (args.cobusy_spread == 0.0 or args.cobusy_spread >= 1.0):
        raise SimUsageError(f"--cobusy-spread must be 0 (no bound) or >= 1, got {args.cobusy_spread:g}")
    if not args.watch_every_hours >= 0.0:
        raise SimUsageError(f"--watch-every-hours must be >= 0 (0: no watch), got {args.watch_every_hours:g}")
    for opt in ("reimage_choices", "repair_choices"):
        if getattr(args, opt) < 1:
            raise SimUsageError(f"--{opt.replace('_', '-')} must be >= 1, got {getattr(args, opt)}")
    try:
        return mover_config(args.move_every_days, args.move_risk_max, args.move_max_frac,
                            budget_mb_per_server_day=1024.0 * args.move_budget_gb)
    except (ValueError, PolicyError) as exc:
        raise SimUsageError(f"HDFS-H-cobusy-mover options: {exc}") from None


def _durability(args: argparse.Namespace, *, dc: Any = None, shared: Any = None) -> int:
    """``harvest sim durability``; ``dc`` / ``shared`` as in :func:`_schedule`."""
    from placement_service.sim.durability import DurabilityConfig
    from placement_service.sim.policy import HdfsSystem
    from placement_service.sim.run import run_durability

    _check_runs(args)
    _show_progress()
    systems = _systems(args.systems, HdfsSystem)
    move = _move_config(args)
    try:
        config = DurabilityConfig(
            days=args.days, blocks=args.blocks, step_s=args.step_s,
            repair_blocks_per_hour=args.repair_blocks_per_hour, block_size_mb=args.block_size_mb,
            place_every_s=args.place_every_s,
        )
    except ValueError as exc:
        raise SimUsageError(str(exc)) from None
    t0 = time.perf_counter()
    _code_version()
    if dc is None:
        dc = load_input(args)
        if args.utilization and not args.reimages:
            dc = _with_synthetic_reimages(dc, args)
    records = run_durability(
        dc, replicas=args.replicas, runs=args.runs, seed=args.seed, config=config, history_days=args.history_days,
        systems=systems, workers=args.workers, move_config=move, move_every_days=args.move_every_days,
        cobusy_risk_target=args.cobusy_risk_target,
        cobusy_spread=args.cobusy_spread, cobusy_new_target=args.cobusy_new_target,
        cobusy_new_max_turnover=args.cobusy_new_max_turnover,
        reimage_choices=args.reimage_choices,
        repair_choices=args.repair_choices, watch_every_hours=args.watch_every_hours, shared=shared,
    )
    settings = {k: v for k, v in vars(args).items() if k != "func"}
    return _finish(Path(args.out), "durability", dc, settings, records, t0)


def _with_synthetic_reimages(dc: Any, args: argparse.Namespace) -> Any:
    """No reimage log for the user's own inventory: draw one from the generator's model over the
    simulated days (docs/generator.md), and say so in the output and in the results' settings."""
    import dataclasses

    from placement_service.traces.importer import synthetic_reimages

    events = synthetic_reimages(dc.inventory, start_s=float(dc.series.start_s), days=args.days, seed=args.seed)
    note = (f"no --reimages: {len(events.server)} synthetic reimages drawn from the generator's model over "
            f"{args.days:g} days (seed {args.seed}); give your reimage or repair log for real figures")
    print(f"harvest sim durability: {note}")
    args.reimage_note = note
    return dataclasses.replace(dc, reimages=events, reimage_window_s=float(args.days) * 86400.0)


def _availability(args: argparse.Namespace, *, dc: Any = None, shared: Any = None) -> int:
    """``harvest sim availability``; ``dc`` / ``shared`` as in :func:`_schedule`."""
    from placement_service.sim.availability import AvailabilityConfig
    from placement_service.sim.datacenter import Scaling
    from placement_service.sim.policy import HdfsSystem
    from placement_service.sim.run import run_availability

    _check_runs(args)
    _show_progress()
    systems = _systems(args.systems, HdfsSystem)
    move = _move_config(args)
    try:
        config = AvailabilityConfig(
            days=args.days, history_days=args.history_days, blocks=args.blocks, accesses=args.accesses,
            reserve_frac=args.reserve_frac, busy_cpu=args.busy_cpu, block_size_mb=args.block_size_mb,
        )
    except ValueError as exc:
        raise SimUsageError(str(exc)) from None
    t0 = time.perf_counter()
    _code_version()
    dc = dc if dc is not None else load_input(args)
    records = run_availability(
        dc, levels=args.levels, replicas=args.replicas, scaling=Scaling(args.scaling), runs=args.runs,
        seed=args.seed, config=config, systems=systems, workers=args.workers,
        move_config=move, move_every_days=args.move_every_days, cobusy_risk_target=args.cobusy_risk_target,
        cobusy_spread=args.cobusy_spread, cobusy_new_target=args.cobusy_new_target,
        cobusy_new_max_turnover=args.cobusy_new_max_turnover,
        reimage_choices=args.reimage_choices,
        repair_choices=args.repair_choices, watch_every_hours=args.watch_every_hours, shared=shared,
    )
    settings = {k: v for k, v in vars(args).items() if k != "func"}
    return _finish(Path(args.out), "availability", dc, settings, records, t0)


def _report(args: argparse.Namespace) -> int:
    from placement_service.sim.report import write_report

    path = write_report([Path(r) for r in args.results], Path(args.out), Path(args.figures) if args.figures else None)
    print(path)
    return 0

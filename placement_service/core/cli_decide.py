"""``harvest select`` and ``harvest place``: the two policy decisions from the command line.

Thin adapters: read files, build the pure policy objects of ``core/selection.py`` and
``core/placement.py``, print or write the decisions.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from placement_service import HarvestError
from placement_service.atomic import atomic_open
from placement_service.validate import InputError, finite_float, load_json_file, output_file


class DecideInputError(HarvestError):
    """A file given to ``harvest select`` / ``harvest place`` is missing or unreadable."""


def register(subparsers: Any) -> None:
    sel = subparsers.add_parser(
        "select",
        help="choose the utilization classes a batch job should run in",
        description=(
            "Class selection for one job: its type (short / medium / long) from its last duration, its "
            "peak concurrent containers from its DAG (largest per-level sum of task counts), then one "
            "class drawn with probability proportional to weighted headroom, several classes when no "
            "single one fits, or none (the job should wait). Prints one JSON object "
            '{"job_type", "max_concurrency", "classes": [...]}.'
        ),
    )
    sel.add_argument("--classes", required=True, type=Path, help="classes.json written by 'harvest cluster'")
    src = sel.add_mutually_exclusive_group(required=True)
    src.add_argument(
        "--job",
        type=Path,
        help='job JSON: {"name", "last_duration_s"|null, "vertices": {name: {"tasks": n}}, '
        '"edges": [{"src", "dst", "type"}]}',
    )
    src.add_argument("--tpcds", metavar="Q", help="use the bundled TPC-DS query Q (1..99) as the job")
    sel.add_argument(
        "--tpcds-bytes-scale",
        type=finite_float,
        default=1.0,
        help="with --tpcds: scale the plans' 30 TB byte estimates before deriving task counts "
        "(e.g. 0.0333 for about 1 TB; default 1.0)",
    )
    sel.add_argument(
        "--last-duration-s",
        type=finite_float,
        default=None,
        help="with --tpcds: the job's last duration in seconds (default: never ran = medium job)",
    )
    sel.add_argument("--seed", type=int, default=0, help="seed of the random draw (default 0)")
    sel.add_argument(
        "--short-max-s",
        type=finite_float,
        default=300.0,
        help="last run shorter than this = short job (default 300)",
    )
    sel.add_argument(
        "--long-min-s",
        type=finite_float,
        default=3600.0,
        help="last run at least this long = long job (default 3600)",
    )
    sel.add_argument(
        "--reserve-frac",
        type=finite_float,
        default=0.0,
        help="fraction of each class's cores kept for the primary tenants (default 0.0)",
    )
    sel.add_argument("--container-cores", type=finite_float, default=1.0, help="cores per container (default 1.0)")
    sel.set_defaults(func=_select)

    pl = subparsers.add_parser(
        "place",
        help="place the replicas of N new HDFS blocks over the reimage x peak-CPU grid",
        description=(
            "Replica placement for N blocks of 256 MB: the first replica on the writer's server (writers "
            "drawn uniformly from servers with space), each further one in an unused row and column of "
            "the 3x3 grid, in an environment without a replica of the block. Writes one JSON line per "
            'block {"block", "writer", "replicas": [...], "relaxed"} (a block that could not be placed '
            'has "replicas": [] and an "error") atomically to --out, and prints a JSON summary. '
            "Never exceeds a server's storage_gb."
        ),
    )
    pl.add_argument(
        "--classes", required=True, type=Path, help="classes.json with a 'grid' (from 'harvest cluster')"
    )
    pl.add_argument("--inventory", required=True, type=Path, help="inventory (Parquet or CSV)")
    pl.add_argument("--blocks", required=True, type=int, help="number of blocks to place")
    pl.add_argument("--replicas", type=int, default=3, help="replicas per block (default 3)")
    pl.add_argument("--seed", type=int, default=0, help="seed of writers and placement (default 0)")
    pl.add_argument("--out", required=True, type=output_file, help="output file, one JSON line per block")
    pl.add_argument(
        "--strict",
        action="store_true",
        help="refuse a block when the row / column / environment constraints cannot be met "
        "(default: relax them in order column, row, environment, grid, and say so)",
    )
    pl.add_argument(
        "--stock", action="store_true", help="use stock HDFS rack-aware placement instead (for comparison)"
    )
    pl.set_defaults(func=_place)


def _read_json(path: Path, what: str) -> Any:
    try:
        return load_json_file(path, what)
    except InputError as exc:
        raise DecideInputError(str(exc)) from None


def _select(args: argparse.Namespace) -> int:
    import numpy as np

    from placement_service.core.dag import parse_job
    from placement_service.core.selection import ClassSelector, SelectionConfig
    from placement_service.core.types import ClassTable, PolicyError

    table = ClassTable.from_json(_read_json(args.classes, "class table"), source=str(args.classes))
    if args.job is not None:
        job = parse_job(_read_json(args.job, "job"), source=str(args.job))
    else:
        from placement_service.core.tpcds import tpcds_jobs

        jobs = {
            j.name: j
            for j in tpcds_jobs(bytes_scale=args.tpcds_bytes_scale, last_duration_s=args.last_duration_s)
        }
        name = f"tpcds-q{str(args.tpcds).removeprefix('q')}"
        if name not in jobs:
            raise PolicyError(f"--tpcds: no bundled query {args.tpcds!r} (use 1..99)")
        job = jobs[name]
    config = SelectionConfig(
        short_max_s=args.short_max_s,
        long_min_s=args.long_min_s,
        reserve_frac=args.reserve_frac,
        container_cores=args.container_cores,
    )
    selector = ClassSelector(table.classes, config)
    sel = selector.select(job, np.random.default_rng(args.seed))
    print(
        json.dumps(
            {
                "job_type": sel.job_type.value,
                "max_concurrency": sel.max_concurrency,
                "classes": list(sel.classes),
            }
        )
    )
    return 0


def _place(args: argparse.Namespace) -> int:
    import numpy as np

    from placement_service.core.placement import PlacementConfig, ReplicaPlacer
    from placement_service.core.stock_placement import StockPlacer
    from placement_service.core.types import ClassTable, PlacementError, PolicyError
    from placement_service.traces.io import load_inventory

    if args.blocks < 0:
        raise PolicyError(f"--blocks must be >= 0, got {args.blocks}")
    if args.replicas < 1:
        raise PolicyError(f"--replicas must be >= 1, got {args.replicas}")
    table = ClassTable.from_json(_read_json(args.classes, "class table"), source=str(args.classes))
    if table.grid is None and not args.stock:
        raise PolicyError(
            f"{args.classes}: has no 'grid'; run 'harvest cluster' with --reimages and --inventory to build it"
        )
    inventory = load_inventory(args.inventory)
    config = PlacementConfig(strict=args.strict)
    cls = StockPlacer if args.stock else ReplicaPlacer
    placer = cls(inventory, table.grid or {}, config=config, seed=args.seed)
    writers = np.random.default_rng([args.seed, 1])

    placed = relaxed = failed = distinct_env = distinct_cells = 0
    index = inventory.index()
    grid = table.grid or {}
    first_failure = ""
    with atomic_open(args.out, "w") as f:
        for block in range(args.blocks):
            writer = placer.random_usable(writers)
            line: dict[str, Any] = {"block": block, "writer": writer}
            try:
                res = placer.place(writer, args.replicas)
            except PlacementError as exc:
                failed += 1
                first_failure = first_failure or f"block {block}: {exc}"
                line.update(replicas=[], relaxed=False, error=str(exc))
            else:
                placed += 1
                relaxed += res.relaxed
                line.update(replicas=list(res.targets), relaxed=res.relaxed)
                rows_cols = _diversity(res.targets, inventory, index, grid)
                distinct_env += rows_cols[0]
                distinct_cells += rows_cols[1]
                if res.reason:
                    line["reason"] = res.reason
            f.write(json.dumps(line) + "\n")
    summary = {
        "policy": "stock" if args.stock else ("grid-strict" if args.strict else "grid"),
        "blocks": args.blocks,
        "replicas": args.replicas,
        "placed": placed,
        "relaxed": relaxed,
        "failed": failed,
        "blocks_in_distinct_environments": distinct_env,
        "blocks_in_distinct_rows_and_columns": distinct_cells,
        "servers_with_space_left": placer.usable_count(),
        "out": str(args.out),
    }
    if first_failure:
        summary["first_failure"] = first_failure
    print(json.dumps(summary))
    return 0


def _diversity(
    targets: tuple[str, ...], inventory: Any, index: dict[str, int], grid: Any
) -> tuple[bool, bool]:
    """(replicas in pairwise distinct environments, in distinct grid rows and columns per round of 3)."""
    envs = {inventory.environment[index[s]] for s in targets}
    cells = [grid.get(inventory.tenant[index[s]]) for s in targets]
    ok_cells = all(c is not None for c in cells)
    for start in range(0, len(cells), 3):
        part = [c for c in cells[start : start + 3] if c is not None]
        ok_cells = ok_cells and len({c.reimage_row for c in part}) == len(
            {c.peak_column for c in part}
        ) == len(part)
    return len(envs) == len(targets), ok_cells

"""POP for RAS end to end: partition, sub-problems on Dask (or in this process), coalesce, bound.

The sub-problems' method: ``Method.AUTO`` (the default) runs as ``Method.LP_ROUND`` inside a part (LP,
rounding, repair; no branch-and-bound). Measured on the 100k region (docs/bench/pop.md),
branch-and-bound in the parts cost 4-7x the time for at most 0.4% better plans (k = 2: worse), and
a part cut off by its clock makes the plan depend on machine load. ``mip`` and ``greedy`` are passed
through as given.

``auto_k``: how many parts when none is given (the rule and its reason are printed by the CLI).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from placement_service.capacity.pop.execute import connect, run_parts
from placement_service.capacity.pop.ras_pop import (
    PartResult,
    build_parts,
    finish_plan,
    full_lp_bound,
    solve_part,
)
from placement_service.capacity.ras.domain import Method, Problem, Region, Settings
from placement_service.capacity.ras.plan import Plan

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PopOptions:
    """``k`` sub-problems; ``split_threshold`` extra virtual clients per client (Algorithm-2 style)."""

    k: int
    split_threshold: float = 0.0
    seed: int = 0
    scheduler: str | None = None  # tcp://HOST:PORT of an existing cluster; None: a LocalCluster
    workers: int | None = None  # LocalCluster size (default: the machine's cores)
    part_time_limit_s: float | None = None  # default: the time limit / waves of sub-problems
    timeout_s: float | None = None  # wall limit for the whole run (default: 3 x time limit + 60 s)
    connect_timeout_s: float = 10.0  # give up reaching ``scheduler`` after this
    bound: bool = True  # compute the full problem's LP bound (one more task)
    inline: bool = False  # solve the sub-problems one after another in this process (no Dask)


# auto k: below AUTO_MIN_SERVERS available servers the full solve's LP + rounding takes seconds and
# POP only loses quality; above it, the fewest parts (a power of two, at least 2) of at most
# AUTO_PART_SERVERS servers each, and at most AUTO_MAX_K (the loss from partitioning grows with k)
AUTO_MIN_SERVERS = 20_000
AUTO_PART_SERVERS = 12_500
AUTO_MAX_K = 16


def auto_k(region: Region) -> tuple[int, str]:
    """The number of sub-problems for ``region`` and the reason, in words (see the constants above)."""
    n = int(region.available.sum())
    if n < AUTO_MIN_SERVERS:
        return 1, (f"{n:,} available servers (< {AUTO_MIN_SERVERS:,}): one full solve, its LP + rounding "
                   f"takes seconds at this size and splitting would only lose quality")  # fmt: skip
    k = 2
    while k < AUTO_MAX_K and n / k > AUTO_PART_SERVERS:
        k *= 2
    rule = (f"at most {AUTO_PART_SERVERS:,} each, at least 2" if n / k <= AUTO_PART_SERVERS
            else f"capped at {AUTO_MAX_K} parts, as the loss from partitioning grows with k")  # fmt: skip
    return k, f"{n:,} available servers (>= {AUTO_MIN_SERVERS:,}): {k} sub-problems of about {n // k:,} servers ({rule})"


def part_settings(st: Settings, time_limit_s: float) -> Settings:
    """A sub-problem's settings: its share of the time; ``auto`` runs as ``lp-round`` (module docstring)."""
    method = Method.LP_ROUND if st.method == Method.AUTO else st.method
    return replace(st, time_limit_s=time_limit_s, method=method)


def _progress(done: int, total: int, values: list[Any]) -> None:
    gaps = [v.gap for v in values if isinstance(v, PartResult) and math.isfinite(v.gap)]
    best = f", gap of finished parts {min(gaps):.2%}..{max(gaps):.2%}" if gaps else ""
    logger.warning("pop: %d/%d sub-problems done%s", done, total, best)


def solve_pop(problem: Problem, opts: PopOptions,
              progress: Callable[[int, int, list[Any]], None] | None = _progress) -> tuple[Plan, dict[str, object]]:
    """The coalesced plan and the POP report (``pop_k``, per-part status/gap/wall, the full LP bound)."""
    t_start = time.monotonic()
    t0 = time.monotonic()
    parted = build_parts(problem, opts.k, opts.split_threshold, opts.seed)
    phases: list[dict[str, object]] = [{"phase": "pop-partition", "wall_s": time.monotonic() - t0,
                                        "virtual_clients": sum(len(p.requests) for p in parted.parts)}]  # fmt: skip
    st = problem.settings
    results: dict[int, PartResult] = {}
    failed: dict[int, str] = {}
    bound: dict[str, Any] | None = None
    if opts.inline:
        part_limit = opts.part_time_limit_s or st.time_limit_s / opts.k
        sub_st = part_settings(st, part_limit)
        for spec in parted.parts:
            results[spec.index] = solve_part(problem.region, spec, sub_st)
            if progress:
                progress(len(results), opts.k, list(results.values()))
        if opts.bound:
            bound = full_lp_bound(problem.region, parted.requests, st, problem.previous, st.time_limit_s)
    else:
        client, cluster = connect(opts.scheduler, opts.workers, opts.connect_timeout_s)
        try:
            n_workers = max(1, len(client.scheduler_info().get("workers", {})))
            waves = math.ceil(opts.k / n_workers)
            part_limit = opts.part_time_limit_s or st.time_limit_s / waves
            sub_st = part_settings(st, part_limit)
            timeout = opts.timeout_s or 3 * part_limit * waves + 60 + 0.001 * len(problem.region)
            # the bound may take as long as the whole run (it is computed beside the sub-problems)
            extra = [(full_lp_bound, (parted.requests, st, problem.previous, timeout))] if opts.bound else []
            logger.warning("pop: %d sub-problems on %d Dask worker(s), %.0f s each", opts.k, n_workers, part_limit)
            parts, extras = run_parts(client, solve_part, problem.region, parted.parts, (sub_st,),
                                      timeout_s=timeout, extra=extra, progress=progress)  # fmt: skip
        finally:
            client.close()
            if cluster is not None:
                cluster.close()
        for o in parts:
            if o.error is None:
                results[o.index] = o.value
            else:
                failed[o.index] = o.error
                logger.warning("pop: sub-problem %d incomplete: %s", o.index, o.error)
        if extras and extras[0].error is None:
            bound = extras[0].value
        elif extras:
            bound = {"lp_bound": float("nan"), "status": f"not computed: {extras[0].error}"}
    phases.extend({"phase": f"pop-part-{r.index}", "status": r.status, "objective": r.objective, "gap": r.gap,
                   "wall_s": r.wall_s} for r in sorted(results.values(), key=lambda r: r.index))  # fmt: skip
    return finish_plan(problem, parted, results, failed, bound, opts.k, t_start, phases)

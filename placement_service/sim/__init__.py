"""Trace-driven simulator: the policy core's clustering, class selection and replica placement run
over months of primary-tenant traces at datacenter scale (``harvest sim ...``).

Modules: ``datacenter`` (inputs and load scaling), ``workload`` (TPC-DS DAG jobs, Poisson
arrivals), ``schedule`` (YARN-Stock / YARN-PT / YARN-H), ``durability`` and ``reimages`` (a year
of reimages against HDFS-Stock / HDFS-H), ``availability`` (failed accesses), ``policy`` (adapters
to the core), ``run`` (sweeps), ``results`` / ``figures`` / ``report`` (outputs), ``demo`` (the
small configuration behind ``make demo``), ``streams`` (named seeded random streams).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from placement_service.extras import require_extra

require_extra("sim", "the simulator (placement_service.sim)")

if TYPE_CHECKING:
    from pathlib import Path


def demo_results(out_dir: str | Path, seed: int = 0) -> dict[str, Any]:
    """Small, fast versions of the three experiments (see ``placement_service.sim.demo``)."""
    from placement_service.sim.demo import demo_results as run

    return run(out_dir, seed)

"""The small, fast configuration of the three experiments behind ``make demo`` (well under 2 minutes).

A generated datacenter of ``servers`` servers (default 600); scheduling: linear scaling at three
levels, 3 simulated days after 4 days of history, one run; durability: one year, 150k blocks,
3 and 4 replicas; availability: three levels, 3 replicas. Results and figures go to
``out_dir/{schedule,durability,availability}/``; the returned summary holds the per-point means
and the report's checks.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from placement_service.sim.availability import AvailabilityConfig
from placement_service.sim.datacenter import Scaling, from_generated
from placement_service.sim.durability import DurabilityConfig
from placement_service.sim.figures import figures_for
from placement_service.sim.results import write_results
from placement_service.sim.run import run_availability, run_durability, run_schedule
from placement_service.sim.schedule import ScheduleConfig, YarnSystem

logger = logging.getLogger(__name__)


def demo_results(out_dir: str | Path, seed: int = 0, *, servers: int = 600) -> dict[str, Any]:
    from placement_service.traces.generate import generate_datacenter

    t0 = time.perf_counter()
    out = Path(out_dir)
    dc = from_generated(generate_datacenter(servers, seed=seed + 1, days=8), f"demo-{servers}")
    summary: dict[str, Any] = {"datacenter": dc.name, "servers": dc.n_servers, "tenants": dc.n_tenants}
    experiments = (
        (
            "schedule",
            lambda: run_schedule(
                dc, levels=[0.25, 0.4, 0.55], scaling=Scaling.LINEAR, runs=1, seed=seed,
                config=ScheduleConfig(days=3, history_days=4, step_s=120),
                systems=(YarnSystem.PT, YarnSystem.H, YarnSystem.H_FORECAST),
            ),
        ),
        (
            "durability",
            lambda: run_durability(
                dc, replicas=[3, 4], runs=1, seed=seed, config=DurabilityConfig(blocks=150_000), history_days=4
            ),
        ),
        (
            "availability",
            lambda: run_availability(
                dc, levels=[0.25, 0.4, 0.55], replicas=[3], scaling=Scaling.LINEAR, runs=1, seed=seed,
                config=AvailabilityConfig(days=4, history_days=4, blocks=30_000, accesses=200_000),
            ),
        ),
    )
    for name, fn in experiments:
        records = fn()
        doc = write_results(out / name, name, dc.name, {"demo": True, "seed": seed}, records)
        figures_for(doc, out / name, title=f"{name}: {dc.name} (demo)")
        summary[name] = [
            {k: (v["mean"] if isinstance(v, dict) else v) for k, v in s.items()} for s in doc["summary"]
        ]
    summary["wall_s"] = time.perf_counter() - t0
    return summary

"""YARN-H-forecast's figures are pinned to what the simulator produced before its forecast policy
moved into the module the node agent shares (``core/headroom_policy.py``).

``tests/fixtures/sim/forecast_schedule_golden.json`` was written by :func:`forecast_records` on
commit 8b3c6cd (the forecast's growth and the safe-first choice still in ``sim/schedule.py``):

    PYTHONPATH=. python -c "import json; from tests.sim.test_forecast_golden import forecast_records; \\
        print(json.dumps(forecast_records(), indent=1))" > tests/fixtures/sim/forecast_schedule_golden.json

The same seeds through the shared module must give the same records (every field but ``wall_s``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from placement_service.sim.datacenter import Scaling
from placement_service.sim.run import run_schedule
from placement_service.sim.schedule import ScheduleConfig, YarnSystem
from placement_service.sim.workload import WorkloadConfig
from tests.sim.conftest import chain_job, daily_cpu, make_dc

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "sim" / "forecast_schedule_golden.json"


def forecast_records() -> list[dict[str, Any]]:
    """YARN-H-forecast and YARN-PT-forecast, with and without spill, two levels, two runs."""
    dc = make_dc(daily_cpu(8, 5.0, seed=7), servers_per_tenant=5)
    jobs = [chain_job(f"q{i}", [5 + 6 * i, 3 + i, 2]) for i in range(6)]
    out: list[dict[str, Any]] = []
    for spill in (True, False):
        cfg = ScheduleConfig(days=1.0, history_days=3.0, step_s=120.0, forecast_spill=spill,
                             workload=WorkloadConfig(offered_core_frac=0.1, task_s=60.0, length_scale=10.0))
        records = run_schedule(dc, levels=[0.3, 0.5], scaling=Scaling.LINEAR, runs=2, seed=11, config=cfg,
                               systems=(YarnSystem.PT_FORECAST, YarnSystem.H_FORECAST), jobs=jobs)
        out.extend({**{k: v for k, v in r.items() if k != "wall_s"}, "spill": spill} for r in records)
    return out


def test_forecast_systems_give_the_figures_of_the_code_before_the_shared_module() -> None:
    expected = json.loads(GOLDEN.read_text())
    got = json.loads(json.dumps(forecast_records()))
    assert len(got) == len(expected) == 16
    assert sum(r["killed_tasks"] for r in got) > 0  # the forecast's choices matter in these runs
    assert got == expected

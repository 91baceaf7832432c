"""HDFS-H-cobusy's figures are pinned to what the simulator produced before the service took it as
its default placement (issue 38 point 3: the service and the simulator fit the estimates with the
same ``core.cobusy.fit_cobusy``; nothing on the simulator's path may change).

``tests/fixtures/sim/cobusy_availability_golden.json`` was written by :func:`cobusy_records` with the
code of commit 8b3c6cd (``git archive 8b3c6cd placement_service agent | tar -x -C OLD``, run from
another directory so that OLD comes first on the path)::

    cd /tmp && PYTHONPATH=OLD python -c "import json, sys; sys.path.append('WORKTREE'); \\
        from tests.sim.test_cobusy_golden import cobusy_records; \\
        print(json.dumps(cobusy_records(), indent=1))" > WORKTREE/tests/fixtures/sim/cobusy_availability_golden.json
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

GOLDEN = Path(__file__).resolve().parent.parent / "fixtures" / "sim" / "cobusy_availability_golden.json"


def cobusy_records() -> list[dict[str, Any]]:
    """HDFS-H-cobusy and HDFS-H-hours, availability at two levels, 3 replicas, two runs."""
    from placement_service.sim.availability import AvailabilityConfig
    from placement_service.sim.datacenter import Scaling
    from placement_service.sim.policy import HdfsSystem
    from placement_service.sim.run import run_availability
    from tests.sim.conftest import daily_cpu, make_dc

    dc = make_dc(daily_cpu(12, 4.0, seed=5), servers_per_tenant=3)
    cfg = AvailabilityConfig(days=1.0, history_days=2.0, blocks=1500, accesses=20000)
    records = run_availability(dc, levels=[0.5, 0.6], replicas=[3], scaling=Scaling.LINEAR, runs=2, seed=9,
                               config=cfg, systems=(HdfsSystem.H_HOURS, HdfsSystem.H_COBUSY))
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in records]


def test_cobusy_availability_gives_the_figures_of_the_code_before() -> None:
    expected = json.loads(GOLDEN.read_text())
    got = json.loads(json.dumps(cobusy_records()))
    assert len(got) == len(expected) == 8
    assert got == expected

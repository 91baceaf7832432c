"""The headroom forecast reaches the real scheduler (issue 38 point 2): an agent whose primary tenant is
forecast to grow advertises ``capacity - reserve - primary - growth`` to the ResourceManager, and the
RM's new containers go to the other hosts.

worker1 runs the agent (8 cores lent, 2 reserved, primary idle: 6 vcores advertised); worker2 and
worker3 keep their NodeManagers' 4 vcores. A sleep job of more maps than worker2 and worker3 hold at
once is run twice: with a forecast of no growth, worker1 gets containers (the RM node report counts
them); with a forecast of a 0.75 peak (6 of 8 cores: growth 6), worker1 advertises 0 vcores and every
container lands on worker2 and worker3, and the job still succeeds.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

import pytest

from placement_service.core.headroom_policy import TenantForecast
from tests.agent.procs import wait_until
from tests.hadoop.agent_node import AgentNode
from tests.hadoop.conftest import WORKERS, HadoopCluster
from tests.hadoop.test_agent_rm import submit_sleep_job

pytestmark = [pytest.mark.hadoop, pytest.mark.timeout(1200)]


def write_forecast(path: Path, peak_frac: float) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(TenantForecast(WORKERS["worker1"][0], tuple([peak_frac] * 24)).to_json())
    tmp.replace(path)


def node_reports(c: HadoopCluster) -> dict[str, dict[str, Any]]:
    """Host name -> the RM's node report (RUNNING nodes)."""
    nodes = (c.rm_get("/ws/v1/cluster/nodes").get("nodes") or {}).get("node") or []
    return {c.name_of_ip(n["nodeHostName"]): n for n in nodes if n["state"] == "RUNNING"}


def vcores(c: HadoopCluster, host: str) -> int | None:
    node = node_reports(c).get(host)
    return None if node is None else int(node["totalResource"]["vCores"])


def run_job_and_count(c: HadoopCluster, log: Path) -> dict[str, int]:
    """Run a sleep job and return, per host, the most containers the RM's node reports showed at once."""
    most: dict[str, int] = {}
    job = submit_sleep_job(c, maps=12, map_ms=8_000, log=log)
    try:
        while job.poll() is None:
            for host, node in node_reports(c).items():
                most[host] = max(most.get(host, 0), int(node.get("numContainers", 0)))
            time.sleep(0.3)
        assert job.returncode == 0, log.read_text()[-4000:]
        assert "completed successfully" in log.read_text(), log.read_text()[-4000:]
    finally:
        if job.poll() is None:
            job.kill()
            job.wait()
    return most


@pytest.mark.feature("agent: a primary forecast to grow -> fewer vcores advertised, containers on the other hosts")
def test_a_primary_forecast_to_grow_sends_new_containers_to_the_other_hosts(hadoop_cluster: HadoopCluster,
                                                                           tmp_path: Path) -> None:
    c = hadoop_cluster
    forecast = tmp_path / "forecast.json"
    write_forecast(forecast, 0.0)
    settings = {"forecast-file": str(forecast), "tenant": WORKERS["worker1"][0]}
    node = AgentNode(c, "worker1", tmp_path, **settings)  # type: ignore[arg-type]  # (flag names, not keywords)
    try:
        # 1. No growth forecast: capacity 8 - reserve 2 - primary 0 = 6 vcores in the RM.
        assert wait_until(lambda: vcores(c, "worker1") == 6, 90, step_s=0.5), (vcores(c, "worker1"), node.explain())
        assert node.explain()["forecast"]["growth_cores"] == 0
        before = run_job_and_count(c, tmp_path / "job-before.log")
        assert before.get("worker1", 0) >= 1, before  # worker2 + worker3 alone cannot hold the job at once

        # 2. The primary is forecast to reach 0.75 of 8 cores within the hour: growth 6, nothing offered.
        write_forecast(forecast, 0.75)
        assert wait_until(lambda: vcores(c, "worker1") == 0, 60, step_s=0.5), (vcores(c, "worker1"), node.explain())
        explained = node.explain()
        assert explained["forecast"]["growth_cores"] == 6 and explained["forecast"]["error"] == ""
        assert any(r.startswith("forecast:") for r in explained["decision"]["reasons"]), explained["decision"]
        after = run_job_and_count(c, tmp_path / "job-after.log")
        assert after.get("worker1", 0) == 0, after
        assert after.get("worker2", 0) + after.get("worker3", 0) >= 2, after
        assert node.metric("kills_total") == 0 and node.metric("rm_reclaimed_total") == 0
        sys.stderr.write(f"\nHadoop {c.version}: worker1 6 -> 0 vcores in the RM; most containers at once per host "
                         f"before {before}, after {after}\n")
    finally:
        node.close()

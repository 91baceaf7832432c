"""The loop under faults: a sampler that keeps failing degrades to the safe side and says so."""

from __future__ import annotations

import logging
import os

from agent.config import load_config
from agent.runtime import Agent


class BrokenSampler:
    def __init__(self) -> None:
        self.calls = 0

    def sample(self):
        self.calls += 1
        raise PermissionError("/proc is not readable")


def test_failing_sampler_harvests_nothing_flags_busy_and_logs_once(tmp_path, caplog):
    flags = {"state_dir": str(tmp_path), "capacity_cores": "8", "capacity_memory_mb": "8192"}
    sampler = BrokenSampler()
    agent = Agent(load_config({}, {}, flags), sampler=sampler)
    try:
        with caplog.at_level(logging.WARNING, logger="agent.runtime"):
            decisions = [agent.tick() for _ in range(5)]
        assert sampler.calls == 5
        assert all(d.stale and d.kills == () and d.advertise_cores == 0 and d.advertise_memory_mb == 0
                   for d in decisions)
        explained = agent.explain()
        assert explained["decision"]["reasons"][0].startswith("stale: no sample")
        assert agent.metrics.get("errors_total", kind="sample") == 5
        assert agent.metrics.get("stale") == 1 and agent.metrics.get("stale_samples_total") == 5
        assert (tmp_path / "datanode-busy").read_text() == "busy\n"
        assert len([r for r in caplog.records if "sample failed" in r.getMessage()]) == 1
    finally:
        agent.close()


def test_nodemanager_down_falls_back_to_local_processes(tmp_path):
    flags = {"mode": "yarn", "state_dir": str(tmp_path), "capacity_cores": "8", "capacity_memory_mb": "8192",
             "nm_url": "http://127.0.0.1:1", "rm_url": "http://127.0.0.1:1", "yarn_node_id": "n1:8041",
             "http_timeout_s": "0.3", "rm_retries": "1", "scope_root_pid": str(os.getpid())}
    agent = Agent(load_config({}, {}, flags))
    try:
        decision = agent.tick()
        assert not decision.stale  # local sampling still decides
        assert agent.metrics.get("errors_total", kind="nm_containers") == 1
    finally:
        agent.close()

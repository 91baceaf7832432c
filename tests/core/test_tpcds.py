"""Tests of placement_service/core/tpcds.py: the bundled TPC-DS plans as jobs with task counts."""

from __future__ import annotations

import math

import pytest

from placement_service.core.dag import job_to_json, max_concurrency, parse_job, vertex_levels
from placement_service.core.tpcds import MB, load_tpcds_plans, plan_to_job, tpcds_jobs, tpcds_query_ids
from placement_service.core.types import Job, PolicyError


@pytest.fixture(scope="module")
def jobs() -> list[Job]:
    return tpcds_jobs()


def test_all_99_queries_parse_as_job_json_with_positive_concurrency(jobs: list[Job]) -> None:
    assert tpcds_query_ids() == [str(q) for q in range(1, 100)]
    assert [j.name for j in jobs] == [f"tpcds-q{q}" for q in range(1, 100)]
    for job in jobs:
        again = parse_job(job_to_json(job), source=job.name)  # validates names, tasks, edges, no cycle
        assert again == job
        assert max_concurrency(job) >= 1
        assert all(n >= 1 for n in job.vertices.values())


def test_unions_run_no_tasks_and_members_feed_the_consumers(jobs: list[Job]) -> None:
    plans = load_tpcds_plans()["queries"]
    for job in jobs:
        assert not any(v.startswith("Union") for v in job.vertices)
        assert all(e.type != "CONTAINS" for e in job.edges)
    # Query 2: "Union 2" groups Map 1 and Map 5 and feeds Reducer 3.
    raw = plans["2"]["tez_stages"][0]["edges"]
    assert {"src": "Union 2", "dst": "Map 1", "type": "CONTAINS"} in raw
    assert {"src": "Union 2", "dst": "Reducer 3", "type": "SIMPLE_EDGE"} in raw
    q2 = jobs[1]
    pairs = {(e.src, e.dst) for e in q2.edges}
    assert {("Map 1", "Reducer 3"), ("Map 5", "Reducer 3")} <= pairs
    levels = vertex_levels(q2)
    assert levels["Reducer 3"] > max(levels["Map 1"], levels["Map 5"])


def test_map_and_reducer_tasks_follow_the_byte_estimates(jobs: list[Job]) -> None:
    plans = load_tpcds_plans()["queries"]
    checked_maps = checked_reducers = 0
    for job in jobs:
        spec = plans[job.name.removeprefix("tpcds-q")]["tez_stages"][0]["vertices"]
        for v, tasks in job.vertices.items():
            s = spec[v]
            if s["kind"] == "Map" and s.get("first_stat_bytes") is not None:
                assert tasks == max(1, math.ceil(s["first_stat_bytes"] / (256 * MB))), (job.name, v)
                checked_maps += 1
            if s["kind"] == "Reducer" and s.get("max_stat_bytes") is not None:
                assert tasks == min(1009, max(1, math.ceil(s["max_stat_bytes"] / (256 * MB)))), (job.name, v)
                checked_reducers += 1
    assert checked_maps > 400 and checked_reducers > 500


def test_overrides_change_the_task_counts(jobs: list[Job]) -> None:
    coarse = tpcds_jobs(map_bytes_per_task=1024 * MB, reducer_bytes=64 * MB, max_reducers=10)
    scan = load_tpcds_plans()["queries"]["19"]["tez_stages"][0]["vertices"]["Map 4"]["first_stat_bytes"]
    assert coarse[18].vertices["Map 4"] == math.ceil(scan / (1024 * MB)) < jobs[18].vertices["Map 4"]
    assert max(n for j in coarse for v, n in j.vertices.items() if v.startswith("Reducer")) == 10
    assert max(n for j in jobs for v, n in j.vertices.items() if v.startswith("Reducer")) > 10


def test_reducer_without_statistics_uses_its_parents_bytes() -> None:
    plan = {
        "tez_stages": [
            {
                "vertices": {
                    "Map 1": {"kind": "Map", "first_stat_bytes": 3 * 256 * MB},
                    "Map 2": {"kind": "Map", "first_stat_bytes": 2 * 256 * MB},
                    "Union 3": {"kind": "Union"},
                    "Reducer 4": {"kind": "Reducer"},
                    "Map 5": {"kind": "Map"},
                },
                "edges": [
                    {"src": "Union 3", "dst": "Map 1", "type": "CONTAINS"},
                    {"src": "Union 3", "dst": "Map 2", "type": "CONTAINS"},
                    {"src": "Union 3", "dst": "Reducer 4", "type": "SIMPLE_EDGE"},
                    {"src": "Map 5", "dst": "Reducer 4", "type": "BROADCAST_EDGE"},
                ],
            }
        ]
    }
    job = plan_to_job("hand", plan, reducer_bytes=256 * MB, last_duration_s=42.0)
    assert job.vertices == {"Map 1": 3, "Map 2": 2, "Reducer 4": 5, "Map 5": 1}
    assert {(e.src, e.dst, e.type) for e in job.edges} == {
        ("Map 1", "Reducer 4", "SIMPLE_EDGE"),
        ("Map 2", "Reducer 4", "SIMPLE_EDGE"),
        ("Map 5", "Reducer 4", "BROADCAST_EDGE"),
    }
    assert job.last_duration_s == 42.0
    assert max_concurrency(job) == 6


def test_bytes_scale_shrinks_the_warehouse(jobs: list[Job]) -> None:
    small = tpcds_jobs(bytes_scale=1 / 30)
    scan = load_tpcds_plans()["queries"]["19"]["tez_stages"][0]["vertices"]["Map 4"]["first_stat_bytes"]
    assert small[18].vertices["Map 4"] == math.ceil(scan / 30 / (256 * MB))
    assert all(max_concurrency(s) <= max_concurrency(b) for s, b in zip(small, jobs, strict=True))
    with pytest.raises(PolicyError, match="bytes_scale"):
        tpcds_jobs(bytes_scale=0.0)


def test_durations_per_query_and_bad_settings() -> None:
    jobs = tpcds_jobs(last_duration_s={"19": 30.0})
    assert jobs[18].last_duration_s == 30.0 and jobs[0].last_duration_s is None
    with pytest.raises(PolicyError, match="max_reducers"):
        tpcds_jobs(max_reducers=0)
    with pytest.raises(PolicyError, match="malformed plan"):
        plan_to_job("bad", {"tez_stages": []})

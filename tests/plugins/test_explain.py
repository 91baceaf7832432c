"""EXPLAIN FORMATTED fixtures and the 99 bundled TPC-DS DAGs -> job JSON with task estimates."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from placement_service.core.dag import max_concurrency, parse_job
from placement_service.core.tpcds import MB, load_tpcds_plans, plan_to_job
from scheduler_plugin.explain import (
    EstimateConfig,
    PlanError,
    VertexKind,
    collapse_unions,
    estimate_tasks,
    job_document,
    parse_dag_description,
    parse_explain,
)


def load(fixtures: Path, name: str) -> dict:
    return json.loads((fixtures / name).read_text())


def edges(dag) -> set[tuple[str, str, str]]:
    return {(e.src, e.dst, e.type) for e in dag.edges}


def test_single_parent_object_edge(fixtures: Path) -> None:
    dag = parse_explain(load(fixtures, "explain_single_parent.json"))
    assert set(dag.vertices) == {"Map 1", "Reducer 2"}
    assert edges(dag) == {("Map 1", "Reducer 2", "SIMPLE_EDGE")}
    assert dag.vertices["Map 1"].kind is VertexKind.MAP
    assert dag.vertices["Map 1"].scan_bytes == 23039903992
    tasks = estimate_tasks(dag)
    assert tasks == {"Map 1": math.ceil(23039903992 / (256 * 2**20)), "Reducer 2": 1}


def test_multiple_parents_array_edges_union_and_two_scans(fixtures: Path) -> None:
    dag = parse_explain(load(fixtures, "explain_multi_parent.json"))
    assert dag.vertices["Union 2"].kind is VertexKind.UNION
    assert ("Union 2", "Map 1", "CONTAINS") in edges(dag)
    assert dag.vertices["Map 7"].scan_bytes == 96192 + 1880  # two table scans in one Map vertex
    flat = collapse_unions(dag)
    assert "Union 2" not in flat.vertices
    assert edges(flat) == {
        ("Map 4", "Map 1", "BROADCAST_EDGE"),
        ("Map 4", "Map 5", "BROADCAST_EDGE"),
        ("Map 1", "Reducer 3", "SIMPLE_EDGE"),
        ("Map 5", "Reducer 3", "SIMPLE_EDGE"),
        ("Reducer 3", "Reducer 6", "SIMPLE_EDGE"),
        ("Map 7", "Reducer 6", "SIMPLE_EDGE"),
    }
    job = job_document("q", dag, EstimateConfig(bytes_per_reducer=256_000_000))
    tasks = {v: s["tasks"] for v, s in job["vertices"].items()}
    assert tasks["Reducer 3"] == math.ceil(900_000_000 / 256_000_000)
    assert tasks["Map 5"] == math.ceil(12 * 10**9 / (256 * 2**20))
    # Levels: {Map 4, Map 7} -> {Map 1, Map 5} -> Reducer 3 -> Reducer 6.
    assert max_concurrency(parse_job(job)) == tasks["Map 1"] + tasks["Map 5"]


def test_real_hive_outputs_from_ambari(fixtures: Path) -> None:
    one = parse_explain(load(fixtures, "ambari_explain_select_count.json"))
    assert edges(one) == {("Map 1", "Reducer 2", "SIMPLE_EDGE")}
    assert one.vertices["Map 1"].scan_bytes == 132960632
    join = parse_explain(load(fixtures, "ambari_explain_join.json"))
    assert edges(join) == {("Map 1", "Reducer 2", "SIMPLE_EDGE"), ("Map 3", "Reducer 2", "SIMPLE_EDGE")}
    assert estimate_tasks(join, EstimateConfig(map_split_bytes=64 * 2**20))["Map 1"] == 2


def test_last_run_replaces_estimates_and_duration_is_kept(fixtures: Path) -> None:
    dag = parse_explain(load(fixtures, "explain_single_parent.json"))
    job = job_document("q", dag, last_duration_s=42.0, last_run_tasks={"Reducer 2": 7, "Map 9": 3})
    assert job["vertices"]["Reducer 2"] == {"tasks": 7}
    assert job["last_duration_s"] == 42.0
    assert "Map 9" not in job["vertices"]


@pytest.mark.parametrize(
    "doc, match",
    [
        ({}, "no \"STAGE PLANS\""),
        ({"STAGE PLANS": {"Stage-0": {"Fetch Operator": {}}}}, "no Tez stage"),
        ({"STAGE PLANS": {"Stage-1": {"Tez": {"Edges:": {}}}}}, "no \"Vertices:\""),
        ({"STAGE PLANS": {"Stage-1": {"Tez": {"Vertices:": {"Map 1": {}},
                                              "Edges:": {"Reducer 2": {"parent": "Map 1"}}}}}},
         "unknown vertex 'Reducer 2'"),
        ({"STAGE PLANS": {"Stage-1": {"Tez": {"Vertices:": {"Map 1": {}}, "Edges:": {"Map 1": [3]}}}}},
         r"'Edges:'\['Map 1'\]\[0\]"),
    ],
)
def test_bad_plans_name_what_is_wrong(doc: dict, match: str) -> None:
    with pytest.raises(PlanError, match=match):
        parse_explain(doc, "q.json")


def test_all_99_bundled_tpcds_dags_route_and_match_the_policy_core() -> None:
    queries = load_tpcds_plans()["queries"]
    assert len(queries) == 99
    cfg = EstimateConfig(map_split_bytes=256 * MB, bytes_per_reducer=256 * MB)
    for q, plan in queries.items():
        job = parse_job(job_document(f"tpcds-q{q}", parse_dag_description(plan, f"query{q}"), cfg))
        ref = plan_to_job(f"tpcds-q{q}", plan)
        assert set(job.vertices) == set(ref.vertices), q
        assert {(e.src, e.dst) for e in job.edges} == {(e.src, e.dst) for e in ref.edges}, q
        raw = plan["tez_stages"][0]["vertices"]
        for v, n in job.vertices.items():
            has_stats = raw[v].get("max_stat_bytes") is not None
            if has_stats:
                assert n == ref.vertices[v], (q, v)
        assert max_concurrency(job) >= 1


def test_several_tez_stages_run_one_after_the_other() -> None:
    def stage(scan_bytes: int) -> dict:
        scan = f"Num rows: 1000 Data size: {scan_bytes} Basic stats: COMPLETE Column stats: NONE"
        return {"Tez": {
            "Edges:": {"Reducer 2": {"parent": "Map 1", "type": "SIMPLE_EDGE"}},
            "Vertices:": {
                "Map 1": {"Map Operator Tree:": [{"TableScan": {"alias:": "t", "Statistics:": scan}}]},
                "Reducer 2": {"Reduce Operator Tree:": {"Group By Operator": {"Statistics:": scan}}},
            }}}

    # Plan order lists the later stage first; the dependencies say Stage-4 runs after Stage-1.
    doc = {
        "STAGE DEPENDENCIES": {"Stage-1": {"ROOT STAGE": "TRUE"}, "Stage-2": {"DEPENDENT STAGES": "Stage-1"},
                               "Stage-0": {"DEPENDENT STAGES": "Stage-2"}, "Stage-4": {"DEPENDENT STAGES": "Stage-0"}},
        "STAGE PLANS": {"Stage-4": stage(3 * 2**30), "Stage-1": stage(2 * 2**30),
                        "Stage-0": {"Move Operator": {}}, "Stage-2": {"Dependency Collection": {}}},
    }
    dag = parse_explain(doc)
    assert ("Stage-1/Reducer 2", "Stage-4/Map 1", "STAGE_ORDER") in edges(dag)
    assert not any(e.src.startswith("Stage-4") and e.dst.startswith("Stage-1") for e in dag.edges)
    job = parse_job(job_document("multi", dag, EstimateConfig(map_split_bytes=2**30, bytes_per_reducer=2**30)))
    # Sequential stages: the peak is the larger stage's Map (3 tasks), not the sum of both Maps (5).
    assert max_concurrency(job) == 3


def test_tez_dag_plan_with_recorded_tasks(fixtures: Path) -> None:
    from scheduler_plugin.explain import parse_tez_dag_plan

    dag, recorded = parse_tez_dag_plan(load(fixtures, "tez_dag_plan.json"))
    assert edges(dag) == {("Map 4", "Map 1", "BROADCAST"), ("Map 1", "Reducer 2", "SCATTER_GATHER")}
    assert dag.vertices["Reducer 2"].kind is VertexKind.REDUCER
    assert recorded == {"Map 4": 1, "Map 1": 809}
    job = parse_job(job_document("tez", dag, last_run_tasks=recorded))
    assert job.vertices == {"Map 4": 1, "Map 1": 809, "Reducer 2": 1}
    assert max_concurrency(job) == 809
    with pytest.raises(PlanError, match=r"edges\[0\]"):
        parse_tez_dag_plan({"vertices": [{"vertexName": "a"}], "edges": [{"inputVertexName": "a"}]})

"""Tests of placement_service/core/dag.py: job JSON parsing, vertex levels, peak concurrency."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from placement_service.core.dag import job_to_json, level_tasks, max_concurrency, parse_job, vertex_levels
from placement_service.core.types import Edge, Job, PolicyError

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "policy"


def _job(tasks: dict[str, int], edges: list[tuple[str, str]]) -> Job:
    return Job("t", None, tasks, tuple(Edge(a, b) for a, b in edges))


@pytest.mark.parametrize(
    ("tasks", "edges", "levels", "peak"),
    [
        # single vertex
        ({"A": 7}, [], {"A": 0}, 7),
        # diamond: A -> B, A -> C, B -> D, C -> D
        (
            {"A": 2, "B": 5, "C": 4, "D": 1},
            [("A", "B"), ("A", "C"), ("B", "D"), ("C", "D")],
            {"A": 0, "B": 1, "C": 1, "D": 2},
            9,
        ),
        # multiple parents at different depths: the level follows the deepest parent
        (
            {"A": 3, "B": 3, "C": 10, "X": 4},
            [("A", "B"), ("B", "C"), ("A", "C"), ("X", "C")],
            {"A": 0, "X": 0, "B": 1, "C": 2},
            10,
        ),
        # disconnected components add up level by level
        (
            {"A": 1, "B": 6, "P": 2, "Q": 5, "R": 1},
            [("A", "B"), ("P", "Q"), ("Q", "R")],
            {"A": 0, "B": 1, "P": 0, "Q": 1, "R": 2},
            11,
        ),
        # a wide source level beats a deep narrow chain
        ({"S1": 50, "S2": 50, "M": 99}, [("S1", "M"), ("S2", "M")], {"S1": 0, "S2": 0, "M": 1}, 100),
    ],
)
def test_levels_and_peak_on_hand_made_dags(
    tasks: dict[str, int], edges: list[tuple[str, str]], levels: dict[str, int], peak: int
) -> None:
    job = _job(tasks, edges)
    assert vertex_levels(job) == levels
    assert max_concurrency(job) == peak
    per_level = level_tasks(job)
    assert sum(per_level) == sum(tasks.values())
    assert max(per_level) == peak


def test_figure7_like_example_has_469_concurrent_containers() -> None:
    doc = json.loads((FIXTURES / "job_figure7_like.json").read_text())
    job = parse_job(doc)
    levels = vertex_levels(job)
    # The store table joins late (level 2) but, as a source, it is scanned at level 0.
    assert levels["Map 8"] == 0
    assert levels["Map 2"] == levels["Reducer 5"] == 1
    assert levels["Reducer 10"] == 4
    assert max_concurrency(job) == 440 + 29 == 469


def test_job_json_round_trip() -> None:
    doc = json.loads((FIXTURES / "job_figure7_like.json").read_text())
    job = parse_job(doc)
    again = parse_job(json.loads(json.dumps(job_to_json(job))))
    assert again == job


def _doc(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "name": "q",
        "last_duration_s": 12.5,
        "vertices": {"Map 1": {"tasks": 3}, "Reducer 2": {"tasks": 1}},
        "edges": [{"src": "Map 1", "dst": "Reducer 2", "type": "SIMPLE_EDGE"}],
    }
    doc.update(over)
    return doc


def test_parse_defaults_edge_type_and_accepts_null_duration() -> None:
    job = parse_job(_doc(last_duration_s=None, edges=[{"src": "Map 1", "dst": "Reducer 2"}]))
    assert job.last_duration_s is None
    assert job.edges == (Edge("Map 1", "Reducer 2", "SIMPLE_EDGE"),)


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"name": ""}, "name"),
        ({"last_duration_s": -1}, "last_duration_s"),
        ({"last_duration_s": "long"}, "last_duration_s"),
        ({"vertices": {}}, "vertices"),
        ({"vertices": {"Map 1": {"tasks": 0}}, "edges": []}, "vertices['Map 1'].tasks"),
        ({"vertices": {"Map 1": {"tasks": 2.5}}, "edges": []}, "vertices['Map 1'].tasks"),
        ({"vertices": {"Map 1": {"tasks": True}}, "edges": []}, "vertices['Map 1'].tasks"),
        ({"vertices": {"Map 1": {}}, "edges": []}, "vertices['Map 1']"),
        ({"edges": [{"src": "Map 1", "dst": "Reducer 9"}]}, "edges[0].dst: unknown vertex 'Reducer 9'"),
        ({"edges": [{"src": 3, "dst": "Reducer 2"}]}, "edges[0].src"),
        ({"edges": [{"src": "Map 1", "dst": "Map 1"}]}, "edges[0]: self-loop"),
        ({"edges": "Map 1 -> Reducer 2"}, "edges"),
        (
            {"edges": [{"src": "Map 1", "dst": "Reducer 2"}, {"src": "Reducer 2", "dst": "Map 1"}]},
            "cycle",
        ),
    ],
)
def test_parse_errors_name_the_field(over: dict[str, Any], needle: str) -> None:
    with pytest.raises(PolicyError) as err:
        parse_job(_doc(**over), source="jobs/q.json")
    assert "jobs/q.json" in str(err.value)
    assert needle in str(err.value)


def test_missing_duration_field_is_an_error() -> None:
    doc = _doc()
    del doc["last_duration_s"]
    with pytest.raises(PolicyError, match="last_duration_s"):
        parse_job(doc)


def test_not_an_object() -> None:
    with pytest.raises(PolicyError, match="expected a JSON object"):
        parse_job([1, 2])  # type: ignore[arg-type]


def test_cycle_in_a_job_built_in_code_is_rejected() -> None:
    job = _job({"A": 1, "B": 1, "C": 1}, [("A", "B"), ("B", "C"), ("C", "B")])
    with pytest.raises(PolicyError, match=r"cycle through \['B', 'C'\]"):
        max_concurrency(job)

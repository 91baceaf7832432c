"""Real EXPLAIN FORMATTED plans of Hive 4.1.0 on Tez (tests/fixtures/plugins/hive41_tpcds) through the parser.

Each plan's own "Vertices:" and "Edges:" objects are the expected answer: every vertex and every
parent link appears in the parsed DAG with the kind its name says, and a plan of several Tez stages
is ordered by "STAGE DEPENDENCIES".
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scheduler_plugin.explain import CONTAINS, STAGE_ORDER, VertexKind, job_document, kind_of, parse_explain

PLANS = Path(__file__).resolve().parents[1] / "fixtures" / "plugins" / "hive41_tpcds"
NAMES = sorted(p.name for p in PLANS.glob("q*.json"))


def tez_stages(doc: dict) -> dict[str, dict]:
    return {s: p["Tez"] for s, p in doc["STAGE PLANS"].items() if "Tez" in p}


def declared_edges(tez: dict, prefix: str) -> set[tuple[str, str, str]]:
    out = set()
    for child, value in tez.get("Edges:", {}).items():
        for parent in value if isinstance(value, list) else [value]:
            out.add((prefix + parent["parent"], prefix + child, parent["type"]))
    return out


def test_the_sample_holds_unions_and_several_stages() -> None:
    docs = [json.loads((PLANS / n).read_text()) for n in NAMES]
    assert len(NAMES) >= 5
    assert any(len(tez_stages(d)) > 1 for d in docs)
    assert any("Vertex:" in body for d in docs for t in tez_stages(d).values() for body in t["Vertices:"].values())


@pytest.mark.parametrize("name", NAMES)
def test_every_declared_vertex_and_edge_is_parsed(name: str) -> None:
    doc = json.loads((PLANS / name).read_text())
    dag = parse_explain(doc, name)
    stages = tez_stages(doc)
    prefix = {s: (f"{s}/" if len(stages) > 1 else "") for s in stages}
    declared = {prefix[s] + v for s, t in stages.items() for v in t["Vertices:"]}
    assert set(dag.vertices) == declared
    for vname, v in dag.vertices.items():
        assert v.kind is kind_of(vname.rsplit("/", 1)[-1])
        if v.kind is VertexKind.MAP:
            assert v.scan_bytes is not None  # every Map scans a table with statistics
    wanted = set().union(*(declared_edges(t, prefix[s]) for s, t in stages.items()))
    got = {(e.src, e.dst, e.type) for e in dag.edges if e.type != STAGE_ORDER}
    assert got == wanted
    job = job_document(name, dag)
    assert all(not v.startswith("Union") for v in job["vertices"])
    assert all(e["type"] != CONTAINS for e in job["edges"])


def test_a_later_stage_starts_after_every_sink_of_the_earlier_one() -> None:
    doc = json.loads((PLANS / "q14.json").read_text())
    dag = parse_explain(doc, "q14")
    order = [e for e in dag.edges if e.type == STAGE_ORDER]
    assert order
    assert {e.src.split("/")[0] for e in order} == {"Stage-1"}
    assert {e.dst.split("/")[0] for e in order} == {"Stage-4"}  # Stage-4 waits for Stage-2 and Stage-0, which wait for Stage-1

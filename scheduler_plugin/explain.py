"""Hive/Tez plans -> job DAG with estimated task counts (the job JSON of ``docs/contracts.md``).

Two inputs are understood:

* Hive's ``EXPLAIN FORMATTED <query>`` JSON: ``{"STAGE PLANS": {"Stage-1": {"Tez": {"Vertices:":
  {name: {...operator tree...}}, "Edges:": {child: {"parent": p, "type": t} | [{...}, ...]}}}}}``.
  Keys end in a colon; an edge value is one object for a single parent and an array for several.
  A Map vertex holds ``"Map Operator Tree:"`` (a list of root operators, one per scanned table), a
  Reducer ``"Reduce Operator Tree:"`` (one root operator), a Union only ``"Vertex:"``. Operators
  carry ``"Statistics:": "Num rows: N Data size: B Basic stats: ..."``.
* Tez's own DAG plan (``parse_tez_dag_plan``: vertex and edge lists, as the Tez UI and the
  timeline server show them), with the task counts of a finished run when present.
* A Tez DAG description as bundled with the TPC-DS plans (``placement_service/data``): per stage
  ``{"vertices": {name: {"kind", "first_stat_bytes", "max_stat_bytes", ...}}, "edges": [{"src",
  "dst", "type"}]}``.

Task estimate per vertex (Hive plans carry no task counts):

1. Map: ``ceil(scan_bytes / map_split_bytes)`` where ``scan_bytes`` is the sum of the data sizes of
   the vertex's table scans (one split per ``map_split_bytes``, default 256 MiB; Tez groups splits
   towards that size).
2. Reducer: ``ceil(max_bytes / bytes_per_reducer)`` capped at ``max_reducers`` (Hive's
   ``hive.exec.reducers.bytes.per.reducer``, default 256,000,000, and ``hive.exec.reducers.max``,
   default 1009), where ``max_bytes`` is the largest data size any operator of the vertex reports.
3. At least one task per vertex; unknown sizes count as one task.
4. Union vertices are not Tez vertices (they become vertex groups): each is removed and its
   members (``CONTAINS`` edges, union -> member) are wired straight to the union's consumers with
   the consumer edge's type.
5. A recorded last run (vertex -> tasks) replaces the estimate of every vertex it names.

Pure functions: dicts in, frozen dataclasses and dicts out.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from placement_service import HarvestError
from placement_service.core.types import Edge

_STATS_RE = re.compile(r"Num rows:\s*(\d+)\s+Data size:\s*(\d+)")
CONTAINS = "CONTAINS"
STAGE_ORDER = "STAGE_ORDER"  # a later Tez stage starts after an earlier one ends


class PlanError(HarvestError):
    """A query plan or DAG description does not have the expected shape."""


class VertexKind(StrEnum):
    MAP = "Map"
    REDUCER = "Reducer"
    UNION = "Union"
    OTHER = "Other"


@dataclass(frozen=True)
class PlanVertex:
    name: str
    kind: VertexKind
    scan_bytes: int | None  # Map: sum of table-scan data sizes
    max_bytes: int | None  # largest data size of any operator in the vertex


@dataclass(frozen=True)
class PlanDag:
    vertices: Mapping[str, PlanVertex]
    edges: tuple[Edge, ...]


@dataclass(frozen=True)
class EstimateConfig:
    """How task counts are estimated (see the module docstring)."""

    map_split_bytes: int = 256 * 1024 * 1024
    bytes_per_reducer: int = 256_000_000
    max_reducers: int = 1009
    max_map_tasks: int = 1_000_000

    def __post_init__(self) -> None:
        for name in ("map_split_bytes", "bytes_per_reducer", "max_reducers", "max_map_tasks"):
            if int(getattr(self, name)) < 1:
                raise PlanError(f"EstimateConfig.{name} must be >= 1, got {getattr(self, name)}")


def kind_of(name: str) -> VertexKind:
    head = name.split(" ", 1)[0]
    for kind in (VertexKind.MAP, VertexKind.REDUCER, VertexKind.UNION):
        if head == kind.value:
            return kind
    return VertexKind.OTHER


# --- EXPLAIN FORMATTED -------------------------------------------------------------------------


def _stats_bytes(value: Any) -> int | None:
    if isinstance(value, str):
        m = _STATS_RE.search(value)
        if m:
            return int(m.group(2))
    return None


def _all_stats(node: Any, out: list[int]) -> None:
    if isinstance(node, Mapping):
        for key, value in node.items():
            if key == "Statistics:":
                b = _stats_bytes(value)
                if b is not None:
                    out.append(b)
            else:
                _all_stats(value, out)
    elif isinstance(node, list):
        for item in node:
            _all_stats(item, out)


def _root_ops(tree: Any) -> list[Mapping[str, Any]]:
    """Root operators' bodies: ``[{"TableScan": {...}}, ...]`` or ``{"Group By Operator": {...}}``."""
    items = tree if isinstance(tree, list) else [tree]
    out = []
    for item in items:
        if isinstance(item, Mapping):
            out += [body for body in item.values() if isinstance(body, Mapping)]
    return out


def _explain_vertex(name: str, body: Any, where: str) -> PlanVertex:
    if not isinstance(body, Mapping):
        raise PlanError(f"{where}: vertex {name!r}: expected an object, got {type(body).__name__}")
    kind = kind_of(name)
    sizes: list[int] = []
    _all_stats(body, sizes)
    scan: int | None = None
    if "Map Operator Tree:" in body:
        scans = [_stats_bytes(op.get("Statistics:")) for op in _root_ops(body["Map Operator Tree:"])]
        known = [s for s in scans if s is not None]
        scan = sum(known) if known else None
        if kind is VertexKind.OTHER:
            kind = VertexKind.MAP
    elif "Reduce Operator Tree:" in body and kind is VertexKind.OTHER:
        kind = VertexKind.REDUCER
    elif "Vertex:" in body and kind is VertexKind.OTHER:
        kind = VertexKind.UNION
    return PlanVertex(name, kind, scan, max(sizes) if sizes else None)


def _explain_edges(raw: Any, where: str) -> list[Edge]:
    if raw is None:
        return []
    if not isinstance(raw, Mapping):
        raise PlanError(f"{where}: 'Edges:' must be an object {{child: parent edge(s)}}")
    edges = []
    for child, value in raw.items():
        parents = value if isinstance(value, list) else [value]
        for i, p in enumerate(parents):
            if not isinstance(p, Mapping) or not isinstance(p.get("parent"), str):
                raise PlanError(f"{where}: 'Edges:'[{child!r}][{i}]: expected {{\"parent\": name, \"type\": t}}")
            edges.append(Edge(src=p["parent"], dst=str(child), type=str(p.get("type", "SIMPLE_EDGE"))))
    return edges


def _stage_order(doc: Mapping[str, Any], stages: list[str]) -> list[str]:
    """Tez stages in execution order: a stage with more (transitive) ancestors in ``"STAGE
    DEPENDENCIES"`` runs later; ties keep the plan's order."""
    raw = doc.get("STAGE DEPENDENCIES")
    parents: dict[str, set[str]] = {}
    if isinstance(raw, Mapping):
        for stage, info in raw.items():
            dep = info.get("DEPENDENT STAGES", "") if isinstance(info, Mapping) else ""
            parents[str(stage)] = {d.strip() for d in str(dep).split(",") if d.strip()}

    def ancestors(stage: str) -> set[str]:
        seen: set[str] = set()
        todo = list(parents.get(stage, ()))
        while todo:
            s = todo.pop()
            if s not in seen:
                seen.add(s)
                todo += parents.get(s, ())
        return seen

    return sorted(stages, key=lambda s: (len(ancestors(s)), stages.index(s)))


def parse_explain(doc: Any, source: str = "explain.json") -> PlanDag:
    """The Tez DAG of an ``EXPLAIN FORMATTED`` document.

    Several Tez stages (e.g. a multi-insert) run one after the other: vertex names get a
    ``"<stage>/"`` prefix and every sink of a stage gets a ``STAGE_ORDER`` edge to every source of
    the next, so the levels of the job DAG follow the stages' order.
    """
    if not isinstance(doc, Mapping) or not isinstance(doc.get("STAGE PLANS"), Mapping):
        raise PlanError(f"{source}: not an EXPLAIN FORMATTED document (no \"STAGE PLANS\" object)")
    tez_plans = {str(s): p["Tez"] for s, p in doc["STAGE PLANS"].items() if isinstance(p, Mapping) and "Tez" in p}
    if not tez_plans:
        raise PlanError(f"{source}: no Tez stage in \"STAGE PLANS\" (is hive.execution.engine=tez?)")
    vertices: dict[str, PlanVertex] = {}
    edges: list[Edge] = []
    prefix_needed = len(tez_plans) > 1
    previous_sinks: list[str] = []
    for stage in _stage_order(doc, list(tez_plans)):
        tez = tez_plans[stage]
        where = f"{source}: {stage}"
        if not isinstance(tez, Mapping) or not isinstance(tez.get("Vertices:"), Mapping):
            raise PlanError(f"{where}: \"Tez\" has no \"Vertices:\" object")
        pre = f"{stage}/" if prefix_needed else ""
        names: list[str] = []
        for name, body in tez["Vertices:"].items():
            v = _explain_vertex(str(name), body, where)
            vertices[pre + v.name] = PlanVertex(pre + v.name, v.kind, v.scan_bytes, v.max_bytes)
            if v.kind is not VertexKind.UNION:
                names.append(pre + v.name)
        stage_edges = [Edge(pre + e.src, pre + e.dst, e.type) for e in _explain_edges(tez.get("Edges:"), where)]
        edges += stage_edges
        flow = [e for e in stage_edges if e.type != CONTAINS]
        sources = [n for n in names if not any(e.dst == n for e in flow)]
        edges += [Edge(sink, src, STAGE_ORDER) for sink in previous_sinks for src in sources]
        previous_sinks = [n for n in names if not any(e.src == n for e in flow)]
    return _checked(PlanDag(vertices, tuple(edges)), source)


# --- Tez DAG description (bundled TPC-DS format) -----------------------------------------------


def _opt_int(value: Any, where: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value < 0:
        raise PlanError(f"{where}: expected a byte count >= 0 or null, got {value!r}")
    return int(value)


def parse_dag_description(doc: Any, source: str = "dag.json") -> PlanDag:
    """A ``{"vertices": {...}, "edges": [...]}`` stage, or ``{"tez_stages": [stage, ...]}``."""
    if isinstance(doc, Mapping) and isinstance(doc.get("tez_stages"), list):
        stages = doc["tez_stages"]
    else:
        stages = [doc]
    vertices: dict[str, PlanVertex] = {}
    edges: list[Edge] = []
    for k, stage in enumerate(stages):
        where = f"{source}: tez_stages[{k}]" if len(stages) > 1 else source
        if not isinstance(stage, Mapping) or not isinstance(stage.get("vertices"), Mapping):
            raise PlanError(f"{where}: expected an object with 'vertices' and 'edges'")
        pre = f"{stage.get('stage', k)}/" if len(stages) > 1 else ""
        for name, spec in stage["vertices"].items():
            vw = f"{where}: vertices[{name!r}]"
            if not isinstance(spec, Mapping):
                raise PlanError(f"{vw}: expected an object")
            kind = VertexKind(spec["kind"]) if spec.get("kind") in VertexKind._value2member_map_ else kind_of(name)
            scan = _opt_int(spec.get("first_stat_bytes"), f"{vw}.first_stat_bytes")
            top = _opt_int(spec.get("max_stat_bytes"), f"{vw}.max_stat_bytes")
            vertices[pre + name] = PlanVertex(pre + name, kind, scan if kind is VertexKind.MAP else None, top)
        raw_edges = stage.get("edges", [])
        if not isinstance(raw_edges, list):
            raise PlanError(f"{where}: 'edges' must be a list")
        for i, e in enumerate(raw_edges):
            if not isinstance(e, Mapping) or not isinstance(e.get("src"), str) or not isinstance(e.get("dst"), str):
                raise PlanError(f"{where}: edges[{i}]: expected {{\"src\", \"dst\", \"type\"}}, got {e!r}")
            edges.append(Edge(pre + e["src"], pre + e["dst"], str(e.get("type", "SIMPLE_EDGE"))))
    return _checked(PlanDag(vertices, tuple(edges)), source)


# --- Tez's own DAG plan (Tez UI / timeline "dagPlan") --------------------------------------------

_PROCESSOR_KIND = {"MapTezProcessor": VertexKind.MAP, "ReduceTezProcessor": VertexKind.REDUCER}


def parse_tez_dag_plan(doc: Any, source: str = "dag-plan.json") -> tuple[PlanDag, dict[str, int]]:
    """Tez's DAG plan ``{"vertices": [{"vertexName", "processorClass", ...}], "edges": [{"inputVertexName",
    "outputVertexName", "dataMovementType", ...}]}`` (also wrapped as ``{"dagPlan": {...}}``).

    It carries no data sizes; the second value holds the task counts a finished run recorded
    (``numTasks`` / ``totalTasks`` of a vertex, also under its ``"data"``), to use as the last run.
    """
    plan = doc.get("dagPlan") if isinstance(doc, Mapping) and "dagPlan" in doc else doc
    if not isinstance(plan, Mapping) or not isinstance(plan.get("vertices"), list):
        raise PlanError(f"{source}: not a Tez DAG plan (no 'vertices' list)")
    vertices: dict[str, PlanVertex] = {}
    recorded: dict[str, int] = {}
    for i, v in enumerate(plan["vertices"]):
        if not isinstance(v, Mapping) or not isinstance(v.get("vertexName"), str) or not v["vertexName"]:
            raise PlanError(f"{source}: vertices[{i}]: expected an object with a 'vertexName'")
        name = v["vertexName"]
        processor = str(v.get("processorClass", "")).rsplit(".", 1)[-1]
        kind = _PROCESSOR_KIND.get(processor, kind_of(name))
        vertices[name] = PlanVertex(name, kind, None, None)
        data = v.get("data")
        holders: list[Mapping[str, Any]] = [v, data] if isinstance(data, Mapping) else [v]
        for holder in holders:
            n = holder.get("numTasks", holder.get("totalTasks"))
            if isinstance(n, int) and not isinstance(n, bool) and n >= 1:
                recorded[name] = n
    edges = []
    for i, e in enumerate(plan.get("edges") or []):
        if not isinstance(e, Mapping) or not isinstance(e.get("inputVertexName"), str) or not isinstance(
            e.get("outputVertexName"), str
        ):
            raise PlanError(f"{source}: edges[{i}]: expected 'inputVertexName' and 'outputVertexName'")
        edges.append(Edge(e["inputVertexName"], e["outputVertexName"], str(e.get("dataMovementType", "SCATTER_GATHER"))))
    return _checked(PlanDag(vertices, tuple(edges)), source), recorded


def _checked(dag: PlanDag, source: str) -> PlanDag:
    if not dag.vertices:
        raise PlanError(f"{source}: the plan has no vertices")
    for i, e in enumerate(dag.edges):
        for end in (e.src, e.dst):
            if end not in dag.vertices:
                raise PlanError(f"{source}: edge #{i} {e.src!r} -> {e.dst!r}: unknown vertex {end!r}")
    return dag


# --- estimate ----------------------------------------------------------------------------------


def collapse_unions(dag: PlanDag) -> PlanDag:
    """Remove Union vertices, wiring their members to their consumers (module docstring, step 4)."""
    unions = {n for n, v in dag.vertices.items() if v.kind is VertexKind.UNION}
    if not unions:
        return dag

    def members(u: str, seen: frozenset[str] = frozenset()) -> set[str]:
        out: set[str] = set()
        for e in dag.edges:
            if e.src == u and e.type == CONTAINS and e.dst not in seen:
                out |= members(e.dst, seen | {u}) if e.dst in unions else {e.dst}
        return out

    edges: list[Edge] = []
    for e in dag.edges:
        if e.type == CONTAINS or e.dst in unions:
            continue  # membership, not data flow
        srcs = members(e.src) if e.src in unions else {e.src}
        edges += [Edge(s, e.dst, e.type) for s in sorted(srcs)]
    unique = tuple(dict.fromkeys(edges))
    kept = {n: v for n, v in dag.vertices.items() if n not in unions}
    return PlanDag(kept, unique)


def estimate_tasks(
    dag: PlanDag, config: EstimateConfig = EstimateConfig(), last_run: Mapping[str, int] | None = None
) -> dict[str, int]:
    """Tasks per vertex (module docstring, steps 1-3 and 5)."""
    out: dict[str, int] = {}
    for name, v in dag.vertices.items():
        if v.kind is VertexKind.MAP:
            size = v.scan_bytes if v.scan_bytes is not None else v.max_bytes
            tasks = math.ceil((size or 0) / config.map_split_bytes)
            tasks = min(tasks, config.max_map_tasks)
        else:
            tasks = math.ceil((v.max_bytes or 0) / config.bytes_per_reducer)
            tasks = min(tasks, config.max_reducers)
        out[name] = max(1, int(tasks))
    for name, tasks in (last_run or {}).items():
        if name in out and int(tasks) >= 1:
            out[name] = int(tasks)
    return out


def job_document(
    name: str,
    dag: PlanDag,
    config: EstimateConfig = EstimateConfig(),
    last_duration_s: float | None = None,
    last_run_tasks: Mapping[str, int] | None = None,
) -> dict[str, Any]:
    """The job JSON (``docs/contracts.md``) for ``dag``: unions collapsed, tasks estimated."""
    flat = collapse_unions(dag)
    tasks = estimate_tasks(flat, config, last_run_tasks)
    return {
        "name": name,
        "last_duration_s": last_duration_s,
        "vertices": {v: {"tasks": tasks[v]} for v in flat.vertices},
        "edges": [{"src": e.src, "dst": e.dst, "type": e.type} for e in flat.edges],
    }

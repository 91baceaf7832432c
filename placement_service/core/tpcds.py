"""The 99 TPC-DS queries as Hive-on-Tez job DAGs with task counts, from the bundled plans.

``placement_service/data/tpcds_dags.json`` holds the Tez DAG of every TPC-DS query as Hive plans it
for a 30 TB warehouse (vertices with their kind, tables and estimated rows / bytes; typed edges;
see ``placement_service/data/README.md`` for its origin and license). The plans carry no task
counts; this module derives them from the byte estimates the way Hive and Tez size vertices:

- **Map** vertex (table scan): ``tasks = max(1, ceil(scan_bytes / map_bytes_per_task))``, one task
  per 256 MB HDFS block by default. ``scan_bytes`` is the vertex's first statistic (the TableScan).
- **Reducer** vertex: ``tasks = clamp(ceil(bytes / reducer_bytes), 1, max_reducers)``, Hive's rule
  with ``hive.exec.reducers.bytes.per.reducer`` (default 256 MB) and ``hive.exec.reducers.max``
  (default 1009). ``bytes`` is the largest statistic of the vertex's operators (the data it
  handles); without statistics, the sum of its parents' bytes.
- **Union** vertex: a Tez vertex *group*, an alias for the outputs of its member vertices; it runs
  no tasks. It is removed: each member gets an edge to each consumer of the union (with the type
  of the union -> consumer edge), and its bytes are the sum of its members' bytes. In the plans, a
  ``CONTAINS`` edge is written ``union -> member``; data flows the other way.
- A vertex with no statistics at all (query 14's plan has none) gets 1 task, or its parents' bytes
  for a reducer.

All other edges keep their direction: ``src`` produces, ``dst`` consumes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from functools import lru_cache
from importlib import resources
from typing import Any

from placement_service.core.dag import vertex_levels
from placement_service.core.types import Edge, Job, PolicyError

MB = 2**20
DATA_FILE = "tpcds_dags.json"
CONTAINS = "CONTAINS"


@lru_cache(maxsize=1)
def _raw_text() -> str:
    return resources.files("placement_service.data").joinpath(DATA_FILE).read_text(encoding="utf-8")


def load_tpcds_plans() -> dict[str, Any]:
    """The bundled plans document: ``{"source": {...}, "queries": {"1": {...}, ...}}`` (a fresh copy)."""
    doc: dict[str, Any] = json.loads(_raw_text())
    return doc


def tpcds_query_ids() -> list[str]:
    """Query numbers of the bundled plans, in numeric order ("1" .. "99")."""
    return sorted(load_tpcds_plans()["queries"], key=int)


def plan_to_job(
    name: str,
    plan: Mapping[str, Any],
    *,
    map_bytes_per_task: int = 256 * MB,
    reducer_bytes: int = 256 * MB,
    max_reducers: int = 1009,
    last_duration_s: float | None = None,
    bytes_scale: float = 1.0,
) -> Job:
    """One query plan (``queries[n]`` of the bundled document) -> a :class:`Job` with task counts.

    ``bytes_scale`` multiplies every byte estimate first (``1 / 30`` approximates a 1 TB warehouse
    from the 30 TB plans; the plan shapes stay those Hive chose for 30 TB).
    """
    if not (bytes_scale > 0.0 and math.isfinite(bytes_scale)):
        raise PolicyError(f"tpcds: bytes_scale must be a positive number, got {bytes_scale!r}")
    for label, setting in (
        ("map_bytes_per_task", map_bytes_per_task),
        ("reducer_bytes", reducer_bytes),
        ("max_reducers", max_reducers),
    ):
        if not isinstance(setting, int) or isinstance(setting, bool) or setting < 1:
            raise PolicyError(f"tpcds: {label} must be a positive integer, got {setting!r}")
    try:
        (stage,) = plan["tez_stages"]
        raw_vertices: Mapping[str, Mapping[str, Any]] = stage["vertices"]
        raw_edges = stage["edges"]
        kinds = {v: str(spec["kind"]) for v, spec in raw_vertices.items()}
        flow = [_flow_edge(e) for e in raw_edges]
    except (KeyError, TypeError, ValueError) as exc:
        raise PolicyError(f"tpcds: query {name!r}: malformed plan ({exc!r})") from None

    # Parents first: level every vertex of the raw graph (unions included).
    levels = vertex_levels(Job(name, None, dict.fromkeys(raw_vertices, 1), tuple(flow)))
    parents: dict[str, list[str]] = {v: [] for v in raw_vertices}
    for e in flow:
        parents[e.dst].append(e.src)
    est_bytes: dict[str, float | None] = {}
    tasks: dict[str, int] = {}
    for v in sorted(raw_vertices, key=lambda x: levels[x]):
        spec, kind = raw_vertices[v], kinds[v]
        from_parents = _sum_known(est_bytes[p] for p in parents[v])
        if kind == "Union":
            est_bytes[v] = from_parents
            continue
        if kind == "Map":
            scan = _scaled(spec.get("first_stat_bytes"), bytes_scale)
            est_bytes[v] = scan
            tasks[v] = max(1, math.ceil((scan or 0.0) / map_bytes_per_task))
        elif kind == "Reducer":
            own = _scaled(spec.get("max_stat_bytes"), bytes_scale)
            own = own if own is not None else _scaled(spec.get("first_stat_bytes"), bytes_scale)
            b = own if own is not None else from_parents
            est_bytes[v] = b
            tasks[v] = min(max_reducers, max(1, math.ceil((b or 0.0) / reducer_bytes)))
        else:
            raise PolicyError(f"tpcds: query {name!r}: vertex {v!r} has unknown kind {kind!r}")
    edges = _without_unions(flow, {v for v, k in kinds.items() if k == "Union"})
    in_plan_order = {v: tasks[v] for v in raw_vertices if v in tasks}
    return Job(name=name, last_duration_s=last_duration_s, vertices=in_plan_order, edges=tuple(edges))


def tpcds_jobs(
    *,
    map_bytes_per_task: int = 256 * MB,
    reducer_bytes: int = 256 * MB,
    max_reducers: int = 1009,
    last_duration_s: float | Mapping[str, float] | None = None,
    bytes_scale: float = 1.0,
) -> list[Job]:
    """The 99 TPC-DS queries as jobs named ``tpcds-q<N>``, in query order.

    ``last_duration_s``: one duration for every job, or a mapping query number ("19") -> seconds
    (queries missing from it never ran: ``None``), or ``None``. ``bytes_scale``: see
    :func:`plan_to_job`.
    """
    queries = load_tpcds_plans()["queries"]
    jobs = []
    for q in sorted(queries, key=int):
        if isinstance(last_duration_s, Mapping):
            d = last_duration_s.get(q)
        else:
            d = last_duration_s
        jobs.append(
            plan_to_job(
                f"tpcds-q{q}",
                queries[q],
                map_bytes_per_task=map_bytes_per_task,
                reducer_bytes=reducer_bytes,
                max_reducers=max_reducers,
                last_duration_s=None if d is None else float(d),
                bytes_scale=bytes_scale,
            )
        )
    return jobs


def _flow_edge(e: Mapping[str, Any]) -> Edge:
    """An edge in data-flow direction (a CONTAINS edge is written union -> member)."""
    src, dst, etype = str(e["src"]), str(e["dst"]), str(e["type"])
    if etype == CONTAINS:
        return Edge(dst, src, etype)
    return Edge(src, dst, etype)


def _without_unions(edges: list[Edge], unions: set[str]) -> list[Edge]:
    """Replace each union by edges from each of its members to each of its consumers."""
    out = list(edges)
    for u in sorted(unions):
        members = [e.src for e in out if e.dst == u]
        consumers = [(e.dst, e.type) for e in out if e.src == u]
        out = [e for e in out if u not in (e.src, e.dst)]
        out.extend(Edge(m, c, t) for m in members for c, t in consumers)
    seen: set[tuple[str, str]] = set()
    unique = []
    for e in out:
        if (e.src, e.dst) not in seen:
            seen.add((e.src, e.dst))
            unique.append(e)
    return unique


def _num(value: Any) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) and out >= 0.0 else None


def _scaled(value: Any, scale: float) -> float | None:
    v = _num(value)
    return None if v is None else v * scale


def _sum_known(values: Any) -> float | None:
    known = [v for v in values if v is not None]
    return float(sum(known)) if known else None

"""Job DAG analysis: parse the job JSON, level the vertices, estimate peak concurrent containers.

Class selection needs to know how many containers a job may hold at once. The estimate walks the
DAG breadth first:

1. A vertex's *level* is 0 when it has no parents, otherwise ``1 + max(level of its parents)``
   (the longest path from any source, counted in edges).
2. Vertices of one level may run at the same time; their task counts add up.
3. ``max_concurrency(job) = max over levels L of sum(tasks(v) for v at level L)`` (containers).

The estimate assumes one container per task and that a level only starts once its parents finish,
which is how Tez schedules vertices that are joined by shuffle edges; broadcast inputs of a level
are already complete when it starts.

Job JSON (see ``docs/contracts.md``)::

    {"name": str, "last_duration_s": float | null,
     "vertices": {name: {"tasks": int >= 1}}, "edges": [{"src": str, "dst": str, "type": str}]}

``src`` is the producing vertex and ``dst`` the consuming one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from placement_service.core.types import Edge, Job, PolicyError
from placement_service.validate import InputError, check_finite, check_int

DEFAULT_EDGE_TYPE = "SIMPLE_EDGE"
MAX_DURATION_S = 10 * 365 * 86400.0  # a "last duration" beyond ten years is a unit mistake
MAX_TASKS = 10**9  # tasks of one vertex (Tez's largest vertices have about 10^5)


def parse_job(doc: Mapping[str, Any], source: str = "job.json") -> Job:
    """Validate a job JSON document and build a :class:`Job`.

    Errors are :class:`PolicyError` naming ``source`` and the offending field, e.g.
    ``job.json: edges[3].dst: unknown vertex 'Reducer 9'`` or ``job.json: vertices: cycle ...``.
    """
    if not isinstance(doc, Mapping):
        raise PolicyError(f"{source}: expected a JSON object, got {type(doc).__name__}")
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise PolicyError(f"{source}: name: expected a non-empty string, got {name!r}")
    if "last_duration_s" not in doc:
        raise PolicyError(f"{source}: last_duration_s: missing (use null for a job that never ran)")
    last = _parse_duration(doc["last_duration_s"], f"{source}: last_duration_s")

    raw_vertices = doc.get("vertices")
    if not isinstance(raw_vertices, Mapping) or not raw_vertices:
        raise PolicyError(f'{source}: vertices: expected a non-empty object {{name: {{"tasks": n}}}}')
    vertices: dict[str, int] = {}
    for vname, spec in raw_vertices.items():
        where = f"{source}: vertices[{vname!r}]"
        if not isinstance(vname, str) or not vname:
            raise PolicyError(f"{where}: vertex names must be non-empty strings")
        if not isinstance(spec, Mapping) or "tasks" not in spec:
            raise PolicyError(f"{where}: expected an object with a 'tasks' field, got {spec!r}")
        vertices[vname] = _parse_tasks(spec["tasks"], f"{where}.tasks")

    raw_edges = doc.get("edges", [])
    if not isinstance(raw_edges, list):
        raise PolicyError(f"{source}: edges: expected a list, got {type(raw_edges).__name__}")
    edges: list[Edge] = []
    for i, e in enumerate(raw_edges):
        where = f"{source}: edges[{i}]"
        if not isinstance(e, Mapping):
            raise PolicyError(f"{where}: expected an object with 'src' and 'dst', got {e!r}")
        ends = []
        for key in ("src", "dst"):
            v = e.get(key)
            if not isinstance(v, str):
                raise PolicyError(f"{where}.{key}: expected a vertex name, got {v!r}")
            if v not in vertices:
                raise PolicyError(f"{where}.{key}: unknown vertex {v!r}")
            ends.append(v)
        etype = e.get("type", DEFAULT_EDGE_TYPE)
        if not isinstance(etype, str) or not etype:
            raise PolicyError(f"{where}.type: expected a non-empty string, got {etype!r}")
        if ends[0] == ends[1]:
            raise PolicyError(f"{where}: self-loop on vertex {ends[0]!r}")
        edges.append(Edge(ends[0], ends[1], etype))
    job = Job(name=name, last_duration_s=last, vertices=vertices, edges=tuple(edges))
    vertex_levels(job, source=source)  # rejects cycles with a message naming the vertices
    return job


def job_to_json(job: Job) -> dict[str, Any]:
    """The job JSON document of ``job`` (inverse of :func:`parse_job`)."""
    return {
        "name": job.name,
        "last_duration_s": job.last_duration_s,
        "vertices": {v: {"tasks": int(n)} for v, n in job.vertices.items()},
        "edges": [{"src": e.src, "dst": e.dst, "type": e.type} for e in job.edges],
    }


def vertex_levels(job: Job, *, source: str | None = None) -> dict[str, int]:
    """Level of every vertex: 0 for sources, else ``1 + max(level of parents)``.

    Kahn's topological order, O(vertices + edges). Raises :class:`PolicyError` on an edge naming an
    unknown vertex or on a cycle (the message lists the vertices left on cycles).
    """
    where = source or f"job {job.name!r}"
    children: dict[str, list[str]] = {v: [] for v in job.vertices}
    indegree: dict[str, int] = dict.fromkeys(job.vertices, 0)
    for i, e in enumerate(job.edges):
        for end in (e.src, e.dst):
            if end not in children:
                raise PolicyError(f"{where}: edges[{i}]: unknown vertex {end!r}")
        children[e.src].append(e.dst)
        indegree[e.dst] += 1
    level = dict.fromkeys(job.vertices, 0)
    ready = [v for v, d in indegree.items() if d == 0]
    done = 0
    while ready:
        v = ready.pop()
        done += 1
        for c in children[v]:
            if level[v] + 1 > level[c]:
                level[c] = level[v] + 1
            indegree[c] -= 1
            if indegree[c] == 0:
                ready.append(c)
    if done < len(level):
        stuck = sorted(v for v, d in indegree.items() if d > 0)
        raise PolicyError(f"{where}: vertices: the edges form a cycle through {stuck[:10]}")
    return level


def level_tasks(job: Job) -> list[int]:
    """Total task count per level, index = level (containers that may run at once per level)."""
    levels = vertex_levels(job)
    out = [0] * (max(levels.values(), default=-1) + 1)
    for v, lvl in levels.items():
        out[lvl] += int(job.vertices[v])
    return out


def max_concurrency(job: Job) -> int:
    """Peak concurrent containers: the largest per-level sum of task counts (see module docstring)."""
    if not job.vertices:
        raise PolicyError(f"job {job.name!r}: has no vertices")
    return max(level_tasks(job))


def _parse_duration(value: Any, where: str) -> float | None:
    if value is None:
        return None
    try:
        return check_finite(value, where, minimum=0.0, maximum=MAX_DURATION_S)
    except InputError as exc:
        raise PolicyError(f"{exc} (seconds, or null for a job that never ran)") from None


def _parse_tasks(value: Any, where: str) -> int:
    if isinstance(value, float) and value.is_integer() and abs(value) <= MAX_TASKS:
        value = int(value)
    try:
        return check_int(value, where, minimum=1, maximum=MAX_TASKS)
    except InputError as exc:
        raise PolicyError(str(exc)) from None

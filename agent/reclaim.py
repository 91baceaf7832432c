"""How a kill is carried out, and whether the scheduler keeps to the advertised size (pure policy).

Reclaim path (``choose_path``):

- **rm-preemption** (Hadoop 3.3+): the agent shrinks the node in the ResourceManager to what the
  surviving containers hold, with a short ``overCommitTimeout``; the RM kills newest-first (never the
  ApplicationMaster) with exit status PREEMPTED, which MapReduce and Tez count as a *killed* attempt
  (not against ``maxattempts``);
- **local-kill**: SIGTERM/SIGKILL to the container's process group on the node. The NodeManager then
  reports exit 143/137, a *failed* attempt. Used on 3.2 (no over-commit kill there), when the RM is
  unreachable or its version unknown, and as the fallback of the RM path: when the RM has not
  killed within ``rm_reclaim_wait_s``, or at once when the memory reserve is used up (a memory deficit
  larger than the reserve: the primary has no memory left to wait in; CPU is elastic, so a CPU
  deficit waits for the RM).

Scheduler check (``ignored_resources``): the agent advertises a node size; a container that appears
well after that size was set (``grace_s``) and takes the allocation above it shows the scheduler does
not count that resource (e.g. the memory-only default calculator and vcores). Killing would loop (the
scheduler refills the node at once), so for an ignored resource the agent kills only on measured
primary load (see ``decide``) and raises an alarm.
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass

from agent.attribute import NodeView
from agent.decide import Decision, Kill


class ReclaimPath(enum.Enum):
    RM_PREEMPTION = "rm-preemption"
    LOCAL_KILL = "local-kill"


def parse_version(version: str | None) -> tuple[int, int] | None:
    """``"3.3.6"`` -> (3, 3); None when absent or unreadable."""
    if not version:
        return None
    parts = version.strip().split(".")
    try:
        return int(parts[0]), int(parts[1].split("-")[0]) if len(parts) > 1 else 0
    except ValueError:
        return None


def choose_path(setting: str, hadoop_version: str | None, resource_rest: bool) -> tuple[ReclaimPath, str]:
    """The path for ``reclaim`` = auto | rm | local, and why (for /explain)."""
    if setting == "local":
        return ReclaimPath.LOCAL_KILL, "reclaim = local (configured)"
    version = parse_version(hadoop_version)
    if not resource_rest:
        return ReclaimPath.LOCAL_KILL, ("the RM has no node-resource REST call (404: Hadoop 3.2); "
                                        "yarn rmadmin cannot preempt there either")
    if setting == "rm":
        return ReclaimPath.RM_PREEMPTION, "reclaim = rm (configured)"
    if version is None:
        return ReclaimPath.LOCAL_KILL, "Hadoop version not known yet (GET /ws/v1/cluster/info failed)"
    if version >= (3, 3):
        return ReclaimPath.RM_PREEMPTION, (f"Hadoop {hadoop_version}: the RM preempts over-committed "
                                           f"containers (PREEMPTED = killed attempts, not failed)")
    return ReclaimPath.LOCAL_KILL, (f"Hadoop {hadoop_version}: the RM lets a shrunk node sit over-committed "
                                    f"and kills nothing; local kills count as failed attempts")


@dataclass(frozen=True)
class ReclaimPlan:
    via_rm: tuple[Kill, ...]  # the RM is asked to take these back
    local: tuple[Kill, ...]  # killed on the node now
    node_memory_mb: int  # node size that leaves exactly the survivors' allocation
    node_vcores: int
    urgent: bool  # the reserve is used up: no time to wait for the RM
    path: ReclaimPath = ReclaimPath.LOCAL_KILL


def plan_reclaim(decision: Decision, view: NodeView | None, reserve_cores: float, reserve_memory_mb: float,
                 dying: Collection[str], path: ReclaimPath) -> ReclaimPlan:
    """Split the decision's kills between the RM and the node.

    Step plan: 1. local path, no view, or urgent (memory deficit > memory reserve): everything local;
    2. a kill the NodeManager does not list (no allocation known) is local; 3. the RM gets the rest,
    with the node size = the allocation of the containers that stay (neither killed nor dying).
    """
    del reserve_cores  # CPU is elastic: an overrun slows the primary for a heartbeat, memory would OOM it
    urgent = decision.deficit_memory_mb > reserve_memory_mb + 1e-9
    if path is ReclaimPath.LOCAL_KILL or view is None or urgent or not decision.kills:
        return ReclaimPlan((), decision.kills, 0, 0, urgent, path)
    allocated = {c.container_id: c for c in view.containers if c.alloc_memory_mb is not None}
    via_rm = tuple(k for k in decision.kills if k.container_id in allocated)
    local = tuple(k for k in decision.kills if k.container_id not in allocated)
    leaving = {k.container_id for k in via_rm} | set(dying)
    stay = [c for cid, c in allocated.items() if cid not in leaving]
    memory_mb = int(sum(c.alloc_memory_mb or 0.0 for c in stay))
    vcores = int(sum(c.alloc_cores or 0.0 for c in stay))
    return ReclaimPlan(via_rm, local, memory_mb, vcores, urgent, path)


def size_at(history: Sequence[tuple[float, tuple[int, int]]], t_s: float) -> tuple[int, int] | None:
    """The node size (memory MB, vcores) in effect at ``t_s`` from ``(set at, size)`` pairs in time order."""
    current = None
    for set_at_s, size in history:
        if set_at_s > t_s:
            break
        current = size
    return current


def ignored_resources(view: NodeView, history: Sequence[tuple[float, tuple[int, int]]],
                      first_seen_s: Mapping[str, float], grace_s: float,
                      previously: Collection[str] = ()) -> frozenset[str]:
    """Resources ("cores", "memory") the scheduler over-allocated beyond the node size it had.

    ``history``: ``(set at, (memory MB, vcores))`` of the sizes written to the RM, in time order;
    ``first_seen_s``: when the agent first saw each container. A resource is ignored when the
    containers' allocation exceeds the current size and some container first seen at ``f`` takes the
    allocation above the size that was in effect at ``f - grace_s`` (so the RM had that size well
    before it granted the container). The verdict latches (``previously``) while the allocation
    stays above the size, so a resize does not restart the kill loop.
    """
    if not history:
        return frozenset()
    applied = history[-1][1]
    listed = [c for c in view.containers if c.alloc_memory_mb is not None]
    alloc = {"memory": sum(c.alloc_memory_mb or 0.0 for c in listed),
             "cores": sum(c.alloc_cores or 0.0 for c in listed)}
    index = {"memory": 0, "cores": 1}
    out = set()
    for resource in ("cores", "memory"):
        if alloc[resource] <= applied[index[resource]] + 1e-9:
            continue
        if resource in previously:
            out.add(resource)
            continue
        for c in listed:
            then = size_at(history, first_seen_s.get(c.container_id, -float("inf")) - grace_s)
            if then is not None and alloc[resource] > then[index[resource]] + 1e-9:
                out.add(resource)
                break
    return frozenset(out)

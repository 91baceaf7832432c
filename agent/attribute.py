"""Stage 2, attribute: group secondary processes into containers and work out the primary's share.

Pure functions over a ``NodeSample`` (and, in YARN mode, the NodeManager's container list):

    primary_cpu_cores   = ceil(node_cpu - secondary_cpu - datanode_cpu - daemon_cpu - noise)   [whole cores]
    primary_memory_mb   = ceil(node_memory - secondary_memory - datanode_memory)  [whole MB]

``daemon_cpu``: the other Hadoop daemons' CPU (the NodeManager). It comes with container launches
(localizing, starting, monitoring: 0.1-0.2 core for a second or two on a real 3.3.6), so as primary
load it would round up to a whole core at each launch on a full node, and the agent would take back
the container just started, at every launch (a kill loop seen on a real NodeManager). Their memory
stays primary (steady, and the safe side).

``noise`` (``primary_cpu_noise_cores``, default 0.1 core) keeps a primary that is all but idle, or a
hair above a whole core, from being rounded up a full core by measurement jitter.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from agent.sampler import NodeSample

_CONTAINER_ID = re.compile(r"^container_(?:e(\d+)_)?(\d+)_(\d+)_(\d+)_(\d+)$")


def is_application_master(container_id: str) -> bool:
    """Container 1 of an application attempt is its ApplicationMaster (YARN numbers it first)."""
    key = container_order(container_id)
    return len(key) > 1 and key[3] == 1


@functools.lru_cache(maxsize=1 << 16)  # parsed once per id: sorted on every tick (and simulated step)
def container_order(container_id: str) -> tuple[int, ...]:
    """Sort key from a YARN container id: (cluster start ms, application, attempt, sequence).

    YARN has no container start time in the NM REST answer, so when no process is seen the id's
    numbers stand in for age (a larger key is younger). Unparseable ids sort as oldest.
    """
    match = _CONTAINER_ID.match(container_id)
    if not match:
        return (0,)
    epoch, cluster_ts, app, attempt, seq = match.groups()
    return (int(cluster_ts), int(app), int(attempt), int(seq), int(epoch or 0))


@dataclass(frozen=True)
class Allocation:
    """What YARN granted a container (NM ``totalVCoresNeeded`` / ``totalMemoryNeededMB``)."""

    cores: float
    memory_mb: float
    state: str = "RUNNING"


@dataclass(frozen=True)
class ContainerView:
    """One secondary container: measured usage, YARN allocation (if known), its processes."""

    container_id: str
    cpu_cores: float
    memory_mb: float
    start_time: float  # earliest process start, epoch s; 0.0 when no process was seen
    processes: tuple[tuple[int, float], ...]  # (pid, create_time) pairs, to re-check before a kill
    pgids: tuple[int, ...]
    alloc_cores: float | None = None
    alloc_memory_mb: float | None = None

    @property
    def footprint_cores(self) -> float:
        """Cores charged to the container: its allocation when known, else its measured use.

        CPU above the allocation is borrowed idle time the kernel hands back under contention, so it
        is not charged; memory is not elastic, so ``footprint_memory_mb`` takes the larger figure.
        """
        return self.alloc_cores if self.alloc_cores else self.cpu_cores

    @property
    def footprint_memory_mb(self) -> float:
        return max(self.alloc_memory_mb or 0.0, self.memory_mb)

    def age_key(self) -> tuple[float, tuple[int, ...]]:
        """Larger is younger: process start time first, container id as tie-break / fallback.

        A container the NM lists with no local process yet is being launched: the youngest of all
        (killing it loses no work); among several such, the container id decides.
        """
        start = self.start_time if self.processes else math.inf
        return (start, container_order(self.container_id))


@dataclass(frozen=True)
class NodeView:
    """The node after attribution: what the decide stage works from."""

    timestamp: float
    window_s: float
    node_cpu_cores: float
    node_memory_mb: float
    primary_cpu_raw: float  # measured, before rounding
    primary_cpu_cores: int  # rounded up to whole cores
    primary_memory_mb: int  # rounded up to whole MB
    secondary_cpu_cores: float  # measured
    secondary_memory_mb: float
    datanode_cpu_cores: float
    datanode_memory_mb: float
    containers: tuple[ContainerView, ...]
    daemon_cpu_cores: float = 0.0  # the other Hadoop daemons (NodeManager): not primary CPU


def attribute(
    sample: NodeSample,
    allocations: Mapping[str, Allocation] | None = None,
    *,
    container_cores: float = 0.0,
    primary_cpu_noise_cores: float = 0.1,
) -> NodeView:
    """Group the sample's processes by ``CONTAINER_ID`` and split the node into primary/secondary.

    ``allocations`` (YARN mode) adds each container's granted size and containers the NM lists that
    have no local process; ``container_cores`` (local mode) is the allocation assumed per container
    when no NM is asked (0: charge measured use).
    """
    groups: dict[str, list] = {}
    datanode_cpu = datanode_mem = daemon_cpu = 0.0
    for proc in sample.processes:
        if proc.container_id is not None:
            groups.setdefault(proc.container_id, []).append(proc)
        elif proc.datanode:
            datanode_cpu += proc.cpu_cores
            datanode_mem += proc.memory_mb
        elif proc.hadoop_daemon:
            daemon_cpu += proc.cpu_cores
    active = {cid: a for cid, a in (allocations or {}).items() if a.state not in _FINISHED_STATES}
    containers: list[ContainerView] = []
    for cid in sorted(set(groups) | set(active)):
        procs = groups.get(cid, [])
        alloc = active.get(cid)
        alloc_cores = alloc.cores if alloc else (container_cores or None)
        containers.append(ContainerView(
            container_id=cid,
            cpu_cores=sum(p.cpu_cores for p in procs),
            memory_mb=sum(p.memory_mb for p in procs),
            start_time=min((p.create_time for p in procs), default=0.0),
            processes=tuple(sorted((p.pid, p.create_time) for p in procs)),
            pgids=tuple(sorted({p.pgid for p in procs if p.pgid > 0})),
            alloc_cores=alloc_cores,
            alloc_memory_mb=alloc.memory_mb if alloc else None,
        ))
    secondary_cpu = sum(c.cpu_cores for c in containers)
    secondary_mem = sum(c.memory_mb for c in containers)
    primary_cpu_raw = max(sample.node_cpu_cores - secondary_cpu - datanode_cpu - daemon_cpu, 0.0)
    primary_mem_raw = max(sample.node_memory_mb - secondary_mem - datanode_mem, 0.0)
    return NodeView(
        timestamp=sample.timestamp,
        window_s=sample.window_s,
        node_cpu_cores=sample.node_cpu_cores,
        node_memory_mb=sample.node_memory_mb,
        primary_cpu_raw=primary_cpu_raw,
        primary_cpu_cores=int(math.ceil(max(primary_cpu_raw - primary_cpu_noise_cores, 0.0))),
        primary_memory_mb=int(math.ceil(primary_mem_raw)),
        secondary_cpu_cores=secondary_cpu,
        secondary_memory_mb=secondary_mem,
        datanode_cpu_cores=datanode_cpu,
        datanode_memory_mb=datanode_mem,
        containers=tuple(containers),
        daemon_cpu_cores=daemon_cpu,
    )


# NM container states after which the container holds no resources any more.
_FINISHED_STATES = frozenset({
    "EXITED_WITH_SUCCESS", "EXITED_WITH_FAILURE", "CONTAINER_CLEANEDUP_AFTER_KILL", "DONE",
    "LOCALIZATION_FAILED",
})

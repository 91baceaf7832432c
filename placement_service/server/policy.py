"""The policy view: one immutable snapshot of what the decisions need, swapped in as a whole.

A view bundles the adopted class table, a ``ClassSelector`` over its classes (current CPU from the
nodes' latest reports), and a ``ReplicaPlacer`` over the harvestable nodes (free space from their
latest reports, grid cells from the table). The service builds a new view after a re-clustering,
when nodes register, and on every compaction tick, and replaces its reference in one assignment,
so a request sees either the old view or the new one. The core objects are not thread-safe: each
view serializes its decisions with its own lock (decisions take microseconds).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from placement_service.core.placement import PlacementConfig, PlacementResult, ReplicaPlacer
from placement_service.core.selection import ClassSelector
from placement_service.core.types import ClassTable, Inventory, Job, PlacementError, PolicyError, Selection
from placement_service.server.config import ServiceConfig
from placement_service.server.reports import NodeReport, NotFoundError, RequestError

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class StaticInputs:
    """Optional operator files: the inventory (environment, rack per node) and reimage rates."""

    node_environment: Mapping[str, str]
    node_rack: Mapping[str, str]
    reimage_rates: Mapping[str, float]  # tenant -> reimages per server per 30-day month


def load_static_inputs(cfg: ServiceConfig) -> StaticInputs:
    env: dict[str, str] = {}
    rack: dict[str, str] = {}
    rates: dict[str, float] = {}
    if cfg.inventory_file is not None:
        from placement_service.traces.io import load_inventory

        inv = load_inventory(cfg.inventory_file)
        env = dict(zip(inv.server, inv.environment, strict=True))
        rack = dict(zip(inv.server, inv.rack, strict=True))
        if cfg.reimages_file is not None:
            from placement_service.traces.io import load_reimages
            from placement_service.traces.series import reimage_rates

            rates = reimage_rates(load_reimages(cfg.reimages_file, known_servers=inv.server), inv)
    elif cfg.reimages_file is not None:
        logger.warning("reimages_file needs inventory_file (server -> tenant); reimage rates ignored")
    return StaticInputs(env, rack, rates)


@dataclass(frozen=True)
class JobDecision:
    selection: Selection
    queue: str | None
    node_label: str | None


class PolicyView:
    def __init__(
        self,
        version: int,
        doc: dict[str, Any] | None,
        table: ClassTable | None,
        selector: ClassSelector | None,
        placer: ReplicaPlacer | None,
        placer_nodes: frozenset[str],
        cfg: ServiceConfig,
        reimage_rates: Mapping[str, float],
    ) -> None:
        self.version = version
        self.doc = doc
        self.table = table
        self.tenant_class: Mapping[str, str] = table.tenant_class if table is not None else {}
        self.selector = selector
        self.placer = placer
        self.placer_nodes = placer_nodes
        self.cfg = cfg
        self.reimage_rates = reimage_rates
        self._lock = threading.Lock()
        self._rng = np.random.default_rng(cfg.seed)

    def class_of_tenant(self, tenant: str) -> str:
        return self.tenant_class.get(tenant, "")

    def update_current(self, nodes: Mapping[str, NodeReport], window_s: float) -> None:
        """Refresh the classes' current CPU from the nodes' latest reports."""
        if self.selector is None or self.table is None:
            return
        current = class_current_cpu(self.table, nodes, time.time(), window_s)
        if current:
            with self._lock:
                self.selector.update_current(current)

    def set_busy(self, node: str, busy: bool) -> None:
        if self.placer is not None and node in self.placer_nodes:
            with self._lock:
                self.placer.set_busy(node, busy)

    def select(self, job: Job) -> JobDecision:
        if self.selector is None:
            raise RequestError("no class table yet: run POST /v1/recluster once history exists", "classes", 409)
        with self._lock:
            selection = self.selector.select(job, self._rng)
        if not selection.classes:
            return JobDecision(selection, None, None)
        if len(selection.classes) == 1:
            return JobDecision(selection, selection.classes[0], selection.classes[0])
        # YARN requests name at most one label: a multi-class job goes to the shared queue and the
        # default partition, where idle non-exclusive class nodes take its containers.
        return JobDecision(selection, self.cfg.multi_class_queue, "")

    def place(self, writer: str, replicas: int, excluded: Sequence[str], block_size_bytes: int) -> PlacementResult:
        if self.placer is None:
            raise RequestError("no harvestable node with storage has reported yet", "nodes", 409)
        block_mb = block_size_bytes / (1024.0 * 1024.0) if block_size_bytes else self.placer.config.block_size_mb
        with self._lock:
            result = self.placer.place(
                writer if writer in self.placer_nodes else None, replicas,
                excluded=[e for e in excluded if e in self.placer_nodes], rng=self._rng,
            )
            # The placer books its configured block size; correct the booking to this block's size.
            delta = self.placer.config.block_size_mb - block_mb
            for t in result.targets:
                if delta > 0:
                    self.placer.release(t, delta)
                elif delta < 0:
                    self.placer.allocate(t, min(-delta, self.placer.free_mb(t)))
        return result


def _placer_for(
    nodes: Mapping[str, NodeReport], harvestable: frozenset[str] | None, table: ClassTable | None, seed: int,
    block_size_mb: float, static: StaticInputs,
) -> tuple[ReplicaPlacer | None, frozenset[str]]:
    usable = sorted(n for n in nodes if harvestable is None or n in harvestable)
    if not usable:
        return None, frozenset()
    inv = Inventory(
        server=tuple(usable),
        tenant=tuple(nodes[n].tenant for n in usable),
        # Without an inventory a tenant is its own environment (replicas never share a tenant).
        environment=tuple(static.node_environment.get(n, nodes[n].tenant) for n in usable),
        rack=tuple(static.node_rack.get(n, "/default-rack") for n in usable),
        cores=np.array([nodes[n].capacity_cores for n in usable]),
        memory_mb=np.array([nodes[n].capacity_memory_mb for n in usable]),
        storage_gb=np.array([nodes[n].free_storage_gb for n in usable]),
    )
    grid = dict(table.grid) if table is not None and table.grid is not None else {}
    placer = ReplicaPlacer(inv, grid, config=PlacementConfig(block_size_mb=block_size_mb), seed=seed)
    for n in usable:
        if nodes[n].busy:
            placer.set_busy(n, True)
    return placer, frozenset(usable)


def class_current_cpu(
    table: ClassTable, nodes: Mapping[str, NodeReport], now_s: float, window_s: float
) -> dict[str, float]:
    """Each class's current CPU: mean ``cpu_frac`` of its nodes' reports newer than ``window_s``."""
    sums: dict[str, list[float]] = {}
    for r in nodes.values():
        cid = table.tenant_class.get(r.tenant)
        if cid is None or r.timestamp < now_s - window_s:
            continue
        acc = sums.setdefault(cid, [0.0, 0.0])
        acc[0] += r.cpu_frac
        acc[1] += 1.0
    return {cid: min(1.0, max(0.0, s / n)) for cid, (s, n) in sums.items() if n > 0}


def build_policy_view(
    cfg: ServiceConfig,
    version: int,
    doc: dict[str, Any] | None,
    nodes: Mapping[str, NodeReport],
    harvestable: frozenset[str] | None,
    current_window_s: float | None = None,
    block_size_mb: float = 256.0,
    static: StaticInputs | None = None,
    table: ClassTable | None = None,
    pause: Callable[[], None] = lambda: None,
) -> PolicyView:
    """Build a view; ``table`` is ``doc`` already parsed (optional); ``pause`` runs between the
    stages (the background caller sleeps there, so request threads get the GIL back)."""
    static = static or StaticInputs({}, {}, {})
    selector = None
    if doc is not None:
        try:
            if table is None:
                table = ClassTable.from_json(doc, f"class table v{version}")
                pause()
            if table.classes:
                selector = ClassSelector(table)
                if current_window_s:
                    pause()
                    current = class_current_cpu(table, nodes, time.time(), current_window_s)
                    if current:
                        selector.update_current(current)
        except PolicyError as exc:
            logger.error("stored class table v%d is unusable (%s); serving without classes", version, exc)
            table, selector = None, None
    else:
        table = None
    pause()
    try:
        placer, placer_nodes = _placer_for(nodes, harvestable, table, cfg.seed, block_size_mb, static)
    except PolicyError as exc:
        logger.error("cannot build the replica placer: %s", exc)
        placer, placer_nodes = None, frozenset()
    return PolicyView(version, doc, table, selector, placer, placer_nodes, cfg, static.reimage_rates)


__all__ = ["PolicyView", "JobDecision", "build_policy_view", "NotFoundError", "PlacementError"]

"""The policy view: one immutable snapshot of what the decisions need, swapped in as a whole.

A view bundles the adopted class table, a ``ClassSelector`` over its classes (current CPU from the
nodes' latest reports), and ``ReplicaPlacer`` s over the harvestable nodes (free space from their
latest reports, grid cells from the table), one per block-size bucket asked for.

Placement decisions change nothing (they are not authenticated): the space of a placed block is not
booked, free space comes only from the nodes' reports (``set_free``). A block of ``B`` bytes needs
free space of at least ``B`` rounded up to a power of two MiB (at least 1 MiB) on every target: the
buckets bound how many placers a view can build (each costs ~50 ms for 15,000 nodes), whatever sizes
unauthenticated callers ask for. When fewer usable nodes exist than replicas asked for, the answer
holds the usable ones and is marked ``short`` (the NameNode's re-replication loop would otherwise ask
again about once a second per block); none at all is a refusal. The service builds a new view after a re-clustering,
when nodes register, and on every compaction tick, and replaces its reference in one assignment,
so a request sees either the old view or the new one. The core objects are not thread-safe: each
view serializes its decisions with its own lock (decisions take microseconds).
"""

from __future__ import annotations

import gc
import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from placement_service.core.cobusy import reimage_penalty
from placement_service.core.placement import (
    COBUSY_NEW_MAX_TURNOVER,
    COBUSY_NEW_TARGET,
    COBUSY_RISK_TARGET,
    COBUSY_SPREAD,
    REIMAGE_CHOICES,
    REPAIR_CHOICES,
    PlacementConfig,
    ReplicaPlacer,
)
from placement_service.core.selection import ClassSelector, SelectionConfig
from placement_service.core.types import (
    ClassTable,
    Inventory,
    Job,
    Pattern,
    PlacementError,
    PolicyError,
    Selection,
    UtilizationClass,
)
from placement_service.server.cobusy_store import CobusyEstimates, CobusyState
from placement_service.server.config import ServiceConfig
from placement_service.server.elastic import ELASTIC_CLASS
from placement_service.server.reports import NodeReport, NotFoundError, RequestError

logger = logging.getLogger(__name__)

HDFS_H = "HDFS-H"  # the paper's placement: distinct grid rows, peak columns and environments
HDFS_H_HOURS = "HDFS-H-hours"  # + replicas on tenants not busy at the same hours (placement_busy_hours)
HDFS_H_COBUSY = "HDFS-H-cobusy"  # + replicas on the tenants least likely busy together (placement_cobusy)
NO_GRID = "environments-only"  # no class table with a grid yet: environments and free space only


@dataclass(frozen=True)
class PlacementMode:
    """The replica placement in force, the one configured, and why they differ (a fallback)."""

    mode: str
    configured: str
    reason: str = ""
    cobusy_estimates: Mapping[str, Any] | None = None  # what the estimates in use were fitted on
    # HDFS-H-cobusy configured, HDFS-H-hours in force only because no estimates are fitted yet (a
    # --classes-file table, or none stored): reported, but not a health problem
    waiting: bool = False

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, "configured": self.configured, "fallback": self.mode != self.configured,
                "reason": self.reason, "waiting_for_estimates": self.waiting,
                "cobusy_estimates": dict(self.cobusy_estimates) if self.cobusy_estimates is not None else None}


def placement_mode(cfg: ServiceConfig, table: ClassTable | None, cobusy: CobusyState) -> PlacementMode:
    """HDFS-H-cobusy when configured and usable estimates are loaded; else HDFS-H-hours when
    configured and the table has busy-hour profiles; else HDFS-H (each fallback says why)."""
    configured = HDFS_H_COBUSY if cfg.placement_cobusy else HDFS_H_HOURS if cfg.placement_busy_hours else HDFS_H
    if table is None or not table.grid:
        return PlacementMode(NO_GRID, configured, "no class table with a reimage x peak grid yet: replicas "
                                                  "spread over environments and free space only")
    why: list[str] = []
    if cfg.placement_cobusy:
        if cobusy.estimates is not None:
            return PlacementMode(HDFS_H_COBUSY, configured, "", cobusy.estimates.describe())
        why.append(f"no usable co-busy estimates: {cobusy.note or 'none loaded'}")
    if cfg.placement_busy_hours:
        if table.busy_hours:
            return PlacementMode(HDFS_H_HOURS, configured, "; ".join(why),
                                 waiting=cfg.placement_cobusy and cobusy.pending)
        why.append("the class table has no busy-hour profiles")
    return PlacementMode(HDFS_H, configured, "; ".join(why))


@dataclass(frozen=True)
class StaticInputs:
    """Optional operator files: the inventory (environment, rack per node) and reimage rates."""

    node_environment: Mapping[str, str]
    node_rack: Mapping[str, str]
    reimage_rates: Mapping[str, float]  # tenant -> reimages per server per 30-day month
    node_tenant: Mapping[str, str] = field(default_factory=dict)  # from the inventory
    node_reimage_times: Mapping[str, tuple[float, ...]] = field(default_factory=dict)  # node -> reimage event times

    @property
    def node_reimages(self) -> dict[str, float]:
        """Each node's reimages seen: its distinct reimages (:func:`count_reimages`)."""
        return {node: count_reimages(ts) for node, ts in self.node_reimage_times.items()}


SAME_REIMAGE_S = 6 * 3600.0
"""Two reimage events of one node this close (seconds) are one reimage. The same reimage reaches the
service more than once, with different times: in the operator's reimages file (when it started, say)
and from the agent (``detected``: the boot after it, ``agent/reimage.py``), or declared by an
operator as well; a reimage takes hours. A retried reimage within hours counts once, too."""


def count_reimages(times: Iterable[float]) -> float:
    """Distinct reimages among one node's event times: events within ``SAME_REIMAGE_S`` of the
    previous one (in time order) are the same reimage."""
    ts = sorted(times)
    return float(sum(1 for i, t in enumerate(ts) if i == 0 or t - ts[i - 1] > SAME_REIMAGE_S))


def load_static_inputs(cfg: ServiceConfig) -> StaticInputs:
    env: dict[str, str] = {}
    rack: dict[str, str] = {}
    rates: dict[str, float] = {}
    tenant: dict[str, str] = {}
    times: dict[str, list[float]] = {}
    if cfg.inventory_file is not None:
        from placement_service.traces.io import load_inventory

        inv = load_inventory(cfg.inventory_file)
        env = dict(zip(inv.server, inv.environment, strict=True))
        rack = dict(zip(inv.server, inv.rack, strict=True))
        tenant = dict(zip(inv.server, inv.tenant, strict=True))
        if cfg.reimages_file is not None:
            from placement_service.traces.io import load_reimages
            from placement_service.traces.series import reimage_rates

            events = load_reimages(cfg.reimages_file, known_servers=inv.server)
            rates = reimage_rates(events, inv)
            for node, ts in zip(events.server, events.timestamp_s.tolist(), strict=True):
                times.setdefault(node, []).append(float(ts))
    elif cfg.reimages_file is not None:
        logger.warning("reimages_file needs inventory_file (server -> tenant); reimage rates ignored")
    return StaticInputs(env, rack, rates, tenant, {n: tuple(sorted(ts)) for n, ts in times.items()})


@dataclass(frozen=True)
class PlaceDecision:
    targets: tuple[str, ...]
    relaxed: bool
    reason: str
    short: bool  # fewer targets than replicas asked for: all the usable nodes there are
    block_mb: float  # the bucket the block was placed in


def block_bucket_mb(block_size_bytes: int, default_mb: float) -> float:
    """The free space (MiB) a block needs: its size rounded up to a power of two, at least 1 MiB;
    ``default_mb`` when the caller gave no size (0)."""
    if block_size_bytes <= 0:
        return default_mb
    mb = block_size_bytes / (1024.0 * 1024.0)
    return float(2 ** max(0, math.ceil(math.log2(mb)))) if mb > 1.0 else 1.0


@dataclass(frozen=True)
class JobDecision:
    selection: Selection
    queue: str | None
    node_label: str | None
    explanation: dict[str, Any] | None = None  # ClassSelector.explain, when asked for


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
        make_placer: Callable[[float], ReplicaPlacer | None] | None = None,
        node_env: Mapping[str, str] | None = None,
        cobusy: CobusyState | None = None,
        mode: PlacementMode | None = None,
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
        self._make_placer = make_placer
        self._placers: dict[float, ReplicaPlacer] = {}
        if placer is not None:
            self._placers[placer.config.block_size_mb] = placer
        self._free_gb: dict[str, float] = {}  # reported free space last applied to the placers
        self._busy: dict[str, bool] = {}  # busy flags reported since the view was built
        self.node_env: Mapping[str, str] = node_env or {}  # placer node -> environment
        self.has_grid = table is not None and bool(table.grid)
        self.cobusy = cobusy if cobusy is not None else CobusyState()  # carried to the next view of this table
        self.mode = mode if mode is not None else placement_mode(cfg, table, self.cobusy)

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
                self.selector.set_live(live_classes(self.selector, current))

    def set_selection(self, selection: SelectionConfig | None) -> None:
        """Take new selection settings in place: a new selector over the same classes, each class's
        current CPU carried over; the placers are untouched."""
        if self.selector is None:
            return
        with self._lock:
            current, live = self.selector.current(), self.selector.live()
            selector = ClassSelector(self.selector.classes, selection)
            selector.update_current(current)
            selector.set_live(live)
            self.selector = selector

    def set_busy(self, node: str, busy: bool) -> None:
        if self.placer is not None and node in self.placer_nodes:
            with self._lock:
                self._busy[node] = busy
                for placer in self._placers.values():
                    placer.set_busy(node, busy)

    def set_free(self, node: str, free_storage_gb: float, min_change_gb: float = 1.0) -> None:
        """Take a node's reported free space (placements book nothing); changes under
        ``min_change_gb`` are skipped, to keep the ingest path cheap."""
        if self.placer is None or node not in self.placer_nodes:
            return
        with self._lock:
            last = self._free_gb.get(node)
            if last is not None and abs(last - free_storage_gb) < min_change_gb:
                return
            self._free_gb[node] = free_storage_gb
            for placer in self._placers.values():
                _set_free_mb(placer, node, free_storage_gb * 1024.0)

    def select(self, job: Job, explain: bool = False) -> JobDecision:
        if self.selector is None:
            raise RequestError("no class table yet: run POST /v1/recluster once history exists", "classes", 409)
        why = None
        with self._lock:
            if explain:
                selection, why = self.selector.explain(job, self._rng)
            else:
                selection = self.selector.select(job, self._rng)
        if not selection.classes:
            return JobDecision(selection, None, None, why)
        if len(selection.classes) == 1:
            return JobDecision(selection, selection.classes[0], selection.classes[0], why)
        # YARN requests name at most one label: a multi-class job goes to the shared queue and the
        # default partition, where idle non-exclusive class nodes take its containers.
        return JobDecision(selection, self.cfg.multi_class_queue, "", why)

    def buckets(self) -> list[float]:
        """The block-size buckets (MiB) this view has built placers for."""
        with self._lock:
            return list(self._placers)

    def prebuild(self, buckets: Iterable[float]) -> None:
        """Build the placers of ``buckets`` now (before the view is published), so that the first
        decision of each bucket after a rebuild does not build one on the request path: ~50-100 ms
        for 15,000 nodes, every call behind it queued (the tail after each re-clustering)."""
        if self.placer is None:
            return
        with self._lock:
            for block_mb in buckets:
                self._placer_for_bucket(block_mb)

    def private_placer(self) -> ReplicaPlacer | None:
        """A placer of the default bucket that nobody else uses (the mover's passes book space on
        it, server/mover.py), with the busy flags and free space reported since the view was built;
        None without nodes or a factory. Built outside the view's lock: requests are not held."""
        if self.placer is None or self._make_placer is None:
            return None
        with self._lock:
            busy, free_gb = dict(self._busy), dict(self._free_gb)
        built = self._make_placer(self.placer.config.block_size_mb)
        if built is not None:
            for node, flag in busy.items():
                built.set_busy(node, flag)
            for node, gb in free_gb.items():
                _set_free_mb(built, node, gb * 1024.0)
        return built

    def _placer_for_bucket(self, block_mb: float) -> ReplicaPlacer:
        """Under ``_lock``: the placer of one block-size bucket, built on first use."""
        placer = self._placers.get(block_mb)
        if placer is None:
            assert self.placer is not None
            # Built like a view (service.refresh_policy): the collector off during the burst of
            # allocations, the placer's ~100k long-lived objects frozen after it, so that later
            # collections on the request path do not walk them (10-50 ms pauses until the next
            # compaction tick froze them).
            gc_was_enabled = gc.isenabled()
            gc.disable()
            try:
                built = self._make_placer(block_mb) if self._make_placer is not None else None
                if built is None:
                    built = self.placer  # no factory (tests): the default bucket serves every size
                else:
                    for node, busy in self._busy.items():
                        built.set_busy(node, busy)
                    for node, free_gb in self._free_gb.items():
                        _set_free_mb(built, node, free_gb * 1024.0)
                gc.freeze()
            finally:
                if gc_was_enabled:
                    gc.enable()
            placer = self._placers[block_mb] = built
        return placer

    def place(self, writer: str, replicas: int, excluded: Sequence[str], block_size_bytes: int,
              strict: bool = False, chosen: Sequence[str] = ()) -> PlaceDecision:
        """Targets for one block; books nothing (see the module docstring). ``strict``: refuse
        (PlacementError) rather than answer with a relaxed placement. ``chosen``: nodes already
        holding a replica of the block (re-replication): never targets, and ``replicas`` more are
        placed as the block's further replicas (rows, columns, environments and co-busy estimates
        of the holders count; HDFS-H-cobusy's risk target applies). Holders the placer does not know
        (not harvestable, no storage, never reported) are only excluded."""
        if self.placer is None:
            raise RequestError("no harvestable node with storage has reported yet", "nodes", 409)
        block_mb = block_bucket_mb(block_size_bytes, self.placer.config.block_size_mb)
        held = [c for c in dict.fromkeys(chosen) if c in self.placer_nodes]
        excluded_known = [e for e in dict.fromkeys([*excluded, *chosen]) if e in self.placer_nodes]
        if writer in chosen:  # HDFS passes one of the holders (the copy's source) as the writer
            writer = ""
        with self._lock:
            placer = self._placer_for_bucket(block_mb)
            available = placer.usable_count() - sum(1 for e in excluded_known if placer.is_usable(e))
            if available <= 0:
                raise PlacementError(
                    f"place: no node has {block_mb:.0f} MB free for this block (of {len(self.placer_nodes)}; "
                    f"busy, full and excluded nodes skipped)"
                )
            short = available < replicas
            result = placer.place(
                writer if writer in self.placer_nodes else None, min(replicas, available),
                excluded=excluded_known, rng=self._rng, existing=held,
            )
            for t in result.targets:  # book nothing: give the space back at once
                placer.release(t, placer.config.block_size_mb)
        reason = result.reason
        if strict and result.relaxed and not short:
            raise PlacementError(f"strict placement mode: refused rather than place without diversity ({reason})")
        if not self.has_grid:
            note = "no class table yet: replicas spread over environments and free space only (no reimage x peak grid)"
            reason = f"{note}; {reason}" if reason else note
        if short:
            note = f"short: only {available} usable node(s) for {replicas} replicas"
            reason = f"{note}; {reason}" if reason else note
        return PlaceDecision(result.targets, result.relaxed, reason, short, block_mb)


def _set_free_mb(placer: ReplicaPlacer, node: str, free_mb: float) -> None:
    current = placer.free_mb(node)
    if free_mb > current:
        placer.release(node, free_mb - current)
    elif free_mb < current:
        placer.allocate(node, current - free_mb)


def _placer_for(
    nodes: Mapping[str, NodeReport], harvestable: frozenset[str] | None, table: ClassTable | None, seed: int,
    block_size_mb: float, static: StaticInputs, busy_hours: bool = True, cobusy: CobusyEstimates | None = None,
    cobusy_risk_target: float = COBUSY_RISK_TARGET, cobusy_spread: float = COBUSY_SPREAD,
    reimage_choices: int = REIMAGE_CHOICES, repair_choices: int = REPAIR_CHOICES,
    cobusy_new_target: float = COBUSY_NEW_TARGET, cobusy_new_max_turnover: float = COBUSY_NEW_MAX_TURNOVER,
) -> tuple[ReplicaPlacer | None, frozenset[str]]:
    """The replica placer over the usable nodes; with ``cobusy`` and a grid, each further replica
    goes to the allowed tenant least likely busy with the block's tenants so far (HDFS-H-cobusy:
    estimates aligned to the placer's tenants, new tenants at the population's mean; each tenant's
    estimate times ``1 + core.cobusy.reimage_penalty`` of the static reimage rates, as the
    simulator does; re-replications take any tenant under ``cobusy_risk_target``, and a tenant past ``cobusy_spread``
    times its share of the choices is passed over while another keeps the block under the target; the node within
    the chosen tenant the one with the fewest reimages seen, ``static.node_reimages``, of
    ``reimage_choices`` random ones, and with ``repair_choices`` > 1 a repair's tenant likewise among those
    under the target; new blocks likewise under ``cobusy_new_target`` while the estimates' history
    predicted itself, ``cobusy_new_max_turnover``); otherwise, with
    ``busy_hours`` and a table that has busy-hour profiles, replicas avoid tenants busy at the same
    hours (tenants without a profile, e.g. new ones, count as never busy)."""
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
    config = PlacementConfig(block_size_mb=block_size_mb)
    if cobusy is not None and grid:
        # Aligned once per tenant order and kept (CobusyEstimates.aligned_to), so the placer's own
        # alignment is free: building stays as cheap as without estimates.
        model = cobusy.aligned_to(tuple(dict.fromkeys(inv.tenant)))
        penalty = None
        if static.reimage_rates:
            servers: dict[str, int] = {}
            for t in inv.tenant:
                servers[t] = servers.get(t, 0) + 1
            penalty = reimage_penalty(static.reimage_rates, grid, servers)
        placer = ReplicaPlacer(inv, grid, config=config, seed=seed, cobusy=model, cobusy_penalty=penalty,
                               cobusy_risk_target=cobusy_risk_target, cobusy_spread=cobusy_spread,
                               server_reimages=static.node_reimages, reimage_choices=reimage_choices,
                               repair_choices=repair_choices, cobusy_new_target=cobusy_new_target,
                               cobusy_new_max_turnover=cobusy_new_max_turnover)
    else:
        hours = table.busy_hours if busy_hours and table is not None and table.busy_hours and grid else None
        placer = ReplicaPlacer(inv, grid, config=config, seed=seed, busy_hours=hours)
    for n in usable:
        if nodes[n].busy:
            placer.set_busy(n, True)
    return placer, frozenset(usable)


def elastic_class(nodes: Mapping[str, NodeReport], elastic_nodes: frozenset[str]) -> list[UtilizationClass]:
    """The elastic servers as one class for class selection (empty list when none reports).

    Their primary tenant is idle by construction (RAS buffer servers): average and peak CPU are the
    mean of their latest reports (what little runs there), current CPU the same; capacity is their
    cores. Pattern *constant*, so long jobs prefer it, as the ranking weights do for steady classes.
    """
    reps = [nodes[n] for n in sorted(elastic_nodes) if n in nodes]
    if not reps:
        return []
    cpu = min(1.0, max(0.0, sum(r.cpu_frac for r in reps) / len(reps)))
    return [UtilizationClass(id=ELASTIC_CLASS, pattern=Pattern.CONSTANT, avg_cpu=cpu, peak_cpu=cpu, current_cpu=cpu,
                             tenants=(), servers=len(reps), cores=float(sum(r.capacity_cores for r in reps)))]


def live_classes(selector: ClassSelector, current: Mapping[str, float]) -> set[str]:
    """The classes a job may be sent to: those with a node that reported within the current window
    (the keys of ``current``), plus the elastic class, which exists only while its servers report.
    A class no node reports from has an empty YARN partition: a job sent there waits for ever."""
    return set(current) | ({ELASTIC_CLASS} & set(selector.ids))


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
    selection: SelectionConfig | None = None,
    elastic_nodes: frozenset[str] = frozenset(),
    cobusy: CobusyState | None = None,
) -> PolicyView:
    """Build a view; ``table`` is ``doc`` already parsed (optional); ``cobusy``: the co-busy
    estimates loaded for this table (or why there are none), used when ``placement_cobusy`` is on
    (:func:`placement_mode`). A background caller throttles the whole build
    (``server/throttle.py``), so request threads get the GIL back."""
    cobusy = cobusy if cobusy is not None else CobusyState()
    static = static or StaticInputs({}, {}, {})
    selector = None
    if doc is not None:
        try:
            if table is None:
                table = ClassTable.from_json(doc, f"class table v{version}")
            if table.classes:
                selector = ClassSelector(list(table.classes) + elastic_class(nodes, elastic_nodes), selection)
                if current_window_s:
                    current = class_current_cpu(table, nodes, time.time(), current_window_s)
                    if current:
                        selector.update_current(current)
                        selector.set_live(live_classes(selector, current))
        except PolicyError as exc:
            logger.error("stored class table v%d is unusable (%s); serving without classes", version, exc)
            table, selector = None, None
    else:
        table = None
    if selector is None and elastic_class(nodes, elastic_nodes):
        # No class table yet, but elastic servers are lent: jobs can already go to them.
        selector = ClassSelector(elastic_class(nodes, elastic_nodes), selection)
    mode = placement_mode(cfg, table, cobusy)
    use_hours = mode.mode == HDFS_H_HOURS
    estimates = cobusy.estimates if mode.mode == HDFS_H_COBUSY else None
    try:
        placer, placer_nodes = _placer_for(nodes, harvestable, table, cfg.seed, block_size_mb, static,
                                           use_hours, estimates, cfg.placement_cobusy_risk_target,
                                           cfg.placement_cobusy_spread, cfg.placement_reimage_choices,
                                           cfg.placement_repair_choices, cfg.placement_cobusy_new_target,
                                           cfg.placement_cobusy_new_max_turnover)
    except PolicyError as exc:
        logger.error("cannot build the replica placer: %s", exc)
        placer, placer_nodes = None, frozenset()
    frozen_nodes = {n: nodes[n] for n in placer_nodes}  # the view's own copy (the caller's dict moves on)

    def make_placer(bucket_mb: float) -> ReplicaPlacer | None:
        return _placer_for(frozen_nodes, harvestable, table, cfg.seed, bucket_mb, static, use_hours, estimates,
                           cfg.placement_cobusy_risk_target, cfg.placement_cobusy_spread,
                           cfg.placement_reimage_choices, cfg.placement_repair_choices,
                           cfg.placement_cobusy_new_target, cfg.placement_cobusy_new_max_turnover)[0]

    node_env = {n: static.node_environment.get(n, nodes[n].tenant) for n in placer_nodes}
    return PolicyView(version, doc, table, selector, placer, placer_nodes, cfg, static.reimage_rates,
                      make_placer=make_placer, node_env=node_env, cobusy=cobusy, mode=mode)


__all__ = ["PlacementMode", "placement_mode", "PolicyView", "JobDecision", "PlaceDecision", "block_bucket_mb", "build_policy_view", "NotFoundError", "PlacementError"]

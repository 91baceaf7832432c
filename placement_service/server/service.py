"""The placement service's state machine: ingest, durable state, recovery and background work.

Protocol-free: the HTTP and gRPC adapters (``http_api``, ``grpc_api``) translate requests into calls
here. Ingest of one request (HTTP body or gRPC message):

1. under the ingest lock, drop replays (``seq`` <= the node's last accepted ``seq``), append the rest
   to the report log as one frame and keep them *in flight* under the frame's ticket;
2. outside the lock, wait until the frame is durable (group commit, see ``wal``). The log's writer
   thread, once the frame is on disk and before any waiter wakes, moves the in-flight reports into
   the in-memory aggregate of the segment the frame landed in (the aggregate answers history
   queries until the segment is compacted): nothing that is not durable is ever counted;
3. only then update the live node view (last report, busy flag, new nodes) and acknowledge.

A storage error refuses the request at once (:class:`UnavailableError`, HTTP 503 / gRPC UNAVAILABLE,
with the reason): the log forgets every frame not yet durable, their seqs are given back (a resend
is not taken for a replay), ``/healthz`` turns unhealthy, and the log accepts reports again by
itself once the disk takes writes (see ``wal``).

Compaction (background thread, every ``compact_interval_s``): close the active log segment, store
each closed segment's aggregate as Parquet and its nodes' last reports in SQLite, then delete the
segment. A failed compaction keeps its segments and is retried on the next tick. Start-up replays
every remaining segment into the same in-memory structures, so a crash at any point loses nothing
that was acknowledged and counts nothing twice; when SQLite is behind the history (its WAL file was
lost), the nodes' last seqs are rebuilt from the Parquet files' metadata so replays stay replays.

One process owns a data directory (``lockfile``); each start is a new *incarnation* (an id stored in
SQLite) and a re-clustering child of an older incarnation cannot store its class table.

Layout: ``PlacementService`` (here: start and stop, health, decisions, queries, the policy view and
re-clustering adoption) takes its other parts from ``ingest`` (ingest, recovery, compaction),
``reimages`` (reported reimages) and ``publishing`` (elastic set, revocations, labels and queues).
"""

from __future__ import annotations

import gc
import logging
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

from placement_service.server.agent_versions import AgentVersions
from placement_service.server.cobusy_store import CobusyState, load_cobusy
from placement_service.server.config import ServiceConfig
from placement_service.server.elastic import CapacityLink, ElasticState
from placement_service.server.hdfs_blocks import WebHdfs
from placement_service.server.health import Health
from placement_service.server.history import Aggregate, HistoryStore, SlotSample
from placement_service.server.ingest import IngestResult as IngestResult  # re-exported: importable from here
from placement_service.server.ingest import _cause_of as _cause_of
from placement_service.server.ingest import _Ingest
from placement_service.server.ingest import _newer as _newer
from placement_service.server.insight import Insight
from placement_service.server.lockfile import lock_data_dir, unlock_data_dir
from placement_service.server.maintenance import controller_from_config
from placement_service.server.metrics import Metrics
from placement_service.server.mover import MoverSettings, ServiceMover
from placement_service.server.policy import (
    NO_GRID,
    PlaceDecision,
    PolicyView,
    build_policy_view,
    load_static_inputs,
)
from placement_service.server.publishing import _Publishing
from placement_service.server.queues import QueueSync
from placement_service.server.recluster import ReclusterInput, ReclusterWorker
from placement_service.server.reimages import _Reimages
from placement_service.server.reports import NodeReport, NotFoundError
from placement_service.server.state import StateStore
from placement_service.server.throttle import duty_cycle
from placement_service.server.wal import ReportLog
from placement_service.server.yarn_rm import ResourceManagerClient

logger = logging.getLogger(__name__)


# Background view builds run 1 ms slices with 3 ms rests (throttle.py): a quarter of the GIL at most.
REBUILD_DUTY_CYCLE = (0.001, 0.003)

class RateLimitedLog:
    """INFO lines at most ``per_s`` per second (token bucket, burst ``per_s``); the next line that
    passes says how many were left out meanwhile. ``per_s`` 0 logs nothing."""

    def __init__(self, log: logging.Logger, per_s: float) -> None:
        self._log = log
        self._per_s = per_s
        self._tokens = per_s
        self._last = time.monotonic()
        self._dropped = 0
        self._lock = threading.Lock()

    def log(self, fmt: str, *args: object) -> None:
        if self._per_s <= 0 or not self._log.isEnabledFor(logging.INFO):
            return
        with self._lock:
            now = time.monotonic()
            self._tokens = min(self._per_s, self._tokens + (now - self._last) * self._per_s)
            self._last = now
            if self._tokens < 1.0:
                self._dropped += 1
                return
            self._tokens -= 1.0
            dropped, self._dropped = self._dropped, 0
        if dropped:
            self._log.info(fmt + " [%d similar line(s) not logged]", *args, dropped)
        else:
            self._log.info(fmt, *args)


class PlacementService(_Ingest, _Reimages, _Publishing):
    def __init__(self, cfg: ServiceConfig) -> None:
        self.cfg = cfg
        self.metrics = Metrics()
        self.health = Health(self.metrics)
        self._decision_log = RateLimitedLog(logger, per_s=cfg.decision_log_per_s)
        self.insight = Insight(cfg)  # decisions explained, placement quality, strict mode, heartbeats
        self.metrics.add_collector(lambda: self.insight.export_metrics(self.metrics))
        self.metrics.add_collector(lambda: {"harvest_silent_nodes": float(len(self.silent_nodes()))})
        self.agent_versions = AgentVersions()  # which agent release runs where (GET /v1/agents)
        self._versions_exported: set[str] = set()
        self.metrics.add_collector(self._export_agent_versions)
        self.insight.heartbeats.register("compaction", cfg.compact_interval_s)
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        self._lock_fd = lock_data_dir(cfg.data_dir)  # before touching anything else in it
        try:
            self._open(cfg)
        except BaseException:
            unlock_data_dir(self._lock_fd)
            raise

    def _open(self, cfg: ServiceConfig) -> None:
        self.log_dir = cfg.data_path("log")
        self.state = StateStore(cfg.data_path("state.sqlite"))
        self.instance_id = uuid.uuid4().hex
        self.state.set_meta("instance_id", self.instance_id)
        self.history = HistoryStore(cfg.data_path("history"), cfg.slot_s)
        self._ingest_lock = threading.Lock()
        self._query_lock = threading.Lock()
        self._nodes_lock = threading.Lock()
        self._compact_lock = threading.Lock()
        # Durable view: last stored report per node, from SQLite then the log.
        self._nodes: dict[str, NodeReport] = self.state.load_nodes()
        self._last_seq: dict[str, int] = {n: r.seq for n, r in self._nodes.items()}
        self._rebuild_seq_from_history()
        self._pending: dict[int, Aggregate] = {}
        self._pending_nodes: dict[int, dict[str, NodeReport]] = {}
        self._closed: list[int] = self._recover_log()
        # Seqs on disk (what a refused frame's nodes fall back to) and frames not yet durable.
        self._durable_seq: dict[str, int] = dict(self._last_seq)
        self._inflight: dict[int, tuple[NodeReport, ...]] = {}
        next_id = max([*self._closed, int(self.state.get_meta("next_segment", "0")),
                       self.history.max_segment_id]) + 1
        self.state.set_meta("next_segment", str(next_id))
        self.wal = ReportLog(self.log_dir, next_id, on_durable=self._on_durable, on_failed=self._on_log_failed,
                             on_recovered=self._on_log_recovered)
        self._report_quarantine()
        self._harvestable = self.state.load_harvestable()
        self.elastic = ElasticState(cfg.data_path("elastic.sqlite"))
        self.capacity_link: CapacityLink | None = None
        version, doc = self.state.load_class_table()
        if doc is None and cfg.classes_file is not None:
            import json

            from placement_service.server.config import ConfigError

            try:
                doc = json.loads(cfg.classes_file.read_text())
            except (OSError, ValueError) as exc:
                raise ConfigError(f"classes file {cfg.classes_file}: {exc}") from None
        self._static = load_static_inputs(cfg)
        self._selection, self._selection_source = self.insight.selection_config()
        cobusy = self._load_cobusy(version, doc)
        self._policy: PolicyView = build_policy_view(cfg, version, doc, self._nodes, self._effective_harvestable(),
                                                     static=self._static_now(), selection=self._selection,
                                                     elastic_nodes=self._lent_elastic(), cobusy=cobusy)
        self._report_mode(self._policy)
        self._nodes_version = 0
        self._policy_nodes_version = 0
        self._reimages_version = 0  # reimages reported since the start; the view's count below
        self._policy_reimages_version = 0
        self._policy_stale = False
        # One rebuild at a time (compaction tick, adoption, harvestable or elastic change, placement
        # path): each reads the current view and swaps in its own, so unserialized a rebuild that
        # started over an older table could land after a newer one's and put the old table back.
        self._refresh_lock = threading.RLock()
        self._rm = (
            ResourceManagerClient(cfg.rm_url, cfg.rm_timeout_s, cfg.rm_exclusive, cfg.rm_centralized,
                                  cfg.rm_admin_user)
            if cfg.rm_url else None
        )
        self.rm_status: dict[str, Any] = {
            "enabled": self._rm is not None, "last_error": "", "pushes": 0,
            "queue_refreshes": 0, "queue_refresh_error": "",
        }
        self.queues = (
            QueueSync(cfg.capacity_scheduler_file, cfg.refresh_queues_command, cfg.refresh_queues_timeout_s,
                      self._rm, self.health, self.metrics, self.rm_status, cfg.queue_check_interval_s)
            if cfg.capacity_scheduler_file is not None else None
        )
        self._published_labels: list[str] = []
        self._publisher = threading.Thread(target=self._publish_loop, name="rm-publisher", daemon=True)
        self.recluster = ReclusterWorker(
            self._recluster_input, self.adopt_class_table, cfg.recluster_interval_s, cfg.recluster_priority
        )
        self._stopping = threading.Event()
        self._gc_full_at_s = time.monotonic()
        self._compactor = threading.Thread(target=self._compact_loop, name="compactor", daemon=True)
        self.maintenance = controller_from_config(cfg, self._node_reports, self.metrics)  # busy DNs -> maintenance
        self.mover = self._make_mover(cfg)  # replicas of blocks at risk moved (server/mover.py)

    def _make_mover(self, cfg: ServiceConfig) -> ServiceMover:
        namenode = WebHdfs(cfg.mover_namenode_url, cfg.mover_hdfs_user) if cfg.mover_namenode_url else None
        roots = tuple(r.strip() for r in cfg.mover_paths.split(",") if r.strip()) or ("/",)
        settings = MoverSettings(mode=cfg.mover, watch_every_s=cfg.mover_watch_every_s, roots=roots,
                                 max_moves_per_hour=cfg.mover_max_moves_per_hour,
                                 mb_per_server_hour=cfg.mover_mb_per_server_hour,
                                 move_timeout_s=cfg.mover_move_timeout_s, seed=cfg.seed)
        return ServiceMover(settings, namenode, cfg.data_path("mover-journal.json"), self._node_reports,
                            lambda: self._policy, self.metrics)

    def start(self) -> None:
        self.compact()  # store what the previous run left in the log before serving
        self._compactor.start()
        self.recluster.start()
        if self._rm is not None or self.queues is not None:
            self._publisher.start()
        if self.maintenance is not None:
            self.maintenance.start()
        self.mover.start()
        if self.cfg.capacity_url:
            self.capacity_link = CapacityLink(
                self.elastic, self.cfg.capacity_url, self.cfg.cluster, self.cfg.read_token(), self.last_seen,
                self.cfg.capacity_silent_after_s, self.cfg.capacity_link_interval_s).start()  # fmt: skip

    def close(self) -> None:
        self._stopping.set()
        if self.capacity_link is not None:
            self.capacity_link.stop()
        self.recluster.stop()
        self.mover.stop()
        if self._publisher.ident is not None:
            self._publisher.join(timeout=10)
        if self.maintenance is not None:
            self.maintenance.stop()
        if self._compactor.ident is not None:  # started (a service can be closed before start)
            self._compactor.join(timeout=30)
        try:
            self.compact()
        except Exception as exc:
            logger.error("final compaction failed; the log keeps the reports for the next start: %s", exc)
        self.wal.close()
        self.state.close()
        self.elastic.close()
        unlock_data_dir(self._lock_fd)

    # -- health ----------------------------------------------------------------------------------
    def health_snapshot(self) -> dict[str, Any]:
        doc = self.health.snapshot()
        doc["quarantined_files"] = list(self.history.quarantined)
        silent = self.silent_nodes()
        doc["silent_nodes"] = {"count": len(silent), "first": dict(sorted(silent.items(), key=lambda kv: -kv[1])[:10])}
        doc["loops"] = {"heartbeat_age_s": self.insight.heartbeats.ages(), "stalled": self.insight.heartbeats.stalled()}
        doc["placement"] = self.placement_quality()
        return doc

    def placement_quality(self) -> dict[str, Any]:
        """Placement quality and strict mode (``Insight``), plus the placement mode in force
        (``placement_mode``: HDFS-H-cobusy, HDFS-H-hours, HDFS-H; a fallback says why)."""
        return {**self.insight.quality_doc(), "placement_mode": self._policy.mode.to_json()}

    def _report_mode(self, view: PolicyView) -> None:
        """A placement that fell back from the configured one is a (non-critical) health problem, except
        while co-busy estimates are only not fitted yet (``waiting``: the next re-clustering fits them)."""
        mode = view.mode
        self.metrics.set("harvest_placement_fallback", 1.0 if mode.mode != mode.configured else 0.0)
        if mode.mode != mode.configured and mode.mode != NO_GRID and not mode.waiting:
            self.health.set("placement_mode", f"replica placement {mode.mode} instead of {mode.configured}: "
                                              f"{mode.reason}", "fallback", critical=False)
        else:
            self.health.clear("placement_mode")

    def _load_cobusy(self, version: int, doc: Mapping[str, Any] | None) -> CobusyState:
        """The co-busy estimates stored with class table ``version`` when ``placement_cobusy`` is on
        (a missing or damaged row is logged and becomes the fallback's reason, never fatal)."""
        if not self.cfg.placement_cobusy or doc is None:
            return CobusyState()
        if version <= 0:
            return CobusyState(None, "the class table is not a stored re-clustering result (e.g. --classes-file): "
                                     "no co-busy estimates until the first re-clustering", pending=True)
        raw_tenants = doc.get("tenants")
        tenants = list(raw_tenants) if isinstance(raw_tenants, dict) else None
        return load_cobusy(self.state, version, tenants)

    def _report_quarantine(self) -> None:
        n = len(self.history.quarantined)
        self.metrics.set("harvest_history_quarantined_files", n)
        if n:
            last = self.history.quarantined[-1]
            self.health.set("history", f"{n} damaged history file(s) quarantined, their samples are lost; "
                                       f"last: {last['file']}: {last['reason']}", "quarantined", critical=False)
    def _export_agent_versions(self) -> dict[str, float]:
        """Gauge ``harvest_agents{version=...}``: nodes whose last report came from that release."""
        counts = self.agent_versions.counts()
        for gone in self._versions_exported - set(counts):
            self.metrics.set("harvest_agents", 0.0, version=gone)
        for version, n in counts.items():
            self.metrics.set("harvest_agents", float(n), version=version)
        self._versions_exported = set(counts)
        return {}

    # -- decisions -------------------------------------------------------------------------------
    def select(self, job: Any, explain: bool = False) -> Any:
        """Class selection for a job (HTTP); its last duration feeds the job-type thresholds."""
        self.insight.saw_job(job.last_duration_s)
        decision = self.policy.select(job, explain=explain)
        if explain and decision.explanation is not None:
            decision.explanation["settings_source"] = self._selection_source  # of the view in force
        return decision

    def place(self, writer: str, replicas: int, excluded: Sequence[str], block_size_bytes: int,
              chosen: Sequence[str] = ()) -> PlaceDecision:
        """Replica targets for one block (HTTP and gRPC); logged one line each (rate-limited).
        ``chosen``: nodes already holding a replica (re-replication, ``PolicyView.place``)."""
        return self.place_explained(writer, replicas, excluded, block_size_bytes, chosen=chosen)[0]

    def place_explained(self, writer: str, replicas: int, excluded: Sequence[str], block_size_bytes: int,
                        block: str = "", rules: bool = False, chosen: Sequence[str] = (),
                        ) -> tuple[PlaceDecision, dict[str, Any]]:
        """:meth:`place` plus the why: each replica's node, tenant, class, environment and grid cell
        (and those of the ``chosen`` holders), the strict-mode state, and the decision-log key
        (``block`` when given). Quality counts the whole block: holders and new replicas."""
        if writer and writer not in chosen:
            self.node(writer)  # NotFoundError for an unknown writer (a holder writes nothing new)
        strict = self.insight.strict.strict
        view = self.policy_with_node("" if writer in chosen else writer)
        try:
            steered = self.mover.steer(chosen, replicas, excluded) if chosen else None
            if steered is not None:  # a block the mover is moving: its planned target (server/mover.py)
                decision = PlaceDecision((steered,), False, "mover: the planned target of a move", False,
                                         view.placer.config.block_size_mb if view.placer is not None else 0.0)
            else:
                decision = view.place(writer, replicas, excluded, block_size_bytes, strict=strict, chosen=chosen)
        except Exception as exc:
            self._decision_log.log("place block_size=%d replicas=%d writer=%s chosen=%s -> refused: %s",
                                   block_size_bytes, replicas, writer or "-", ",".join(chosen) or "-", exc)
            raise
        self.metrics.inc("harvest_placements_total", short=str(decision.short).lower(),
                         relaxed=str(decision.relaxed).lower())
        with self._nodes_lock:
            tenants = {t: self._nodes[t].tenant for t in (*chosen, *decision.targets) if t in self._nodes}
        table = view.table if view.has_grid else None
        detail = self.insight.replicas_detail(table, tenants, view.node_env, decision.targets)
        held = self.insight.replicas_detail(table, tenants, view.node_env, chosen)
        request: dict[str, Any] = {"writer": writer, "replicas": replicas, "excluded": list(excluded),
                                   "block_size": block_size_bytes}
        if chosen:
            request["chosen"] = list(chosen)
        key = self.insight.record_place(block, request, detail, decision.relaxed, decision.reason,
                                        decision.short or not view.has_grid, chosen=held)
        self._decision_log.log("place block_size=%d (bucket %.0f MB) replicas=%d writer=%s chosen=%s -> targets=%s "
                               "relaxed=%s short=%s%s", block_size_bytes, decision.block_mb, replicas, writer or "-",
                               ",".join(chosen) or "-", ",".join(decision.targets), decision.relaxed, decision.short,
                               f" ({decision.reason})" if decision.reason else "")
        why = {"decision": key, "replicas": detail, "strict_mode": strict, "quality": self.placement_quality()}
        if chosen:
            why["chosen"] = held
        if rules and view.placer is not None:  # explain=1 only: one pass over the candidate nodes
            with self._nodes_lock:
                node_tenant = {n: self._nodes[n].tenant for n in view.placer_nodes if n in self._nodes}
            grid = view.table.grid if view.has_grid and view.table is not None and view.table.grid else {}
            cell_of = {n: grid[t] for n, t in node_tenant.items() if t in grid}
            funnel = self.insight.rule_funnel(sorted(view.placer_nodes), view.placer.is_usable, excluded,
                                              held + detail, cell_of, view.node_env)
            why["rules"] = funnel[len(held):]  # the holders' own entries say nothing about this decision
        return decision, why


    def silent_nodes(self) -> dict[str, float]:
        """Nodes whose agent has not reported for ``silent_after_s``: {node: seconds silent}."""
        with self._nodes_lock:
            last = {n: r.timestamp for n, r in self._nodes.items()}
        return self.insight.silent_nodes(last, time.time())

    # -- queries ---------------------------------------------------------------------------------
    def _node_reports(self) -> dict[str, NodeReport]:
        with self._nodes_lock:
            return dict(self._nodes)

    def node(self, node: str) -> NodeReport:
        with self._nodes_lock:
            r = self._nodes.get(node)
        if r is None:
            raise NotFoundError(f"node {node!r} is unknown (it has never reported)", "node")
        return r

    def node_info(self, node: str) -> dict[str, Any]:
        r = self.node(node)
        policy = self._policy
        class_id = self.class_of_node(node, r.tenant)
        return {
            "node": node,
            "tenant": r.tenant,
            "class_id": class_id,
            "label": class_id,
            "busy": r.busy,
            "harvestable": node not in self.elastic.revoked() and (
                self._harvestable is None or node in self._harvestable or node in self.elastic.nodes),
            "elastic": node in self.elastic.nodes,
            "revocations": list(self.revocations_for(node)),
            "last_seq": self._last_seq.get(node, r.seq),
            "agent_version": self.agent_versions.of(node),
            "last_report": r.to_json(),
            "class_table_version": policy.version,
        }

    def samples(self, tenant: str, since_s: float, until_s: float) -> list[SlotSample]:
        with self._query_lock:
            with self._ingest_lock:
                pending = [{k: v[:] for k, v in agg.items()} for agg in self._pending.values()]
            samples = self.history.samples(tenant, since_s, until_s, pending)
        if len(self.history.quarantined) != self.metrics.gauge("harvest_history_quarantined_files"):
            self._report_quarantine()  # a read found a damaged file
        return samples

    def known_tenant(self, tenant: str) -> bool:
        """Reported by a node now, in the class table, or in the stored history."""
        with self._nodes_lock:
            if any(r.tenant == tenant for r in self._nodes.values()):
                return True
        if tenant in self.history.known_tenants:
            return True
        with self._ingest_lock:
            if any(k[0] == tenant for agg in self._pending.values() for k in agg):
                return True
        return tenant in self._policy.tenant_class

    @property
    def policy(self) -> PolicyView:
        """The current policy view (rebuilt in the background; never on the request path)."""
        return self._policy

    def policy_with_node(self, node: str) -> PolicyView:
        """The policy view, rebuilt first if ``node`` registered after it was built (placement path)."""
        view = self._policy
        missing = view.placer is None or (node and node not in view.placer_nodes)
        if missing and self._nodes_version != self._policy_nodes_version:
            with self._refresh_lock:
                if self._nodes_version != self._policy_nodes_version:
                    self.refresh_policy(background=False)
            view = self._policy
        return view

    def refresh_policy(self, doc: dict[str, Any] | None = None, version: int | None = None,
                       table: Any = None, background: bool = True, cobusy: CobusyState | None = None) -> None:
        """Rebuild the view when the table, the node set or the harvestable set changed; otherwise
        only refresh the classes' current CPU (cheap, in place under the view's lock). ``cobusy``:
        the co-busy estimates of a new ``doc`` (a view of the same table keeps its own). Rebuilds
        are serialized (``_refresh_lock``), each over the view the previous one swapped in."""
        with self._refresh_lock:
            self._refresh_policy_locked(doc, version, table, background, cobusy)

    def _refresh_policy_locked(self, doc: dict[str, Any] | None, version: int | None, table: Any,
                               background: bool, cobusy: CobusyState | None) -> None:
        with self._nodes_lock:
            nodes_version, reimages_version = self._nodes_version, self._reimages_version
            selection, selection_source = self.insight.selection_config()
            changed = (doc is not None or nodes_version != self._policy_nodes_version or self._policy_stale
                       or reimages_version != self._policy_reimages_version)
            nodes = dict(self._nodes)
        old = self._policy
        if not changed:
            # New selection settings (thresholds learned from job lengths move with almost every
            # tick) need only a new selector; rebuilding the placers over every node for them cost
            # ~120 ms of CPU per tick, a ChooseTargets stall of up to 200 ms each time.
            if selection != self._selection:
                old.set_selection(selection)
                self._selection, self._selection_source = selection, selection_source
            old.update_current(nodes, self.cfg.current_window_s)
            return
        # The view is long-lived (~100k objects): build it with the collector off, so that the burst
        # of allocations cannot trigger a full collection (one uninterruptible pause of tens of ms),
        # then freeze it out of every later collection. The old view is freed by reference counting
        # (views hold no reference cycles).
        gc_was_enabled = gc.isenabled()
        gc.disable()
        switch_s = sys.getswitchinterval()
        if background:
            # Hand the interpreter back to request threads five times more often while building.
            sys.setswitchinterval(min(switch_s, 0.0002))
        try:
            with duty_cycle(*(REBUILD_DUTY_CYCLE if background else (0.0, 0.0))):
                view = build_policy_view(
                    self.cfg, old.version if version is None else version, old.doc if doc is None else doc,
                    nodes, self._effective_harvestable(), static=self._static_now(),
                    # A new table brings each class's latest CPU from the history; reports refine it on
                    # the next compaction tick (``update_current``), keeping the swap itself short.
                    current_window_s=None if doc is not None else self.cfg.current_window_s,
                    table=table, selection=selection,
                    elastic_nodes=self._lent_elastic(), cobusy=old.cobusy if doc is None else cobusy,
                )
                view.prebuild(old.buckets())  # not on the first request of each block size
            gc.freeze()
        finally:
            sys.setswitchinterval(switch_s)
            if gc_was_enabled:
                gc.enable()
        self._policy = view  # one reference swap: requests see the old or the new view, never a mix
        self._selection, self._selection_source = selection, selection_source
        self._policy_nodes_version = nodes_version
        self._policy_reimages_version = reimages_version
        self._policy_stale = False
        self.metrics.inc("harvest_policy_rebuilds_total")
        if view.mode != old.mode:
            logger.info("replica placement: %s (configured %s)%s", view.mode.mode, view.mode.configured,
                        f": {view.mode.reason}" if view.mode.reason else "")
        self._report_mode(view)

    # -- harvestable set -------------------------------------------------------------------------
    def set_harvestable(self, nodes: Sequence[str] | None) -> None:
        self.state.save_harvestable(nodes)
        self._harvestable = None if nodes is None else frozenset(nodes)
        self._policy_stale = True
        self.refresh_policy()

    @property
    def harvestable(self) -> frozenset[str] | None:
        return self._harvestable

    # -- re-clustering ---------------------------------------------------------------------------
    def _recluster_input(self) -> ReclusterInput:
        self.compact()
        with self._nodes_lock:
            nodes = list(self._nodes.values())
        servers: dict[str, int] = {}
        cores: dict[str, float] = {}
        storage: dict[str, float] = {}
        for r in nodes:
            servers[r.tenant] = servers.get(r.tenant, 0) + 1
            cores[r.tenant] = cores.get(r.tenant, 0.0) + r.capacity_cores
            storage[r.tenant] = storage.get(r.tenant, 0.0) + r.free_storage_gb
        now = time.time()
        latest = max((r.timestamp for r in nodes), default=now)
        until = max(now, latest) + self.cfg.slot_s
        return ReclusterInput(
            history_dir=self.history.root, slot_s=self.cfg.slot_s,
            since_s=until - self.cfg.history_days * 86400.0, until_s=until,
            servers_per_tenant=servers, cores_per_tenant=cores, storage_gb_per_tenant=storage,
            reimage_rate_per_tenant=self.reimage_rates(servers, now), seed=self.cfg.seed,
            state_path=self.cfg.data_path("state.sqlite"), node_tenant={r.node: r.tenant for r in nodes},
            instance_id=self.instance_id,
            busy_profile_cpu=self.cfg.busy_profile_cpu if self.cfg.placement_busy_hours else None,
            cobusy_cpu=self.cfg.busy_profile_cpu if self.cfg.placement_cobusy else None,
        )

    def adopt_class_table(self, version: int, doc: dict[str, Any]) -> None:
        """Swap in a class table already stored as ``version`` (0: store it here first); then push
        labels (best effort). Called by the re-clustering worker, never on a request path."""
        from placement_service.core.types import ClassTable

        with duty_cycle(*REBUILD_DUTY_CYCLE):  # see throttle.py: requests drain between slices
            gc_was_enabled = gc.isenabled()
            gc.disable()  # see refresh_policy: no full collection in the middle of a burst of allocations
            try:
                table = ClassTable.from_json(doc, "re-clustering result")
            finally:
                if gc_was_enabled:
                    gc.enable()
            if version == 0:
                with self._nodes_lock:
                    nodes = dict(self._nodes)  # copy under the lock, compute outside it
                labels_of = {n: table.tenant_class.get(r.tenant, "") for n, r in nodes.items()}
                version = self.state.save_class_table(doc, labels_of)
            # The estimates the child stored with this version (none for a table stored here).
            cobusy = self._load_cobusy(version, doc)
            self.refresh_policy(doc, version, table=table, cobusy=cobusy)
        self.metrics.set("harvest_class_table_version", version)
        self.metrics.set("harvest_classes", len(table.classes))
        logger.info("adopted class table v%d: %d classes, %d tenants", version, len(table.classes),
                    len(table.tenant_class))
        self._publish_labels(table, version)

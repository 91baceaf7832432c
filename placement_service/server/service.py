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
"""

from __future__ import annotations

import gc
import logging
import os
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from placement_service.server.agent_versions import AgentVersions
from placement_service.server.cobusy_store import CobusyState, load_cobusy
from placement_service.server.config import ServiceConfig
from placement_service.server.elastic import ELASTIC_CLASS, CapacityLink, ElasticState
from placement_service.server.health import Health
from placement_service.server.history import Aggregate, HistoryStore, SlotSample, add_reports
from placement_service.server.insight import Insight
from placement_service.server.lockfile import lock_data_dir, unlock_data_dir
from placement_service.server.maintenance import controller_from_config
from placement_service.server.metrics import Metrics
from placement_service.server.policy import (
    NO_GRID,
    PlaceDecision,
    PolicyView,
    StaticInputs,
    build_policy_view,
    load_static_inputs,
)
from placement_service.server.queues import QueueSync
from placement_service.server.recluster import ReclusterInput, ReclusterWorker
from placement_service.server.reports import (
    NodeReport,
    NotFoundError,
    UnavailableError,
    decode_frame,
    encode_frame,
)
from placement_service.server.state import StateStore
from placement_service.server.throttle import duty_cycle
from placement_service.server.wal import (
    LogError,
    ReportLog,
    describe_error,
    errno_name,
    fsync_dir,
    list_segments,
    read_frames,
    segment_path,
)
from placement_service.server.yarn_rm import ResourceManagerClient

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class IngestResult:
    ticket: int
    stored: tuple[NodeReport, ...]
    duplicates: int
    acked_seq: dict[str, int]


# Background view builds run 1 ms slices with 3 ms rests (throttle.py): a quarter of the GIL at most.
REBUILD_DUTY_CYCLE = (0.001, 0.003)


def _newer(a: NodeReport | None, b: NodeReport) -> NodeReport:
    if a is None or (b.seq, b.timestamp) >= (a.seq, a.timestamp):
        return b
    return a


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


class PlacementService:
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

    def start(self) -> None:
        self.compact()  # store what the previous run left in the log before serving
        self._compactor.start()
        self.recluster.start()
        if self._rm is not None or self.queues is not None:
            self._publisher.start()
        if self.maintenance is not None:
            self.maintenance.start()
        if self.cfg.capacity_url:
            self.capacity_link = CapacityLink(
                self.elastic, self.cfg.capacity_url, self.cfg.cluster, self.cfg.read_token(), self.last_seen,
                self.cfg.capacity_silent_after_s, self.cfg.capacity_link_interval_s).start()  # fmt: skip

    def close(self) -> None:
        self._stopping.set()
        if self.capacity_link is not None:
            self.capacity_link.stop()
        self.recluster.stop()
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
        """A placement that fell back from the configured one is a (non-critical) health problem."""
        mode = view.mode
        self.metrics.set("harvest_placement_fallback", 1.0 if mode.mode != mode.configured else 0.0)
        if mode.mode != mode.configured and mode.mode != NO_GRID:
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
                                     "no co-busy estimates until the first re-clustering")
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

    # -- recovery --------------------------------------------------------------------------------
    def _recover_log(self) -> list[int]:
        segments = list_segments(self.log_dir) if self.log_dir.exists() else []
        n_reports = 0
        for i, seg in enumerate(segments):
            agg = self._pending.setdefault(seg.segment_id, {})
            nodes = self._pending_nodes.setdefault(seg.segment_id, {})
            for payload in read_frames(seg.path, truncate_torn=(i == len(segments) - 1), payload_prefix=b"[["):
                try:
                    reports = decode_frame(payload)
                except (ValueError, TypeError, IndexError) as exc:
                    logger.warning("%s: skipping a frame that does not decode: %s", seg.path, exc)
                    continue
                add_reports(agg, reports, self.cfg.slot_s)
                for r in reports:
                    nodes[r.node] = _newer(nodes.get(r.node), r)
                    self._nodes[r.node] = _newer(self._nodes.get(r.node), r)
                    self._last_seq[r.node] = max(self._last_seq.get(r.node, 0), r.seq)
                n_reports += len(reports)
        if segments:
            logger.info("replayed %d report(s) from %d log segment(s)", n_reports, len(segments))
        return [s.segment_id for s in segments]

    def _rebuild_seq_from_history(self) -> None:
        """SQLite behind the history (its WAL lost after a crash)? Take each node's highest stored
        seq from the Parquet metadata, so reports replayed by agents are not stored twice."""
        behind = 0
        for node, seq in self.history.node_seq.items():
            if seq > self._last_seq.get(node, 0):
                self._last_seq[node] = seq
                behind += 1
        if behind:
            logger.warning("state.sqlite is behind the stored history for %d node(s) (lost SQLite WAL?): "
                           "de-duplication state rebuilt from the Parquet files", behind)
            self.metrics.inc("harvest_seq_rebuilt_nodes_total", behind)

    # -- ingest ----------------------------------------------------------------------------------
    def _export_agent_versions(self) -> dict[str, float]:
        """Gauge ``harvest_agents{version=...}``: nodes whose last report came from that release."""
        counts = self.agent_versions.counts()
        for gone in self._versions_exported - set(counts):
            self.metrics.set("harvest_agents", 0.0, version=gone)
        for version, n in counts.items():
            self.metrics.set("harvest_agents", float(n), version=version)
        self._versions_exported = set(counts)
        return {}

    def ingest(self, reports: Sequence[NodeReport]) -> IngestResult:
        """Steps 1-2 of the module docstring (append; wait with ``wal.wait(result.ticket)``).

        Raises :class:`UnavailableError` at once while the report log refuses writes."""
        stored: list[NodeReport] = []
        duplicates = 0
        with self._ingest_lock:
            seen: dict[str, int] = {}
            for r in reports:
                if r.seq:
                    last = seen.get(r.node, self._last_seq.get(r.node, 0))
                    if r.seq <= last:
                        duplicates += 1
                        continue
                    seen[r.node] = r.seq
                pool = self.elastic.history_tenant.get(r.node)  # a lent elastic node counts for its pool
                stored.append(r if pool is None or pool == r.tenant else replace(r, tenant=pool))
            if stored:
                try:
                    ticket = self.wal.append(encode_frame(stored))
                except LogError as exc:
                    self.metrics.inc("harvest_reports_refused_total", len(reports))
                    raise UnavailableError(f"storage unavailable, reports refused: {exc}") from None
                self._inflight[ticket] = tuple(stored)
                self._last_seq.update(seen)
            else:
                ticket = self.wal.last_ticket()
            acked = {r.node: self._last_seq.get(r.node, 0) for r in reports}
        for r in reports:
            self.agent_versions.note(r.node, r.agent_version, r.timestamp)
        return IngestResult(ticket, tuple(stored), duplicates, acked)

    def _on_durable(self, first_ticket: int, last_ticket: int, segment_id: int) -> None:
        """Writer thread, frames on disk in ``segment_id``: count them (step 2)."""
        with self._ingest_lock:
            agg = self._pending.setdefault(segment_id, {})
            nodes = self._pending_nodes.setdefault(segment_id, {})
            for ticket in range(first_ticket, last_ticket + 1):
                batch = self._inflight.pop(ticket, None)
                if not batch:
                    continue
                add_reports(agg, batch, self.cfg.slot_s)
                for r in batch:
                    nodes[r.node] = _newer(nodes.get(r.node), r)
                    if r.seq > self._durable_seq.get(r.node, 0):
                        self._durable_seq[r.node] = r.seq

    def _on_log_failed(self, last_failed_ticket: int, exc: BaseException) -> None:
        """Writer thread: every in-flight frame up to ``last_failed_ticket`` is refused; give its
        nodes' seqs back so that the agents' resends are stored, not taken for replays."""
        refused = 0
        with self._ingest_lock:
            nodes: set[str] = set()
            for ticket in [t for t in self._inflight if t <= last_failed_ticket]:
                batch = self._inflight.pop(ticket)
                refused += len(batch)
                nodes.update(r.node for r in batch)
            for node in nodes:
                self._last_seq[node] = self._durable_seq.get(node, 0)
        self.metrics.inc("harvest_reports_refused_total", refused)
        self.health.set("report_log", f"report log write failed, ingest refused: {describe_error(exc)}",
                        errno_name(exc))

    def _on_log_recovered(self) -> None:
        self.health.clear("report_log")

    def wait_durable(self, result: IngestResult) -> None:
        """Step 2: block until the request's frame is durable; :class:`UnavailableError` if refused."""
        try:
            self.wal.wait(result.ticket)
        except LogError as exc:
            raise UnavailableError(f"storage unavailable, reports refused: {exc}") from None

    def after_durable(self, result: IngestResult) -> None:
        """Step 3: the live view follows durable reports only."""
        if result.duplicates:
            self.metrics.inc("harvest_reports_duplicate_total", result.duplicates)
        if not result.stored:
            return
        with self._nodes_lock:
            for r in result.stored:
                old = self._nodes.get(r.node)
                if old is None:
                    self._nodes_version += 1
                new = _newer(old, r)
                self._nodes[r.node] = new
                if old is None or old.busy != new.busy:
                    self._policy.set_busy(r.node, new.busy)
                if new is r:
                    self._policy.set_free(r.node, r.free_storage_gb)
        self.metrics.inc("harvest_reports_stored_total", len(result.stored))

    def ingest_and_wait(self, reports: Sequence[NodeReport]) -> IngestResult:
        result = self.ingest(reports)
        self.wait_durable(result)
        self.after_durable(result)
        return result

    # -- compaction ------------------------------------------------------------------------------
    def _compact_loop(self) -> None:
        while not self._stopping.wait(self.cfg.compact_interval_s):
            try:
                self.compact()
                self.insight.heartbeats.beat("compaction")
            except Exception as exc:
                logger.warning("compaction failed; retrying on the next tick: %s", exc)
            try:
                self.refresh_policy()
            except Exception:
                logger.exception("policy refresh failed; keeping the current view")
            self.age_out_of_gc()

    def age_out_of_gc(self, now_s: float | None = None) -> str:
        """Keep full garbage collections short: they stop every thread, requests included.

        A full (generation 2) collection walks every tracked object not frozen, so its pause grows
        with what the service keeps (node reports, the decision log, metrics): ~20 ms every ~20 s
        with 15,000 nodes, the worst stall a `ChooseTargets` call saw. After each compaction tick
        the young generations are collected (cheap: their garbage, cycles included, goes first)
        and the survivors frozen, so a full collection walks only what was allocated since. Every
        ``gc_full_collect_interval_s`` everything is unfrozen and walked once, so cyclic garbage
        that was frozen is still freed. Returns what was done ("off", "froze", "full")."""
        interval_s = self.cfg.gc_full_collect_interval_s
        if interval_s <= 0:
            return "off"
        now_s = time.monotonic() if now_s is None else now_s
        if now_s - self._gc_full_at_s >= interval_s:
            gc.unfreeze()
            gc.collect()
            gc.freeze()
            self._gc_full_at_s = now_s
            return "full"
        gc.collect(1)
        gc.freeze()
        return "froze"

    def compact(self) -> int:
        """Close the active log segment and store every closed one; returns the segments stored.

        A segment leaves the to-do list only once it is stored, so a failure (disk full, EMFILE)
        is retried by the next call; the failure is a ``compaction`` health problem until then."""
        with self._compact_lock:
            try:
                closed = self.wal.rotate()
                rotate_error: Exception | None = None
            except LogError as exc:
                closed, rotate_error = [], exc
            with self._ingest_lock:  # barrier: appends tagged with a closed segment have finished
                self._closed = sorted(set(self._closed) | set(closed))
                todo = list(self._closed)
            try:
                self.compact_closed(todo)
            except Exception as exc:
                cause = errno_name(exc) or type(exc).__name__
                self.health.set("compaction", f"storing the report log failed (retried every "
                                              f"{self.cfg.compact_interval_s:g} s): {describe_error(exc)}", cause)
                self.metrics.inc("harvest_compaction_failures_total")
                raise UnavailableError(f"storage unavailable, compaction failed: {describe_error(exc)}") from exc
            if rotate_error is not None and self.wal.error is None:
                self.health.set("compaction", f"log rotation failed (retried every {self.cfg.compact_interval_s:g} s): "
                                              f"{rotate_error}", _cause_of(rotate_error))
                self.metrics.inc("harvest_compaction_failures_total")
                raise UnavailableError(f"storage unavailable, compaction failed: {rotate_error}") from rotate_error
            if rotate_error is None:
                self.health.clear("compaction")
            return len(todo)

    def compact_closed(self, segment_ids: Sequence[int]) -> None:
        for seg in segment_ids:
            agg = self._pending.get(seg, {})
            nodes = self._pending_nodes.get(seg, {})
            with self._query_lock:
                if agg:
                    node_seq = {n: r.seq for n, r in nodes.items() if r.seq}
                    self.history.write_segment(seg, agg, node_seq)
                with self._ingest_lock:
                    self._pending.pop(seg, None)
            if nodes:
                self.state.upsert_nodes(nodes.values())
            with self._ingest_lock:
                self._pending_nodes.pop(seg, None)
            path = segment_path(self.log_dir, seg)
            if path.exists():
                os.unlink(path)
                fsync_dir(self.log_dir)
            with self._ingest_lock:
                if seg in self._closed:
                    self._closed.remove(seg)
            self.metrics.inc("harvest_segments_compacted_total", 1)

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

    def record_reimages(self, events: Sequence[tuple[str, float, str]]) -> tuple[int, int]:
        """Store reimages (node, epoch s, how) reported live; the node's tenant is taken from its
        reports (or the inventory). New ones mark the policy view stale when the co-busy placer counts
        each node's reimages seen (``_counts_reimages``). Returns (new, already known)."""
        rows = []
        with self._nodes_lock:
            tenants = {n: r.tenant for n, r in self._nodes.items()}
        for i, (node, ts, how) in enumerate(events):
            tenant = tenants.get(node) or self._static.node_tenant.get(node, "")
            if not tenant:
                raise NotFoundError(f"events[{i}].node: node {node!r} is unknown (it has never reported and is not "
                                    "in the inventory); nothing stored", f"events[{i}].node")
            rows.append((node, float(ts), tenant, how))
        new = self.state.add_reimages(rows)
        self.metrics.inc("harvest_reimages_reported_total", new)
        if new and self._counts_reimages():  # the placer counts them: rebuilt on the next compaction tick
            with self._nodes_lock:
                self._reimages_version += 1
        return new, len(rows) - new

    def _counts_reimages(self) -> bool:
        """Whether the co-busy placer reads each node's reimages seen (a choice above 1 is set)."""
        cfg = self.cfg
        return cfg.placement_cobusy and (cfg.placement_reimage_choices > 1 or cfg.placement_repair_choices > 1)

    def _static_now(self) -> StaticInputs:
        """The operator's static inputs with each node's reimages seen (:meth:`reimages_seen_by_node`).
        Nothing is read while no placer would use the counts."""
        if not self._counts_reimages():
            return self._static
        return self._with_reported_reimages()

    def _with_reported_reimages(self) -> StaticInputs:
        """The static inputs with the reimages reported to the service added to the file's."""
        times: dict[str, list[float]] = {n: list(ts) for n, ts in self._static.node_reimage_times.items()}
        for node, ts, _tenant, _how in self.state.load_reimages():
            times.setdefault(node, []).append(float(ts))
        return replace(self._static, node_reimage_times={n: tuple(sorted(ts)) for n, ts in times.items()})

    def reimages_seen_by_node(self) -> dict[str, float]:
        """Each node's distinct reimages: the reimages file's and every one reported to the service
        (``POST /v1/reimages``), what the co-busy placer's server choice reads
        (``placement_reimage_choices``). Events of one node within ``SAME_REIMAGE_S`` are one
        reimage (``count_reimages``), so a reimage in both the file and a report, or detected by the
        agent and declared by the operator, counts once."""
        return self._with_reported_reimages().node_reimages

    def reimage_rates(self, servers_per_tenant: Mapping[str, int], now_s: float) -> dict[str, float]:
        """Reimages per server per 30-day month for the grid rows. A tenant with live reimages in the
        last ``reimage_window_days`` gets the live rate; others keep the reimages file's rate."""
        window_s = self.cfg.reimage_window_days * 86400.0
        live: dict[str, int] = {}
        for _node, _ts, tenant, _how in self.state.load_reimages(now_s - window_s):
            live[tenant] = live.get(tenant, 0) + 1
        rates = dict(self._static.reimage_rates)
        for tenant, n in live.items():
            servers = max(1, servers_per_tenant.get(tenant, 1))
            rates[tenant] = n / servers / (window_s / (30 * 86400.0))
        return rates

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

    # -- elastic servers and revocations (elastic.py) ----------------------------------------------
    def _effective_harvestable(self) -> frozenset[str] | None:
        """The harvestable set plus the elastic nodes, minus the nodes being revoked."""
        revoked = self.elastic.revoked()
        base = self._harvestable
        if base is None:
            return frozenset(self._nodes) - revoked if revoked else None
        return (base | self.elastic.nodes) - revoked

    def _lent_elastic(self) -> frozenset[str]:
        """Elastic nodes lent to this cluster and not being revoked: the ``elastic`` class."""
        return frozenset(self.elastic.nodes) - self.elastic.revoked()

    def apply_elastic_set(self, version: int, nodes: list[str], revocations: list[tuple[int, str, str]],
                          pools: Mapping[str, str] | None = None) -> bool:  # fmt: skip
        had_elastic = bool(self._lent_elastic())
        applied = self.elastic.apply(version, nodes, revocations, pools)
        if applied:
            self.metrics.set("harvest_elastic_version", version)
            self._policy_stale = True
            self.refresh_policy()
            if self._lent_elastic() and not had_elastic:  # the elastic queue and label appear
                self._publish_labels(self._policy.table, self._policy.version)
        return applied

    def revocations_for(self, node: str) -> tuple[int, ...]:
        return self.elastic.pending.get(node, ())

    def revocations_drained(self, node: str, ids: list[int]) -> list[int]:
        done = self.elastic.drained(node, ids)
        if done:
            self.metrics.inc("harvest_revocations_drained_total", len(done))
            if self.capacity_link is not None:
                self.capacity_link.wake.set()
        return done

    def class_of_node(self, node: str, tenant: str) -> str:
        """``elastic`` for the capacity service's elastic nodes, else the tenant's class."""
        return ELASTIC_CLASS if node in self.elastic.nodes else self._policy.class_of_tenant(tenant)

    def last_seen(self) -> dict[str, float]:
        with self._nodes_lock:
            return {n: r.timestamp for n, r in self._nodes.items()}

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

    def _publish_loop(self) -> None:
        """The class table the service starts with (``--classes-file`` or its state) is published once;
        then every ``queue_check_interval_s`` the labels are checked (re-added if the RM lost them,
        e.g. a restart without a label store), a failed queue refresh is retried and drained queues of
        dropped classes are removed (``server/queues.py``)."""
        try:
            policy = self._policy
            if policy.table is not None or self._lent_elastic():
                self._publish_labels(policy.table, policy.version)
        except Exception:  # best effort, off the request path; the loop below retries
            logger.exception("publishing the class table to the ResourceManager failed")
        while not self._stopping.wait(self.cfg.queue_check_interval_s):
            try:
                if self._rm is not None and self._published_labels:
                    result = self._rm.push(self._published_labels, {})
                    if result.added:
                        self.rm_status["pushes"] += 1
                        logger.warning("the ResourceManager had lost node labels %s: added again",
                                       ", ".join(result.added))
                    self.rm_status["last_error"] = ""
                if self.queues is not None:
                    self.queues.tick()
            except Exception as exc:  # a periodic loop never dies
                self.rm_status["last_error"] = str(exc)
                logger.warning("checking the ResourceManager's labels and queues failed: %s", exc)

    def _publish_labels(self, table: Any, version: int) -> None:
        """RM labels, then queues (capacity-scheduler.xml, ``server/queues.py``) for the classes, plus
        ``elastic`` once the capacity service has lent servers (their own label and queue). Labels go
        first: the RM refuses a queue file naming a label it does not have. The elastic queue stays
        when every elastic server is revoked (the capacity service may lend again)."""
        classes = list(table.classes) if table is not None else []
        lent = self._lent_elastic()
        elastic = bool(lent) or self.elastic.version > 0
        labels = [c.id for c in classes] + ([ELASTIC_CLASS] if elastic else [])
        weights = {c.id: float(max(c.servers, 1)) for c in classes}
        if elastic:
            weights[ELASTIC_CLASS] = float(max(len(lent), 1))
        self._published_labels = list(labels)
        if self._rm is not None and labels:
            with self._nodes_lock:
                node_tenant = {n: r.tenant for n, r in self._nodes.items()}
            node_labels = {n: ELASTIC_CLASS if n in lent else (table.tenant_class.get(t, "") if table is not None else "")
                           for n, t in node_tenant.items()}
            try:
                self._rm.push(labels, node_labels)
                self.rm_status["pushes"] += 1
                self.rm_status["last_error"] = ""
            except Exception as exc:
                self.rm_status["last_error"] = str(exc)
                logger.warning("pushing labels to the ResourceManager failed: %s", exc)
        if self.queues is not None and labels:
            self.queues.apply(labels, weights, f"class table v{version}")


def _cause_of(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return errno_name(cause) if cause is not None else type(exc).__name__

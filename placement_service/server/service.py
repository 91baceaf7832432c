"""The placement service's state machine: ingest, durable state, recovery and background work.

Protocol-free: the HTTP and gRPC adapters (``http_api``, ``grpc_api``) translate requests into calls
here. Ingest of one request (HTTP body or gRPC message):

1. under the ingest lock, drop replays (``seq`` <= the node's last stored ``seq``), append the rest
   to the report log as one frame and add them to the in-memory aggregate of the log segment they
   went to (the aggregate answers history queries until the segment is compacted);
2. outside the lock, wait until the frame is durable (group commit, see ``wal``);
3. only then update the live node view (last report, busy flag, new nodes) and acknowledge.

Compaction (background thread, every ``compact_interval_s``): close the active log segment, store
each closed segment's aggregate as Parquet and its nodes' last reports in SQLite, then delete the
segment. Start-up replays every remaining segment into the same in-memory structures, so a crash at
any point loses nothing that was acknowledged and counts nothing twice.
"""

from __future__ import annotations

import gc
import logging
import os
import shlex
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from placement_service.atomic import atomic_write_text
from placement_service.server.config import ServiceConfig
from placement_service.server.history import Aggregate, HistoryStore, SlotSample, add_reports
from placement_service.server.maintenance import controller_from_config
from placement_service.server.metrics import Metrics
from placement_service.server.policy import PolicyView, build_policy_view, load_static_inputs
from placement_service.server.recluster import ReclusterInput, ReclusterWorker
from placement_service.server.reports import NodeReport, NotFoundError, decode_frame, encode_frame
from placement_service.server.state import StateStore
from placement_service.server.wal import ReportLog, fsync_dir, list_segments, read_frames, segment_path
from placement_service.server.yarn_rm import ResourceManagerClient

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class IngestResult:
    ticket: int
    stored: tuple[NodeReport, ...]
    duplicates: int
    acked_seq: dict[str, int]


def _yield_gil() -> None:
    """Background rebuilds sleep between stages so request threads drain what queued meanwhile."""
    time.sleep(0.005)


def _newer(a: NodeReport | None, b: NodeReport) -> NodeReport:
    if a is None or (b.seq, b.timestamp) >= (a.seq, a.timestamp):
        return b
    return a


class PlacementService:
    def __init__(self, cfg: ServiceConfig) -> None:
        self.cfg = cfg
        self.metrics = Metrics()
        cfg.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_dir = cfg.data_path("log")
        self.state = StateStore(cfg.data_path("state.sqlite"))
        self.history = HistoryStore(cfg.data_path("history"), cfg.slot_s)
        self._ingest_lock = threading.Lock()
        self._query_lock = threading.Lock()
        self._nodes_lock = threading.Lock()
        self._compact_lock = threading.Lock()
        # Durable view: last stored report per node, from SQLite then the log.
        self._nodes: dict[str, NodeReport] = self.state.load_nodes()
        self._last_seq: dict[str, int] = {n: r.seq for n, r in self._nodes.items()}
        self._pending: dict[int, Aggregate] = {}
        self._pending_nodes: dict[int, dict[str, NodeReport]] = {}
        self._closed: list[int] = self._recover_log()
        next_id = max(self._closed, default=int(self.state.get_meta("next_segment", "0"))) + 1
        self.state.set_meta("next_segment", str(next_id))
        self.wal = ReportLog(self.log_dir, next_id)
        self._harvestable = self.state.load_harvestable()
        version, doc = self.state.load_class_table()
        if doc is None and cfg.classes_file is not None:
            import json

            from placement_service.server.config import ConfigError

            try:
                doc = json.loads(cfg.classes_file.read_text())
            except (OSError, ValueError) as exc:
                raise ConfigError(f"classes file {cfg.classes_file}: {exc}") from None
        self._static = load_static_inputs(cfg)
        self._policy: PolicyView = build_policy_view(cfg, version, doc, self._nodes, self._harvestable,
                                                     static=self._static)
        self._nodes_version = 0
        self._policy_nodes_version = 0
        self._policy_stale = False
        self._refresh_lock = threading.Lock()
        self._rm = (
            ResourceManagerClient(cfg.rm_url, cfg.rm_timeout_s, cfg.rm_exclusive, cfg.rm_centralized)
            if cfg.rm_url else None
        )
        self.rm_status: dict[str, Any] = {
            "enabled": self._rm is not None, "last_error": "", "pushes": 0,
            "queue_refreshes": 0, "queue_refresh_error": "",
        }
        self.recluster = ReclusterWorker(
            self._recluster_input, self.adopt_class_table, cfg.recluster_interval_s, cfg.recluster_priority
        )
        self._stopping = threading.Event()
        self._compactor = threading.Thread(target=self._compact_loop, name="compactor", daemon=True)
        self.maintenance = controller_from_config(cfg, self._node_reports, self.metrics)  # busy DNs -> maintenance

    def start(self) -> None:
        self.compact()  # store what the previous run left in the log before serving
        self._compactor.start()
        self.recluster.start()
        if self.maintenance is not None:
            self.maintenance.start()

    def close(self) -> None:
        self._stopping.set()
        self.recluster.stop()
        if self.maintenance is not None:
            self.maintenance.stop()
        self._compactor.join(timeout=30)
        try:
            self.compact()
        except Exception:
            logger.exception("final compaction failed; the log keeps the reports for the next start")
        self.wal.close()
        self.state.close()

    # -- recovery --------------------------------------------------------------------------------
    def _recover_log(self) -> list[int]:
        segments = list_segments(self.log_dir) if self.log_dir.exists() else []
        n_reports = 0
        for i, seg in enumerate(segments):
            agg = self._pending.setdefault(seg.segment_id, {})
            nodes = self._pending_nodes.setdefault(seg.segment_id, {})
            for payload in read_frames(seg.path, truncate_torn=(i == len(segments) - 1)):
                reports = decode_frame(payload)
                add_reports(agg, reports, self.cfg.slot_s)
                for r in reports:
                    nodes[r.node] = _newer(nodes.get(r.node), r)
                    self._nodes[r.node] = _newer(self._nodes.get(r.node), r)
                    self._last_seq[r.node] = max(self._last_seq.get(r.node, 0), r.seq)
                n_reports += len(reports)
        if segments:
            logger.info("replayed %d report(s) from %d log segment(s)", n_reports, len(segments))
        return [s.segment_id for s in segments]

    # -- ingest ----------------------------------------------------------------------------------
    def ingest(self, reports: Sequence[NodeReport]) -> IngestResult:
        """Steps 1-3 of the module docstring; returns once the stored reports are durable."""
        stored: list[NodeReport] = []
        duplicates = 0
        with self._ingest_lock:
            for r in reports:
                if r.seq:
                    if r.seq <= self._last_seq.get(r.node, 0):
                        duplicates += 1
                        continue
                    self._last_seq[r.node] = r.seq
                stored.append(r)
            if stored:
                ticket, seg = self.wal.append(encode_frame(stored))
                add_reports(self._pending.setdefault(seg, {}), stored, self.cfg.slot_s)
                nodes = self._pending_nodes.setdefault(seg, {})
                for r in stored:
                    nodes[r.node] = _newer(nodes.get(r.node), r)
            else:
                ticket = self.wal.last_ticket()
            acked = {r.node: self._last_seq.get(r.node, 0) for r in reports}
        return IngestResult(ticket, tuple(stored), duplicates, acked)

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
        self.metrics.inc("harvest_reports_stored_total", len(result.stored))

    def ingest_and_wait(self, reports: Sequence[NodeReport]) -> IngestResult:
        result = self.ingest(reports)
        self.wal.wait(result.ticket)
        self.after_durable(result)
        return result

    # -- compaction ------------------------------------------------------------------------------
    def _compact_loop(self) -> None:
        while not self._stopping.wait(self.cfg.compact_interval_s):
            try:
                self.compact()
                self.refresh_policy()
            except Exception:
                logger.exception("compaction failed; will retry on the next tick")

    def compact(self) -> int:
        """Close the active log segment and store every closed one; returns reports' segments stored."""
        with self._compact_lock:
            closed = self.wal.rotate()
            with self._ingest_lock:  # barrier: appends tagged with a closed segment have finished
                todo = sorted(set(self._closed) | set(closed))
                self._closed = []
            self.compact_closed(todo)
            return len(todo)

    def compact_closed(self, segment_ids: Sequence[int]) -> None:
        for seg in segment_ids:
            agg = self._pending.get(seg, {})
            nodes = self._pending_nodes.get(seg, {})
            with self._query_lock:
                if agg:
                    self.history.write_segment(seg, agg)
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
            self.metrics.inc("harvest_segments_compacted_total", 1)

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
        class_id = policy.class_of_tenant(r.tenant)
        return {
            "node": node,
            "tenant": r.tenant,
            "class_id": class_id,
            "label": class_id,
            "busy": r.busy,
            "harvestable": self._harvestable is None or node in self._harvestable,
            "last_seq": self._last_seq.get(node, r.seq),
            "last_report": r.to_json(),
            "class_table_version": policy.version,
        }

    def samples(self, tenant: str, since_s: float, until_s: float) -> list[SlotSample]:
        with self._query_lock:
            with self._ingest_lock:
                pending = [{k: v[:] for k, v in agg.items()} for agg in self._pending.values()]
            return self.history.samples(tenant, since_s, until_s, pending)

    def known_tenant(self, tenant: str) -> bool:
        with self._nodes_lock:
            if any(r.tenant == tenant for r in self._nodes.values()):
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
                       table: Any = None, background: bool = True) -> None:
        """Rebuild the view when the table, the node set or the harvestable set changed; otherwise
        only refresh the classes' current CPU (cheap, in place under the view's lock)."""
        with self._nodes_lock:
            nodes_version = self._nodes_version
            changed = doc is not None or nodes_version != self._policy_nodes_version or self._policy_stale
            nodes = dict(self._nodes)
        old = self._policy
        if not changed:
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
            view = build_policy_view(
                self.cfg, old.version if version is None else version, old.doc if doc is None else doc,
                nodes, self._harvestable, static=self._static,
                # A new table brings each class's latest CPU from the history; reports refine it on
                # the next compaction tick (``update_current``), keeping the swap itself short.
                current_window_s=None if doc is not None else self.cfg.current_window_s,
                table=table, pause=_yield_gil if background else (lambda: None),
            )
            gc.freeze()
        finally:
            sys.setswitchinterval(switch_s)
            if gc_was_enabled:
                gc.enable()
        self._policy = view  # one reference swap: requests see the old or the new view, never a mix
        self._policy_nodes_version = nodes_version
        self._policy_stale = False

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
            reimage_rate_per_tenant=self._static.reimage_rates, seed=self.cfg.seed,
            state_path=self.cfg.data_path("state.sqlite"), node_tenant={r.node: r.tenant for r in nodes},
        )

    def adopt_class_table(self, version: int, doc: dict[str, Any]) -> None:
        """Swap in a class table already stored as ``version`` (0: store it here first); then push
        labels (best effort). Called by the re-clustering worker, never on a request path."""
        from placement_service.core.types import ClassTable

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
        _yield_gil()
        self.refresh_policy(doc, version, table=table)
        self.metrics.set("harvest_class_table_version", version)
        self.metrics.set("harvest_classes", len(table.classes))
        logger.info("adopted class table v%d: %d classes, %d tenants", version, len(table.classes),
                    len(table.tenant_class))
        labels = [c.id for c in table.classes]
        self._write_capacity_scheduler(labels, {c.id: float(max(c.servers, 1)) for c in table.classes}, version)
        if self._rm is not None:
            with self._nodes_lock:
                node_tenant = {n: r.tenant for n, r in self._nodes.items()}
            node_labels = {n: table.tenant_class.get(t, "") for n, t in node_tenant.items()}
            try:
                self._rm.push(labels, node_labels)
                self.rm_status["pushes"] += 1
                self.rm_status["last_error"] = ""
            except Exception as exc:
                self.rm_status["last_error"] = str(exc)
                logger.warning("pushing labels to the ResourceManager failed: %s", exc)

    def _write_capacity_scheduler(self, labels: list[str], weights: dict[str, float], version: int) -> None:
        """Write the queue config for the class table (atomically), then ask YARN to load it.

        Nothing is written, and YARN is not asked, when the queues are what the file already holds
        (the ``source`` comment names the table version, so compare without it).
        """
        path = self.cfg.capacity_scheduler_file
        if path is None or not labels:
            return
        try:
            from scheduler_plugin.capacity_scheduler import render_capacity_scheduler
        except ImportError:
            logger.warning("scheduler_plugin.capacity_scheduler is not available; %s not written", path)
            return
        try:
            text = render_capacity_scheduler(labels, weights=weights, source=f"class table v{version}")
            try:
                old = path.read_text()
            except OSError:
                old = None
            if old is not None and _without_source(old) == _without_source(text):
                return
            atomic_write_text(path, text)
        except Exception as exc:
            logger.warning("writing %s failed: %s", path, exc)
            return
        self._refresh_queues()

    def _refresh_queues(self) -> None:
        """Run ``refresh_queues_command`` (e.g. ``yarn rmadmin -refreshQueues``); failures are logged,
        counted and shown in ``GET /v1/recluster`` (``resource_manager``), never fatal."""
        command = self.cfg.refresh_queues_command.strip()
        if not command:
            return
        try:
            done = subprocess.run(shlex.split(command), capture_output=True, text=True,
                                  timeout=self.cfg.refresh_queues_timeout_s, check=False)
            error = "" if done.returncode == 0 else (
                f"exit {done.returncode}: {(done.stderr or done.stdout).strip()[-500:]}"
            )
        except (OSError, ValueError, subprocess.TimeoutExpired) as exc:
            error = str(exc)
        if error:
            self.rm_status["queue_refresh_error"] = f"{command}: {error}"
            self.metrics.inc("harvest_queue_refresh_failures_total")
            logger.warning("refreshing YARN queues with %r failed: %s", command, error)
        else:
            self.rm_status["queue_refreshes"] += 1
            self.rm_status["queue_refresh_error"] = ""
            logger.info("YARN queues refreshed (%s)", command)


def _without_source(text: str) -> str:
    """The queue config without its comment lines (they name the class-table version)."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("<!--"))

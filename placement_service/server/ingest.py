"""Ingest, the report log's callbacks, recovery and compaction of ``PlacementService`` (steps 1-3
and "Compaction" of the ``server/service.py`` module docstring)."""

from __future__ import annotations

import gc
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace

from placement_service.server.history import add_reports
from placement_service.server.reports import NodeReport, UnavailableError, decode_frame, encode_frame
from placement_service.server.service_state import _ServiceState
from placement_service.server.wal import (
    LogError,
    describe_error,
    errno_name,
    fsync_dir,
    list_segments,
    read_frames,
    segment_path,
)

# The service's own log lines, wherever their code lives, keep the service's logger name.
logger = logging.getLogger("placement_service.server.service")


@dataclass(frozen=True)
class IngestResult:
    ticket: int
    stored: tuple[NodeReport, ...]
    duplicates: int
    acked_seq: dict[str, int]


def _newer(a: NodeReport | None, b: NodeReport) -> NodeReport:
    if a is None or (b.seq, b.timestamp) >= (a.seq, a.timestamp):
        return b
    return a


def _cause_of(exc: BaseException) -> str:
    cause = exc.__cause__ or exc.__context__
    return errno_name(cause) if cause is not None else type(exc).__name__


class _Ingest(_ServiceState):
    """The durable side of ``PlacementService``: what reaches the log, the history and SQLite."""

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

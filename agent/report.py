"""Reports to the placement service: sequence numbers, the on-disk buffer, the gRPC sender.

Every report gets the next per-node ``seq`` (kept in ``DIR/seq`` so it keeps increasing across
restarts) and is written to ``DIR/report-buffer/<seq>.json`` before any send. A sender thread
streams the buffered reports in ``seq`` order over ``Placement.Report`` and deletes them once a reply's
``acked_seq`` covers them; while the service is away they stay on disk (at most ``max_reports``, the
oldest dropped first and counted) and are replayed in order on reconnect. The service stores each
``seq`` once, so a replay after a lost reply is harmless. Replies also carry the node's class label.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from agent import AgentError
from agent.metrics import Metrics
from agent.statefiles import Throttle, atomic_write
from placement_service import __version__

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Report:
    node: str
    tenant: str
    timestamp: float
    primary_cpu_cores: float
    primary_memory_mb: float
    capacity_cores: float
    capacity_memory_mb: float
    busy: bool
    free_storage_gb: float
    seq: int
    drained_revocations: tuple[int, ...] = ()  # revocations this node has drained (agent/drain.py)
    agent_version: str = __version__  # so the service can list which agent release runs where


MAX_SEQ = 2**63 - 1


class SeqCounter:
    """``DIR/seq``: the last sequence number used, written before the number is handed out.

    A missing file starts at 0 (a new node). A damaged one (not a decimal integer 0..2^63-1) is never
    read as 0: the service would take the next reports for replays of ones it already stored and drop
    them. The counter recovers instead, to ``max(highest seq in the report buffer, now in
    microseconds)``: a counter that adds one per report stays far below the clock in microseconds, so
    the next number is above any the service has seen. It logs an error naming the file and the value.
    """

    def __init__(self, path: str, buffer_dir: str | None = None, clock: Callable[[], float] = time.time) -> None:
        self.path = path
        self._lock = threading.Lock()
        try:
            with open(path, "rb") as handle:
                raw = handle.read()
        except FileNotFoundError:
            self.last = 0
            return
        except OSError as exc:
            raise AgentError(f"sequence file {path}: cannot read it: {exc.strerror or exc}") from None
        text = raw.decode("ascii", errors="replace").strip()
        if text.isdigit() and len(text) <= 19 and int(text) <= MAX_SEQ:
            self.last = int(text)
            return
        buffered = _buffered_seqs(buffer_dir or os.path.join(os.path.dirname(path), "report-buffer"))
        self.last = max([int(clock() * 1e6), *buffered])
        logger.error("sequence file %s is damaged (%r); continuing from %d (above every number used so far) "
                     "so that the service stores the next report", path, raw[:40], self.last)
        atomic_write(self.path, f"{self.last}\n")

    def next(self) -> int:
        with self._lock:
            self.last += 1
            atomic_write(self.path, f"{self.last}\n")
            return self.last

    def at_least(self, seq: int) -> None:
        """Jump forward (the service has seen higher numbers, e.g. after the state dir was lost)."""
        with self._lock:
            if seq > self.last:
                self.last = seq
                atomic_write(self.path, f"{self.last}\n")


def _buffered_seqs(directory: str) -> list[int]:
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    return [int(name[:-5]) for name in names if name.endswith(".json") and name[:-5].isdigit()]


class ReportBuffer:
    """Bounded on-disk queue of unacknowledged reports, one JSON file per report."""

    def __init__(self, directory: str, max_reports: int, metrics: Metrics) -> None:
        self.directory = directory
        self.max_reports = max_reports
        self.metrics = metrics
        self._lock = threading.Lock()
        os.makedirs(directory, exist_ok=True)
        self._seqs = sorted(_buffered_seqs(directory))
        self.metrics.set("report_buffer_depth", len(self._seqs))

    def _path(self, seq: int) -> str:
        return os.path.join(self.directory, f"{seq:020d}.json")

    def append(self, report: Report) -> None:
        atomic_write(self._path(report.seq), json.dumps(asdict(report)))
        with self._lock:
            self._seqs.append(report.seq)
            while len(self._seqs) > self.max_reports:
                oldest = self._seqs.pop(0)
                self._remove(oldest)
                self.metrics.inc("report_buffer_dropped_total")
            self.metrics.set("report_buffer_depth", len(self._seqs))

    def _remove(self, seq: int) -> None:
        try:
            os.unlink(self._path(seq))
        except FileNotFoundError:
            pass

    def pending(self, limit: int = 500) -> list[Report]:
        with self._lock:
            seqs = list(self._seqs[:limit])
        out = []
        for seq in seqs:
            try:
                with open(self._path(seq), encoding="utf-8") as handle:
                    out.append(Report(**json.load(handle)))
            except (OSError, ValueError, TypeError):
                logger.warning("dropping unreadable buffered report %s", seq)
                self.ack_one(seq)
        return out

    def ack_one(self, seq: int) -> None:
        with self._lock:
            if seq in self._seqs:
                self._seqs.remove(seq)
                self._remove(seq)
            self.metrics.set("report_buffer_depth", len(self._seqs))

    def ack(self, acked_seq: int) -> int:
        """Forget every report with seq <= ``acked_seq``; returns how many."""
        with self._lock:
            done = [s for s in self._seqs if s <= acked_seq]
            self._seqs = [s for s in self._seqs if s > acked_seq]
            for seq in done:
                self._remove(seq)
            self.metrics.set("report_buffer_depth", len(self._seqs))
        return len(done)

    def depth(self) -> int:
        with self._lock:
            return len(self._seqs)


class GrpcSender:
    """Thread that drains the buffer to ``Placement.Report`` whenever woken (or every ``retry_s``)."""

    def __init__(self, address: str, buffer: ReportBuffer, seq: SeqCounter, metrics: Metrics, *,
                 token_file: str | None, on_label: Callable[[str], None], retry_s: float,
                 throttle: Throttle, timeout_s: float = 10.0,
                 on_revocations: Callable[[list[int], str], None] | None = None) -> None:
        self.address = address
        self.last_round_s: float | None = None  # monotonic time of the last delivered round
        self.buffer = buffer
        self.seq = seq
        self.metrics = metrics
        self.token_file = token_file
        self.on_label = on_label
        self.on_revocations = on_revocations
        self.retry_s = retry_s
        self.throttle = throttle
        self.timeout_s = timeout_s
        self.connected = False
        self.last_error: str | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._channel: Any = None
        self._thread = threading.Thread(target=self._run, name="agent-report", daemon=True)

    def start(self) -> GrpcSender:
        self._thread.start()
        return self

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.timeout_s + 2)
        self._close()

    def _close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None

    def _metadata(self) -> list[tuple[str, str]]:
        if not self.token_file:
            return []
        with open(self.token_file, encoding="utf-8") as handle:
            return [("authorization", f"Bearer {handle.read().strip()}")]

    def flush_once(self) -> int:
        """Send what is buffered in one stream; returns how many reports were acknowledged."""
        import grpc

        from placement_service.proto_gen import harvest_pb2, harvest_pb2_grpc

        pending = self.buffer.pending()
        if not pending:
            return 0
        if self._channel is None:
            self._channel = grpc.insecure_channel(self.address, options=[
                ("grpc.initial_reconnect_backoff_ms", 200), ("grpc.max_reconnect_backoff_ms", 2000)])
        stub = harvest_pb2_grpc.PlacementStub(self._channel)
        messages = [harvest_pb2.NodeReport(**asdict(r)) for r in pending]
        last_sent = pending[-1].seq
        acked = 0
        call = stub.Report(iter(messages), metadata=self._metadata(), timeout=self.timeout_s)
        try:
            for reply in call:
                acked += self.buffer.ack(reply.acked_seq)
                if reply.acked_seq > last_sent:
                    self.seq.at_least(reply.acked_seq)
                label = reply.label or reply.class_id
                if label:
                    self.on_label(label)
                if self.on_revocations is not None and reply.node == pending[0].node:
                    self.on_revocations([int(i) for i in reply.revocations], label)
                if reply.acked_seq >= last_sent:
                    break
        finally:
            call.cancel()
        self.metrics.inc("reports_acked_total", acked)
        return acked

    def _run(self) -> None:
        import grpc

        delay = self.retry_s
        while not self._stop.is_set():
            self._wake.wait(timeout=delay)
            self._wake.clear()
            if self._stop.is_set():
                break
            try:
                while self.flush_once() and not self._stop.is_set():
                    pass
                self.connected, self.last_error, delay = True, None, self.retry_s
                self.last_round_s = time.monotonic()  # watchdog: the sender loop delivered a round
            except grpc.RpcError as exc:
                if exc.code() == grpc.StatusCode.INVALID_ARGUMENT:
                    self._reject_oldest(exc.details())
                    continue
                self._failed(exc)
                delay = min(delay * 2, 30.0)
            except OSError as exc:
                self._failed(exc)
                delay = min(delay * 2, 30.0)

    def _reject_oldest(self, details: str) -> None:
        """The service refused a report as malformed: drop it (the oldest unacked), or it blocks the rest."""
        pending = self.buffer.pending(limit=1)
        if pending:
            self.buffer.ack_one(pending[0].seq)
            self.metrics.inc("reports_rejected_total")
            logger.error("placement service rejected report seq %d: %s (dropped)", pending[0].seq, details)
        self._wake.set()

    def _failed(self, exc: Exception) -> None:
        import grpc

        self.connected = False
        if isinstance(exc, grpc.RpcError):
            self.last_error = f"{exc.code().name}: {exc.details()}"
        else:
            self.last_error = f"OSError: {exc}"
        self.metrics.inc("errors_total", kind="report")
        self._close()  # a fresh channel reconnects at once when the service is back
        log_now, suppressed = self.throttle.should_log("report")
        if log_now:
            logger.warning("placement service %s unreachable (%s); %d report(s) buffered%s",
                           self.address, self.last_error, self.buffer.depth(),
                           f", {suppressed} more failures" if suppressed else "")

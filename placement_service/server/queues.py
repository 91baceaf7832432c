"""The Capacity Scheduler queues of the class table, kept equal in the file and in the ResourceManager.

After a re-clustering the service writes ``capacity-scheduler.xml`` (one queue per class, rendered by
``scheduler_plugin.capacity_scheduler``) and runs ``refresh_queues_command`` (``yarn rmadmin
-refreshQueues``). Queues have a lifecycle in the RM, and this module follows it (issue 36 D1: a
re-clustering that dropped a class wrote a file without its queue; the RM refused to delete a RUNNING
queue and with it the whole refresh, the new class's queue included, and ``/healthz`` said ok):

1. a class the new table no longer has keeps its queue, ``STOPPED`` and with no DEFAULT-partition
   share: the RM takes no new application there and lets the running ones finish (DRAINING);
2. once the RM reports the queue ``STOPPED`` (``GET /ws/v1/cluster/scheduler``), a later refresh
   leaves it out of the file. Without ``rm_url`` the service cannot see that, and the queue stays in
   the file, STOPPED (harmless: no share, no applications);
3. a queue the RM never loaded (a refresh that failed) is simply left out;
4. a failed refresh is a critical ``queue_refresh`` health problem (``/healthz`` 503 ``unhealthy``,
   with the command's error), retried every ``queue_check_interval_s`` until it succeeds; the same
   check removes drained queues.

``plan_queues`` is the pure part (states in, queue lists out); ``QueueSync`` the adapter (file,
command, RM reads, health); the service's publisher loop calls ``tick``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placement_service.atomic import atomic_write_text
from placement_service.server.admin_command import run_admin_command
from placement_service.server.health import Health
from placement_service.server.metrics import Metrics

logger = logging.getLogger(__name__)

DEFAULT_QUEUE = "default"


@dataclass(frozen=True)
class QueuePlan:
    running: tuple[str, ...]  # the classes' queues
    stopped: tuple[str, ...]  # dropped classes' queues, kept STOPPED until the RM has drained them
    removed: tuple[str, ...]  # dropped from the file now (drained, or never loaded by the RM)


def plan_queues(wanted: Sequence[str], in_file: Mapping[str, str], in_rm: Mapping[str, str] | None) -> QueuePlan:
    """Which queues the next file holds, and in which state.

    ``wanted``: the class ids; ``in_file``: queue -> configured state in the current file;
    ``in_rm``: queue -> state in the RM, or None when the RM cannot be asked.
    """
    wanted_set = set(wanted)
    known = set(in_file) | set(in_rm or {})
    stopped, removed = [], []
    for q in sorted(known - wanted_set - {DEFAULT_QUEUE}):
        if in_rm is None:
            stopped.append(q)  # cannot see whether it drained: keep it, stopped
        elif q not in in_rm or in_rm[q] == "STOPPED":
            removed.append(q)  # never loaded, or drained: the RM lets it go
        else:
            stopped.append(q)  # RUNNING -> STOPPED now; DRAINING: still has applications
    return QueuePlan(tuple(sorted(wanted_set)), tuple(stopped), tuple(removed))


def _without_source(text: str) -> str:
    """The queue config without its comment lines (they name the class-table version)."""
    return "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("<!--"))


class QueueSync:
    """Writes the queue file for the current classes and keeps the RM's queues equal to it."""

    def __init__(self, path: Path, refresh_command: str, refresh_timeout_s: float, rm: Any, health: Health,
                 metrics: Metrics, status: dict[str, Any], check_interval_s: float = 30.0) -> None:
        self.path = path
        self.refresh_command = refresh_command.strip()
        self.refresh_timeout_s = refresh_timeout_s
        self.rm = rm  # ResourceManagerClient or None
        self.health = health
        self.metrics = metrics
        self.status = status  # shared with GET /v1/recluster (resource_manager)
        self.status.setdefault("stopped_queues", [])
        self.check_interval_s = check_interval_s
        self._lock = threading.Lock()
        self._wanted: tuple[list[str], dict[str, float], str] | None = None
        self._refresh_failed = False

    # -- what the service asks -------------------------------------------------------------------
    def apply(self, labels: Sequence[str], weights: Mapping[str, float], source: str) -> None:
        """The classes changed (or were adopted again): write the file if its queues change, refresh."""
        with self._lock:
            self._wanted = (list(labels), dict(weights), source)
            self._sync_locked()

    def tick(self) -> None:
        """Retry a failed refresh; drop queues the RM has drained."""
        with self._lock:
            if self._wanted is not None and (self._refresh_failed or self.status["stopped_queues"]):
                self._sync_locked()

    # -- the work --------------------------------------------------------------------------------
    def _rm_states(self) -> dict[str, str] | None:
        if self.rm is None:
            return None
        try:
            return dict(self.rm.queue_states())
        except Exception as exc:
            logger.warning("reading the ResourceManager's queues failed (dropped classes' queues stay "
                           "STOPPED in the file): %s", exc)
            return None

    def _sync_locked(self) -> None:
        from scheduler_plugin.capacity_scheduler import read_queue_states, render_capacity_scheduler

        assert self._wanted is not None
        labels, weights, source = self._wanted
        try:
            old: str | None = self.path.read_text()
        except OSError:
            old = None
        try:
            in_file = read_queue_states(old) if old else {}
        except Exception as exc:
            logger.warning("%s is not readable (%s): writing it anew", self.path, exc)
            in_file = {}
        plan = plan_queues(labels, in_file, self._rm_states())
        try:
            text = render_capacity_scheduler(list(plan.running), weights=weights, source=source,
                                             stopped=list(plan.stopped))
            changed = old is None or _without_source(old) != _without_source(text)
            if changed:
                atomic_write_text(self.path, text)
        except Exception as exc:
            logger.warning("writing %s failed: %s", self.path, exc)
            return
        if plan.stopped != tuple(self.status["stopped_queues"]) or plan.removed:
            if plan.stopped:
                logger.info("queues of dropped classes kept STOPPED until drained: %s", ", ".join(plan.stopped))
            if plan.removed:
                logger.info("queues removed (drained or never loaded): %s", ", ".join(plan.removed))
        self.status["stopped_queues"] = list(plan.stopped)
        if changed or self._refresh_failed:
            self._refresh()

    def _refresh(self) -> None:
        """Run ``refresh_command``; a failure is a critical health problem until a refresh succeeds."""
        if not self.refresh_command:
            return
        error = run_admin_command(self.refresh_command, self.refresh_timeout_s)
        if error:
            self._refresh_failed = True
            self.status["queue_refresh_error"] = f"{self.refresh_command}: {error}"
            self.metrics.inc("harvest_queue_refresh_failures_total")
            self.health.set("queue_refresh", f"{self.refresh_command} failed, the ResourceManager's queues "
                            f"differ from {self.path} (retried every {self.check_interval_s:g} s): {error}",
                            "refresh_failed")
            logger.warning("refreshing YARN queues with %r failed: %s", self.refresh_command, error)
            return
        self._refresh_failed = False
        self.status["queue_refreshes"] += 1
        self.status["queue_refresh_error"] = ""
        self.health.clear("queue_refresh")
        logger.info("YARN queues refreshed (%s)", self.refresh_command)

"""What is wrong with the service right now, for ``/healthz`` and the ``harvest_health_*`` gauges.

A *problem* belongs to one component (``report_log``, ``compaction``, ``http``, ``history``) and says
why in words and in a short cause code (``ENOSPC``, ``EMFILE``, ``quarantined``). A *critical* problem
means the service refuses work it should do (ingest, or storing the log): ``/healthz`` answers 503
``unhealthy``; a non-critical one (data lost to a damaged file, but serving) answers 200 ``degraded``.
Components set and clear their own problems; nothing here polls.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass
from typing import Any

from placement_service.server.metrics import Metrics

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Problem:
    component: str
    reason: str
    cause: str
    critical: bool
    since_s: float


class Health:
    def __init__(self, metrics: Metrics) -> None:
        self._metrics = metrics
        self._lock = threading.Lock()
        self._problems: dict[str, Problem] = {}
        metrics.set("harvest_healthy", 1.0)

    def set(self, component: str, reason: str, cause: str = "", *, critical: bool = True) -> None:
        """Record (or update) the problem of ``component``; logs when it is new or changes cause."""
        with self._lock:
            old = self._problems.get(component)
            since = old.since_s if old is not None and old.cause == cause else time.time()
            self._problems[component] = Problem(component, reason, cause, critical, since)
            if old is not None and old.cause != cause:
                self._metrics.set("harvest_health_problem", 0.0, component=component, cause=old.cause)
            self._metrics.set("harvest_health_problem", 1.0, component=component, cause=cause)
            self._update_locked()
        if old is None or old.cause != cause:
            logger.warning("health: %s %s: %s", component, "failing" if critical else "degraded", reason)

    def clear(self, component: str) -> None:
        with self._lock:
            old = self._problems.pop(component, None)
            if old is None:
                return
            self._metrics.set("harvest_health_problem", 0.0, component=component, cause=old.cause)
            self._update_locked()
        logger.warning("health: %s recovered (was: %s)", component, old.reason)

    def _update_locked(self) -> None:
        critical = any(p.critical for p in self._problems.values())
        self._metrics.set("harvest_healthy", 0.0 if critical else 1.0)

    def problem(self, component: str) -> Problem | None:
        with self._lock:
            return self._problems.get(component)

    @property
    def healthy(self) -> bool:
        with self._lock:
            return not any(p.critical for p in self._problems.values())

    def snapshot(self) -> dict[str, Any]:
        """``{"status": ok | degraded | unhealthy, "problems": {component: {...}}}``."""
        with self._lock:
            problems = dict(self._problems)
        if any(p.critical for p in problems.values()):
            status = "unhealthy"
        elif problems:
            status = "degraded"
        else:
            status = "ok"
        return {
            "status": status,
            "problems": {
                c: {"reason": p.reason, "cause": p.cause, "critical": p.critical, "since_s": p.since_s}
                for c, p in sorted(problems.items())
            },
        }

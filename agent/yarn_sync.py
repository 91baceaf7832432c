"""The agent's one writer of YARN state: a worker thread that keeps the RM's node resource in step.

The loop never waits for the ResourceManager: it states what it wants (``want``: the advertised
size; ``reclaim``: a smaller size that makes the RM preempt) and this thread writes the latest wish,
skipping writes that change nothing. On its first run it asks the RM for its version
(``GET /ws/v1/cluster/info``), which decides the reclaim path (``agent.reclaim.choose_path``).

Over-commit timeout, handled deliberately: in the RM the first timeout >= 0 written for a node
**sticks** (a later ``-1`` does not clear it until the node re-registers), and a write equal to the
node's current size is a no-op that does not re-arm it. So on the RM path every write carries the
same ``rm_reclaim_timeout_ms`` (no write pretends that ``-1`` still means "never kill"), and a
reclaim whose size equals the size the RM holds is sent 1 MB smaller, so the RM acts on it.

The RM forgets a written size when the NodeManager re-registers (a restart): the node is back at the
NM's configured total (seen on a real 3.3.6), while the agent would skip every write of the size it
believes applied. So at most every ``check_interval_s``, while nothing else is to be written, the
thread reads the node's ``totalResource`` (``GET /ws/v1/cluster/nodes/{id}``) and writes the
applied size again when the RM holds another one.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from agent.metrics import Metrics
from agent.reclaim import ReclaimPath, choose_path
from agent.statefiles import Throttle, atomic_write
from agent.yarn import YarnClient, YarnError, dynamic_resources_xml, parse_dynamic_resources

logger = logging.getLogger(__name__)


@dataclass
class _YarnWork:
    desired: tuple[int, int] | None = None  # (memory MB, vcores)
    reclaim: bool = False  # the desired size is a reclaim: write it even if equal to the applied one
    applied: tuple[int, int] | None = None
    applied_at_s: float | None = None
    remote_kills: list[str] = field(default_factory=list)
    check: bool = False  # read the RM's node size and write ours again if it differs


class YarnSync:
    """Worker thread that keeps the RM's node resource at the desired value (latest wins)."""

    def __init__(self, client: YarnClient, node_id: Callable[[], str], overcommit_timeout_ms: int,
                 dynamic_xml: str | None, metrics: Metrics, throttle: Throttle, *, reclaim: str = "local",
                 rm_reclaim_timeout_ms: int = 0, version_retry_s: float = 60.0, check_interval_s: float = 30.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.client = client
        self._node_id = node_id
        self.overcommit_timeout_ms = overcommit_timeout_ms
        self.dynamic_xml = dynamic_xml
        self.metrics = metrics
        self.throttle = throttle
        self.reclaim_setting = reclaim
        self.rm_reclaim_timeout_ms = rm_reclaim_timeout_ms
        self.version_retry_s = version_retry_s
        self.check_interval_s = check_interval_s
        self._checked_s = time.monotonic()
        self.rewrites = 0  # the RM had lost the applied size (NodeManager re-registered): written again
        self._clock = clock
        self.hadoop_version: str | None = None
        self._version_tried_s = -float("inf")
        self.reclaim_failures = 0  # reclaim writes that failed (the executor then kills locally)
        self._work = _YarnWork()
        self._cond = threading.Condition()
        self._stop = False
        self.last_error: str | None = None
        self._detect = reclaim != "local"
        self._thread = threading.Thread(target=self._run, name="agent-yarn", daemon=True)
        self._thread.start()

    # -- what the loop asks ----------------------------------------------------------------------
    def want(self, memory_mb: int, vcores: int) -> None:
        with self._cond:
            if self._work.applied == (memory_mb, vcores) and self._work.desired is None:
                self.metrics.inc("yarn_writes_skipped_total")
                if time.monotonic() - self._checked_s >= self.check_interval_s:
                    self._checked_s = time.monotonic()
                    self._work.check = True
                    self._cond.notify()
                return
            if self._work.reclaim and self._work.desired is not None:
                return  # a reclaim not yet written is not overtaken by a plain update
            self._work.desired = (memory_mb, vcores)
            self._cond.notify()

    def reclaim(self, memory_mb: int, vcores: int) -> None:
        """Shrink the node to what stays, so that the RM preempts the rest (newest first)."""
        with self._cond:
            self._work.desired, self._work.reclaim = (memory_mb, vcores), True
            self._cond.notify()

    def remote_kill(self, container_id: str) -> None:
        with self._cond:
            self._work.remote_kills.append(container_id)
            self._cond.notify()

    def applied(self) -> tuple[int, int] | None:
        with self._cond:
            return self._work.applied

    def in_force(self, memory_mb: int, vcores: int) -> bool:
        """The RM holds at most this size for the node (the last write that landed), so it cannot hand
        out more than that: what a kill frees is not refilled."""
        with self._cond:
            applied = self._work.applied
        return applied is not None and applied[0] <= memory_mb and applied[1] <= vcores

    def applied_at_s(self) -> float | None:
        with self._cond:
            return self._work.applied_at_s

    def path(self) -> tuple[ReclaimPath, str]:
        return choose_path(self.reclaim_setting, self.hadoop_version, self.client.resource_rest)

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(timeout=5)

    # -- the thread ------------------------------------------------------------------------------
    def _error(self, kind: str, exc: Exception) -> None:
        self.metrics.inc("errors_total", kind=kind)
        self.last_error = str(exc)
        log_now, suppressed = self.throttle.should_log(kind)
        if log_now:
            extra = f" ({suppressed} more since the last report)" if suppressed else ""
            logger.warning("%s failed: %s%s", kind, exc, extra)

    def _detect_version(self) -> None:
        if not self._detect or self.hadoop_version is not None:
            return
        if time.monotonic() - self._version_tried_s < self.version_retry_s:
            return
        self._version_tried_s = time.monotonic()
        try:
            self.hadoop_version = self.client.hadoop_version()
            path, why = self.path()
            logger.info("ResourceManager runs Hadoop %s: reclaim path %s (%s)", self.hadoop_version,
                        path.value, why)
        except YarnError as exc:
            self._error("yarn_cluster_info", exc)

    def timeout_ms(self) -> int:
        return self.rm_reclaim_timeout_ms if self.path()[0] is ReclaimPath.RM_PREEMPTION else \
            self.overcommit_timeout_ms

    def _run(self) -> None:
        self._detect_version()
        while True:
            with self._cond:
                while (not self._stop and self._work.desired is None and not self._work.remote_kills
                       and not self._work.check):
                    self._cond.wait()
                if self._stop:
                    return
                desired, kills, reclaim = self._work.desired, self._work.remote_kills, self._work.reclaim
                self._work.desired, self._work.remote_kills, self._work.reclaim = None, [], False
                check, self._work.check = self._work.check, False
            self._detect_version()
            for cid in kills:
                try:
                    self.client.signal_container(cid, "FORCEFUL_SHUTDOWN")
                except YarnError as exc:
                    self._error("yarn_signal", exc)
            if desired is None and check:
                desired = self._lost_size()
            if desired is None:
                continue
            if desired == self.applied():
                if not reclaim:
                    continue
                desired = (max(desired[0] - 1, 0), desired[1])  # an equal size would be a no-op in the RM
            try:
                node = self._node_id()
                path = self.client.update_node_resource(node, desired[0], desired[1], self.timeout_ms())
                self.metrics.inc("yarn_writes_total", path=path)
                if reclaim:
                    self.metrics.inc("rm_reclaims_total")
                if self.dynamic_xml:
                    self._write_dynamic(node, desired)
                with self._cond:
                    self._work.applied, self._work.applied_at_s = desired, self._clock()
                self.last_error = None
            except (YarnError, OSError) as exc:
                if reclaim:
                    self.reclaim_failures += 1
                self._error("yarn_node_resource", exc)  # desired is offered again on the next tick

    def _lost_size(self) -> tuple[int, int] | None:
        """The applied size when the RM holds another one for the node (else None)."""
        applied = self.applied()
        if applied is None:
            return None
        try:
            held = self.client.node_total(self._node_id())
        except (YarnError, OSError) as exc:
            self._error("yarn_node_read", exc)
            return None
        if held == applied:
            return None
        logger.warning("the ResourceManager holds %s MB / %s vcores for the node, not the %s MB / %s vcores "
                       "written (the NodeManager re-registered?): writing it again", held[0], held[1], *applied)
        self.rewrites += 1
        self.metrics.inc("yarn_rewrites_total")
        with self._cond:
            self._work.applied = None  # so the write below is not skipped as a no-op
        return applied

    def _write_dynamic(self, node: str, desired: tuple[int, int]) -> None:
        assert self.dynamic_xml is not None
        entries: dict[str, tuple[int, int]] = {}
        try:
            with open(self.dynamic_xml, encoding="utf-8") as handle:
                entries = parse_dynamic_resources(handle.read())
        except (OSError, ValueError, SyntaxError):
            entries = {}
        if entries.get(node) == desired:
            return
        entries[node] = desired
        atomic_write(self.dynamic_xml, dynamic_resources_xml(entries))

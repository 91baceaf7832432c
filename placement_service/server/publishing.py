"""The elastic servers and revocations of ``PlacementService`` (``server/elastic.py``), and what it
publishes to the ResourceManager: node labels, then the class queues (``server/queues.py``)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from placement_service.server.elastic import ELASTIC_CLASS
from placement_service.server.service_state import _ServiceState

# The service's own log lines, wherever their code lives, keep the service's logger name.
logger = logging.getLogger("placement_service.server.service")


class _Publishing(_ServiceState):
    """The elastic set, revocations and label / queue publishing of ``PlacementService``."""

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

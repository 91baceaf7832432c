"""Reimages reported to ``PlacementService`` (``POST /v1/reimages``): storing them, the counts the
co-busy placer reads and the grid rows' reimage rates."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from placement_service.server.policy import StaticInputs
from placement_service.server.reports import NotFoundError
from placement_service.server.service_state import _ServiceState


class _Reimages(_ServiceState):
    """The reimage side of ``PlacementService``."""

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

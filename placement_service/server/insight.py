"""What the live service knows about its own decisions: why, how well, and whether its loops live.

One :class:`Insight` per service, fed by the decision calls and read by ``/v1/explain/*``,
``/healthz`` and ``/metrics``:

- **class-selection settings from history**: the lengths of the jobs seen (their ``last_duration_s``)
  give the short / medium / long thresholds as their thirds once ``selection_min_jobs`` were seen
  (``selection_thresholds = "history"``, the default; ``"fixed"`` keeps the configured values), as
  the simulator does. Reserve fraction and container size are configured
  (``selection_reserve_frac``, ``selection_container_cores``). The lengths live in memory: after a
  restart the configured thresholds serve until enough jobs were seen again;
- **placement quality**: the share of recent blocks whose replicas sit in distinct grid rows,
  columns and environments, relaxations, and the strict-mode switch (``placement_strict_*``): below
  the threshold the service refuses a target rather than place without diversity (the NameNode
  shim then falls back to the stock choice for that block), and says why in ``/healthz``;
- **decision log**: a sampled record of placements bounded in entries and bytes
  (``decision_log_size``, ``decision_log_bytes``, ``decision_log_sample``; gauges
  ``harvest_decision_log_bytes`` / ``_entries``) answering "why did this block go there" by block id
  or by node; a logged request keeps the first 32 names of a list and their count;
- **heartbeats** of the service's loops and the nodes whose agents went silent
  (``silent_after_s``).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from placement_service.core.selection import SelectionConfig, thresholds_from_history
from placement_service.core.types import ClassTable
from placement_service.server.quality import (
    DecisionLog,
    Heartbeats,
    QualityTracker,
    StrictPolicy,
    StrictSwitch,
    diversity_of,
)


def _same(node: str) -> str:
    return node


def _cell(cell_of: Mapping[str, Any], node: str, i: int) -> int | None:
    cell = cell_of.get(node)
    return None if cell is None else (cell.reimage_row, cell.peak_column)[i]


LOGGED_NAMES = 32  # names of a request list (excluded nodes) kept in its decision-log entry


def _loggable(request: Mapping[str, Any]) -> dict[str, Any]:
    """The request as logged: lists of names cut to their first :data:`LOGGED_NAMES` (with their
    count in ``<name>_total``), so an entry's size does not grow with the caller's lists."""
    out = dict(request)
    for k, v in request.items():
        if isinstance(v, list) and len(v) > LOGGED_NAMES:
            out[k] = v[:LOGGED_NAMES]
            out[f"{k}_total"] = len(v)
    return out


class Insight:
    def __init__(self, cfg: Any) -> None:
        self.cfg = cfg
        self.quality = QualityTracker(window=cfg.placement_quality_window)
        self.strict = StrictSwitch(StrictPolicy(
            enabled=cfg.placement_strict_auto, enter_below=cfg.placement_strict_enter_below,
            leave_above=cfg.placement_strict_leave_above, min_blocks=cfg.placement_strict_min_blocks,
        ))
        self.decisions = DecisionLog(capacity=cfg.decision_log_size, sample=cfg.decision_log_sample, seed=cfg.seed,
                                     max_bytes=cfg.decision_log_bytes)
        self.heartbeats = Heartbeats()
        self._lengths: deque[float] = deque(maxlen=10_000)
        self._lock = threading.Lock()
        self._seq = 0

    # -- class selection ---------------------------------------------------------------------------
    def saw_job(self, last_duration_s: float | None) -> None:
        if last_duration_s is not None:
            with self._lock:
                self._lengths.append(float(last_duration_s))

    def selection_config(self) -> tuple[SelectionConfig, str]:
        """The selection settings in force and where the thresholds came from."""
        cfg = self.cfg
        short, long = cfg.selection_short_max_s, cfg.selection_long_min_s
        source = "configured"
        if cfg.selection_thresholds == "history":
            with self._lock:
                lengths = list(self._lengths)
            derived = thresholds_from_history(lengths, min_jobs=cfg.selection_min_jobs)
            if derived is not None:
                short, long = derived
                source = f"thirds of the {len(lengths)} job lengths seen"
            else:
                source = (f"configured (history needs {cfg.selection_min_jobs} jobs with a last duration, "
                          f"{len(lengths)} seen)")
        return SelectionConfig(short_max_s=short, long_min_s=long, reserve_frac=cfg.selection_reserve_frac,
                               container_cores=cfg.selection_container_cores), source

    # -- placement ---------------------------------------------------------------------------------
    @staticmethod
    def rule_funnel(candidates: Sequence[str], usable: Callable[[str], bool], excluded: Sequence[str],
                    replicas: list[dict[str, Any]], cell_of: Mapping[str, Any],
                    env_of: Mapping[str, str]) -> list[dict[str, Any]]:
        """For each replica, how many candidate nodes each placement rule removed, in the rules'
        order, given the replicas before it: not usable (busy, or no room for the block), excluded
        or already chosen, same environment as an earlier replica, same grid row, same grid column
        (rows and columns for the first three replicas: the grid has three of each). A replica whose
        node is not among the survivors of a rule is where that rule was relaxed."""
        out = []
        excl = set(excluded)
        for k, rep in enumerate(replicas):
            earlier = replicas[:k]
            steps = []
            # (rule, the node's value under that rule, the values earlier replicas took)
            rules: list[tuple[str, Callable[[str], Any], set[Any]]] = [
                ("excluded or already chosen", _same, {r["node"] for r in earlier} | excl),
                ("same environment", env_of.get, {r["environment"] for r in earlier}),
            ]
            if k < 3:
                rules += [("same grid row", lambda n: _cell(cell_of, n, 0), {r["grid_row"] for r in earlier}),
                          ("same grid column", lambda n: _cell(cell_of, n, 1), {r["grid_column"] for r in earlier})]
            relaxed = []
            left = [n for n in candidates if usable(n)]
            steps.append({"rule": "not usable (busy or full)", "removed": len(candidates) - len(left), "left": len(left)})
            for name, value, taken in rules:
                kept = [n for n in left if value(n) not in taken]
                steps.append({"rule": name, "removed": len(left) - len(kept), "left": len(kept)})
                if rep["node"] in left and rep["node"] not in kept:
                    relaxed.append(name)
                left = kept or left  # a rule that would leave nobody is the one the placer relaxes
            out.append({"replica": k + 1, "node": rep["node"], "start": len(candidates), "rules": steps,
                        "relaxed": relaxed})
        return out


    def replicas_detail(self, table: ClassTable | None, node_tenant: Mapping[str, str],
                        node_env: Mapping[str, str], targets: Sequence[str]) -> list[dict[str, Any]]:
        grid: Mapping[str, Any] = table.grid if table is not None and table.grid is not None else {}
        out = []
        for t in targets:
            tenant = node_tenant.get(t, "")
            cell = grid.get(tenant)
            out.append({"node": t, "tenant": tenant, "environment": node_env.get(t, tenant),
                        "class": table.tenant_class.get(tenant, "") if table is not None else "",
                        "grid_row": None if cell is None else cell.reimage_row,
                        "grid_column": None if cell is None else cell.peak_column})
        return out

    def record_place(self, block: str, request: Mapping[str, Any], replicas: list[dict[str, Any]],
                     relaxed: bool, reason: str, short: bool, chosen: list[dict[str, Any]] | None = None) -> str:
        """Track quality, re-evaluate strict mode, keep the decision (sampled); returns its key.
        ``chosen``: the block's holders before this decision (re-replication); quality is that of
        the whole block, the new replicas and the holders the service knows (a holder without an
        agent has no tenant or grid cell: it says nothing about this placement)."""
        held = chosen or []
        if not short:
            block_reps = [h for h in held if h["tenant"]] + replicas
            self.quality.record(diversity_of([r["grid_row"] for r in block_reps],
                                             [r["grid_column"] for r in block_reps],
                                             [r["environment"] for r in block_reps], relaxed))
            self.strict.update(self.quality.shares())
        with self._lock:
            self._seq += 1
            key = block or f"decision-{self._seq}"
        entry = {"request": _loggable(request), "replicas": replicas, "relaxed": relaxed, "reason": reason,
                 "short": short, "strict_mode": self.strict.strict}
        if held:
            entry["chosen"] = held
        self.decisions.record(key, entry)
        return key

    def explain_place(self, block: str | None = None, node: str | None = None, n: int = 20) -> list[dict[str, Any]]:
        if block:
            e = self.decisions.get(block)
            return [e] if e is not None else []
        recent = self.decisions.recent(self.cfg.decision_log_size)
        if node:
            recent = [e for e in recent if any(r["node"] == node for r in e["replicas"])]
        return recent[-n:]

    def quality_doc(self) -> dict[str, Any]:
        shares = {k: (None if v != v else v) for k, v in self.quality.shares().items()}  # NaN: no blocks yet
        return {"shares": shares, "blocks_total": self.quality.total_blocks,
                "relaxed_total": self.quality.total_relaxed, "strict_mode": self.strict.strict,
                "strict_reason": self.strict.reason, "strict_changed_at": self.strict.changed_at}

    # -- watching ----------------------------------------------------------------------------------
    def silent_nodes(self, last_report_s: Mapping[str, float], now_s: float) -> dict[str, float]:
        """Nodes whose last report is older than ``silent_after_s``: {node: seconds silent}."""
        limit = self.cfg.silent_after_s
        return {n: now_s - t for n, t in last_report_s.items() if now_s - t > limit}

    def export_metrics(self, metrics: Any) -> dict[str, float]:
        """A metrics collector: quality shares, strict mode, loop heartbeats (written as gauges)."""
        shares = self.quality.shares()
        for k in ("rows", "columns", "environments", "full", "relaxed"):
            v = shares[k]
            metrics.set("harvest_placement_diverse_share", v if v == v else 0.0, kind=k)
        metrics.set("harvest_placement_strict_mode", 1.0 if self.strict.strict else 0.0)
        metrics.set("harvest_decision_log_bytes", float(self.decisions.bytes))
        metrics.set("harvest_decision_log_entries", float(len(self.decisions)))
        with self._lock:
            metrics.set("harvest_job_lengths_kept", float(len(self._lengths)))  # at most 10,000
        self.heartbeats.export(metrics.set, "harvest_loop_heartbeat_age_seconds")
        return {}

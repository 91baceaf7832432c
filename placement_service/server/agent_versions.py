"""Which agent release runs on which node, from the ``agent_version`` of each report.

Kept in memory only (it is not history): after a restart the table fills again within one report
interval. Bounded: at most ``max_nodes`` nodes (the least recently reporting node gives way), and
a version string is at most 64 characters of ``[0-9A-Za-z.+_-]`` (checked where reports are
parsed). An empty version means an agent older than 0.2.0, which did not send one.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from typing import Any

UNKNOWN = "unknown (before 0.2.0)"


class AgentVersions:
    def __init__(self, max_nodes: int = 200_000) -> None:
        self._lock = threading.Lock()
        self._by_node: OrderedDict[str, tuple[str, float]] = OrderedDict()  # node -> (version, last report)
        self._counts: Counter[str] = Counter()
        self.max_nodes = max_nodes

    def note(self, node: str, version: str, at_s: float) -> None:
        version = version or UNKNOWN
        with self._lock:
            old = self._by_node.pop(node, None)
            if old is not None:
                self._counts[old[0]] -= 1
            elif len(self._by_node) >= self.max_nodes:
                _, (gone, _) = self._by_node.popitem(last=False)
                self._counts[gone] -= 1
            self._by_node[node] = (version, at_s)
            self._counts[version] += 1
            for name in [v for v, n in self._counts.items() if n <= 0]:
                del self._counts[name]

    def counts(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def of(self, node: str) -> str | None:
        with self._lock:
            got = self._by_node.get(node)
        return None if got is None else got[0]

    def snapshot(self, version: str | None = None, limit: int = 1000) -> dict[str, Any]:
        """``{"versions": {v: n}, "nodes": {node: {"version", "last_report"}}, "truncated"}``.

        ``nodes`` lists at most ``limit`` nodes (of ``version`` only, when given), newest report first.
        """
        with self._lock:
            items = list(reversed(self._by_node.items()))
            counts = dict(self._counts)
        chosen = [(n, v) for n, v in items if version is None or v[0] == version]
        return {
            "versions": counts,
            "nodes": {n: {"version": v, "last_report": at} for n, (v, at) in chosen[:limit]},
            "truncated": len(chosen) > limit,
        }

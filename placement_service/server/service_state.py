"""The attributes and methods of ``PlacementService`` (``server/service.py``) that its parts
(``ingest``, ``reimages``, ``publishing``) read by name: annotations for the type checker only."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pathlib import Path

    from placement_service.server.agent_versions import AgentVersions
    from placement_service.server.config import ServiceConfig
    from placement_service.server.elastic import CapacityLink, ElasticState
    from placement_service.server.health import Health
    from placement_service.server.history import Aggregate, HistoryStore
    from placement_service.server.insight import Insight
    from placement_service.server.metrics import Metrics
    from placement_service.server.policy import PolicyView, StaticInputs
    from placement_service.server.queues import QueueSync
    from placement_service.server.reports import NodeReport
    from placement_service.server.state import StateStore
    from placement_service.server.wal import ReportLog
    from placement_service.server.yarn_rm import ResourceManagerClient


class _ServiceState:
    cfg: ServiceConfig
    metrics: Metrics
    health: Health
    insight: Insight
    agent_versions: AgentVersions
    log_dir: Path
    state: StateStore
    history: HistoryStore
    wal: ReportLog
    elastic: ElasticState
    capacity_link: CapacityLink | None
    queues: QueueSync | None
    rm_status: dict[str, Any]
    _rm: ResourceManagerClient | None
    _ingest_lock: threading.Lock
    _query_lock: threading.Lock
    _nodes_lock: threading.Lock
    _compact_lock: threading.Lock
    _nodes: dict[str, NodeReport]
    _last_seq: dict[str, int]
    _durable_seq: dict[str, int]
    _pending: dict[int, Aggregate]
    _pending_nodes: dict[int, dict[str, NodeReport]]
    _inflight: dict[int, tuple[NodeReport, ...]]
    _closed: list[int]
    _harvestable: frozenset[str] | None
    _static: StaticInputs
    _policy: PolicyView
    _policy_stale: bool
    _nodes_version: int
    _reimages_version: int
    _published_labels: list[str]
    _stopping: threading.Event
    _gc_full_at_s: float

    if TYPE_CHECKING:

        def refresh_policy(self, doc: dict[str, Any] | None = None, version: int | None = None,
                           table: Any = None, background: bool = True, cobusy: Any = None) -> None: ...

        def _report_quarantine(self) -> None: ...

        def _lent_elastic(self) -> frozenset[str]: ...

        def _publish_labels(self, table: Any, version: int) -> None: ...

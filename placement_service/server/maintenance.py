"""Busy DataNodes as HDFS maintenance: neither a write target nor a read source while busy.

The placement service already keeps busy nodes out of replica targets; HDFS reads cannot be
steered without patching the NameNode, but a DataNode in the stock ``IN_MAINTENANCE`` admin state
gets no new replicas and is not handed to clients as a read source (checked on a real 3.3.6; see
docs/hadoop.md). This module puts busy nodes there through the NameNode's JSON combined hosts file
(``CombinedHostFileManager``) and ``hdfs dfsadmin -refreshNodes``, and takes them out again.

Two parts:

* :class:`MaintenancePlanner`, pure (numbers in, decisions out). Per tick it gets each node's busy
  flag and last report time and returns the set that should be in maintenance:

  - hysteresis: a node enters after being busy for ``enter_after_s`` without a break, and leaves
    after being idle for ``leave_after_s`` without a break (a flapping node stays where it is);
  - rate limit: at most ``max_enter_per_min`` nodes enter in any 60 s window, longest-busy first;
  - cap and guard: nodes in maintenance plus nodes that have stopped reporting (possibly down, but
    not yet dead to HDFS) stay within ``max_fraction`` of the known nodes, rounded down but at least
    one while ``max_fraction`` > 0 (10 % of fewer than 10 nodes would be 0: no maintenance at all on
    a small cluster; HDFS's ``dfs.namenode.maintenance.replication.min`` still keeps a node that holds
    a block's last replicas ENTERING until they are copied). A silent node may hold replicas;
    counting it keeps maintenance plus failures within the same budget;
  - expiry, the safety net: every entry carries ``maintenanceExpireTimeInMS`` = now +
    ``expiry_s``; the NameNode returns the node to normal by itself if the service stops
    refreshing it (crash, partition). The planner renews an entry when half its expiry is gone.

* :class:`MaintenanceController`, the adapter: a thread that feeds the planner from the service's
  node view, writes the hosts file atomically when the plan changes (or an expiry needs renewing)
  and runs the refresh command.

What protects a block's last live replicas: HDFS itself. A node asked into maintenance stays
``ENTERING_MAINTENANCE`` (still a read source) until each of its blocks has at least
``dfs.namenode.maintenance.replication.min`` live replicas on other nodes, copying blocks first
when needed (hadoop-conf/hdfs-site.xml sets 2, so one more failure still leaves a live replica).
The service has no block locations; its own guard is the cap above, which counts silent nodes.

The hosts file is also the NameNode's include list (a DataNode missing from it cannot register,
and an empty one admits every DataNode): every entry of the base (``harvest hosts-file`` output with
upgrade domains, and the operator's own admin states) is kept as it is, no entry is ever added, and
an empty base is refused at start-up.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placement_service import HarvestError
from placement_service.atomic import atomic_write_text
from placement_service.server.admin_command import run_admin_command

logger = logging.getLogger(__name__)

IN_MAINTENANCE = "IN_MAINTENANCE"


class MaintenanceError(HarvestError):
    """The hosts file or the maintenance settings are unusable."""


@dataclass(frozen=True)
class MaintenanceSettings:
    enter_after_s: float = 60.0
    leave_after_s: float = 300.0
    max_enter_per_min: int = 2
    max_fraction: float = 0.1
    expiry_s: float = 3600.0
    stale_after_s: float = 60.0  # no report for this long: possibly down (counts against the cap)

    def __post_init__(self) -> None:
        if self.enter_after_s < 0 or self.leave_after_s < 0 or self.stale_after_s <= 0:
            raise MaintenanceError("maintenance: enter/leave delays must be >= 0 and stale_after_s > 0")
        if self.max_enter_per_min < 0 or not 0.0 <= self.max_fraction <= 1.0:
            raise MaintenanceError("maintenance: max_enter_per_min must be >= 0 and max_fraction in [0, 1]")
        if self.expiry_s < 60:
            raise MaintenanceError("maintenance: expiry_s must be >= 60 (the NameNode checks about once a "
                                   "30 s and the service renews at half the expiry)")


def maintenance_cap(max_fraction: float, n_nodes: int) -> int:
    """Nodes that may be unavailable (in maintenance or silent): ``floor(max_fraction * n)``, at least
    1 while ``max_fraction`` > 0 and there is a node; 0 turns maintenance off."""
    if max_fraction <= 0 or n_nodes <= 0:
        return 0
    return max(1, int(max_fraction * n_nodes + 1e-9))


@dataclass(frozen=True)
class NodeObservation:
    busy: bool
    last_report_s: float


@dataclass(frozen=True)
class Plan:
    in_maintenance: dict[str, float]  # node -> expiry (epoch seconds)
    entered: tuple[str, ...]
    left: tuple[str, ...]
    held: dict[str, str]  # busy long enough but not entered: node -> why
    changed: bool  # the hosts file must be rewritten (membership or a renewed expiry)


@dataclass
class MaintenancePlanner:
    settings: MaintenanceSettings
    busy_since: dict[str, float] = field(default_factory=dict)
    idle_since: dict[str, float] = field(default_factory=dict)
    expiry: dict[str, float] = field(default_factory=dict)  # nodes in maintenance -> expiry (epoch s)
    entries_s: deque[float] = field(default_factory=deque)  # times of recent entries (rate limit)

    def adopt(self, node: str, expiry_s: float) -> None:
        """A node found in maintenance at start-up (the service's own earlier entry)."""
        self.expiry[node] = expiry_s

    def step(self, now_s: float, nodes: Mapping[str, NodeObservation]) -> Plan:
        """Observe every node at ``now_s`` (epoch seconds); see the module docstring for the rules."""
        st = self.settings
        for name, obs in nodes.items():
            if obs.busy:
                self.busy_since.setdefault(name, now_s)
                self.idle_since.pop(name, None)
            else:
                self.idle_since.setdefault(name, now_s)
                self.busy_since.pop(name, None)
        stale = {n for n, o in nodes.items() if now_s - o.last_report_s > st.stale_after_s}
        left = []
        renewed = False
        for name in sorted(self.expiry):
            idle_for = now_s - self.idle_since[name] if name in self.idle_since else 0.0
            if name not in nodes or idle_for >= st.leave_after_s or self.expiry[name] <= now_s:
                del self.expiry[name]
                left.append(name)
            elif self.expiry[name] - now_s < st.expiry_s / 2 and name not in stale:
                # renewed only while the node reports: a silent one is left to expire
                self.expiry[name] = now_s + st.expiry_s
                renewed = True
        while self.entries_s and self.entries_s[0] <= now_s - 60.0:
            self.entries_s.popleft()
        cap = maintenance_cap(st.max_fraction, len(nodes))
        candidates = sorted(
            (since, name) for name, since in self.busy_since.items()
            if name not in self.expiry and name in nodes and now_s - since >= st.enter_after_s
        )
        entered = []
        held = {}
        for _since, name in candidates:
            if name in stale:
                held[name] = "no recent report"
            elif len(self.expiry) + len(stale - set(self.expiry)) + 1 > cap:
                held[name] = (f"cap: {len(self.expiry)} in maintenance + {len(stale - set(self.expiry))} silent "
                              f"of {len(nodes)} nodes, at most {cap} ({st.max_fraction:.0%})")
            elif len(self.entries_s) >= st.max_enter_per_min:
                held[name] = f"rate limit: {st.max_enter_per_min} entered in the last 60 s"
            else:
                self.expiry[name] = now_s + st.expiry_s
                self.entries_s.append(now_s)
                entered.append(name)
        return Plan(dict(self.expiry), tuple(entered), tuple(left), held, bool(entered or left or renewed))


def read_hosts_entries(path: Path) -> list[dict[str, Any]]:
    """The JSON array of a combined hosts file; errors name the file and the entry."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MaintenanceError(f"hosts file {path}: {exc}") from None
    if not isinstance(doc, list):
        raise MaintenanceError(f"hosts file {path}: expected a JSON array of host objects")
    for i, entry in enumerate(doc):
        if not isinstance(entry, dict) or not isinstance(entry.get("hostName"), str) or not entry["hostName"]:
            raise MaintenanceError(f"hosts file {path}: entry {i}: expected an object with a 'hostName' string")
    return doc


def entry_keys(entry: Mapping[str, Any]) -> tuple[str, ...]:
    """Node names an entry stands for: ``host`` and, with a ``port``, ``host:port`` (several
    DataNodes on one host are told apart by their transfer port, as the NameNode does)."""
    host = str(entry["hostName"])
    return (host, f"{host}:{entry['port']}") if entry.get("port") else (host,)


def render_hosts(base: list[dict[str, Any]], maintenance: Mapping[str, float]) -> str:
    """The base entries, with the nodes in ``maintenance`` marked IN_MAINTENANCE (until their expiry)
    unless the base gives them an admin state of its own (the operator's decision wins). A node is
    matched by ``host`` or ``host:port`` (see :func:`entry_keys`)."""
    entries = [dict(e) for e in base]
    for e in entries:
        expiry = next((maintenance[k] for k in entry_keys(e) if k in maintenance), None)
        if expiry is not None and e.get("adminState") in (None, "NORMAL"):
            e["adminState"] = IN_MAINTENANCE
            e["maintenanceExpireTimeInMS"] = int(expiry * 1000)
    return json.dumps(entries, indent=1) + "\n"


class MaintenanceController:
    """Drives the planner from the service's nodes; writes the hosts file and runs the refresh.

    The base entries come from ``base_file`` when given (re-read on every write, so the operator
    can change it), else from the hosts file as found at the first start. What this service put in
    maintenance, and that first base, are kept in ``<hosts file>.harvest-state`` so that a restart
    neither drops nor mistakes them for the operator's entries. Only nodes listed in the base are
    considered: the file is the NameNode's include list, and a node added to it would be a node the
    operator did not allow.
    """

    def __init__(self, hosts_file: Path, refresh_command: str, settings: MaintenanceSettings,
                 observe: Callable[[], Mapping[str, NodeObservation]], base_file: Path | None = None,
                 refresh_timeout_s: float = 60.0, tick_s: float = 5.0,
                 clock: Callable[[], float] = time.time) -> None:
        self.hosts_file = hosts_file
        self.state_file = hosts_file.with_name(hosts_file.name + ".harvest-state")
        self.base_file = base_file
        self.refresh_command = refresh_command.strip()
        self.refresh_timeout_s = refresh_timeout_s
        self.tick_s = tick_s
        self.planner = MaintenancePlanner(settings)
        self._observe = observe
        self._clock = clock
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._written = False
        self._dirty = False  # the file changed but the NameNode has not re-read it yet
        self.status: dict[str, Any] = {"in_maintenance": [], "held": {}, "refreshes": 0, "last_error": ""}
        self._snapshot: list[dict[str, Any]] = []
        self._load_state()
        if not self._base():
            raise MaintenanceError(
                f"{base_file or hosts_file}: the hosts file lists no DataNode (an empty dfs.hosts allows every "
                "DataNode; one maintenance entry would then shut out all others): list every DataNode first, "
                "e.g. with 'harvest hosts-file'")

    def _base(self) -> list[dict[str, Any]]:
        return read_hosts_entries(self.base_file) if self.base_file is not None else self._snapshot

    def _load_state(self) -> None:
        if self.state_file.exists():
            try:
                state = json.loads(self.state_file.read_text(encoding="utf-8"))
                self._snapshot = list(state["base"])
                ours = {str(k): float(v) for k, v in dict(state["ours"]).items()}
            except (OSError, ValueError, KeyError, TypeError) as exc:
                raise MaintenanceError(f"{self.state_file}: unreadable ({exc}); remove it and restore "
                                       f"{self.hosts_file} from 'harvest hosts-file'") from None
            now = self._clock()
            for node, expiry in ours.items():
                if expiry > now:
                    self.planner.adopt(node, expiry)
            if self.planner.expiry:
                logger.info("maintenance: adopted %d node(s) from %s", len(self.planner.expiry), self.state_file)
            return
        if not self.hosts_file.exists():
            if self.base_file is None:
                raise MaintenanceError(f"{self.hosts_file}: missing; generate the NameNode's dfs.hosts first "
                                       "(harvest hosts-file) or pass a base file")
            return
        self._snapshot = read_hosts_entries(self.hosts_file)

    def tick(self) -> Plan:
        base = self._base()
        listed = {k for e in base for k in entry_keys(e)}
        nodes = {n: o for n, o in self._observe().items() if n in listed}
        plan = self.planner.step(self._clock(), nodes)
        for name in plan.entered:
            logger.info("maintenance: %s enters (busy for %.0f s or more)", name, self.planner.settings.enter_after_s)
        for name in plan.left:
            logger.info("maintenance: %s leaves", name)
        if plan.held and plan.held != self.status["held"]:
            logger.warning("maintenance: %d busy node(s) held out: %s", len(plan.held),
                           "; ".join(f"{n}: {why}" for n, why in sorted(plan.held.items())[:5]))
        self.status["held"] = plan.held
        self.status["in_maintenance"] = sorted(plan.in_maintenance)
        if plan.changed or not self._written:
            try:
                atomic_write_text(self.state_file, json.dumps({"base": self._snapshot, "ours": plan.in_maintenance}))
                atomic_write_text(self.hosts_file, render_hosts(base, plan.in_maintenance))
            except OSError as exc:
                self.status["last_error"] = f"writing {self.hosts_file}: {exc}"
                logger.warning("maintenance: %s", self.status["last_error"])
                return plan
            self._written = True
            self._dirty = True
        if self._dirty:
            self._dirty = not self._refresh()
        return plan

    def _refresh(self) -> bool:
        if not self.refresh_command:
            return True
        error = run_admin_command(self.refresh_command, self.refresh_timeout_s)
        if error:
            self.status["last_error"] = f"{self.refresh_command}: {error}"
            logger.warning("maintenance: refreshing the NameNode failed (retried next tick): %s",
                           self.status["last_error"])
            return False
        self.status["refreshes"] += 1
        self.status["last_error"] = ""
        return True

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="maintenance", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self.tick_s):
            try:
                self.tick()
            except Exception:
                logger.exception("maintenance tick failed; retrying on the next one")

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.refresh_timeout_s + 5)


def controller_from_config(cfg: Any, reports: Callable[[], Mapping[str, Any]],
                           metrics: Any = None) -> MaintenanceController | None:
    """The controller ``harvest serve`` runs when ``dfs_hosts_file`` is set (else None).

    ``reports`` returns the service's last report per node (``busy``, ``timestamp``); with
    ``metrics`` (``server.metrics.Metrics``) the controller's state is exported as gauges."""
    if cfg.dfs_hosts_file is None:
        return None
    settings = MaintenanceSettings(
        enter_after_s=cfg.maintenance_enter_after_s, leave_after_s=cfg.maintenance_leave_after_s,
        max_enter_per_min=cfg.maintenance_max_enter_per_min, max_fraction=cfg.maintenance_max_fraction,
        expiry_s=cfg.maintenance_expiry_s, stale_after_s=cfg.maintenance_stale_after_s,
    )

    def observe() -> dict[str, NodeObservation]:
        return {n: NodeObservation(bool(r.busy), float(r.timestamp)) for n, r in reports().items()}

    ctl = MaintenanceController(cfg.dfs_hosts_file, cfg.refresh_nodes_command, settings, observe,
                                base_file=cfg.dfs_hosts_base_file, tick_s=cfg.maintenance_tick_s)
    if metrics is not None:
        metrics.add_collector(lambda: {
            "harvest_maintenance_nodes": float(len(ctl.status["in_maintenance"])),
            "harvest_maintenance_held_nodes": float(len(ctl.status["held"])),
            "harvest_maintenance_refresh_failing": 1.0 if ctl.status["last_error"] else 0.0,
        })
    return ctl

"""The agent loop: sample -> attribute -> decide -> act every ``interval_s``, report every few seconds.

A periodic loop never dies on a bad tick: a failed sample is logged (throttled), counted, and the
tick is decided with no sample, which harvests nothing. Only start-up errors are fatal.
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable
from typing import Any

import psutil

from agent.attribute import Allocation, NodeView, attribute
from agent.config import AgentConfig, Mode, as_dict
from agent.decide import DecideState, Decision, Policy, decide
from agent.drain import Drainer
from agent.executor import ActResult, Executor, YarnSync
from agent.forecast import ForecastFetcher, ForecastSource
from agent.metrics import Metrics, MetricsServer
from agent.reclaim import ignored_resources, plan_reclaim
from agent.reimage import ReimageSender, ReimageWatch
from agent.report import GrpcSender, Report, ReportBuffer, SeqCounter
from agent.sampler import NodeSample, PsutilSampler
from agent.statefiles import Throttle
from agent.yarn import YarnClient, YarnError

logger = logging.getLogger(__name__)


class Agent:
    def __init__(self, config: AgentConfig, *, sampler: Any = None, yarn: YarnClient | None = None,
                 clock: Callable[[], float] = time.time) -> None:
        self.config = config
        self.clock = clock
        self.metrics = Metrics()
        self.throttle = Throttle(config.error_log_interval_s)
        self.policy = Policy.from_config(config)
        self.state = DecideState()
        self.sampler = sampler or PsutilSampler(datanode_pattern=config.datanode_pattern,
                                                daemon_patterns=config.hadoop_daemon_patterns,
                                                secondary_cgroups=config.secondary_cgroups,
                                                scope_root_pid=config.scope_root_pid,
                                                cgroup=config.cgroup)
        os.makedirs(config.state_dir, exist_ok=True)
        self.yarn_client: YarnClient | None = None
        yarn_sync = None
        if config.mode is Mode.YARN:
            self.yarn_client = yarn or YarnClient(config.rm_url, config.nm_url, yarn_bin=config.yarn_bin,
                                                  timeout_s=config.http_timeout_s, retries=config.rm_retries,
                                                  backoff_s=config.rm_backoff_s)
            yarn_sync = YarnSync(self.yarn_client, self._node_id, config.overcommit_timeout_ms,
                                 config.dynamic_resources_xml, self.metrics, self.throttle,
                                 reclaim=config.reclaim, rm_reclaim_timeout_ms=config.rm_reclaim_timeout_ms,
                                 check_interval_s=config.rm_check_interval_s, clock=clock)
        self.executor = Executor(config.state_dir, self.metrics, kill_grace_s=config.kill_grace_s,
                                 heartbeat_s=config.heartbeat_s, yarn=yarn_sync,
                                 rm_reclaim_wait_s=config.rm_reclaim_wait_s, shrink_wait_s=config.shrink_wait_s)
        self._first_seen_s: dict[str, float] = {}  # container id -> when this agent first saw it
        self._sizes: list[tuple[float, tuple[int, int]]] = []  # (set at, node size written to the RM)
        self.ignored: frozenset[str] = frozenset()  # resources the scheduler over-allocates
        self.seq = SeqCounter(os.path.join(config.state_dir, "seq"))
        self.buffer = ReportBuffer(os.path.join(config.state_dir, "report-buffer"), config.report_buffer_max,
                                   self.metrics)
        self.drainer = Drainer(os.path.join(config.state_dir, "revocations.json"))
        self.forecast = ForecastSource(config.forecast_file, config.tenant) if config.forecast_file else None
        self.forecast_fetcher = (ForecastFetcher(config.service_http, config.tenant, config.forecast_file,
                                                 config.token_file, refresh_s=config.forecast_refresh_s,
                                                 timeout_s=config.http_timeout_s)
                                 if config.forecast_from_service and config.service_http and config.forecast_file
                                 else None)
        self.sender: GrpcSender | None = None
        if config.service:
            self.sender = GrpcSender(config.service, self.buffer, self.seq, self.metrics,
                                     token_file=config.token_file, on_label=self.executor.set_label,
                                     retry_s=min(config.report_interval_s, 5.0), throttle=self.throttle,
                                     on_revocations=self.drainer.on_reply)
        self.server: MetricsServer | None = None
        # Reimages: noticed at start (new boot id + a wiped DataNode dir) or declared with
        # 'harvest agent report-reimage'; queued in the state dir until the service takes them.
        self.reimages = ReimageWatch(config.node, config.state_dir,
                                     list(config.datanode_dirs) or ([config.storage_path] if config.storage_path else []))
        self.reimage_sender = (ReimageSender(self.reimages, config.service_http, config.token_file,
                                             interval_s=max(config.report_interval_s, 5.0))
                               if config.service_http else None)
        self._loop_beats: dict[str, float] = {"tick": time.monotonic()}  # loop -> last finished round
        self._node_id_cache: str | None = config.yarn_node_id
        self._last_view: NodeView | None = None
        self._last_decision: Decision | None = None
        self._last_act: ActResult | None = None
        self._last_report_s = -float("inf")
        self._lock = threading.Lock()
        for name, value in (("capacity_cores", config.capacity_cores),
                            ("capacity_memory_mb", config.capacity_memory_mb),
                            ("reserve_cores", config.reserve_cores),
                            ("reserve_memory_mb", config.reserve_memory_mb)):
            self.metrics.set(name, value)
        for counter in ("samples_total", "stale_samples_total", "kills_total", "reports_total", "reports_acked_total",
                        "report_buffer_dropped_total", "yarn_writes_skipped_total", "rm_reclaims_total",
                        "rm_reclaimed_total"):
            self.metrics.inc(counter, 0.0)
        for resource in ("cores", "memory"):
            self.metrics.set("scheduler_ignores_advertised", 0.0, resource=resource)

    # -- adapters ------------------------------------------------------------------------------
    def _node_id(self) -> str:
        if self._node_id_cache is None:
            assert self.yarn_client is not None
            self._node_id_cache = self.yarn_client.node_id()
        return self._node_id_cache

    def _error(self, kind: str, exc: BaseException) -> None:
        self.metrics.inc("errors_total", kind=kind)
        log_now, suppressed = self.throttle.should_log(kind)
        if log_now:
            logger.warning("%s failed: %s%s", kind, exc, f" ({suppressed} more)" if suppressed else "")

    def _allocations(self) -> dict[str, Allocation] | None:
        if self.yarn_client is None:
            return None
        try:
            return self.yarn_client.containers(timeout_s=min(self.config.http_timeout_s,
                                                             self.config.interval_s / 2))
        except YarnError as exc:
            self._error("nm_containers", exc)
            return None

    def _free_storage_gb(self) -> float:
        if not self.config.storage_path:
            return 0.0
        try:
            free_gb = shutil.disk_usage(self.config.storage_path).free / 1e9
        except OSError:
            return 0.0
        return min(free_gb, self.config.storage_limit_gb) if self.config.storage_limit_gb else free_gb

    # -- one tick ------------------------------------------------------------------------------
    def tick(self) -> Decision:
        """Step plan: 1. sample; 2. attribute; 3. decide; 4. act; 5. report when due; 6. metrics."""
        started = time.monotonic()
        view: NodeView | None = None
        sample: NodeSample | None = None
        try:
            sample = self.sampler.sample()
            self.metrics.inc("samples_total")
            view = attribute(sample, self._allocations(), container_cores=self.config.container_cores,
                             primary_cpu_noise_cores=self.config.primary_cpu_noise_cores)
        except Exception as exc:  # the loop must survive any sampling failure; harvest nothing
            self._error("sample", exc)
        now = self.clock()
        if view is not None:
            self._check_scheduler(view, now)
        growth = 0
        if view is not None and self.forecast is not None:
            used = self.forecast.use(self.config.capacity_cores, view.primary_cpu_cores, now)
            growth = used.growth_cores
            if used.error:
                self._error("forecast", RuntimeError(used.error))
        decision = decide(view, now, self.policy, self.state, self.executor.dying(), self.ignored, growth)
        self.state = decision.state
        decision = self.drainer.apply(decision, view, self.executor.dying())  # revoked: drain (drain.py)
        plan = None
        if self.executor.yarn is not None:
            plan = plan_reclaim(decision, view, self.config.reserve_cores, self.config.reserve_memory_mb,
                                self.executor.dying(), self.executor.yarn.path()[0])
        listed = None if view is None or self.executor.yarn is None else {
            c.container_id: (c.alloc_cores or 0.0, c.alloc_memory_mb or 0.0)
            for c in view.containers if c.alloc_memory_mb is not None}
        try:
            act = self.executor.apply(decision, plan, listed)
        except Exception as exc:
            self._error("act", exc)
            act = ActResult()
        reasons = {k.container_id: k.reason for k in decision.kills}
        for cid in act.signalled:
            logger.warning("killed container %s: %s", cid,
                           reasons.get(cid, "the ResourceManager did not preempt it in time"))
        for cid in act.remote:
            logger.warning("killed container %s through the ResourceManager (no local process): %s", cid,
                           reasons.get(cid, "the ResourceManager did not preempt it in time"))
        for cid in act.reclaimed:
            logger.warning("asked the ResourceManager to preempt container %s: %s", cid, reasons.get(cid, ""))
        if act.held:
            logger.info("holding the kill of %s until the node's shrink to %d MB / %d vcores is in force in "
                        "the ResourceManager", ", ".join(act.held), decision.advertise_memory_mb,
                        decision.advertise_cores)
        for cid in act.already_gone:
            logger.info("container %s exited by itself before the kill", cid)
        if view is not None and (now - self._last_report_s >= self.config.report_interval_s
                                 or (self.drainer.draining and not self.drainer.acknowledged
                                     and self.drainer.drained(view))):  # acknowledge a drain at once
            self._report(view, decision, now)
        with self._lock:
            self._last_view, self._last_decision, self._last_act = view, decision, act
        self._update_metrics(view, decision, sample, time.monotonic() - started)
        self._loop_beats["tick"] = time.monotonic()
        return decision

    def loop_ages(self) -> dict[str, float]:
        """Seconds since each loop last finished a round: the tick, the report sender, the reimage sender."""
        now = time.monotonic()
        beats = dict(self._loop_beats)
        sent_s = self.sender.last_round_s if self.sender is not None else None
        if sent_s is not None:
            beats["report"] = sent_s
        if self.reimage_sender is not None and self.reimage_sender.last_round_s is not None:
            beats["reimage"] = self.reimage_sender.last_round_s
        return {k: now - v for k, v in beats.items()}

    def _check_scheduler(self, view: NodeView, now: float) -> None:
        """Does the scheduler keep to the advertised size? Alarm (metric, log, /explain) when not."""
        listed = {c.container_id for c in view.containers}
        self._first_seen_s = {cid: self._first_seen_s.get(cid, now) for cid in listed}
        yarn = self.executor.yarn
        if yarn is None:
            return
        applied, applied_at = yarn.applied(), yarn.applied_at_s()
        if applied is not None and applied_at is not None and (not self._sizes or self._sizes[-1][0] != applied_at):
            self._sizes.append((applied_at, applied))
            horizon = now - self.config.scheduler_check_grace_s - 3600.0
            while len(self._sizes) > 2 and self._sizes[1][0] < horizon:
                self._sizes.pop(0)
            del self._sizes[:-1000]
        ignored = ignored_resources(view, self._sizes, self._first_seen_s, self.config.scheduler_check_grace_s,
                                    self.ignored)
        for resource in ("cores", "memory"):
            if resource in ignored and resource not in self.ignored:
                logger.error("the scheduler ignores the advertised %s: containers hold more than the node size "
                             "%s set in the RM; not killing for %s without primary load (set "
                             "yarn.scheduler.capacity.resource-calculator to DominantResourceCalculator)",
                             resource, yarn.applied(), resource)
            elif resource in self.ignored and resource not in ignored:
                logger.warning("the scheduler keeps to the advertised %s again", resource)
            self.metrics.set("scheduler_ignores_advertised", 1.0 if resource in ignored else 0.0, resource=resource)
        self.ignored = ignored

    def _report(self, view: NodeView, decision: Decision, now: float) -> None:
        self._last_report_s = now
        try:
            report = Report(node=self.config.node, tenant=self.config.tenant, timestamp=now,
                            primary_cpu_cores=float(view.primary_cpu_cores),
                            primary_memory_mb=float(view.primary_memory_mb),
                            capacity_cores=float(self.config.capacity_cores),
                            capacity_memory_mb=float(self.config.capacity_memory_mb),
                            busy=decision.busy, free_storage_gb=self._free_storage_gb(), seq=self.seq.next(),
                            drained_revocations=self.drainer.drained(view))
            self.buffer.append(report)
            self.metrics.inc("reports_total")
        except OSError as exc:
            self._error("report_buffer", exc)
            return
        if self.sender is not None:
            self.sender.wake()

    def _update_metrics(self, view: NodeView | None, decision: Decision, sample: NodeSample | None,
                        tick_s: float) -> None:
        m = self.metrics
        m.set("stale", 1.0 if decision.stale else 0.0)
        if decision.stale:
            m.inc("stale_samples_total")
        m.set("harvestable_cores", decision.advertise_cores)
        m.set("harvestable_memory_mb", decision.advertise_memory_mb)
        m.set("busy", 1.0 if decision.busy else 0.0)
        m.set("reserve_deficit_cores", max(decision.deficit_cores, 0.0))
        m.set("reserve_deficit_memory_mb", max(decision.deficit_memory_mb, 0.0))
        m.set("secondary_cores", decision.secondary_cores)
        m.set("secondary_memory_mb", decision.secondary_memory_mb)
        m.set("tick_seconds", tick_s)
        if view is not None:
            m.set("primary_cores", view.primary_cpu_cores)
            m.set("primary_memory_mb", view.primary_memory_mb)
            m.set("containers", len(view.containers))
        if sample is not None:
            m.set("agent_cpu_cores", sample.agent_cpu_cores)
            m.set("agent_memory_mb", sample.agent_memory_mb)
        for loop, age_s in self.loop_ages().items():
            m.set("loop_heartbeat_age_seconds", age_s, loop=loop)
        m.set("reimages_pending", float(len(self.reimages.pending())))

    # -- explain -------------------------------------------------------------------------------
    def explain(self) -> dict[str, Any]:
        """The numbers behind the last decision, for ``/explain`` and ``harvest agent explain``."""
        with self._lock:
            view, decision = self._last_view, self._last_decision
        cfg = self.config
        out: dict[str, Any] = {
            "node": cfg.node, "mode": cfg.mode.value,
            "formula": "harvestable = capacity - primary - reserve; kill youngest while "
                       "primary + secondary > capacity - reserve",
            "capacity": {"cores": cfg.capacity_cores, "memory_mb": cfg.capacity_memory_mb},
            "reserve": {"cores": cfg.reserve_cores, "memory_mb": cfg.reserve_memory_mb},
            "label": self.executor.label,
            "report_buffer_depth": self.buffer.depth(),
            "loops_heartbeat_age_s": self.loop_ages(),
            "reimages": {"pending": [e.as_dict() for e in self.reimages.pending()],
                         "reported": self.reimage_sender.sent if self.reimage_sender else 0,
                         "last_error": self.reimage_sender.last_error if self.reimage_sender
                         else ("" if not self.reimages.pending() else
                               "service_http is not set: reimages wait in the state dir")},
            "service": None if self.sender is None else {
                "address": cfg.service, "connected": self.sender.connected, "last_error": self.sender.last_error},
            "recent_kills": list(self.executor.kill_log),
            "dying": sorted(self.executor.dying()),
            "drain": self.drainer.state(),
            "forecast": None if self.forecast is None else {
                **self.forecast.explain(),
                "fetch": None if self.forecast_fetcher is None else {
                    "url": self.forecast_fetcher.url, "fetched": self.forecast_fetcher.fetched,
                    "last_error": self.forecast_fetcher.last_error}},
        }
        if self.executor.yarn is not None:
            yarn = self.executor.yarn
            applied = yarn.applied()
            path, why = yarn.path()
            out["yarn"] = {"applied": None if applied is None else {"memory_mb": applied[0], "vcores": applied[1]},
                           "last_error": yarn.last_error,
                           "resource_rest": self.yarn_client.resource_rest if self.yarn_client else None,
                           "hadoop_version": yarn.hadoop_version}
            out["reclaim"] = {"path": path.value, "why": why, "setting": cfg.reclaim,
                              "overcommit_timeout_ms": yarn.timeout_ms(),
                              "rm_reclaim_wait_s": cfg.rm_reclaim_wait_s,
                              "pending_rm": self.executor.reclaiming(),
                              "held_for_shrink": list(self._last_act.held) if self._last_act is not None else [],
                              "fallbacks": self.metrics.get("reclaim_fallbacks_total", why="rm_slow")
                              + self.metrics.get("reclaim_fallbacks_total", why="rm_error")}
            out["scheduler"] = {
                "ignores_advertised": sorted(self.ignored),
                "explanation": ("containers were granted beyond the node size the agent set in the RM, with "
                                "no primary load: the scheduler does not count "
                                + " and ".join(sorted(self.ignored))
                                + "; the agent does not kill for it without primary load (a kill would only "
                                  "make room for the next over-allocation). Fix: "
                                  "yarn.scheduler.capacity.resource-calculator = "
                                  "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator")
                if self.ignored else "allocations keep within the advertised size"}
        if view is not None:
            out["sample"] = {"timestamp": view.timestamp, "window_s": round(view.window_s, 3),
                             "node_cpu_cores": round(view.node_cpu_cores, 3),
                             "node_memory_mb": round(view.node_memory_mb, 1)}
            out["primary"] = {"cores": view.primary_cpu_cores, "cores_measured": round(view.primary_cpu_raw, 3),
                              "memory_mb": view.primary_memory_mb}
            out["datanode"] = {"cores": round(view.datanode_cpu_cores, 3),
                               "memory_mb": round(view.datanode_memory_mb, 1)}
            out["hadoop_daemons"] = {"cores": round(view.daemon_cpu_cores, 3),
                                     "note": "NodeManager CPU (hadoop_daemon_patterns), not primary load; its memory stays primary"}
            out["containers"] = [
                {"id": c.container_id, "cores": round(c.cpu_cores, 3), "memory_mb": round(c.memory_mb, 1),
                 "alloc_cores": c.alloc_cores, "alloc_memory_mb": c.alloc_memory_mb,
                 "footprint_cores": round(c.footprint_cores, 3),
                 "footprint_memory_mb": round(c.footprint_memory_mb, 1),
                 "start_time": c.start_time, "pids": [p for p, _ in c.processes]}
                for c in sorted(view.containers, key=lambda c: c.age_key(), reverse=True)]
        if decision is not None:
            out["decision"] = {
                "timestamp": decision.timestamp, "stale": decision.stale,
                "secondary": {"cores": round(decision.secondary_cores, 3),
                              "memory_mb": round(decision.secondary_memory_mb, 1)},
                "deficit": {"cores": round(decision.deficit_cores, 3),
                            "memory_mb": round(decision.deficit_memory_mb, 1)},
                "harvestable_target": {"cores": decision.target_cores, "memory_mb": decision.target_memory_mb},
                "advertised": {"cores": decision.advertise_cores, "memory_mb": decision.advertise_memory_mb},
                "busy": decision.busy,
                "kills": [{"container": k.container_id, "reason": k.reason} for k in decision.kills],
                "reasons": list(decision.reasons),
            }
        out["settings"] = as_dict(cfg)
        return out

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> Agent:
        try:
            if self.reimages.check_at_start(psutil.boot_time()) is not None:
                self.metrics.inc("reimages_detected_total")
        except OSError as exc:  # no boot id (not Linux) or an unwritable dir: say so, keep running
            self._error("reimage-check", exc)
        if self.reimage_sender is not None:
            self.reimage_sender.start()
        if self.forecast_fetcher is not None:
            self.forecast_fetcher.start()
        if self.config.metrics_port is not None:
            self.server = MetricsServer(self.config.metrics_host, self.config.metrics_port, self.metrics,
                                        self.explain).start()
            logger.info("metrics on http://%s:%d/metrics", self.config.metrics_host, self.server.port)
        if self.sender is not None:
            self.sender.start()
        return self

    def run(self, stop: threading.Event) -> None:
        """Tick every ``interval_s`` (on a fixed schedule) until ``stop`` is set."""
        next_s = time.monotonic()
        while not stop.is_set():
            self.tick()
            next_s += self.config.interval_s
            delay = next_s - time.monotonic()
            if delay < 0:
                next_s = time.monotonic()
                delay = 0.0
            stop.wait(delay)

    def close(self) -> None:
        if self.sender is not None:
            self.sender.stop()
        if self.reimage_sender is not None:
            self.reimage_sender.stop()
        if self.forecast_fetcher is not None:
            self.forecast_fetcher.stop()
        self.executor.stop()
        if self.server is not None:
            self.server.stop()

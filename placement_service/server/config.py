"""The service's one frozen configuration: defaults, then a JSON file, then ``HARVEST_*`` environment
variables, then command-line flags (each later source wins).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placement_service import HarvestError, validate
from placement_service.core import service_defaults
from placement_service.core.placement import (
    COBUSY_NEW_MAX_TURNOVER,
    COBUSY_NEW_TARGET,
    COBUSY_RISK_TARGET,
    COBUSY_SPREAD,
    REIMAGE_CHOICES,
    REPAIR_CHOICES,
)
from placement_service.validate import InputError

RECLUSTER_PRIORITIES = ("idle", "low", "normal")


class ConfigError(HarvestError):
    """The service configuration is invalid."""


@dataclass(frozen=True)
class ServiceConfig:
    data_dir: Path = Path("harvest-data")
    host: str = "127.0.0.1"
    http_port: int = 8470
    grpc_port: int = 8471
    token_file: Path | None = None
    tls_cert_file: Path | None = None
    tls_key_file: Path | None = None
    # Ingest and validation.
    slot_s: int = 300  # history slot length (s)
    max_future_s: float = 300.0  # reports stamped further in the future are rejected
    max_report_age_s: float = 30 * 86400.0  # reports older than this are rejected (one day folder per day)
    max_body_bytes: int = 8 * 1024 * 1024
    max_reports_per_request: int = 20000
    # Items of any other list in a request body (excluded / chosen nodes of a placement, revocation
    # ids, reimage events): a token-less caller cannot make the service hold more than this per call.
    max_list_items: int = 10_000
    # Background work.
    compact_interval_s: float = 10.0  # close a log segment and store it as Parquet this often
    # After each compaction tick, move what survived out of the garbage collector's walks (a full
    # collection then walks only what was allocated since); every gc_full_collect_interval_s
    # the frozen objects are walked once, so cyclic garbage is never kept. 0: no freezing.
    gc_full_collect_interval_s: float = 3600.0
    recluster_interval_s: float = 86400.0  # 0 disables scheduled re-clustering
    history_days: float = 14.0  # history used by re-clustering
    # CPU priority of the re-clustering child: "idle" (SCHED_IDLE: only on otherwise idle CPU; never
    # delays a request, but waits as long as the machine stays saturated), "low" (nice 19: always
    # progresses, slowly) or "normal".
    recluster_priority: str = "idle"
    current_window_s: float = 900.0  # window for each class's current CPU (class selection)
    # Policy inputs.
    inventory_file: Path | None = None  # optional inventory (racks, storage) for replica placement
    reimages_file: Path | None = None  # optional reimage events for the 3x3 grid rows
    classes_file: Path | None = None  # optional initial classes.json (used when none is stored)
    capacity_scheduler_file: Path | None = None  # where to write the generated queue config
    # Run after capacity_scheduler_file changed, e.g. "yarn rmadmin -refreshQueues" (empty: do not).
    refresh_queues_command: str = ""
    refresh_queues_timeout_s: float = 60.0
    # A failed refresh is retried, and dropped classes' drained queues removed, this often.
    queue_check_interval_s: float = 30.0
    seed: int = 0
    # YARN ResourceManager (label push); empty = do not push.
    rm_url: str = ""
    rm_timeout_s: float = 5.0
    rm_exclusive: bool = False  # exclusivity of the labels the service creates
    rm_centralized: bool = False  # also map nodes to labels centrally (off: NM label script does it)
    rm_admin_user: str = "yarn"  # user.name on RM label calls (must be in yarn.admin.acl; else 401)
    multi_class_queue: str = "default"  # queue for a job spread over several classes (no label OR)
    # gRPC
    grpc_max_workers: int = 16
    # Class selection (server/insight.py): job-type thresholds from the job lengths seen ("history",
    # once selection_min_jobs were seen) or the configured ones ("fixed"); reserve and container size.
    selection_thresholds: str = "history"
    selection_short_max_s: float = 300.0
    selection_long_min_s: float = 3600.0
    selection_min_jobs: int = 30
    selection_reserve_frac: float = 0.0
    selection_container_cores: float = 1.0
    # Placement quality: shares over the last placement_quality_window blocks; strict mode (refuse
    # rather than place without diversity) below placement_strict_enter_below, off again above
    # placement_strict_leave_above, judged over at least placement_strict_min_blocks blocks.
    placement_quality_window: int = 10000
    placement_strict_auto: bool = True
    # Replicas of a block on tenants not busy at the same hours of day (HDFS-H-hours in the
    # simulator): re-clustering stores each tenant's busy-hour profile (CPU above
    # busy_profile_cpu, default 1 - the agent's default reserve) and placement prefers tenants whose
    # busy hours do not overlap those of the block's other replicas. Off: the paper's HDFS-H.
    placement_busy_hours: bool = service_defaults.PLACEMENT_BUSY_HOURS
    busy_profile_cpu: float = 2.0 / 3.0
    # Replicas of a block on the tenants least likely to be busy together (HDFS-H-cobusy in the
    # simulator, docs/bench/cobusy.md): re-clustering also fits each tenant's busy rate and each
    # pair's rate of being busy in the same slot (``core.cobusy``, CPU above busy_profile_cpu) and
    # stores them with the class table; each further replica goes to the allowed tenant least likely
    # busy with the block's tenants so far, every grid rule kept. Takes precedence over
    # placement_busy_hours, which stays the fallback while no usable estimates are stored (before
    # the first re-clustering with this on, or when they are damaged). On by default: the simulator's
    # figures (core/service_defaults.py, docs/policy.md "The service's default placement").
    placement_cobusy: bool = service_defaults.PLACEMENT_COBUSY
    # HDFS-H-cobusy's risk target for re-replications (ChooseTargets with chosen nodes): any allowed
    # tenant that keeps the block's estimated probability of all replicas busy at once under it is
    # good enough, so repairs spread instead of converging onto the quietest tenants (the default is
    # core.placement.COBUSY_RISK_TARGET, 1e-6; 0: the lowest estimate, the first version, which lost
    # blocks in the simulated year).
    placement_cobusy_risk_target: float = COBUSY_RISK_TARGET
    # HDFS-H-cobusy's risk target for new blocks (core.placement.COBUSY_NEW_TARGET): the same for a
    # block's first replicas, so new blocks spread too; applied only while the stored estimates'
    # history predicted itself (quiet_turnover at most placement_cobusy_new_max_turnover), otherwise
    # (and for estimates stored before the measure existed) new blocks take the lowest estimate.
    placement_cobusy_new_target: float = COBUSY_NEW_TARGET
    placement_cobusy_new_max_turnover: float = COBUSY_NEW_MAX_TURNOVER
    # HDFS-H-cobusy's spread bound (core.placement.COBUSY_SPREAD; 0: off, the default): a tenant that
    # took more than this many times its servers' share of its grid cell's co-busy choices is passed
    # over while a tenant under the bound keeps the block under the risk target. It spreads the quiet
    # tenants' replicas at some cost in availability (docs/policy.md). Choices are counted per placer,
    # i.e. since the policy view was last rebuilt.
    placement_cobusy_spread: float = COBUSY_SPREAD
    # HDFS-H-cobusy's node within the chosen tenant (core.placement.REIMAGE_CHOICES): the one with
    # the fewest reimages seen (reimages_file and the reimages reported to the service) of this
    # many random usable nodes of the tenant; 1 (the default): uniform. The tenant is chosen as before.
    placement_reimage_choices: int = REIMAGE_CHOICES
    # HDFS-H-cobusy's re-replications (core.placement.REPAIR_CHOICES): of this many random tenants
    # under the risk target, the one reimaged least often per node; 1 (the default): uniform.
    placement_repair_choices: int = REPAIR_CHOICES
    placement_strict_enter_below: float = 0.95
    placement_strict_leave_above: float = 0.99
    placement_strict_min_blocks: int = 200
    decision_log_size: int = 10000  # placements kept for /v1/explain/place (at most)
    # ... and at most this many bytes of them (each entry counted as its compact JSON encoding,
    # which is how it is held); the oldest go first. Default 16 MiB.
    decision_log_bytes: int = 16 * 1024 * 1024
    decision_log_sample: float = 1.0  # share of placements kept
    silent_after_s: float = 60.0  # a node without a report for this long is listed as silent
    reimage_window_days: float = 90.0  # live reimages (POST /v1/reimages) counted for the grid rows
    # HTTP server (cheroot, see server/wsgi.py): worker threads, socket timeout within a request and
    # for a connection that has not sent one yet, idle keep-alive timeout, connection cap (also
    # bounded by the file-handle limit), largest request head.
    http_threads: int = 16
    http_timeout_s: float = 10.0
    http_idle_timeout_s: float = 60.0
    http_max_connections: int = 1024
    http_max_header_bytes: int = 64 * 1024
    decision_log_per_s: float = 10.0  # INFO lines per second for placement decisions (0: none)
    # Busy DataNodes as HDFS maintenance (server/maintenance.py); off unless dfs_hosts_file is set.
    dfs_hosts_file: Path | None = None  # the NameNode's dfs.hosts (JSON, CombinedHostFileManager)
    dfs_hosts_base_file: Path | None = None  # entries to keep (e.g. `harvest hosts-file` output)
    refresh_nodes_command: str = ""  # e.g. "hdfs dfsadmin -refreshNodes"
    maintenance_enter_after_s: float = 60.0
    maintenance_leave_after_s: float = 300.0
    maintenance_max_enter_per_min: int = 2
    maintenance_max_fraction: float = 0.1
    maintenance_expiry_s: float = 3600.0
    maintenance_stale_after_s: float = 60.0
    maintenance_tick_s: float = 5.0
    # The mover (server/mover.py): off, dry-run or on; the NameNode's WebHDFS address when not off.
    mover: str = "off"
    mover_namenode_url: str = ""  # e.g. http://namenode:9870
    mover_hdfs_user: str = "hdfs"  # WebHDFS user.name (must be allowed to set replication)
    mover_paths: str = "/"  # comma-separated HDFS directories whose blocks the mover watches
    mover_watch_every_s: float = 3600.0  # core.mover.WATCH_EVERY_HOURS
    mover_max_moves_per_hour: int = 600
    mover_mb_per_server_hour: float = 512.0  # server/mover.py MOVE_MB_PER_SERVER_HOUR
    mover_move_timeout_s: float = 300.0
    # Capacity service (harvest ras serve): elastic servers and revocations (empty url: not linked).
    capacity_url: str = ""
    cluster: str = ""  # this cluster's name in the capacity service's inventory
    capacity_silent_after_s: float = 0.0  # signal a node as failed after this long without a report (0: off)
    capacity_link_interval_s: float = 1.0

    def data_path(self, *parts: str) -> Path:
        return self.data_dir.joinpath(*parts)

    def read_token(self) -> str | None:
        """The bearer token of ``token_file`` (checked as every service checks it: ``serving.py``)."""
        from placement_service.server.serving import read_token_file

        return read_token_file(self.token_file)

    def http_limits(self) -> Any:
        """The serving layer's limits (``serving.HttpLimits``) from these settings."""
        from placement_service.server.serving import HttpLimits

        return HttpLimits(threads=self.http_threads, timeout_s=self.http_timeout_s,
                          idle_timeout_s=self.http_idle_timeout_s, max_connections=self.http_max_connections,
                          max_header_bytes=self.http_max_header_bytes, max_body_bytes=self.max_body_bytes,
                          max_list_items=self.max_list_items)


_FIELDS = {f.name: f for f in dataclasses.fields(ServiceConfig)}
_PATHS = {"data_dir", "token_file", "tls_cert_file", "tls_key_file", "inventory_file", "reimages_file",
          "classes_file", "capacity_scheduler_file", "dfs_hosts_file", "dfs_hosts_base_file"}


# Allowed range of each numeric setting: (minimum, maximum, strictly positive for floats). Every float must be
# finite: NaN compares false with every bound, so an unchecked NaN interval would make a loop spin.
_DAY_S = 86400.0
_BOUNDS: dict[str, tuple[float, float, bool]] = {
    "http_port": (0, 65535, False),
    "grpc_port": (0, 65535, False),
    "slot_s": (1, _DAY_S, False),
    "max_future_s": (0.0, _DAY_S, False),
    "max_report_age_s": (0.0, 3650 * _DAY_S, True),
    "max_body_bytes": (1024, 2**31, False),
    "max_reports_per_request": (1, 1_000_000, False),
    "max_list_items": (1, 10_000_000, False),
    "decision_log_bytes": (4096, 2**40, False),
    "compact_interval_s": (0.0, _DAY_S, True),
    "gc_full_collect_interval_s": (0.0, 7 * _DAY_S, False),
    "recluster_interval_s": (0.0, 365 * _DAY_S, False),
    "history_days": (0.0, 3650.0, True),
    "current_window_s": (0.0, 30 * _DAY_S, True),
    "refresh_queues_timeout_s": (0.0, _DAY_S, True),
    "queue_check_interval_s": (0.0, _DAY_S, True),
    "seed": (0, 2**63 - 1, False),
    "rm_timeout_s": (0.0, 3600.0, True),
    "grpc_max_workers": (1, 1024, False),
    "http_threads": (1, 1024, False),
    "http_timeout_s": (0.0, 3600.0, True),
    "http_idle_timeout_s": (0.0, _DAY_S, True),
    "http_max_connections": (1, 1_000_000, False),
    "http_max_header_bytes": (1024, 2**24, False),
    "decision_log_per_s": (0.0, 1e6, False),
    "maintenance_enter_after_s": (0.0, _DAY_S, False),
    "maintenance_leave_after_s": (0.0, _DAY_S, False),
    "maintenance_max_enter_per_min": (0, 1_000_000, False),
    "maintenance_max_fraction": (0.0, 1.0, False),
    "busy_profile_cpu": (0.0, 1.0, True),
    "maintenance_expiry_s": (0.0, 30 * _DAY_S, True),
    "maintenance_stale_after_s": (0.0, _DAY_S, True),
    "maintenance_tick_s": (0.0, 3600.0, True),
    "mover_watch_every_s": (0.0, 7 * _DAY_S, True),
    "mover_max_moves_per_hour": (0, 10_000_000, False),
    "mover_mb_per_server_hour": (0.0, 1e9, False),
    "mover_move_timeout_s": (0.0, _DAY_S, True),
}


def _coerce(name: str, value: Any, source: str) -> Any:
    """``value`` (JSON value or text) as the type of setting ``name``, within its bounds."""
    default = _FIELDS[name].default
    try:
        if value is None or value == "":
            return None if name in _PATHS and name != "data_dir" else default
        if name in _PATHS:
            if not isinstance(value, str | os.PathLike):
                raise InputError(f"{name}: must be a path (a string), got {type(value).__name__}", name)
            return Path(value)
        if isinstance(default, bool):
            return validate.parse_bool(value, name)
        lo, hi, positive = _BOUNDS.get(name, (None, None, False))
        if isinstance(default, int):
            return validate.parse_int(value, name, minimum=None if lo is None else int(lo),
                                      maximum=None if hi is None else int(hi))
        if isinstance(default, float):
            return validate.parse_float(value, name, minimum=lo, maximum=hi, positive=positive)
        if not isinstance(value, str):
            raise InputError(f"{name}: must be a string, got {type(value).__name__}", name)
        return value
    except InputError as exc:
        raise ConfigError(f"{source}: {exc}") from None


def build_config(
    file: Path | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
) -> ServiceConfig:
    """Defaults <- JSON file <- ``HARVEST_<FIELD>`` environment <- flags (``None`` flags are unset)."""
    values: dict[str, Any] = {}
    if file is not None:
        try:
            doc = validate.load_json_file(file, "service configuration")
        except InputError as exc:
            raise ConfigError(f"config file {exc}") from None
        if not isinstance(doc, dict):
            raise ConfigError(f"config file {file}: must be a JSON object")
        for key, value in doc.items():
            if key not in _FIELDS:
                raise ConfigError(f"config file {file}: unknown setting {key!r}")
            values[key] = _coerce(key, value, str(file))
    env = os.environ if env is None else env
    for name in _FIELDS:
        key = f"HARVEST_{name.upper()}"
        if key in env:
            values[name] = _coerce(name, env[key], key)
    for name, value in (flags or {}).items():
        if value is not None and name in _FIELDS:
            values[name] = _coerce(name, value, f"--{name.replace('_', '-')}")
    cfg = ServiceConfig(**values)
    if (cfg.tls_cert_file is None) != (cfg.tls_key_file is None):
        raise ConfigError("TLS needs both tls_cert_file and tls_key_file")
    _check_insight_settings(cfg)
    if cfg.recluster_priority not in RECLUSTER_PRIORITIES:
        raise ConfigError(
            f"recluster_priority: expected one of {', '.join(RECLUSTER_PRIORITIES)}, got {cfg.recluster_priority!r}"
        )
    from placement_service.server.mover import MOVER_MODES

    if cfg.mover not in MOVER_MODES:
        raise ConfigError(f"mover: expected one of {', '.join(MOVER_MODES)}, got {cfg.mover!r}")
    if cfg.mover != "off" and not cfg.mover_namenode_url:
        raise ConfigError(f"mover {cfg.mover} needs mover_namenode_url (the NameNode's WebHDFS address, "
                          "e.g. http://namenode:9870)")
    if cfg.capacity_url and not cfg.cluster:
        raise ConfigError("capacity_url needs cluster (this cluster's name in the capacity service's inventory)")
    return cfg


def _check_insight_settings(cfg: ServiceConfig) -> None:
    """Class-selection, placement-quality and watchdog settings (one clear line each)."""
    import math

    if cfg.selection_thresholds not in ("history", "fixed"):
        raise ConfigError(f"selection_thresholds: expected 'history' or 'fixed', got {cfg.selection_thresholds!r}")
    checks = [
        ("selection_short_max_s", 0.0 <= cfg.selection_short_max_s <= cfg.selection_long_min_s, "0 <= it <= selection_long_min_s"),
        ("selection_long_min_s", math.isfinite(cfg.selection_long_min_s), "finite"),
        ("selection_min_jobs", cfg.selection_min_jobs >= 1, ">= 1"),
        ("selection_reserve_frac", 0.0 <= cfg.selection_reserve_frac < 1.0, "in [0, 1)"),
        ("selection_container_cores", 0.0 < cfg.selection_container_cores < math.inf, "> 0 and finite"),
        ("placement_quality_window", cfg.placement_quality_window >= 1, ">= 1"),
        ("placement_strict_enter_below", 0.0 <= cfg.placement_strict_enter_below <= 1.0, "in [0, 1]"),
        ("placement_strict_leave_above",
         cfg.placement_strict_enter_below <= cfg.placement_strict_leave_above <= 1.0,
         "in [placement_strict_enter_below, 1]"),
        ("placement_strict_min_blocks", cfg.placement_strict_min_blocks >= 1, ">= 1"),
        ("placement_cobusy_risk_target", 0.0 <= cfg.placement_cobusy_risk_target < 1.0, "in [0, 1)"),
        ("placement_cobusy_new_target", 0.0 <= cfg.placement_cobusy_new_target < 1.0, "in [0, 1)"),
        ("placement_cobusy_new_max_turnover", 0.0 <= cfg.placement_cobusy_new_max_turnover <= 1.0, "in [0, 1]"),
        ("placement_cobusy_spread",
         cfg.placement_cobusy_spread == 0.0 or 1.0 <= cfg.placement_cobusy_spread < math.inf,
         "0 (no bound) or >= 1 and finite"),
        ("placement_reimage_choices", cfg.placement_reimage_choices >= 1, ">= 1"),
        ("placement_repair_choices", cfg.placement_repair_choices >= 1, ">= 1"),
        ("decision_log_size", cfg.decision_log_size >= 1, ">= 1"),
        ("decision_log_sample", 0.0 <= cfg.decision_log_sample <= 1.0, "in [0, 1]"),
        ("silent_after_s", 0.0 < cfg.silent_after_s < math.inf, "> 0 and finite"),
        ("reimage_window_days", 0.0 < cfg.reimage_window_days < math.inf, "> 0 and finite"),
    ]
    for name, ok, what in checks:
        if not ok:  # NaN fails every comparison, so it lands here too
            raise ConfigError(f"{name}: must be {what}, got {getattr(cfg, name)!r}")

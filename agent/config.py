"""The agent's one frozen configuration, built once from file, then environment, then flags.

Every setting has one entry in ``SETTINGS``: its TOML key (top level of the file), its environment
variable (``HARVEST_AGENT_<KEY>``), its flag (``--key-with-dashes``), its type and default. Later
sources win: file < environment < flags. A malformed value raises ``ConfigError`` naming the key and
the source it came from.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import os
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent import ConfigError
from placement_service import validate
from placement_service.validate import InputError

ENV_PREFIX = "HARVEST_AGENT_"


class Mode(enum.Enum):
    LOCAL = "local"  # protect the primary by killing local processes; no ResourceManager needed
    YARN = "yarn"  # also shrink the node in the ResourceManager and read containers from the NM


@dataclass(frozen=True)
class Setting:
    key: str
    kind: type  # str, int, float, bool, list (of str), Mode
    default: Any
    help: str
    optional: bool = False  # None allowed (means "derive" or "off")


SETTINGS: tuple[Setting, ...] = (
    Setting("mode", Mode, Mode.LOCAL, "local | yarn"),
    Setting("interval_s", float, 1.0, "sampling period, seconds"),
    Setting("state_dir", str, None, "directory for node-label, datanode-busy, seq, report-buffer/", True),
    Setting("capacity_cores", float, None, "cores the node lends (default: all of the node's cores)", True),
    Setting("capacity_memory_mb", int, None, "MB the node lends (default: all of its memory)", True),
    Setting("reserve_cores", float, None, "cores kept free for the primary to spike into (default 1/3)", True),
    Setting("reserve_memory_mb", int, None, "MB kept free for the primary (default 1/3 of capacity)", True),
    Setting("service", str, None, "placement service gRPC address host:port (none: do not report)", True),
    Setting("token_file", str, None, "file holding the bearer token for the placement service", True),
    Setting("metrics_port", int, None, "port of /metrics and /explain (none: no endpoint; 0: any)", True),
    Setting("metrics_host", str, "127.0.0.1", "address the metrics endpoint binds to"),
    Setting("node", str, None, "node name in reports (default: host name)", True),
    Setting("tenant", str, "", "primary tenant that owns the node"),
    Setting("report_interval_s", float, 5.0, "seconds between reports to the placement service"),
    Setting("report_buffer_max", int, 10000, "reports kept on disk while the service is away"),
    Setting("stale_after_s", float, None, "a sample older than this is stale (default 3 intervals)", True),
    Setting("kill_grace_s", float, 2.0, "seconds between SIGTERM and SIGKILL of a container"),
    Setting("max_kills_per_round", int, 4, "at most this many containers killed per tick"),
    Setting("cooldown_s", float, 60.0, "after a kill the advertised amount does not grow for this long"),
    Setting("advertise_threshold_cores", float, 1.0, "advertised cores change at once past this delta"),
    Setting("advertise_threshold_memory_mb", int, 1024, "advertised MB change at once past this delta"),
    Setting("advertise_hold_s", float, 30.0, "smaller changes wait until the last one is this old"),
    Setting("primary_cpu_noise_cores", float, 0.1, "primary CPU within this of a whole core rounds down"),
    Setting("busy_cpu_cores", float, None, "primary cores above which the DataNode is busy "
            "(default capacity - reserve)", True),
    Setting("busy_clear_margin_cores", float, 0.5, "busy clears only this far below the threshold"),
    Setting("datanode_pattern", str, "org.apache.hadoop.hdfs.server.datanode.DataNode",
            "substring of the DataNode's command line"),
    Setting("hadoop_daemon_patterns", list, ["org.apache.hadoop.yarn.server.nodemanager.NodeManager"],
            "substrings of the command lines of Hadoop daemons other than the DataNode; their CPU is not "
            "primary load (the NodeManager's comes with container launches)"),
    Setting("secondary_cgroups", list, [], "cgroup path prefixes whose processes are secondary"),
    Setting("container_cores", float, 0.0, "local mode: cores allocated per container (0: use usage)"),
    Setting("scope_root_pid", int, None, "measure only this process tree as the node (tests, slices)", True),
    Setting("storage_path", str, None, "DataNode data directory, for free harvestable storage", True),
    Setting("service_http", str, None, "placement service HTTP address, e.g. http://placement:8470, for "
            "reimage reports (none: reimages wait in the state dir)", True),
    Setting("datanode_dirs", list, [], "DataNode data directories watched for a reimage (default: storage_path)"),
    Setting("storage_limit_gb", float, 0.0, "storage the primary lets HDFS use on this node, GB"),
    Setting("rm_url", str, "http://127.0.0.1:8088", "ResourceManager web address"),
    Setting("nm_url", str, "http://127.0.0.1:8042", "NodeManager web address"),
    Setting("yarn_node_id", str, None, "node id host:port in YARN (default: from the NM)", True),
    Setting("yarn_bin", str, "yarn", "yarn command for the CLI fallback"),
    Setting("overcommit_timeout_ms", int, -1, "overCommitTimeout sent with node resource updates"),
    Setting("dynamic_resources_xml", str, None, "dynamic-resources.xml kept in step (none: off)", True),
    Setting("http_timeout_s", float, 2.0, "timeout of one ResourceManager / NodeManager call"),
    Setting("rm_retries", int, 3, "attempts per ResourceManager write"),
    Setting("rm_backoff_s", float, 0.2, "first retry delay, doubled per attempt"),
    Setting("error_log_interval_s", float, 60.0, "a repeated error is logged at most once per this"),
    Setting("heartbeat_s", float, 30.0, "state files are touched at least this often while healthy"),
    Setting("reclaim", str, "auto", "how a yarn-mode agent takes resources back: auto (RM over-commit "
            "preemption on Hadoop 3.3+, else local kill) | rm | local"),
    Setting("rm_reclaim_timeout_ms", int, 0, "overCommitTimeout of every node-resource write on the RM "
            "path (once set it sticks in the RM until the node re-registers)"),
    Setting("rm_check_interval_s", float, 30.0, "at most this often, the node size the RM holds is read "
            "and written again if the RM lost it (a NodeManager restart resets it)"),
    Setting("rm_reclaim_wait_s", float, 3.0, "RM path: kill locally when the RM has not killed by then"),
    Setting("shrink_wait_s", float, 3.0, "local-kill path in yarn mode: a kill waits until the node's "
            "shrink is in force in the RM (else the RM refills the freed room), at most this long; "
            "none when the memory reserve is used up"),
    Setting("scheduler_check_grace_s", float, 5.0, "a container first seen this long after the node size "
            "was set, that takes the allocation above it, means the scheduler ignores the size"),
    Setting("cgroup", str, None, "cgroup v2 directory that is the node (a container or a systemd slice): "
            "totals from cpu.max, cpu.stat, memory.max, memory.current; processes from cgroup.procs", True),
    Setting("forecast_file", str, None, "JSON of this node's primary tenant's hourly forecast peaks: advertise "
            "capacity - reserve - primary - the forecast growth, so YARN hands out the cores the primary is "
            "about to take back last (none: no forecast; with forecast_from_service: STATE_DIR/forecast.json)",
            True),
    Setting("forecast_from_service", bool, False, "fetch the tenant's forecast from service_http "
            "(GET /v1/tenants/<tenant>/forecast) into forecast_file every forecast_refresh_s"),
    Setting("forecast_refresh_s", float, 3600.0, "seconds between fetches of the forecast (a failed one is "
            "retried after a minute; the last file stays in use)"),
)
_BY_KEY = {s.key: s for s in SETTINGS}


@dataclass(frozen=True)
class AgentConfig:
    """Resolved settings (see ``SETTINGS`` for meanings); capacities and reserves are filled in."""

    mode: Mode
    interval_s: float
    state_dir: str
    capacity_cores: float
    capacity_memory_mb: int
    reserve_cores: float
    reserve_memory_mb: int
    service: str | None
    token_file: str | None
    metrics_port: int | None
    metrics_host: str
    node: str
    tenant: str
    report_interval_s: float
    report_buffer_max: int
    stale_after_s: float
    kill_grace_s: float
    max_kills_per_round: int
    cooldown_s: float
    advertise_threshold_cores: float
    advertise_threshold_memory_mb: int
    advertise_hold_s: float
    primary_cpu_noise_cores: float
    busy_cpu_cores: float
    busy_clear_margin_cores: float
    datanode_pattern: str
    secondary_cgroups: tuple[str, ...]
    container_cores: float
    scope_root_pid: int | None
    storage_path: str | None
    service_http: str | None
    datanode_dirs: tuple[str, ...]
    storage_limit_gb: float
    rm_url: str
    nm_url: str
    yarn_node_id: str | None
    yarn_bin: str
    overcommit_timeout_ms: int
    dynamic_resources_xml: str | None
    http_timeout_s: float
    rm_retries: int
    rm_backoff_s: float
    error_log_interval_s: float
    heartbeat_s: float
    reclaim: str = "auto"
    rm_reclaim_timeout_ms: int = 0
    rm_reclaim_wait_s: float = 3.0
    shrink_wait_s: float = 3.0
    scheduler_check_grace_s: float = 5.0
    cgroup: str | None = None
    forecast_file: str | None = None
    forecast_from_service: bool = False
    forecast_refresh_s: float = 3600.0
    hadoop_daemon_patterns: tuple[str, ...] = ("org.apache.hadoop.yarn.server.nodemanager.NodeManager",)
    rm_check_interval_s: float = 30.0


def _coerce(setting: Setting, value: Any, source: str) -> Any:
    """Convert ``value`` (TOML value or string) to the setting's type, or raise naming the key."""
    where = f"{setting.key!r} (from {source})"
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none") and setting.optional):
        if setting.optional:
            return None
        raise ConfigError(f"setting {where} is required")
    try:
        if setting.kind is Mode:
            return Mode(str(value).strip().lower())
        if setting.kind is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(value)
        if setting.kind is list:
            if isinstance(value, str):
                return tuple(part.strip() for part in value.split(",") if part.strip())
            if isinstance(value, list) and all(isinstance(v, str) for v in value):
                return tuple(value)
            raise ValueError(value)
        if setting.kind is int:
            return validate.parse_int(value, setting.key)
        if setting.kind is float:
            # Finite only: NaN compares false with every bound (``interval_s = nan`` would pass
            # "> 0" and make the loop spin), and an infinite capacity or reserve means nothing.
            return validate.parse_float(value, setting.key)
        if not isinstance(value, str):
            raise ValueError(value)
        return value
    except InputError as exc:
        raise ConfigError(f"setting {where}: {str(exc).removeprefix(setting.key + ': ')}") from None
    except ValueError:
        kind = "local|yarn" if setting.kind is Mode else setting.kind.__name__
        raise ConfigError(f"setting {where} must be {kind}, got {validate.short_repr(value)}") from None


def read_toml(path: str) -> dict[str, Any]:
    """Parse the TOML config file; unknown keys and syntax errors are ``ConfigError``s."""
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"config file {path} is not UTF-8 text (byte {exc.start})") from None
    # An optional [agent] table is accepted so the file can share a layout with other tools.
    if isinstance(data.get("agent"), dict) and len(data) == 1:
        data = data["agent"]
    for key in data:
        if key not in _BY_KEY:
            raise ConfigError(f"unknown setting {key!r} in config file {path}")
    return data


def _node_capacity() -> tuple[float, int]:
    import psutil

    return float(psutil.cpu_count() or 1), int(psutil.virtual_memory().total // (1024 * 1024))


def _cgroup_capacity(path: str) -> tuple[float, int]:
    from agent.cgroup import CgroupError, cgroup_capacity

    try:
        return cgroup_capacity(path)
    except CgroupError as exc:
        raise ConfigError(f"setting 'cgroup': {exc}") from None


def load_config(
    file_values: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    flags: Mapping[str, Any] | None = None,
    file_label: str = "config file",
) -> AgentConfig:
    """Merge file < environment < flags into one validated ``AgentConfig``.

    Step plan: 1. defaults; 2. overlay each source, coercing values by key; 3. derive capacity
    (node size), reserve (1/3 of capacity), stale age (3 intervals), busy threshold (capacity -
    reserve); 4. check ranges, naming the key.
    """
    raw: dict[str, Any] = {s.key: (tuple(s.default) if s.kind is list else s.default) for s in SETTINGS}
    for key, value in (file_values or {}).items():
        if key not in _BY_KEY:
            raise ConfigError(f"unknown setting {key!r} in {file_label}")
        raw[key] = _coerce(_BY_KEY[key], value, file_label)
    for key, value in (env if env is not None else os.environ).items():
        if key.startswith(ENV_PREFIX):
            name = key[len(ENV_PREFIX):].lower()
            if name not in _BY_KEY:
                raise ConfigError(f"unknown setting {name!r} (from environment variable {key})")
            raw[name] = _coerce(_BY_KEY[name], value, f"environment variable {key}")
    for key, value in (flags or {}).items():
        if value is not None:
            raw[key] = _coerce(_BY_KEY[key], value, f"flag --{key.replace('_', '-')}")

    if not raw["state_dir"]:
        raise ConfigError("setting 'state_dir' is required (flag --state-dir, or state_dir in the config file)")
    if os.path.exists(raw["state_dir"]) and not os.path.isdir(raw["state_dir"]):
        raise ConfigError(f"setting 'state_dir': {raw['state_dir']} exists and is not a directory")
    if raw["capacity_cores"] is None or raw["capacity_memory_mb"] is None:
        node_cores, node_memory_mb = _node_capacity() if not raw["cgroup"] else _cgroup_capacity(raw["cgroup"])
        raw["capacity_cores"] = node_cores if raw["capacity_cores"] is None else raw["capacity_cores"]
        if raw["capacity_memory_mb"] is None:
            raw["capacity_memory_mb"] = node_memory_mb
    if raw["reserve_cores"] is None:
        raw["reserve_cores"] = raw["capacity_cores"] / 3.0
    if raw["reserve_memory_mb"] is None:
        raw["reserve_memory_mb"] = raw["capacity_memory_mb"] // 3
    if raw["stale_after_s"] is None:
        raw["stale_after_s"] = 3.0 * raw["interval_s"]
    if raw["busy_cpu_cores"] is None:
        raw["busy_cpu_cores"] = raw["capacity_cores"] - raw["reserve_cores"]
    if raw["node"] is None:
        raw["node"] = socket.gethostname()

    positive = ("interval_s", "capacity_cores", "capacity_memory_mb", "report_interval_s", "stale_after_s",
                "http_timeout_s", "heartbeat_s", "report_buffer_max", "max_kills_per_round", "rm_retries")
    for key in positive:
        if raw[key] <= 0:
            raise ConfigError(f"setting {key!r} must be > 0, got {raw[key]!r}")
    non_negative = ("reserve_cores", "reserve_memory_mb", "kill_grace_s", "cooldown_s", "advertise_hold_s",
                    "advertise_threshold_cores", "advertise_threshold_memory_mb", "primary_cpu_noise_cores",
                    "busy_clear_margin_cores", "container_cores", "storage_limit_gb", "rm_backoff_s",
                    "error_log_interval_s")
    for key in non_negative:
        if raw[key] < 0:
            raise ConfigError(f"setting {key!r} must be >= 0, got {raw[key]!r}")
    if raw["reserve_cores"] > raw["capacity_cores"]:
        raise ConfigError(f"setting 'reserve_cores' ({raw['reserve_cores']}) exceeds capacity_cores "
                          f"({raw['capacity_cores']})")
    if raw["reserve_memory_mb"] > raw["capacity_memory_mb"]:
        raise ConfigError(f"setting 'reserve_memory_mb' ({raw['reserve_memory_mb']}) exceeds "
                          f"capacity_memory_mb ({raw['capacity_memory_mb']})")
    if raw["service"] and not raw["tenant"]:
        raise ConfigError("setting 'tenant' is required when 'service' is set (the service keys history by tenant)")
    if raw["forecast_from_service"]:
        if not raw["service_http"] or not raw["tenant"]:
            raise ConfigError("setting 'forecast_from_service' needs 'service_http' and 'tenant' (the forecast is "
                              "the tenant's, from the placement service)")
        raw["forecast_file"] = raw["forecast_file"] or os.path.join(raw["state_dir"], "forecast.json")
    if not raw["forecast_refresh_s"] > 0:
        raise ConfigError(f"setting 'forecast_refresh_s' must be > 0, got {raw['forecast_refresh_s']!r}")
    if raw["reclaim"] not in ("auto", "rm", "local"):
        raise ConfigError(f"setting 'reclaim' must be auto, rm or local, got {raw['reclaim']!r}")
    for key in ("rm_reclaim_wait_s", "shrink_wait_s", "scheduler_check_grace_s"):
        if raw[key] < 0:
            raise ConfigError(f"setting {key!r} must be >= 0, got {raw[key]!r}")
    for key in ("node", "tenant") if raw["service"] else ():
        try:  # the service refuses every report whose names break its rule; refuse them here, once
            validate.check_name(raw[key], key)
        except InputError as exc:
            raise ConfigError(f"setting '{key}': {str(exc).removeprefix(key + ': ')}") from None
    if raw["metrics_port"] is not None and not 0 <= raw["metrics_port"] <= 65535:
        raise ConfigError(f"setting 'metrics_port' must be 0..65535, got {raw['metrics_port']}")
    return AgentConfig(**raw)


def add_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per setting; values stay strings/None here and are coerced in ``load_config``."""
    for setting in SETTINGS:
        flag = "--" + setting.key.replace("_", "-")
        default = setting.default.value if isinstance(setting.default, Mode) else setting.default
        parser.add_argument(flag, dest=setting.key, default=None, metavar=setting.key.upper(),
                            help=f"{setting.help} [default: {default}]")


def flags_from_args(args: argparse.Namespace) -> dict[str, Any]:
    return {s.key: getattr(args, s.key, None) for s in SETTINGS}


def config_from_args(args: argparse.Namespace, env: Mapping[str, str] | None = None) -> AgentConfig:
    path = getattr(args, "config", None) or (env if env is not None else os.environ).get("HARVEST_AGENT_CONFIG")
    file_values = read_toml(path) if path else {}
    env_values = {k: v for k, v in (env if env is not None else os.environ).items() if k != "HARVEST_AGENT_CONFIG"}
    return load_config(file_values, env_values, flags_from_args(args), file_label=f"config file {path}")


def as_dict(config: AgentConfig) -> dict[str, Any]:
    out = dataclasses.asdict(config)
    out["mode"] = config.mode.value
    out["secondary_cgroups"] = list(config.secondary_cgroups)
    out["hadoop_daemon_patterns"] = list(config.hadoop_daemon_patterns)
    out["datanode_dirs"] = list(config.datanode_dirs)
    return out

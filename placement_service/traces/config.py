"""Settings of the synthetic datacenter generator: one frozen ``GeneratorConfig`` with every
distribution parameter (units in the names or the field docs), built from defaults and optionally a
JSON file (``harvest generate --config``). ``docs/generator.md`` explains each choice.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

from placement_service import HarvestError
from placement_service.traces.synth import DEFAULT_START_S


@dataclass(frozen=True)
class HardwareType:
    """One server model: ``cores``, ``memory_mb``, local ``disk_gb`` and its share of the tenants."""

    name: str
    cores: int
    memory_mb: int
    disk_gb: int
    share: float


DEFAULT_HARDWARE: tuple[HardwareType, ...] = (
    HardwareType("gen3-16c", 16, 64 * 1024, 4_000, 0.25),
    HardwareType("gen4-24c", 24, 128 * 1024, 8_000, 0.35),
    HardwareType("gen5-32c", 32, 192 * 1024, 12_000, 0.25),
    HardwareType("gen4-storage", 24, 128 * 1024, 36_000, 0.15),
)


@dataclass(frozen=True)
class GeneratorConfig:
    """Every knob of the generator, with units. ``docs/generator.md`` explains each choice."""

    # -- tenant sizes (servers per tenant): min_size * (1 + Lomax(alpha)), rounded up, capped
    tenant_size_min: int = 2
    tenant_size_alpha: float = 1.3
    """Pareto tail exponent of tenant sizes (smaller = heavier tail; mean ~ min * alpha / (alpha - 1))."""
    tenant_size_max_frac: float = 0.08
    """Largest tenant, as a fraction of all servers."""

    # -- patterns (shares of servers, not of tenants)
    periodic_server_share: float = 0.40
    unpredictable_server_share: float = 0.25
    periodic_size_exponent: float = 1.0
    """Periodic tenants are drawn with probability ~ size**exponent (big user-facing services)."""
    unpredictable_size_exponent: float = 0.8
    """Unpredictable tenants are then drawn with probability ~ size**exponent among the rest, so the
    many small tenants stay mostly constant (the paper: most tenants are roughly constant)."""
    weekly_frac: float = 0.3
    """Share of periodic tenants with a weekly (weekday / weekend) cycle on top of the daily one."""
    peak_hour_utc: float = 15.0
    """Periodic tenants serve one region: their daily peak is near this hour (UTC) ..."""
    peak_hour_std_h: float = 2.5
    """... with this normal spread in hours ..."""
    peak_hour_uniform_frac: float = 0.2
    """... except this share, whose peak hour is uniform over the day (global or other-region users)."""

    # -- utilization series
    series_noise: float = 0.005
    """Std of white noise on a tenant's average-server series (CPU fraction)."""
    server_noise: float = 0.02
    """Std of white noise added per sampled server and slot (CPU fraction)."""
    server_imbalance: float = 0.10
    """Std of a sampled server's load relative to its tenant's average (multiplicative, centred)."""
    sampled_servers_per_tenant: int = 3
    """Servers per tenant with samples in the utilization file (0 = all servers)."""
    missing_sample_frac: float = 0.002
    """Probability that one server's sample in one slot is missing (telemetry loss)."""
    reimage_downtime_s: float = 1800.0
    """A reimaged (sampled) server reports no samples for this long after its reimage."""
    memory_level: tuple[float, float] = (0.2, 0.7)
    """Uniform range of a tenant's memory fraction level; memory = level + 0.3 * (cpu - mean cpu)."""
    cpu_decimals: int = 4
    """Samples are rounded to this many decimals (telemetry resolution; keeps files small)."""

    # -- environments
    tenants_per_environment_mean: float = 3.0
    """Mean of the geometric number of tenants per environment."""
    environment_kind_probs: tuple[tuple[float, float, float], ...] = (
        (1.0, 0.0, 0.0),
        (0.7, 0.3, 0.0),
        (0.1, 0.4, 0.5),
    )
    """P(prod, dev, test) of a tenant's environment kind, for periodic, constant, unpredictable tenants."""

    # -- hardware, storage, topology
    hardware: tuple[HardwareType, ...] = DEFAULT_HARDWARE
    second_hardware_min_servers: int = 40
    """Tenants with at least this many servers put ``second_hardware_frac`` on a second type."""
    second_hardware_frac: float = 0.3
    free_storage_beta: tuple[float, float] = (2.0, 3.0)
    """Beta(a, b) of a tenant's fraction of disk it lets HDFS use (mean a / (a + b) = 0.4)."""
    free_storage_jitter: float = 0.1
    """Per-server uniform +-jitter of that fraction (relative)."""
    no_storage_tenant_frac: float = 0.02
    """Share of tenants that lend no disk at all (storage_gb = 0)."""
    rack_size: int = 40
    racks_per_msb: int = 20
    rack_chunk: int = 10
    """A tenant's servers are installed in chunks of at most this many servers per rack visit."""
    datacenter: str = "dc-1"

    # -- reimages (rates per server per 30-day month)
    reimage_tenant_median: float = 0.08
    reimage_tenant_sigma: float = 1.5
    """Per-tenant rate ~ LogNormal(log(median), sigma) x kind factor, capped at ``reimage_rate_max``."""
    reimage_kind_factor: tuple[float, float, float] = (0.6, 1.5, 3.0)
    """Multiplier of the tenant rate for prod, dev, test environments."""
    reimage_rate_max: float = 10.0
    reimage_month_sigma: float = 0.5
    """Each month a tenant's rate is multiplied by LogNormal(-s^2/2, s) (mean 1): rates drift month
    to month, ranks mostly hold (the paper: tenants rarely change reimage-frequency tercile)."""
    reimage_server_shape: float = 2.0
    """Per-server multiplier ~ Gamma(shape, 1 / shape) (mean 1): some servers are reimaged more."""
    correlated_events_per_month: tuple[float, float, float] = (0.1, 0.3, 0.6)
    """Poisson rate of environment-wide reimage events per environment and month, prod / dev / test."""
    correlated_whole_env_prob: float = 0.5
    """An event covers all tenants of the environment with this probability, else one tenant."""
    correlated_server_frac: tuple[float, float] = (0.3, 1.0)
    """Uniform range of the fraction of the covered servers that are reimaged."""
    correlated_window_s: float = 4 * 3600.0
    """The servers of one event are reimaged at uniform times within this window."""

    start_s: float = DEFAULT_START_S
    """Epoch seconds of the first slot (default 2016-03-01T00:00:00Z, a Tuesday midnight)."""

    @classmethod
    def from_mapping(cls, doc: Mapping[str, Any], source: str = "config") -> GeneratorConfig:
        """Defaults overridden by ``doc`` (e.g. a JSON file); unknown keys and bad types are errors.

        Lists become tuples; ``hardware`` is a list of ``{"name", "cores", "memory_mb", "disk_gb",
        "share"}`` objects.
        """
        known = {f.name: f for f in fields(cls)}
        kwargs: dict[str, Any] = {}
        for key, value in doc.items():
            if key not in known:
                raise ConfigError(f"{source}: unknown generator setting {key!r} (known: {', '.join(sorted(known))})")
            default = getattr(cls(), key)
            try:
                kwargs[key] = _convert_setting(key, value, default)
            except (TypeError, ValueError, KeyError) as exc:
                raise ConfigError(f"{source}: setting {key!r}: {exc}") from None
        return replace(cls(), **kwargs)


class ConfigError(HarvestError):
    """A generator setting is unknown or has the wrong type."""


def _convert_setting(key: str, value: Any, default: Any) -> Any:
    if key == "hardware":
        if not isinstance(value, list) or not value:
            raise ValueError("expected a non-empty list of hardware types")
        return tuple(
            HardwareType(str(h["name"]), int(h["cores"]), int(h["memory_mb"]), int(h["disk_gb"]), float(h["share"]))
            for h in value
        )
    if isinstance(default, tuple):
        if not isinstance(value, list) or len(value) != len(default):
            raise ValueError(f"expected a list of {len(default)} values, got {value!r}")
        return tuple(
            _convert_setting(key, v, d) if isinstance(d, tuple) else type(d)(v) for v, d in zip(value, default, strict=True)
        )
    if isinstance(default, bool) or not isinstance(default, int | float | str):
        raise ValueError(f"cannot set {key!r} from a file")
    if isinstance(default, int) and not isinstance(default, bool):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"expected an integer, got {value!r}")
        return value
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"expected a number, got {value!r}")
        return float(value)
    return str(value)

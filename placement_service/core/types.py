"""Plain data shared by the policy core, the service, the simulator and the tests.

Everything here is a frozen dataclass or an enum: numbers in, decisions out. Fractions of a server
are named ``*_frac`` or ``*_cpu`` (0..1 of the server's cores); times are epoch seconds (``*_s``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

from placement_service import HarvestError
from placement_service.core.busy_hours import ALL_HOURS
from placement_service.validate import InputError, check_class_id, check_finite, check_int, check_text


class PolicyError(HarvestError):
    """A policy input is inconsistent (unknown class, empty DAG, bad setting)."""


class PlacementError(PolicyError):
    """Replica placement could not meet its constraints and the strict setting refuses to relax them."""


class Pattern(StrEnum):
    """Utilization pattern of a primary tenant's average server, from its frequency profile."""

    PERIODIC = "periodic"
    CONSTANT = "constant"
    UNPREDICTABLE = "unpredictable"


class JobType(StrEnum):
    """Length class of a batch job, from its last run's duration (unknown = medium)."""

    SHORT = "short"
    MEDIUM = "medium"
    LONG = "long"


@dataclass(frozen=True)
class UtilizationClass:
    """A group of primary tenants with a similar utilization pattern (one YARN node label).

    ``id`` is ``"<pattern>-<k>"`` (for example ``constant-2``); it is also the YARN node label and the
    Capacity Scheduler queue name of the class, so it only uses ``[0-9a-z-]``.
    ``avg_cpu`` / ``peak_cpu`` / ``current_cpu`` are fractions of the servers' cores: the average, the
    peak (a high percentile) and the latest slot of the class's server-weighted average series.
    ``servers`` / ``cores`` are 0 when the class was built without an inventory.
    """

    id: str
    pattern: Pattern
    avg_cpu: float
    peak_cpu: float
    current_cpu: float
    tenants: tuple[str, ...]
    servers: int = 0
    cores: float = 0.0


@dataclass(frozen=True)
class GridCell:
    """Cell of the 3x3 replica-placement grid: reimage-frequency row x peak-CPU column (0..2 each)."""

    reimage_row: int
    peak_column: int


@dataclass(frozen=True)
class ClassTable:
    """Output of clustering: the classes, each tenant's class and pattern, and the optional grid."""

    classes: tuple[UtilizationClass, ...]
    tenant_class: Mapping[str, str]
    tenant_pattern: Mapping[str, Pattern]
    grid: Mapping[str, GridCell] | None = None
    # Each tenant's busy-hour profile (24-bit mask, ``core.busy_hours``); None: not computed.
    busy_hours: Mapping[str, int] | None = None

    def by_id(self) -> dict[str, UtilizationClass]:
        return {c.id: c for c in self.classes}

    def to_json(self) -> dict[str, object]:
        """The ``classes.json`` contract of ``harvest cluster`` (extra fields are additive)."""
        out: dict[str, object] = {
            "classes": [
                {
                    "id": c.id,
                    "pattern": c.pattern.value,
                    "avg_cpu": c.avg_cpu,
                    "peak_cpu": c.peak_cpu,
                    "current_cpu": c.current_cpu,
                    "servers": c.servers,
                    "cores": c.cores,
                    "tenants": list(c.tenants),
                }
                for c in self.classes
            ],
            "tenants": {
                t: {"class": cid, "pattern": self.tenant_pattern[t].value}
                for t, cid in sorted(self.tenant_class.items())
            },
        }
        if self.grid is not None:
            out["grid"] = {
                t: {"reimage_row": g.reimage_row, "peak_column": g.peak_column}
                for t, g in sorted(self.grid.items())
            }
        if self.busy_hours is not None:
            out["busy_hours"] = {t: int(m) for t, m in sorted(self.busy_hours.items())}
        return out

    @classmethod
    def from_json(cls, doc: Mapping[str, object], source: str = "classes.json") -> ClassTable:
        """Parse the ``classes.json`` contract; errors name ``source`` and the offending field."""
        try:
            raw_classes = doc["classes"]
            raw_tenants = doc["tenants"]
        except (KeyError, TypeError) as exc:
            raise PolicyError(f"{source}: missing top-level field {exc}") from None
        if not isinstance(raw_classes, list) or not isinstance(raw_tenants, dict):
            raise PolicyError(f"{source}: 'classes' must be a list and 'tenants' an object")
        try:
            classes = [_parse_class(c, f"classes[{i}]") for i, c in enumerate(raw_classes)]
            ids = [c.id for c in classes]
            if len(set(ids)) != len(ids):
                dup = next(x for x in ids if ids.count(x) > 1)
                raise InputError(f"classes: class id {dup!r} appears more than once", "classes")
            tenant_class: dict[str, str] = {}
            tenant_pattern: dict[str, Pattern] = {}
            for t, v in raw_tenants.items():
                where = f"tenants[{t!r}]"
                check_text(t, where)
                if not isinstance(v, Mapping):
                    raise InputError(f"{where}: must be an object {{'class', 'pattern'}}", where)
                cid = check_class_id(v.get("class"), f"{where}.class")
                if cid not in ids:
                    raise InputError(f"{where}.class: unknown class {cid!r}", f"{where}.class")
                tenant_class[t] = cid
                tenant_pattern[t] = _parse_pattern(v.get("pattern"), f"{where}.pattern")
            grid: dict[str, GridCell] | None = None
            raw_grid = doc.get("grid")
            if raw_grid is not None and not isinstance(raw_grid, Mapping):
                raise InputError("grid: must be an object {tenant: {reimage_row, peak_column}}", "grid")
            if raw_grid is not None:
                grid = {}
                for t, g in raw_grid.items():
                    where = f"grid[{t!r}]"
                    check_text(t, where)
                    if not isinstance(g, Mapping):
                        raise InputError(f"{where}: must be an object {{reimage_row, peak_column}}", where)
                    grid[t] = GridCell(check_int(g.get("reimage_row"), f"{where}.reimage_row", minimum=0, maximum=2),
                                       check_int(g.get("peak_column"), f"{where}.peak_column", minimum=0, maximum=2))
            busy_hours = _parse_busy_hours(doc.get("busy_hours"))
        except InputError as exc:
            raise PolicyError(f"{source}: {exc}") from None
        return cls(tuple(classes), tenant_class, tenant_pattern, grid, busy_hours)


def _parse_busy_hours(raw: object) -> dict[str, int] | None:
    """Optional ``busy_hours``: {tenant: 24-bit mask of the hours of day it was busy at}."""
    if raw is None:
        return None
    if not isinstance(raw, Mapping):
        raise InputError("busy_hours: must be an object {tenant: mask of busy hours, 0..2^24-1}", "busy_hours")
    out: dict[str, int] = {}
    for t, m in raw.items():
        where = f"busy_hours[{t!r}]"
        check_text(t, where)
        out[t] = check_int(m, where, minimum=0, maximum=ALL_HOURS)
    return out


def _parse_pattern(value: object, where: str) -> Pattern:
    if not isinstance(value, str) or value not in {p.value for p in Pattern}:
        raise InputError(f"{where}: must be one of {', '.join(p.value for p in Pattern)}, got {value!r:.40}",
                         where)
    return Pattern(value)


def _parse_class(c: object, where: str) -> UtilizationClass:
    """One entry of ``classes``: every fraction finite in [0, 1], counts >= 0, id a valid label."""
    if not isinstance(c, Mapping):
        raise InputError(f"{where}: must be an object", where)
    for key in ("id", "pattern", "avg_cpu", "peak_cpu"):
        if key not in c:
            raise InputError(f"{where}.{key}: missing required field", f"{where}.{key}")
    frac = {key: check_finite(c[key], f"{where}.{key}", minimum=0.0, maximum=1.0)
            for key in ("avg_cpu", "peak_cpu", "current_cpu") if key in c}
    tenants = c.get("tenants", [])
    if not isinstance(tenants, list):
        raise InputError(f"{where}.tenants: must be a list of tenant names", f"{where}.tenants")
    return UtilizationClass(
        id=check_class_id(c["id"], f"{where}.id"),
        pattern=_parse_pattern(c["pattern"], f"{where}.pattern"),
        avg_cpu=frac["avg_cpu"],
        peak_cpu=frac["peak_cpu"],
        current_cpu=frac.get("current_cpu", frac["avg_cpu"]),
        tenants=tuple(check_text(t, f"{where}.tenants[{k}]") for k, t in enumerate(tenants)),
        servers=check_int(c.get("servers", 0), f"{where}.servers", minimum=0, maximum=10**9),
        cores=check_finite(c.get("cores", 0.0), f"{where}.cores", minimum=0.0),
    )


@dataclass(frozen=True)
class Edge:
    src: str
    dst: str
    type: str = "SIMPLE_EDGE"


@dataclass(frozen=True)
class Job:
    """A batch job as the class selection sees it: its DAG with task counts and its last duration."""

    name: str
    last_duration_s: float | None
    vertices: Mapping[str, int]  # vertex name -> task count (>= 1)
    edges: tuple[Edge, ...] = ()


@dataclass(frozen=True)
class Selection:
    """Answer of class selection: the job's type, its peak concurrent containers and the classes."""

    job_type: JobType
    max_concurrency: int
    classes: tuple[str, ...]  # empty: nothing fits now (the job should wait)


@dataclass(frozen=True)
class Inventory:
    """Servers, column-wise (index i is one server). Optional capacity-solving columns may be empty."""

    server: tuple[str, ...]
    tenant: tuple[str, ...]
    environment: tuple[str, ...]
    rack: tuple[str, ...]
    cores: np.ndarray  # float64 cores per server
    memory_mb: np.ndarray  # float64
    storage_gb: np.ndarray  # float64, space the primary tenant lets HDFS use
    hardware: tuple[str, ...] = ()
    datacenter: tuple[str, ...] = ()
    msb: tuple[str, ...] = ()

    def __len__(self) -> int:
        return len(self.server)

    def index(self) -> dict[str, int]:
        return {s: i for i, s in enumerate(self.server)}


@dataclass(frozen=True)
class ReimageEvents:
    """Disk reimages: one row per (time, server); ``timestamp_s`` sorted ascending."""

    timestamp_s: np.ndarray  # float64 epoch seconds
    server: tuple[str, ...]


@dataclass(frozen=True)
class TenantSeries:
    """Each tenant's average-server CPU series on a regular grid of slots.

    ``cpu[i, j]`` is tenant ``tenants[i]``'s average CPU fraction (0..1) in slot ``j``, which starts at
    ``start_s + j * interval_s``. Short gaps are already filled; slots inside long gaps are NaN and
    listed in ``long_gaps`` as (tenant, first slot, slot count).
    """

    tenants: tuple[str, ...]
    start_s: float
    interval_s: float
    cpu: np.ndarray  # float64 [n_tenants, n_slots]
    long_gaps: tuple[tuple[str, int, int], ...] = field(default=())

    @property
    def n_slots(self) -> int:
        return int(self.cpu.shape[1])

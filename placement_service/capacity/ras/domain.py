"""Plain data of capacity solving: settings, reservation requests, the region's servers, the plan.

Units: capacities are in RRUs (relative resource units). ``Request.rru[hw]`` is the RRU value of ONE
server of hardware ``hw`` for that reservation; a hardware type that is not listed cannot serve it.
Costs are in "server moves": moving an idle server costs ``move_cost_idle`` (1 by default), an in-use
one ``move_cost_in_use`` (10). RRU-valued terms are converted to servers by dividing by the request's
mean RRU value per server, so every objective term reads as "servers".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

import numpy as np

SHARED_BUFFER_PREFIX = "shared-buffer:"
ELASTIC_TENANT_PREFIX = "elastic:"
UNASSIGNED = "unassigned"
# A reservation is whole when its capacity after the worst MSB loss is >= request - this (RRU). The
# plan's figures, the final top-up and the independent checker (check.TOLERANCE) use the same value.
CAPACITY_TOLERANCE_RRU = 1e-6


def elastic_pool(entity: str | None) -> str:
    """The tenant an elastic server's reports count for where it is lent: ``elastic:<entity>``, the
    shared buffer it sits in or ``unassigned``."""
    return f"{ELASTIC_TENANT_PREFIX}{entity or UNASSIGNED}"


class Method(StrEnum):
    """How the aggregated model is solved (all on the same model; see ``docs/capacity.md``)."""

    AUTO = "auto"  # LP relaxation -> rounding + repair -> branch-and-bound warm-started, best kept
    LP_ROUND = "lp-round"  # LP relaxation -> rounding + greedy repair, no branch-and-bound
    MIP = "mip"  # HiGHS branch-and-bound alone (cold start), for comparison
    GREEDY = "greedy"  # constructive: keep previous servers, then greedy repair; no LP


@dataclass(frozen=True)
class Settings:
    """Solver settings; every field has a default and may be given in ``R.json`` ``settings``.

    Objective (minimised, in servers):
      move_cost_idle * idle moves + move_cost_in_use * in-use moves                     (expression 1)
      + rack_spread_cost * servers above rack_spread_limit * request, phase 2            (expression 2)
      + msb_spread_cost * servers above msb_spread_limit * request                     (expression 3)
      + buffer_cost_per_server * embedded buffer servers                                (expression 4)
      + allocation_cost_per_server * servers held by reservations (surplus stays harvestable)
      + unmet_cost_per_server * shortfall (soft capacity, shared buffer)
      + affinity_cost_per_server * servers outside the datacenter affinity tolerance (soft (7)).
    """

    random_failure_buffer: float = 0.02  # shared buffer per hardware type, fraction of its available servers
    move_cost_in_use: float = 10.0
    move_cost_idle: float = 1.0
    buffer_cost_per_server: float = 1.0  # tau
    allocation_cost_per_server: float = 0.05
    unmet_cost_per_server: float = 1000.0
    affinity_cost_per_server: float = 100.0
    affinity_tolerance: float = 0.1  # theta, as a fraction of the reservation's allocated capacity
    msb_spread_limit: float | None = None  # alpha^F (None: expression 3 off; expression 4 still spreads)
    msb_spread_cost: float = 1.0  # beta for MSBs
    rack_spread_limit: float = 0.1  # alpha^K, phase 2
    rack_spread_cost: float = 1.0  # beta for racks
    rack_phase_share: float = 0.1  # share of reservations (worst rack spread first) re-solved in phase 2
    rack_phase_max_vars: int = 200_000
    time_limit_s: float = 60.0
    mip_rel_gap: float = 1e-4
    method: Method = Method.AUTO
    fix_satisfied: bool = True  # re-solve: reservations whose servers already satisfy them do not move
    threads: int = 1
    aggregate_symmetric: bool = True  # False: one class per server (the plain per-server model)
    mip_max_pairs: int = 100_000  # above this many (class, entity) pairs branch-and-bound is skipped
    integer_buffer_cut: bool = True  # the valid cut b_r >= K v_min (see ras_model constraint 6c)
    seed: int = 0


@dataclass(frozen=True)
class Request:
    """One reservation request: guaranteed ``capacity_rru`` after the loss of any single MSB."""

    id: str
    capacity_rru: float
    rru: Mapping[str, float]
    datacenter_affinity: Mapping[str, float] | None = None
    msb_spread_limit: float | None = None  # overrides Settings.msb_spread_limit
    rack_spread_limit: float | None = None  # overrides Settings.rack_spread_limit
    priority: int = 0  # when not everything fits, higher priorities are served first (topup.py)

    def mean_rru(self) -> float:
        """Mean RRU value of one eligible server (converts RRU-valued costs to servers)."""
        values = [v for v in self.rru.values() if v > 0]
        return float(np.mean(values)) if values else 1.0


@dataclass(frozen=True)
class Region:
    """Servers of a region, column-wise; categorical columns are codes into the ``*_names`` tuples."""

    server: tuple[str, ...]
    hardware: np.ndarray  # int32 code into hardware_names
    datacenter: np.ndarray  # int32 code into datacenter_names
    msb: np.ndarray  # int32 code into msb_names
    rack: np.ndarray  # int32 code into rack_names
    available: np.ndarray  # bool: False = unplanned failure, holds nothing
    in_use: np.ndarray  # bool: runs containers now (moving it costs move_cost_in_use)
    hardware_names: tuple[str, ...]
    datacenter_names: tuple[str, ...]
    msb_names: tuple[str, ...]
    rack_names: tuple[str, ...]
    extra: Mapping[str, tuple[object, ...]] = field(default_factory=dict)  # pass-through columns

    def __len__(self) -> int:
        return len(self.server)

    def index(self) -> dict[str, int]:
        return {s: i for i, s in enumerate(self.server)}


@dataclass(frozen=True)
class Problem:
    """Everything one solve needs: region, requests, settings and the previous assignment."""

    region: Region
    requests: tuple[Request, ...]
    settings: Settings = Settings()
    previous: Mapping[str, str | None] = field(default_factory=dict)  # server -> entity name or None


@dataclass(frozen=True)
class Unmet:
    """A request (or shared buffer) the plan does not fully satisfy, with the reason and the amount."""

    id: str
    reason: str
    constraint: str  # capacity | shared-buffer | datacenter-affinity | eligibility | ...
    shortfall: float = 0.0


@dataclass(frozen=True)
class SolverReport:
    """How the plan was found: status, objective of the plan, best bound and the relative gap."""

    status: str
    method: str
    objective: float
    bound: float
    lp_bound: float
    gap: float
    wall_s: float
    phases: tuple[Mapping[str, object], ...] = ()


def shared_buffer_name(hardware: str) -> str:
    return f"{SHARED_BUFFER_PREFIX}{hardware}"

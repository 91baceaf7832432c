"""Plain data of a Flux plan: the instance (model + demand + supply), the weights, the plan itself.

Units:
- traffic shares ``x[p, r, t]`` are fractions of product ``p``'s baseline global traffic (a product
  with organic growth ``tau[p, t]`` places ``1 + tau[p, t]`` over all regions);
- service capacity ``c[s, r, h, t]`` is in RRUs of hardware ``h`` (the hardware's capacity measure);
- ``alpha[s, p]`` is in normalised capacity units ("units", e.g. cores): the capacity service ``s``
  needs to serve ALL of product ``p``'s baseline traffic;
- ``ratio[s, h]`` (fungibility) is units per RRU of ``h`` for ``s``; 0 = ``s`` cannot run on ``h``;
- residuals ``rho0[s, r]`` are units; supply is RRUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class Weights:
    """Objective weights (expressions 2-7), each per the unit named.

    Capacity-valued terms are divided by ``pool_rru`` (the mean supply of one region x hardware pool
    at the baseline) so every term reads as "pools"; share-valued terms are in shares (1 = a whole
    product). The defaults order the goals: deficits >> disaster readiness > stability > the rest.
    """

    stability: float = 10.0  # e1, per unit of |x[p,r,t] - x[p,r,t0]|
    disaster: float = 20.0  # e2, per unit of max_r x[p,r,t]
    deficit: float = 1.0e5  # e3, per pool of deficit d[r,h,t]
    double_occupancy: float = 1.0  # e4, per pool of o[r,h,t]
    model_deviation: float = 4.0  # e5, per pool (in units) of |residual[s,r,t]| (> capacity_hold: see there)
    spare_balance: float = 1.0  # e6, per pool of |spare - region-size share * total spare|
    # per pool of capacity held: keeps c at the model's requirement. It must exceed 2 x spare_balance:
    # inflating c by d in one region moves the spare-balance term by at most 2 d, and filling every
    # region to 100% would otherwise "balance" the spare pools at zero
    capacity_hold: float = 2.5


@dataclass(frozen=True)
class ServiceFlags:
    """Per-service controls: opt-out (Flux keeps the baseline), review (an operator approves its
    resizes), keep_residual (its residual is excluded from rebalancing: fixed at the baseline)."""

    opt_out: bool = False
    review: bool = False
    keep_residual: bool = False


@dataclass(frozen=True)
class Instance:
    regions: tuple[str, ...]
    services: tuple[str, ...]
    hardware: tuple[str, ...]
    products: tuple[str, ...]
    timesteps: tuple[str, ...]  # timesteps[0] is the baseline t0
    alpha: np.ndarray  # (S, P) units
    ratio: np.ndarray  # (S, H) units per RRU, 0 = not allowed
    kappa: np.ndarray  # (S, R, H) baseline capacity, RRU
    xi: np.ndarray  # (P, R) baseline traffic shares
    tau: np.ndarray  # (P, T) organic growth (tau[:, 0] = sum_r xi - 1, normally 0)
    gamma: np.ndarray  # (S, T) inorganic growth, units (global)
    supply: np.ndarray  # (R, H, T) RRU
    flags: tuple[ServiceFlags, ...]
    rru_per_server: np.ndarray  # (H,) RRU of one server (for the hand-off to RAS)
    metric: tuple[str, ...] = ()  # per service: the demand metric the model kept ("" when given)
    weights: Weights = field(default_factory=Weights)

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        """(S, R, H, P, T)."""
        return (
            len(self.services),
            len(self.regions),
            len(self.hardware),
            len(self.products),
            len(self.timesteps),
        )


def baseline_residual(inst: Instance) -> np.ndarray:
    """rho0[s, r] = sum_h ratio[s,h] kappa[s,r,h] - sum_p alpha[s,p] xi[p,r] (equation 1 at t0), units."""
    cap_units = np.einsum("srh,sh->sr", inst.kappa, inst.ratio)
    return cap_units - inst.alpha @ inst.xi


def growth_factors(inst: Instance) -> tuple[np.ndarray, np.ndarray]:
    """Inorganic growth folded into the service model (linear form of expression 13).

    Expression 13 gives service ``s`` growth ``g[s,r,t] = gamma[s,t] * c[s,r,t] / sum_r c[s,r,t]``
    (a ratio of variables). We distribute it in proportion to the traffic-driven part of the
    capacity instead: with ``A[s,t] = sum_p alpha[s,p] (1 + tau[p,t])`` (a constant, because
    expression 12 fixes ``sum_r x[p,r,t]``), ``g[s,r,t] = gamma[s,t] / A[s,t] * sum_p alpha[s,p]
    x[p,r,t]``, linear in x. It equals expression 13 whenever the residuals are zero, and always sums
    to ``gamma[s,t]`` over regions. So ``phi[s,p,t] = alpha[s,p] (1 + gamma[s,t] / A[s,t])``.
    A service with growth but no traffic (A = 0) gets it by its baseline capacity share (a constant).

    Returns ``phi`` (S, P, T) and ``fixed_growth`` (S, R, T) in units.
    """
    S, R, _H, _P, T = inst.shape
    A = inst.alpha @ (1.0 + inst.tau)  # (S, T)
    scale = np.where(A > 0, inst.gamma / np.where(A > 0, A, 1.0), 0.0)
    phi = inst.alpha[:, :, None] * (1.0 + scale[:, None, :])
    fixed = np.zeros((S, R, T))
    no_traffic = (A <= 0) & (inst.gamma > 0)
    if no_traffic.any():
        base = np.einsum("srh,sh->sr", inst.kappa, inst.ratio)
        tot = base.sum(axis=1, keepdims=True)
        share = np.where(tot > 0, base / np.where(tot > 0, tot, 1.0), 1.0 / R)
        fixed = np.where(no_traffic[:, None, :], share[:, :, None] * inst.gamma[:, None, :], 0.0)
    return phi, fixed


def residual_floor(inst: Instance) -> np.ndarray:
    """Lower bound of residual[s, r] (expression 10): min(rho0, 0), or rho0 when the residual is kept."""
    rho0 = baseline_residual(inst)
    keep = np.array([f.keep_residual or f.opt_out for f in inst.flags], dtype=bool)
    return np.where(keep[:, None], rho0, np.minimum(rho0, 0.0))

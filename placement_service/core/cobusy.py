"""Co-busy estimates: how likely a set of tenants is to be busy *at the same time*, from their history.

The busy-hour masks of ``core/busy_hours.py`` keep one bit per tenant and hour of day: they forget
how often a tenant was busy at that hour and with whom. This module keeps both, as smoothed
probabilities, so the replica placer (``ReplicaPlacer(cobusy=...)``) can put a block's replicas on
the tenants whose estimated probability of being busy all at once is lowest.

Estimates, from the history's CPU samples ``x[t, s]`` (fraction of cores; NaN: a gap, not busy) and
the busy threshold ``busy_cpu``, all unitless probabilities:

0. Soft busy samples: ``b[t, s] = 1`` when ``x > busy_cpu``, else ``near_weight * clip((x - lo) /
   (busy_cpu - lo), 0, 1)`` with ``lo = busy_cpu - near_margin_cpu``: a tenant that ran close to the
   threshold is likelier to cross it later than one that stayed idle. Sample weights ``w_s``:
   ``0.5 ** (age_days / half_life_days)`` (recency: a tenant whose regime changed late in the
   history is judged mostly by the new one), scaled to sum to the number of samples ``n``.
1. Tenant base rate, shrunk toward the population's mean ``R``: ``r_t = (sum_s w_s b[t, s] +
   prior_slots * R) / (n + prior_slots)``.
2. Hour-of-day rate, shrunk toward the base rate: ``p[t, h] = (sum_{s at hour h} w_s b[t, s] +
   prior_slots * r_t) / (sum_{s at hour h} w_s + prior_slots)``, so an hour never seen busy is not 0.
3. Per-slot estimate: ``q[t, s] = (1 - hour_weight) * b[t, s] + hour_weight * p[t, hour(s)]``.
4. Single and pairwise co-busy probabilities ``m1[t] = sum_s w_s q[t, s] / n`` and ``m2[a, b] =
   sum_s w_s q[a, s] q[b, s] / n`` (a tenants x tenants matrix at slot resolution: tenants busy in
   the same slots, not just at the same hours, score high).
5. Three or more tenants: the superposition estimate from the pairs, ``P(a, b, c) ~= m2[a, b] *
   m2[a, c] * m2[b, c] / (m1[a] m1[b] m1[c])`` (exact when the three are independent); for ``k``
   tenants, the product over pairs divided by each one's ``m1 ** (k - 2)``.
6. How far the history predicts itself (``quiet_turnover``): of the tenants never busy (hard
   samples) in the first half of the history, the share busy in the second half. On the generated
   datacenter 3-4% of them turn busy, on the Azure and PlanetLab traces 10-44%: there a low
   estimate for a tenant never seen busy says little, and the placer keeps new blocks on the
   lowest estimates instead of spreading them (``ReplicaPlacer``'s ``cobusy_new_max_turnover``).

The defaults were chosen on the availability experiments of ``docs/bench/cobusy.md`` (which also
lists what was tried and not kept). Pure: numbers in, numbers out; the simulator (``sim.policy``)
fits it on the same history as the busy-hour masks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from placement_service.core.types import GridCell

HOURS = 24
DAY_S = 86400.0
REIMAGE_WEIGHT = 0.1
"""Default weight of :func:`reimage_penalty`: 0.1 kept the availability of the quick runs (Azure and
PlanetLab at 40%: 11 and 3 per million against 10 and 2 without) and brought the year's
re-replications back to HDFS-H's (1.03x instead of 4.9x, docs/bench/cobusy.md)."""


@dataclass(frozen=True)
class CobusyConfig:
    """Smoothing of the estimates (see the module docstring for the formulas)."""

    prior_slots: float = 12.0
    """Pseudo-samples of the prior in the base and hour-of-day rates (12: one hour of 5-min slots)."""
    hour_weight: float = 0.5
    """Share of the hour-of-day rate in the per-slot estimate (the rest: the slot's own sample)."""
    near_margin_cpu: float = 2.0 / 3.0
    """Width of the ramp below the threshold in which a sample counts as partly busy (the default
    with the default threshold 2/3: every sample, in proportion to its CPU)."""
    near_weight: float = 0.01
    """How busy a sample right below the threshold counts (a busy sample counts 1; 0: no ramp)."""
    half_life_days: float = 0.0
    """Recency half-life of the sample weights in days (0: every sample weighs the same; 2 days
    measured no better once replicas are chosen over all feasible cells, docs/bench/cobusy.md)."""

    def __post_init__(self) -> None:
        if not (self.prior_slots > 0 and 0.0 <= self.hour_weight <= 1.0 and self.near_margin_cpu >= 0
                and 0.0 <= self.near_weight <= 1.0 and self.half_life_days >= 0):
            raise ValueError(
                "CobusyConfig: prior_slots > 0, hour_weight and near_weight in [0, 1], near_margin_cpu >= 0 "
                "and half_life_days >= 0"
            )


@dataclass(frozen=True)
class CobusyModel:
    """Fitted estimates, tenants in the order given to :func:`fit_cobusy`; or (``rows`` set, made by
    :func:`aligned`) the same estimates seen in another tenant order without copying the pair matrix.

    Read the pair probabilities through :meth:`pair`: ``m2`` is indexed by ``rows`` when set."""

    tenants: tuple[str, ...]
    m1: np.ndarray  # [tenant]: P(busy), in this model's tenant order
    m2: np.ndarray  # [row, row]: P(both busy in the same slot); rows = tenants unless ``rows`` is set
    rows: np.ndarray | None = None  # [tenant]: its row of m2, -1: unknown to the estimates (``fill2``)
    fill2: float = 0.0  # pair probability of an unknown tenant with any other (the mean of m2)
    unknown: bool = False  # some tenant has row -1
    quiet_turnover: float = 1.0
    """Step 6 of the module docstring (:func:`quiet_turnover`); 1.0 when not measured (estimates
    stored before it existed): as unpredictable as can be."""

    def index(self) -> dict[str, int]:
        return {t: i for i, t in enumerate(self.tenants)}

    def pair(self, a: Any, b: Any) -> Any:
        """``P(a and b busy in the same slot)`` for tenant indices (ints or arrays, broadcast)."""
        if self.rows is None:
            return self.m2[a, b]
        ra, rb = self.rows[a], self.rows[b]
        if not self.unknown:
            return self.m2[ra, rb]
        out = self.m2[np.maximum(ra, 0), np.maximum(rb, 0)]
        return np.where((ra >= 0) & (rb >= 0), out, self.fill2)

    def dense(self) -> np.ndarray:
        """The pair matrix in this model's tenant order (a copy when ``rows`` is set: n x n)."""
        if self.rows is None:
            return self.m2
        n = len(self.tenants)
        return np.asarray(self.pair(np.arange(n)[:, None], np.arange(n)[None, :]), dtype=np.float64)

    def joint(self, group: Sequence[int]) -> float:
        """Estimated probability that every tenant of ``group`` (indices, distinct) is busy at once."""
        g = list(dict.fromkeys(int(x) for x in group))
        if not g:
            return 1.0
        if len(g) == 1:
            return float(self.m1[g[0]])
        if len(g) == 2:
            return float(self.pair(g[0], g[1]))
        out = 1.0
        for i in range(len(g)):
            for j in range(i + 1, len(g)):
                out *= float(self.pair(g[i], g[j]))
        for t in g:
            out /= float(self.m1[t]) ** (len(g) - 2)
        return out

    def scores(self, group: Sequence[int], candidates: np.ndarray) -> np.ndarray:
        """``joint(group + [c])`` for every candidate ``c`` (vectorized; a candidate already in
        ``group`` gets ``joint(group)``, as adding it changes nothing)."""
        g = list(dict.fromkeys(int(x) for x in group))
        c = np.asarray(candidates, dtype=np.int64)
        if not g:
            return self.m1[c].astype(np.float64)
        base = self.joint(g)
        # joint(g + [c]) = joint(g) * prod_a m2[a, c] / (prod_a m1[a] * m1[c] ** (k - 2)) for the
        # k = len(g) + 1 tenants (k = 2: m2[a, c]).
        out = self.pair(g[0], c) * (base / float(self.m1[g[0]]))
        same = c == g[0]
        for a in g[1:]:
            out *= self.pair(a, c) / float(self.m1[a])
            same |= c == a
        if len(g) > 1:
            out /= self.m1[c] ** (len(g) - 1)
        out[same] = base
        return out


    def joint_many(self, groups: np.ndarray) -> np.ndarray:
        """:meth:`joint` of every row of ``groups`` [block, k] (tenant indices, -1: no replica, left
        out), vectorized; a row with no tenant gets 1 (nothing to read from)."""
        g = np.asarray(groups, dtype=np.int64)
        if g.ndim != 2:
            raise ValueError(f"groups must be [block, k], got shape {g.shape}")
        b, k = g.shape
        known = g >= 0
        # Repeated tenants count once, like joint(): drop later duplicates of a row.
        for j in range(1, k):
            for i in range(j):
                known[:, j] &= ~(known[:, i] & (g[:, i] == g[:, j]))
        safe = np.where(known, g, 0)
        size = known.sum(axis=1)
        log_out = np.zeros(b)
        one = size == 1
        m1 = np.log(self.m1[safe])
        log_out[one] = (m1 * known).sum(axis=1)[one]
        pairs = np.zeros(b)
        for j in range(1, k):
            for i in range(j):
                both = known[:, i] & known[:, j]
                pairs += np.where(both, np.log(self.pair(safe[:, i], safe[:, j])), 0.0)
        many = size >= 2
        log_out[many] = (pairs - (size - 2) * (m1 * known).sum(axis=1))[many]
        return np.where(size == 0, 1.0, np.exp(log_out))


def busy_samples(cpu: np.ndarray, busy_cpu: float) -> np.ndarray:
    """``cpu > busy_cpu`` in the series' own precision (NaN: not busy), [tenant, slot]."""
    x = np.asarray(cpu)
    dtype = x.dtype if np.issubdtype(x.dtype, np.floating) else np.float64
    return x > np.asarray(busy_cpu, dtype=dtype)


def quiet_turnover(hard: np.ndarray) -> float:
    """Of the tenants never busy in the first half of ``hard`` [tenant, slot] (busy samples), the
    share busy at least once in the second half; 0.0 when no tenant was quiet in the first half
    (nothing to be wrong about) or the history has fewer than 2 slots."""
    h = np.asarray(hard, dtype=bool)
    if h.ndim != 2 or h.shape[1] < 2:
        return 0.0
    mid = h.shape[1] // 2
    quiet = ~h[:, :mid].any(axis=1)
    n = int(quiet.sum())
    return float((quiet & h[:, mid:].any(axis=1)).sum()) / n if n else 0.0


def fit_cobusy(
    tenants: Sequence[str],
    cpu: np.ndarray,
    start_s: float,
    interval_s: float,
    busy_cpu: float,
    config: CobusyConfig | None = None,
) -> CobusyModel:
    """The estimates of the module docstring from ``cpu`` [tenant, slot] (slot k at ``start_s + k *
    interval_s``) and the busy threshold ``busy_cpu`` (CPU fraction)."""
    cfg = config if config is not None else CobusyConfig()
    x = np.asarray(cpu)
    if x.ndim != 2 or x.shape[0] != len(tenants):
        raise ValueError(f"cpu must be [tenant, slot] with {len(tenants)} rows, got shape {x.shape}")
    if not np.isfinite(busy_cpu) or interval_s <= 0:
        raise ValueError("busy_cpu must be finite and interval_s > 0")
    n_t, n = x.shape
    if n == 0:
        return CobusyModel(tuple(tenants), np.full(n_t, 0.5), np.full((n_t, n_t), 0.25))
    # 0. soft busy samples and recency weights
    hard = busy_samples(x, busy_cpu)
    b = hard.astype(np.float64)
    if cfg.near_weight > 0 and cfg.near_margin_cpu > 0:
        lo = busy_cpu - cfg.near_margin_cpu
        ramp = np.clip((np.nan_to_num(np.asarray(x, dtype=np.float64), nan=0.0) - lo) / cfg.near_margin_cpu, 0.0, 1.0)
        b = np.where(hard, 1.0, cfg.near_weight * ramp)
    if cfg.half_life_days > 0:
        age_d = (n - 1 - np.arange(n)) * interval_s / DAY_S
        w = 0.5 ** (age_d / cfg.half_life_days)
        w *= n / w.sum()
    else:
        w = np.ones(n)
    # 1. base rate
    pop = float((b @ w).sum() / (n * n_t))
    r = (b @ w + cfg.prior_slots * pop) / (n + cfg.prior_slots)
    # 2. hour-of-day rate
    hour = (((start_s + np.arange(n) * interval_s) % DAY_S) // 3600.0).astype(np.int64)
    onehot = np.zeros((n, HOURS))
    onehot[np.arange(n), hour] = w
    busy_h = b @ onehot  # [tenant, hour]
    n_h = onehot.sum(axis=0)
    p = (busy_h + cfg.prior_slots * r[:, None]) / (n_h[None, :] + cfg.prior_slots)
    # 3. per slot
    q = (1.0 - cfg.hour_weight) * b + cfg.hour_weight * p[:, hour]
    # 4. singles and pairs
    m1 = (q @ w) / n
    m2 = ((q * w) @ q.T) / n
    return CobusyModel(tuple(tenants), m1, m2, quiet_turnover=quiet_turnover(hard))


def _positive(model: CobusyModel) -> CobusyModel:
    """``model`` with float64 estimates, all strictly positive (the superposition estimate divides
    by m1); the model itself when it already is (no copy of the pair matrix)."""
    m1, m2 = model.m1, model.m2
    if m1.dtype == np.float64 and m2.dtype == np.float64 and (not m1.size or m1.min() > 0.0) \
            and (not m2.size or m2.min() > 0.0):
        return model
    tiny = np.finfo(np.float64).tiny
    return replace(model, m1=np.maximum(m1.astype(np.float64), tiny), m2=np.maximum(m2.astype(np.float64), tiny))


def aligned(model: CobusyModel, tenants: Sequence[str]) -> CobusyModel:
    """``model`` seen in the order of ``tenants``; a tenant the model does not know gets the model's
    mean single and pair probabilities (no preference for or against it); every estimate is kept
    strictly positive. The pair matrix is not copied (an index of its rows, ``CobusyModel.rows``):
    at 5,000 tenants the copy cost ~0.85 s and 200 MB on every new tenant order of a placer. A model
    already in that order is returned as is, so a caller that builds many placers over the same
    tenants aligns once and hands the result on."""
    want = tuple(tenants)
    if model.tenants == want and len(want) > 0:
        return _positive(model)
    if model.rows is not None:  # re-align from the estimates themselves (already positive)
        at = model.index()
        src = np.array([at.get(t, -1) for t in want], dtype=np.int64)
        pos = np.where(src >= 0, model.rows[np.maximum(src, 0)], -1) if len(model.rows) else np.full(len(want), -1)
        known = model.rows >= 0
        mean1 = float(model.m1[known].mean()) if known.any() else 0.5
        m1 = np.where(pos >= 0, model.m1[np.maximum(src, 0)], mean1) if len(model.m1) else np.full(len(want), mean1)
        m2, fill2 = model.m2, model.fill2
    else:
        base = _positive(model)
        idx = base.index()
        pos = np.array([idx.get(t, -1) for t in want], dtype=np.int64)
        m2 = base.m2
        mean1 = float(base.m1.mean()) if len(base.m1) else 0.5
        m1 = np.where(pos >= 0, base.m1[np.maximum(pos, 0)], mean1) if len(base.m1) else np.full(len(want), mean1)
        fill2 = float(base.m2.mean()) if base.m2.size else 0.25
    tiny = np.finfo(np.float64).tiny
    unknown = bool((pos < 0).any())
    if not m2.size:  # no estimates at all: one pseudo-row holding the fill
        m2 = np.full((1, 1), max(fill2, tiny))
    return CobusyModel(want, np.maximum(np.asarray(m1, dtype=np.float64), tiny), m2, rows=pos,
                       fill2=max(fill2, tiny), unknown=unknown, quiet_turnover=model.quiet_turnover)


def reimage_penalty(
    reimage_rate: Mapping[str, float],
    grid: Mapping[str, GridCell],
    servers: Mapping[str, int],
    weight: float = REIMAGE_WEIGHT,
) -> dict[str, float]:
    """Per tenant of the grid, ``weight * rate / (server-weighted mean rate of its grid row)``
    (reimages per server and month; 0 in a row whose mean is 0). The placer multiplies a tenant's
    co-busy estimate by ``1 + penalty``: choosing the tenants least likely busy would otherwise also
    pick a row's most reimaged tenants (idle ones often are), multiplying re-replications."""
    if weight < 0:
        raise ValueError(f"reimage_penalty: weight must be >= 0, got {weight}")
    total = [0.0, 0.0, 0.0]
    count = [0.0, 0.0, 0.0]
    for t, cell in grid.items():
        n = float(servers.get(t, 0))
        total[cell.reimage_row] += n * float(reimage_rate.get(t, 0.0))
        count[cell.reimage_row] += n
    mean = [total[r] / count[r] if count[r] > 0 else 0.0 for r in range(3)]
    return {
        t: weight * float(reimage_rate.get(t, 0.0)) / mean[cell.reimage_row] if mean[cell.reimage_row] > 0 else 0.0
        for t, cell in grid.items()
    }

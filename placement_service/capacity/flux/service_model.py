"""The service model of equation 1, fitted from sampled RPC traces and pod CPU (pure: data in, model out).

Steps:
1. Attribution: every span gets the product of its nearest upstream gateway: walking up from the
   span, the first span whose parent is a gateway span names the product (its operation, i.e. the
   route behind the gateway); gateway spans get the product of their first non-gateway child. A
   trace that never passes a gateway is attributed to ``direct:<service><operation>``.
2. Demand per (service, product) under two metrics: call counts, and span time exclusive of the
   span's children (a CPU proxy, ns).
3. Capacity: the peak window is the ``peak_minutes`` training minutes with the largest total CPU;
   ``C[s]`` = the service's mean CPU (millicores) over it.
4. ``alpha[s, p] = C[s] * share_m[s, p]``, share_m = product p's part of s's demand under metric m
   over the peak window (units: millicores for ALL of p's peak traffic).
5. Per minute m (an observation of a traffic mix, standing in for a region), presence
   ``rho[p, m] = n_p(m) / mean_peak(n_p)`` (n_p = traces of product p), prediction
   ``c_hat[s, m] = sum_p alpha[s, p] rho[p, m]`` and residual ``delta[s, m] = cpu[s, m] - c_hat``.
   Aggregate residual (Figure 11 of the paper) = sum_m |delta| / sum_m cpu over training minutes.
6. Per service, keep the metric with the smaller aggregate training residual; report the held-out
   error (same formula over the held-out minutes) of the kept metric, the other metric, and of the
   constant predictor ``C[s]`` (what a model that ignores traffic would say).
7. Prediction (``flux/predict.py``): the baseline of a service is its mean CPU over the training
   minutes, ``B[s]`` (millicores), at the training mean traffic ``nbar[p]`` (traces per window);
   ``calibration[s] = B[s] / sum_p alpha[s, p] nbar[p] / base[p]`` (``base`` = the peak-window mean
   traffic the ``alpha`` are relative to), so that
   ``c_hat[s](n) = calibration[s] * sum_p alpha[s, p] n[p] / base[p]`` equals ``B[s]`` at the
   training traffic and follows the traffic mix around it (equation 1 around the mean day instead of
   the peak, whose CPU is the highest of noisy minutes). The predictor per service is ``model`` when
   that prediction's held-out error is below the baseline's ``B[s]``, else ``baseline`` (stated, with
   the reason); a service no sampled trace reaches has no ``alpha`` and gets ``baseline``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from placement_service.capacity.flux import FluxError

METRICS = ("calls", "span_time")


@dataclass(frozen=True)
class Span:
    trace: str
    span: str
    parent: str  # "root" (or empty) for a root span
    service: str
    operation: str
    start_ns: int
    duration_ns: int
    where: str  # "file:row" for errors
    unit: int = 0  # the trace file (one sampled window of about a minute) the span was read from


def attribute(spans: Sequence[Span], gateway: str) -> list[str]:
    """Product of each span (step 1). Errors name the file and row: missing parents, cycles."""
    by_trace: dict[str, dict[str, int]] = {}
    for i, sp in enumerate(spans):
        ids = by_trace.setdefault(sp.trace, {})
        if sp.span in ids:
            raise FluxError(
                f"{sp.where}: field 'SpanID': span {sp.span!r} repeats {spans[ids[sp.span]].where}"
            )
        ids[sp.span] = i
    parent = np.full(len(spans), -1, dtype=np.int64)
    for i, sp in enumerate(spans):
        if sp.parent in ("root", "", "0", None):
            continue
        j = by_trace[sp.trace].get(sp.parent)
        if j is None:
            raise FluxError(
                f"{sp.where}: field 'ParentID': parent span {sp.parent!r} is not in trace {sp.trace!r}"
            )
        parent[i] = j
    is_gw = np.array([sp.service == gateway for sp in spans], dtype=bool)
    product: list[str | None] = [None] * len(spans)
    state = np.zeros(len(spans), dtype=np.int8)  # 0 new, 1 on the current path, 2 done
    for i0 in range(len(spans)):
        if state[i0] == 2:
            continue
        path = []
        i = i0
        while i >= 0 and state[i] == 0:
            state[i] = 1
            path.append(i)
            i = int(parent[i])
        if i >= 0 and state[i] == 1:
            raise FluxError(f"{spans[i].where}: field 'ParentID': the parent chain of span {spans[i].span!r} "
                            f"in trace {spans[i].trace!r} is a cycle")  # fmt: skip
        for j in reversed(path):  # from the top down
            pj = int(parent[j])
            if is_gw[j]:
                product[j] = None
            elif pj < 0:
                product[j] = f"direct:{spans[j].service}{spans[j].operation}"
            elif is_gw[pj]:
                product[j] = spans[j].operation
            else:
                product[j] = product[pj]
            state[j] = 2
    # gateway spans: the product of their first non-gateway child (by start time), else of the trace
    first_child: dict[int, tuple[int, str]] = {}
    for i, sp in enumerate(spans):
        pi = int(parent[i])
        if pi >= 0 and is_gw[pi] and not is_gw[i] and product[i] is not None:
            if pi not in first_child or sp.start_ns < first_child[pi][0]:
                first_child[pi] = (sp.start_ns, product[i] or "")
    trace_product: dict[str, str] = {}
    for i, sp in enumerate(spans):
        if product[i] is not None and sp.trace not in trace_product:
            trace_product[sp.trace] = product[i] or ""
    for i in (int(v) for v in np.flatnonzero(is_gw)):
        if i in first_child:
            product[i] = first_child[i][1]
        else:
            # walk down gateway-only chains: take the trace's first attributed product
            product[i] = trace_product.get(spans[i].trace, f"direct:{gateway}")
    return [p or "" for p in product]


def self_time_ns(spans: Sequence[Span]) -> np.ndarray:
    """Span duration minus its children's durations (>= 0): the exclusive span time."""
    idx = {(sp.trace, sp.span): i for i, sp in enumerate(spans)}
    child = np.zeros(len(spans))
    for sp in spans:
        j = idx.get((sp.trace, sp.parent))
        if j is not None:
            child[j] += sp.duration_ns
    return np.maximum(0.0, np.array([sp.duration_ns for sp in spans], dtype=float) - child)


@dataclass(frozen=True)
class Observations:
    """Per-minute aggregates: demand[metric][s, p, m], traces[p, m], cpu[s, m] (millicores)."""

    services: tuple[str, ...]
    products: tuple[str, ...]
    minutes: tuple[int, ...]  # end of each observed window (a trace file), epoch s
    demand: Mapping[str, np.ndarray]
    traces: np.ndarray
    cpu: np.ndarray


@dataclass
class ServiceModel:
    """Fit alpha per service and metric (steps 3-6). Parameters are stored as given."""

    peak_minutes: int = 10
    holdout: float = 0.3
    alpha_: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    metric_: tuple[str, ...] = ()
    capacity_: np.ndarray = field(default_factory=lambda: np.zeros(0))
    report_: list[dict[str, Any]] = field(default_factory=list)
    train_: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    peak_: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    baseline_traffic_: np.ndarray = field(default_factory=lambda: np.zeros(0))  # base[p], peak-window mean
    mean_traffic_: np.ndarray = field(default_factory=lambda: np.zeros(0))  # nbar[p], training mean
    baseline_mcores_: np.ndarray = field(default_factory=lambda: np.zeros(0))  # B[s]
    calibration_: np.ndarray = field(default_factory=lambda: np.zeros(0))
    predictor_: tuple[str, ...] = ()  # "model" or "baseline" per service
    predictor_reason_: tuple[str, ...] = ()

    def fit(self, obs: Observations) -> ServiceModel:
        S, P, M = len(obs.services), len(obs.products), len(obs.minutes)
        if M < 2:
            raise FluxError(f"need at least 2 usable minutes of traces and CPU, got {M}")
        if not 0 <= self.holdout < 1:
            raise FluxError(f"holdout must be within [0, 1), got {self.holdout}")
        # held-out minutes: every k-th minute (spread over the day, not one block)
        k = int(round(1 / self.holdout)) if self.holdout > 0 else 0
        test = np.zeros(M, dtype=bool)
        if k >= 1:
            test[k - 1 :: k] = True
        train = ~test
        total_cpu = obs.cpu.sum(axis=0)
        order = np.flatnonzero(train)[np.argsort(-total_cpu[train], kind="stable")]
        peak = np.zeros(M, dtype=bool)
        peak[order[: max(1, min(self.peak_minutes, len(order)))]] = True
        cap = obs.cpu[:, peak].mean(axis=1)
        base_traffic = obs.traces[:, peak].mean(axis=1)
        rho = np.where(
            base_traffic[:, None] > 0,
            obs.traces / np.where(base_traffic > 0, base_traffic, 1.0)[:, None],
            0.0,
        )
        alphas, errs_train, errs_test = {}, {}, {}
        for m in METRICS:
            d = obs.demand[m][:, :, peak].sum(axis=2)  # (S, P)
            tot = d.sum(axis=1, keepdims=True)
            share = np.where(tot > 0, d / np.where(tot > 0, tot, 1.0), 0.0)
            a = cap[:, None] * share
            pred = a @ rho  # (S, M)
            alphas[m] = a
            errs_train[m] = _agg_err(obs.cpu[:, train], pred[:, train])
            errs_test[m] = _agg_err(obs.cpu[:, test], pred[:, test]) if test.any() else np.full(S, np.nan)
        const_test = (
            _agg_err(obs.cpu[:, test], np.repeat(cap[:, None], test.sum(), axis=1))
            if test.any()
            else np.full(S, np.nan)
        )
        kept = []
        self.alpha_ = np.zeros((S, P))
        self.report_ = []
        for s in range(S):
            m = min(METRICS, key=lambda mm: (errs_train[mm][s], METRICS.index(mm)))
            kept.append(m)
            self.alpha_[s] = alphas[m][s]
            self.report_.append({
                "service": obs.services[s], "metric": m, "capacity_mcores": float(cap[s]),
                "residual_train": {mm: _f(errs_train[mm][s]) for mm in METRICS},
                "error_heldout": {mm: _f(errs_test[mm][s]) for mm in METRICS},
                "error_heldout_constant": _f(const_test[s]),
                "products": int((self.alpha_[s] > 0).sum()),
            })  # fmt: skip
        self.metric_ = tuple(kept)
        self.capacity_ = cap
        self.train_, self.peak_ = train, peak
        self._fit_predictor(obs, base_traffic, train, test)
        return self

    def _fit_predictor(self, obs: Observations, base_traffic: np.ndarray, train: np.ndarray,
                       test: np.ndarray) -> None:  # fmt: skip
        """Step 7: baseline, calibration and the predictor per service (see the module docstring)."""
        nbar = obs.traces[:, train].mean(axis=1)
        base = np.where(base_traffic > 0, base_traffic, 1.0)
        b = obs.cpu[:, train].mean(axis=1)
        at_mean = self.alpha_ @ (nbar / base)
        calib = np.where(at_mean > 0, b / np.where(at_mean > 0, at_mean, 1.0), 0.0)
        pred = calib[:, None] * (self.alpha_ @ (obs.traces / base[:, None]))
        err_model = _agg_err(obs.cpu[:, test], pred[:, test]) if test.any() else np.full(len(b), np.nan)
        err_base = (_agg_err(obs.cpu[:, test], np.repeat(b[:, None], test.sum(), axis=1)) if test.any()
                    else np.full(len(b), np.nan))  # fmt: skip
        choice, reason = [], []
        for s in range(len(b)):
            if at_mean[s] <= 0:
                choice.append("baseline")
                reason.append("no attributed traffic in the training windows (no sampled trace reaches it, or "
                              "none of its products ran): mean CPU over the training windows")  # fmt: skip
            elif not np.isfinite(err_model[s]):
                choice.append("model")
                reason.append("no held-out windows to compare; equation 1 around the training mean")
            elif err_model[s] < err_base[s]:
                choice.append("model")
                reason.append(f"held-out error {err_model[s]:.2f} < baseline's {err_base[s]:.2f}")
            else:
                choice.append("baseline")
                reason.append(f"held-out error {err_model[s]:.2f} >= baseline's {err_base[s]:.2f}: "
                              f"mean CPU over the training windows")  # fmt: skip
            self.report_[s].update({"baseline_mcores": float(b[s]), "predictor": choice[-1],
                                    "error_heldout_calibrated": _f(err_model[s]),
                                    "error_heldout_baseline": _f(err_base[s])})  # fmt: skip
        self.baseline_traffic_, self.mean_traffic_ = base_traffic, nbar
        self.baseline_mcores_, self.calibration_ = b, calib
        self.predictor_, self.predictor_reason_ = tuple(choice), tuple(reason)


def _agg_err(actual: np.ndarray, pred: np.ndarray) -> np.ndarray:
    den = actual.sum(axis=1)
    return np.where(den > 0, np.abs(actual - pred).sum(axis=1) / np.where(den > 0, den, 1.0), np.nan)


def _f(v: float) -> float | None:
    return None if v != v else round(float(v), 6)

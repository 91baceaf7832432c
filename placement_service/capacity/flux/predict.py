"""Per-service CPU from product request counts with a fitted service model (pure; ``harvest flux predict``).

Formula (``service_model`` step 7), per service ``s`` and product traffic ``n[p]`` (sampled traces
per trace window, the unit ``flux model`` counted in):

    model:     c_hat[s] = calibration[s] * sum_p alpha[s, p] * n[p] / baseline_traffic[p]   (millicores)
    baseline:  c_hat[s] = baseline_mcores[s]   (the mean CPU over the training windows)

``predictor`` in ``model.json`` says which one a service uses and why (a service without attributed
traffic, or whose model did not beat its baseline on the held-out windows, uses the baseline: never
0 for want of a model). Products missing from the counts are taken at their training mean traffic
(and listed); products the model does not know are ignored (and listed).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from placement_service.capacity.flux import FluxError

PREDICTORS = ("model", "baseline")


@dataclass(frozen=True)
class Predictor:
    products: tuple[str, ...]
    services: tuple[str, ...]
    alpha: np.ndarray  # [services, products], millicores for all of p's baseline traffic
    baseline_traffic: np.ndarray  # [products]
    mean_traffic: np.ndarray  # [products]
    calibration: np.ndarray  # [services]
    baseline_mcores: np.ndarray  # [services]
    predictor: tuple[str, ...]
    reason: tuple[str, ...]


@dataclass(frozen=True)
class ServicePrediction:
    service: str
    cpu_mcores: float
    predictor: str  # "model" or "baseline"
    reason: str


@dataclass(frozen=True)
class Prediction:
    services: tuple[ServicePrediction, ...]
    products_at_mean: tuple[str, ...]  # not in the counts: taken at their training mean traffic
    ignored_products: tuple[str, ...]  # in the counts, unknown to the model

    def to_json(self) -> dict[str, Any]:
        return {
            "unit": "millicores of CPU",
            "services": [{"service": p.service, "cpu_mcores": round(p.cpu_mcores, 3), "predictor": p.predictor,
                          "reason": p.reason} for p in self.services],  # fmt: skip
            "products_at_mean": list(self.products_at_mean),
            "ignored_products": list(self.ignored_products),
        }


def _number(v: object, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, int | float) or not np.isfinite(v) or v < 0:
        raise FluxError(f"{where}: expected a non-negative number, got {v!r}")
    return float(v)


def load_predictor(doc: Mapping[str, Any], where: str = "model.json") -> Predictor:
    """The prediction fields of a ``flux model`` document; errors name the file and field."""
    for key in ("products", "services", "baseline_traffic", "mean_traffic", "prediction"):
        if key not in doc:
            hint = " (written by an older `harvest flux model`: fit it again)" if key != "products" else ""
            raise FluxError(f"{where}: missing field {key!r}{hint}")
    products = tuple(str(p) for p in doc["products"])
    p_of = {p: i for i, p in enumerate(products)}
    services = tuple(str(e.get("name")) for e in doc["services"])
    alpha = np.zeros((len(services), len(products)))
    for s, e in enumerate(doc["services"]):
        for p, v in (e.get("alpha") or {}).items():
            if p not in p_of:
                raise FluxError(f"{where}: services[{s}] ({services[s]}): field 'alpha': unknown product {p!r}")
            alpha[s, p_of[p]] = _number(v, f"{where}: services[{s}] ({services[s]}): field 'alpha[{p!r}]'")
    traffic = {}
    for key in ("baseline_traffic", "mean_traffic"):
        t = doc[key]
        missing = [p for p in products if p not in t]
        if missing:
            raise FluxError(f"{where}: field {key!r}: no value for product(s) {missing[:3]}")
        traffic[key] = np.array([_number(t[p], f"{where}: field '{key}[{p!r}]'") for p in products])
    per = doc["prediction"]
    calib, base, choice, reason = [], [], [], []
    for name in services:
        e = per.get(name)
        if not isinstance(e, Mapping):
            raise FluxError(f"{where}: field 'prediction': no entry for service {name!r}")
        calib.append(_number(e.get("calibration"), f"{where}: prediction[{name!r}]: field 'calibration'"))
        base.append(_number(e.get("baseline_mcores"), f"{where}: prediction[{name!r}]: field 'baseline_mcores'"))
        if e.get("predictor") not in PREDICTORS:
            raise FluxError(f"{where}: prediction[{name!r}]: field 'predictor': expected one of {PREDICTORS}, "
                            f"got {e.get('predictor')!r}")  # fmt: skip
        choice.append(str(e["predictor"]))
        reason.append(str(e.get("predictor_reason", "")))
    return Predictor(products, services, alpha, traffic["baseline_traffic"], traffic["mean_traffic"],
                     np.array(calib), np.array(base), tuple(choice), tuple(reason))  # fmt: skip


def predict(model: Predictor, counts: Mapping[str, float]) -> Prediction:
    """Per-service CPU for product traffic ``counts`` (see the module docstring)."""
    n = model.mean_traffic.copy()
    given = set()
    for i, p in enumerate(model.products):
        if p in counts:
            n[i] = _number(counts[p], f"counts: product {p!r}")
            given.add(p)
    base = np.where(model.baseline_traffic > 0, model.baseline_traffic, 1.0)
    by_model = model.calibration * (model.alpha @ (n / base))
    out = []
    for s, name in enumerate(model.services):
        use_model = model.predictor[s] == "model"
        cpu = float(by_model[s] if use_model else model.baseline_mcores[s])
        out.append(ServicePrediction(name, cpu, model.predictor[s], model.reason[s]))
    return Prediction(tuple(out), tuple(p for p in model.products if p not in given),
                      tuple(sorted(p for p in counts if p not in set(model.products))))  # fmt: skip

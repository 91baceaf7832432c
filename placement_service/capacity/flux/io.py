"""Adapter: Flux input files (model.json, demand.json, supply.json) <-> ``Instance``; plan JSON.

Formats (units in ``domain``):
- ``model.json``: ``{"products": [..], "services": [{"name", "alpha": {product: units}, "metric"}]}``
- ``demand.json``: ``{"timesteps": [..], "products": [{"name", "baseline": {region: share},
  "growth": [tau per timestep]}], "services": [{"name", "baseline": {region: {hardware: RRU}},
  "ratio": {hardware: units per RRU}, "growth": [units per timestep], "opt_out", "review",
  "keep_residual"}]}``
- ``supply.json``: ``{"regions": [..], "hardware": [{"name", "rru_per_server"}],
  "supply": [{"region", "hardware", "t", "available"}]}``
Every reader names the file and the entry (index and name) and field of bad input; writers are atomic.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from placement_service.atomic import atomic_path
from placement_service.capacity.flux import FluxError
from placement_service.capacity.flux.domain import Instance, ServiceFlags, Weights
from placement_service.capacity.ras.io import load_json as _ras_load_json

MODEL_FILE, DEMAND_FILE, SUPPLY_FILE = "model.json", "demand.json", "supply.json"


def load_json(path: str | Path) -> Any:
    try:
        return _ras_load_json(path)
    except FluxError:
        raise
    except Exception as exc:  # CapacityError from the shared reader
        raise FluxError(str(exc)) from None


def write_json(path: str | Path, doc: Any) -> None:
    import json

    with atomic_path(path, suffix=".json") as tmp, open(tmp, "w") as fh:
        json.dump(doc, fh, indent=1, allow_nan=False)


def number(v: Any, where: str, *, lo: float = 0.0) -> float:
    """A finite number >= lo (named in the error)."""
    if isinstance(v, bool) or not isinstance(v, int | float):
        raise FluxError(f"{where}: expected a number, got {v!r}")
    f = float(v)
    if math.isnan(f) or math.isinf(f):
        raise FluxError(f"{where}: {v!r} is not a finite number")
    if f < lo:
        raise FluxError(f"{where}: {f} is negative" if lo == 0 else f"{where}: {f} is below {lo}")
    return f


def _list(doc: Any, key: str, where: str) -> list[Any]:
    if not isinstance(doc, Mapping) or not isinstance(doc.get(key), list):
        raise FluxError(f"{where}: expected an object with a '{key}' list")
    return list(doc[key])


def _names(items: list[Any], where: str, what: str) -> tuple[str, ...]:
    out: list[str] = []
    for i, v in enumerate(items):
        name = v.get("name") if isinstance(v, Mapping) else v
        if not isinstance(name, str) or not name:
            raise FluxError(f"{where}: {what}[{i}]: name must be a non-empty string, got {name!r}")
        if name in out:
            raise FluxError(f"{where}: {what}[{i}]: name {name!r} repeats {what}[{out.index(name)}]")
        out.append(name)
    return tuple(out)


def read_instance(model_path: str | Path, demand_path: str | Path, supply_path: str | Path,
                  weights: Weights | None = None) -> Instance:  # fmt: skip
    model, demand, supply = load_json(model_path), load_json(demand_path), load_json(supply_path)
    mw, dw, sw = str(model_path), str(demand_path), str(supply_path)
    # supply: regions, hardware, pools
    regions = _names(_list(supply, "regions", sw), sw, "regions")
    hw_items = _list(supply, "hardware", sw)
    hardware = _names(hw_items, sw, "hardware")
    rru = np.array([number(h.get("rru_per_server", 1.0) if isinstance(h, Mapping) else 1.0,
                           f"{sw}: hardware[{i}] ({hardware[i]!r}): field 'rru_per_server'")
                    for i, h in enumerate(hw_items)])  # fmt: skip
    timesteps = _names(_list(demand, "timesteps", dw), dw, "timesteps")
    if len(timesteps) < 2:
        raise FluxError(
            f"{dw}: timesteps: need the baseline and at least one future timestep, got {list(timesteps)}"
        )
    R, H, T = len(regions), len(hardware), len(timesteps)
    r_of = {n: i for i, n in enumerate(regions)}
    h_of = {n: i for i, n in enumerate(hardware)}
    t_of = {n: i for i, n in enumerate(timesteps)}
    sup = np.full((R, H, T), np.nan)
    for i, row in enumerate(_list(supply, "supply", sw)):
        at = f"{sw}: supply[{i}]"
        if not isinstance(row, Mapping):
            raise FluxError(f"{at}: must be an object")
        for key, table in (("region", r_of), ("hardware", h_of), ("t", t_of)):
            if row.get(key) not in table:
                raise FluxError(f"{at}: field '{key}': unknown {key} {row.get(key)!r}")
        sup[r_of[row["region"]], h_of[row["hardware"]], t_of[row["t"]]] = number(
            row.get("available"), f"{at}: field 'available'"
        )
    missing = np.argwhere(np.isnan(sup))
    if len(missing):
        r, h, t = missing[0]
        raise FluxError(f"{sw}: supply: no row for region {regions[r]!r}, hardware {hardware[h]!r}, t {timesteps[t]!r} "
                        f"({len(missing)} missing)")  # fmt: skip
    # model: products, services, alpha
    products = _names(_list(model, "products", mw), mw, "products")
    p_of = {n: i for i, n in enumerate(products)}
    m_services = _list(model, "services", mw)
    m_names = _names(m_services, mw, "services")
    # demand: products (must match the model's), services (must match the model's)
    d_products = _list(demand, "products", dw)
    d_pnames = _names(d_products, dw, "products")
    for i, n in enumerate(d_pnames):
        if n not in p_of:
            raise FluxError(f"{dw}: products[{i}] ({n!r}): the model {mw} does not know this product")
    for i, n in enumerate(products):
        if n not in d_pnames:
            raise FluxError(f"{mw}: products[{i}] ({n!r}): the demand {dw} has no baseline for this product")
    d_services = _list(demand, "services", dw)
    d_snames = _names(d_services, dw, "services")
    for i, n in enumerate(m_names):
        if n not in d_snames:
            raise FluxError(
                f"{mw}: services[{i}] ({n!r}): a model for a service the demand {dw} does not know"
            )
    for i, n in enumerate(d_snames):
        if n not in m_names:
            raise FluxError(f"{dw}: services[{i}] ({n!r}): the model {mw} has no entry for this service")
    services = d_snames
    S, P = len(services), len(products)
    alpha = np.zeros((S, P))
    metric = [""] * S
    s_of = {n: i for i, n in enumerate(services)}
    for i, entry in enumerate(m_services):
        at = f"{mw}: services[{i}] ({m_names[i]!r})"
        a = entry.get("alpha")
        if not isinstance(a, Mapping):
            raise FluxError(f"{at}: field 'alpha' must be an object {{product: units}}")
        for p, v in a.items():
            if p not in p_of:
                raise FluxError(f"{at}: field 'alpha': unknown product {p!r}")
            alpha[s_of[m_names[i]], p_of[p]] = number(v, f"{at}: field 'alpha[{p!r}]'")
        metric[s_of[m_names[i]]] = str(entry.get("metric", ""))
    xi = np.zeros((P, R))
    tau = np.zeros((P, T))
    for i, entry in enumerate(d_products):
        at = f"{dw}: products[{i}] ({d_pnames[i]!r})"
        p = p_of[d_pnames[i]]
        base = entry.get("baseline")
        if not isinstance(base, Mapping):
            raise FluxError(f"{at}: field 'baseline' must be an object {{region: share}}")
        for r, v in base.items():
            if r not in r_of:
                raise FluxError(f"{at}: field 'baseline': unknown region {r!r}")
            xi[p, r_of[r]] = number(v, f"{at}: field 'baseline[{r!r}]'")
        tau[p] = _series(entry.get("growth"), T, f"{at}: field 'growth'", lo=-1.0)
        tau[p, 0] = xi[p].sum() - 1.0
        if abs(tau[p, 0]) > 1e-6:
            raise FluxError(f"{at}: field 'baseline': shares sum to {xi[p].sum():.6f}, expected 1")
    kappa = np.zeros((S, R, H))
    ratio = np.zeros((S, H))
    gamma = np.zeros((S, T))
    flags: list[ServiceFlags] = []
    for i, entry in enumerate(d_services):
        at = f"{dw}: services[{i}] ({d_snames[i]!r})"
        rat = entry.get("ratio")
        if not isinstance(rat, Mapping) or not rat:
            raise FluxError(f"{at}: field 'ratio' must be a non-empty object {{hardware: units per RRU}}")
        for h, v in rat.items():
            if h not in h_of:
                raise FluxError(f"{at}: field 'ratio': unknown hardware {h!r}")
            ratio[i, h_of[h]] = number(v, f"{at}: field 'ratio[{h!r}]'")
        base = entry.get("baseline", {})
        if not isinstance(base, Mapping):
            raise FluxError(f"{at}: field 'baseline' must be an object {{region: {{hardware: RRU}}}}")
        for r, per_h in base.items():
            if r not in r_of or not isinstance(per_h, Mapping):
                raise FluxError(f"{at}: field 'baseline': unknown region {r!r} or not an object")
            for h, v in per_h.items():
                if h not in h_of:
                    raise FluxError(f"{at}: field 'baseline[{r!r}]': unknown hardware {h!r}")
                amount = number(v, f"{at}: field 'baseline[{r!r}][{h!r}]'")
                if amount > 0 and ratio[i, h_of[h]] <= 0:
                    raise FluxError(
                        f"{at}: field 'baseline[{r!r}][{h!r}]': the service has no ratio for {h!r}"
                    )
                kappa[i, r_of[r], h_of[h]] = amount
        gamma[i] = _series(entry.get("growth"), T, f"{at}: field 'growth'")
        flags.append(ServiceFlags(opt_out=bool(entry.get("opt_out", False)), review=bool(entry.get("review", False)),
                                  keep_residual=bool(entry.get("keep_residual", False))))  # fmt: skip
    return Instance(regions=regions, services=services, hardware=hardware, products=products, timesteps=timesteps,
                    alpha=alpha, ratio=ratio, kappa=kappa, xi=xi, tau=tau, gamma=gamma, supply=sup,
                    flags=tuple(flags), rru_per_server=rru, metric=tuple(metric),
                    weights=weights or Weights())  # fmt: skip


def _series(v: Any, T: int, where: str, *, lo: float = 0.0) -> np.ndarray:
    if v is None:
        return np.zeros(T)
    if not isinstance(v, list) or len(v) != T:
        raise FluxError(f"{where}: expected a list of {T} numbers (one per timestep), got {v!r}")
    return np.array([number(x, f"{where}[{k}]", lo=lo) for k, x in enumerate(v)])


def instance_docs(inst: Instance) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """(model, demand, supply) documents of an instance (the inverse of ``read_instance``)."""
    S, R, H, P, T = inst.shape
    model = {
        "products": list(inst.products),
        "services": [
            {"name": inst.services[s], "metric": inst.metric[s] if inst.metric else "given",
             "alpha": {inst.products[p]: float(inst.alpha[s, p]) for p in range(P) if inst.alpha[s, p] > 0}}
            for s in range(S)
        ],
    }  # fmt: skip
    demand = {
        "timesteps": list(inst.timesteps),
        "products": [
            {"name": inst.products[p], "baseline": {inst.regions[r]: float(inst.xi[p, r]) for r in range(R)},
             "growth": [0.0] + [float(v) for v in inst.tau[p, 1:]]}
            for p in range(P)
        ],
        "services": [
            {"name": inst.services[s],
             "ratio": {inst.hardware[h]: float(inst.ratio[s, h]) for h in range(H) if inst.ratio[s, h] > 0},
             "baseline": {inst.regions[r]: {inst.hardware[h]: float(inst.kappa[s, r, h]) for h in range(H)
                                            if inst.kappa[s, r, h] > 0} for r in range(R)},
             "growth": [float(v) for v in inst.gamma[s]],
             "opt_out": inst.flags[s].opt_out, "review": inst.flags[s].review,
             "keep_residual": inst.flags[s].keep_residual}
            for s in range(S)
        ],
    }  # fmt: skip
    supply = {
        "regions": list(inst.regions),
        "hardware": [{"name": inst.hardware[h], "rru_per_server": float(inst.rru_per_server[h])} for h in range(H)],
        "supply": [
            {"region": inst.regions[r], "hardware": inst.hardware[h], "t": inst.timesteps[t],
             "available": float(inst.supply[r, h, t])}
            for r in range(R) for h in range(H) for t in range(T)
        ],
    }  # fmt: skip
    return model, demand, supply


def write_inputs(directory: str | Path, inst: Instance) -> None:
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    for name, doc in zip((MODEL_FILE, DEMAND_FILE, SUPPLY_FILE), instance_docs(inst), strict=True):
        write_json(d / name, doc)

"""Baseline adjustment: start a plan from a previous plan's executed step or the ledger's events.

Flux executes only the next timestep of a plan; the next cycle's baseline is the state after it.
``rebase`` replaces the instance's baseline capacity and traffic with the previous plan's state at
its ``timesteps[1]``; ``apply_events`` applies the ledger's resize / shift events (proposed, active
or succeeded; failed ones are left out) on top, so planning overlaps execution.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from placement_service.capacity.flux import FluxError
from placement_service.capacity.flux.domain import Instance


def rebase(inst: Instance, previous: Mapping[str, Any], where: str = "previous plan") -> Instance:
    """The instance with its baseline set to ``previous``'s state at its first planned timestep."""
    times = list(previous.get("timesteps") or [])
    if len(times) < 2:
        raise FluxError(f"{where}: field 'timesteps': needs at least two timesteps")
    t1 = times[1]
    S, R, H, P, T = inst.shape
    s_of = {n: i for i, n in enumerate(inst.services)}
    r_of = {n: i for i, n in enumerate(inst.regions)}
    h_of = {n: i for i, n in enumerate(inst.hardware)}
    p_of = {n: i for i, n in enumerate(inst.products)}
    kappa = inst.kappa.copy()
    rows = [row for row in previous.get("capacity", []) if row.get("t") == t1]
    for s in {row["service"] for row in rows if row.get("service") in s_of}:
        kappa[s_of[s]] = 0.0
    for row in rows:
        if row.get("service") in s_of and row.get("region") in r_of and row.get("hardware") in h_of:
            kappa[s_of[row["service"]], r_of[row["region"]], h_of[row["hardware"]]] = float(row["amount"])
    xi = inst.xi.copy()
    shares = np.zeros((P, R))
    seen = np.zeros(P, dtype=bool)
    for row in previous.get("traffic", []):
        if row.get("t") == t1 and row.get("product") in p_of and row.get("region") in r_of:
            shares[p_of[row["product"]], r_of[row["region"]]] = float(row["share"])
            seen[p_of[row["product"]]] = True
    tot = shares.sum(axis=1)
    ok = seen & (tot > 0)
    xi[ok] = shares[ok] / tot[ok, None]
    return replace(inst, kappa=kappa, xi=xi)


def apply_events(inst: Instance, events: Iterable[Mapping[str, Any]]) -> Instance:
    """Apply future resize / shift events (ledger rows, payload decoded) to the baseline."""
    s_of = {n: i for i, n in enumerate(inst.services)}
    r_of = {n: i for i, n in enumerate(inst.regions)}
    h_of = {n: i for i, n in enumerate(inst.hardware)}
    p_of = {n: i for i, n in enumerate(inst.products)}
    kappa = inst.kappa.copy()
    xi = inst.xi.copy()
    changed_p: set[int] = set()
    for ev in sorted(events, key=lambda e: (e["timestamp"], e["id"])):
        if ev["state"] == "failed":
            continue
        pl = ev["payload"]
        if (
            ev["kind"] == "resize"
            and pl.get("service") in s_of
            and pl.get("region") in r_of
            and pl.get("hardware") in h_of
        ):
            kappa[s_of[pl["service"]], r_of[pl["region"]], h_of[pl["hardware"]]] = float(pl["amount"])
        elif ev["kind"] == "shift" and pl.get("product") in p_of and pl.get("region") in r_of:
            xi[p_of[pl["product"]], r_of[pl["region"]]] = float(pl["share"])
            changed_p.add(p_of[pl["product"]])
    for p in changed_p:
        tot = xi[p].sum()
        if tot > 0:
            xi[p] /= tot
    return replace(inst, kappa=kappa, xi=xi)

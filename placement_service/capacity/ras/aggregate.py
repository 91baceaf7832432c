"""Symmetry aggregation: servers that are interchangeable in every constraint become one class.

Two available servers are interchangeable for the first phase when they share hardware, datacenter
and MSB: they have the same RRU value for every reservation and fall in the same failure and affinity
groups. The model then decides integer *counts* ``y[c, e]`` (servers of class ``c`` given to entity
``e``) instead of one binary per server and reservation. Move costs stay exact: within a class, the
servers that leave an entity are its idle ones first, so the cost of ``k`` departures from ``P``
previous servers of which ``P_idle`` are idle is ``idle * min(k, P_idle) + in_use * max(0, k - P_idle)``,
a convex piecewise-linear function the model expresses with two continuous variables.

Entities are the reservations (indices ``0..R-1``) followed by one shared random-failure buffer per
hardware type (``R..R+H-1``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from placement_service.capacity.ras.domain import Problem, shared_buffer_name


@dataclass(frozen=True)
class Aggregate:
    """Classes, entities and the eligible (class, entity) pairs of one problem.

    Pair arrays (index p): ``pair_class[p]``, ``pair_entity[p]``, ``pair_value[p]`` (RRU of one server
    of the class for the entity; 1 for shared buffers), ``pair_prev[p]`` / ``pair_prev_idle[p]``
    (available servers of the class previously in the entity, and how many of those are idle).
    """

    class_hw: np.ndarray
    class_dc: np.ndarray
    class_msb: np.ndarray
    class_size: np.ndarray  # available servers per class
    server_class: np.ndarray  # per server: class index, -1 when unavailable
    entity_names: tuple[str, ...]
    n_reservations: int
    capacity_rru: np.ndarray  # per reservation
    mean_rru: np.ndarray  # per reservation, RRU per server used to convert RRU costs to servers
    buffer_need: np.ndarray  # per hardware type: servers required in the shared buffer
    pair_class: np.ndarray
    pair_entity: np.ndarray
    pair_value: np.ndarray
    pair_prev: np.ndarray
    pair_prev_idle: np.ndarray
    prev_entity: np.ndarray  # per server: previous entity index, -1 none, -2 an entity that no longer exists
    fixed: np.ndarray  # per entity: True when its previous counts are kept as they are
    dc_share: np.ndarray  # [reservation, datacenter] affinity share A_{r,D}; NaN row = no affinity
    n_msb: int
    n_dc: int

    @property
    def n_classes(self) -> int:
        return len(self.class_size)

    @property
    def n_entities(self) -> int:
        return len(self.entity_names)

    @property
    def n_pairs(self) -> int:
        return len(self.pair_class)


def shared_buffer_need(available_servers: int, fraction: float) -> int:
    """Servers of one hardware type held in the shared buffer: ceil(fraction * available servers)."""
    return int(math.ceil(fraction * available_servers - 1e-9))


def aggregate(problem: Problem) -> Aggregate:
    """Build the classes and eligible pairs; previous counts come from ``problem.previous``."""
    region, requests = problem.region, problem.requests
    n_hw = len(region.hardware_names)
    avail = region.available.astype(bool)
    # 1. classes: (hardware, datacenter, msb) of available servers (one class per server when the
    #    settings turn symmetry aggregation off: the plain per-server model, for comparison)
    if problem.settings.aggregate_symmetric:
        key = (region.hardware.astype(np.int64) * len(region.datacenter_names) + region.datacenter) * len(
            region.msb_names
        ) + region.msb
    else:
        key = np.arange(len(region), dtype=np.int64)
    uniq, first, inverse = np.unique(key[avail], return_index=True, return_inverse=True)
    server_class = np.full(len(region), -1, dtype=np.int64)
    server_class[avail] = inverse
    n_msb, n_dc = len(region.msb_names), len(region.datacenter_names)
    members = np.flatnonzero(avail)[first]
    class_msb = region.msb[members].astype(np.int64)
    class_dc = region.datacenter[members].astype(np.int64)
    class_hw = region.hardware[members].astype(np.int64)
    class_size = np.bincount(inverse, minlength=len(uniq)).astype(np.int64)
    # 2. entities: reservations then shared buffers
    names = tuple(r.id for r in requests) + tuple(shared_buffer_name(h) for h in region.hardware_names)
    entity_of = {n: i for i, n in enumerate(names)}
    prev_entity = np.full(len(region), -1, dtype=np.int64)
    for s, i in region.index().items():
        e = problem.previous.get(s)
        if e is not None:
            prev_entity[i] = entity_of.get(e, -2)
    # 3. eligible pairs and their RRU values
    hw_of = {h: k for k, h in enumerate(region.hardware_names)}
    dc_of = {d: k for k, d in enumerate(region.datacenter_names)}
    pc: list[np.ndarray] = []
    pe: list[np.ndarray] = []
    pv: list[np.ndarray] = []
    for r, req in enumerate(requests):
        value_of_hw = np.zeros(n_hw)
        for h, v in req.rru.items():
            if h in hw_of and v > 0:
                value_of_hw[hw_of[h]] = v
        ok = value_of_hw[class_hw] > 0
        if req.datacenter_affinity is not None:
            dc_ok = np.zeros(n_dc, dtype=bool)
            for d, share in req.datacenter_affinity.items():
                if d in dc_of and share > 0:
                    dc_ok[dc_of[d]] = True
            ok &= dc_ok[class_dc]
        cls = np.flatnonzero(ok)
        pc.append(cls)
        pe.append(np.full(len(cls), r))
        pv.append(value_of_hw[class_hw[cls]])
    for hw_code in range(n_hw):
        cls = np.flatnonzero(class_hw == hw_code)
        pc.append(cls)
        pe.append(np.full(len(cls), len(requests) + hw_code))
        pv.append(np.ones(len(cls)))
    pair_class = np.concatenate(pc).astype(np.int64) if pc else np.zeros(0, np.int64)
    pair_entity = np.concatenate(pe).astype(np.int64) if pe else np.zeros(0, np.int64)
    pair_value = np.concatenate(pv).astype(float) if pv else np.zeros(0)
    # 4. previous counts per pair (available servers only; ineligible previous pairs are simply lost)
    n_ent = len(names)
    prev = np.zeros((len(uniq), n_ent), dtype=np.int64)
    prev_idle = np.zeros((len(uniq), n_ent), dtype=np.int64)
    has = avail & (prev_entity >= 0)
    np.add.at(prev, (server_class[has], prev_entity[has]), 1)
    idle = has & ~region.in_use.astype(bool)
    np.add.at(prev_idle, (server_class[idle], prev_entity[idle]), 1)
    buffer_need = np.array(
        [
            shared_buffer_need(int(np.sum(class_size[class_hw == h])), problem.settings.random_failure_buffer)
            for h in range(n_hw)
        ],
        dtype=np.int64,
    )
    dc_share = np.full((len(requests), n_dc), np.nan)
    for r, req in enumerate(requests):
        if req.datacenter_affinity is not None:
            dc_share[r] = 0.0
            for d, share in req.datacenter_affinity.items():
                if d in dc_of:
                    dc_share[r, dc_of[d]] = share
    return Aggregate(
        class_hw=class_hw,
        class_dc=class_dc,
        class_msb=class_msb,
        class_size=class_size,
        server_class=server_class,
        entity_names=names,
        n_reservations=len(requests),
        capacity_rru=np.array([r.capacity_rru for r in requests], dtype=float),
        mean_rru=np.array([r.mean_rru() for r in requests], dtype=float),
        buffer_need=buffer_need,
        pair_class=pair_class,
        pair_entity=pair_entity,
        pair_value=pair_value,
        pair_prev=prev[pair_class, pair_entity],
        pair_prev_idle=prev_idle[pair_class, pair_entity],
        prev_entity=prev_entity,
        fixed=np.zeros(n_ent, dtype=bool),
        dc_share=dc_share,
        n_msb=n_msb,
        n_dc=n_dc,
    )


def with_fixed(agg: Aggregate, fixed: np.ndarray) -> Aggregate:
    """A copy of ``agg`` whose entities marked in ``fixed`` keep their previous counts."""
    from dataclasses import replace

    return replace(agg, fixed=fixed.astype(bool))

"""Integer counts per (class, entity) -> concrete servers, moving as few as possible.

Per class, in three steps:
  1. each entity keeps up to its count of the servers it held before, in-use ones first (so the
     servers that leave are idle ones, exactly as the model costed them);
  2. the class's other servers form a pool ordered by move cost: servers that leave an entity anyway,
     then idle unassigned ones, then in-use unassigned ones;
  3. each entity still short takes from the pool, cheapest tier first and, within a tier, from the
     rack where it holds the fewest servers (spreads every reservation over racks).
"""

from __future__ import annotations

import heapq
from collections import defaultdict

import numpy as np

from placement_service.capacity.ras.aggregate import Aggregate
from placement_service.capacity.ras.domain import Region


def disaggregate(region: Region, agg: Aggregate, y: np.ndarray) -> np.ndarray:
    """Entity index per server (-1: none) with ``y[p]`` servers of class ``pair_class[p]`` per pair."""
    assign = np.full(len(region), -1, dtype=np.int64)
    in_use = region.in_use.astype(bool)
    prev = agg.prev_entity
    rack = region.rack
    avail_idx = np.flatnonzero(agg.server_class >= 0)
    by_class = avail_idx[np.argsort(agg.server_class[avail_idx], kind="stable")]
    bounds = np.searchsorted(agg.server_class[by_class], np.arange(agg.n_classes + 1))
    pair_order = np.argsort(agg.pair_class, kind="stable")
    pbounds = np.searchsorted(agg.pair_class[pair_order], np.arange(agg.n_classes + 1))
    rack_count: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for c in range(agg.n_classes):
        servers = by_class[bounds[c] : bounds[c + 1]]
        pairs = pair_order[pbounds[c] : pbounds[c + 1]]
        pairs = pairs[y[pairs] > 0]
        kept = np.zeros(len(servers), dtype=bool)
        need: list[tuple[int, int]] = []
        # 1. keep previous servers, in-use first
        for p in pairs:
            e = int(agg.pair_entity[p])
            mine = np.flatnonzero(prev[servers] == e)
            mine = mine[np.argsort(~in_use[servers[mine]], kind="stable")]
            keep = mine[: int(y[p])]
            kept[keep] = True
            assign[servers[keep]] = e
            for s in servers[keep]:
                rack_count[e][int(rack[s])] += 1
            if int(y[p]) > len(keep):
                need.append((e, int(y[p]) - len(keep)))
        if not need:
            continue
        # 2. pool by move-cost tier: leaving anyway (0), idle unassigned (1), in-use unassigned (2)
        pool = servers[~kept]
        tier = np.where(prev[pool] != -1, 0, np.where(in_use[pool], 2, 1))
        tiers = [pool[tier == t] for t in (0, 1, 2)]
        buckets = [_by_rack(t_servers, rack) for t_servers in tiers]
        # 3. fill, cheapest tier first, least-used rack first
        for e, k in need:
            for b in buckets:
                if k == 0:
                    break
                k -= _take(b, k, e, assign, rack_count[e])
    return assign


def _by_rack(servers: np.ndarray, rack: np.ndarray) -> dict[int, list[int]]:
    out: dict[int, list[int]] = defaultdict(list)
    for s in servers[::-1]:  # pop() takes from the end: keep the original order
        out[int(rack[s])].append(int(s))
    return out


def _take(bucket: dict[int, list[int]], k: int, e: int, assign: np.ndarray, counts: dict[int, int]) -> int:
    heap = [(counts[r], r) for r, lst in bucket.items() if lst]
    heapq.heapify(heap)
    taken = 0
    while heap and taken < k:
        n, r = heapq.heappop(heap)
        s = bucket[r].pop()
        assign[s] = e
        counts[r] = n + 1
        taken += 1
        if bucket[r]:
            heapq.heappush(heap, (n + 1, r))
    return taken

"""Generic partitioning of a granular allocation problem into k sub-problems (pure, numbers in and out).

The three steps every POP application shares, independent of the formulation it wraps:

- :func:`split_clients`: client splitting. A heap on the splitting attribute (the client's demand);
  the largest virtual client is halved, and the two halves pushed back, until the number of extra
  virtual clients reaches ``threshold * number of clients``. Halving keeps the total demand, so an
  allocation that serves every virtual client serves the real one.
- :func:`split_resource`: resource splitting. ``count`` units (servers of one equivalence class, a
  buffer, a capacity) are divided over k parts: ``count // k`` each, the ``count % k`` remainders
  given to parts in a seeded order so the spread is deterministic and no part gets two more than
  another.
- :func:`partition`: clients to parts at random (seeded). With ``weight`` (one row per client, one
  column per resource type, normalised by ``supply``), clients are placed largest first onto the part
  where they add the least to the sum of squared normalised loads (every type kept even), ties
  broken by the seeded order; without it, a plain
  seeded round-robin of a random permutation (equal numbers of clients per part).

:func:`coalesce` sums the virtual clients' allocations back onto their real client.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from placement_service.capacity import CapacityError


class PopError(CapacityError):
    """Bad POP parameters (k, threshold) for the given problem."""


@dataclass(frozen=True)
class VirtualClient:
    """One piece of a client: ``share`` of its demand (1.0 when it was not split)."""

    client: int  # index of the real client
    piece: int  # 0.. within the client
    share: float


def split_clients(
    demand: Sequence[float] | np.ndarray, threshold: float, limit: float = float("inf"),
    min_piece: Sequence[float] | np.ndarray | None = None,
) -> list[VirtualClient]:
    """Virtual clients after splitting: halve the largest until ``floor(threshold * n)`` extra exist,
    and further while the largest piece's demand is above ``limit`` (a piece that would not fit in one
    sub-problem). A piece smaller than twice its client's ``min_piece`` is not halved.

    Ties between equal demands are broken by client index (deterministic). ``threshold = 0`` and no
    ``limit`` leave every client whole.
    """
    d = np.asarray(demand, dtype=float)
    if threshold < 0:
        raise PopError(f"split threshold must be >= 0, got {threshold}")
    n = len(d)
    extra = int(np.floor(threshold * n + 1e-9))
    heap: list[tuple[float, int, float]] = [(-float(d[i]), i, 1.0) for i in range(n)]
    heapq.heapify(heap)
    floor = np.zeros(n) if min_piece is None else np.asarray(min_piece, dtype=float)
    made = 0
    whole: list[tuple[float, int, float]] = []
    while heap and -heap[0][0] > 0 and (made < extra or -heap[0][0] > limit):
        neg, i, share = heapq.heappop(heap)
        if -neg / 2 < floor[i]:
            whole.append((neg, i, share))
            continue
        made += 1
        heapq.heappush(heap, (neg / 2, i, share / 2))
        heapq.heappush(heap, (neg / 2, i, share / 2))
    heap += whole
    out: dict[int, list[float]] = {}
    for _neg, i, share in heap:
        out.setdefault(i, []).append(share)
    return [VirtualClient(i, j, s) for i in range(n) for j, s in enumerate(sorted(out.get(i, []), reverse=True))]


def split_resource(count: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """Units per part: ``count // k`` each, the remainder to ``count % k`` parts in seeded order."""
    base = np.full(k, count // k, dtype=np.int64)
    base[rng.permutation(k)[: count % k]] += 1
    return base


def partition(
    n_clients: int,
    k: int,
    seed: int,
    weight: np.ndarray | None = None,
    supply: np.ndarray | None = None,
) -> np.ndarray:
    """Part index (0..k-1) per client; see the module docstring for the two modes."""
    if k < 1:
        raise PopError(f"k must be >= 1, got {k}")
    rng = np.random.default_rng(seed)
    order = rng.permutation(n_clients)
    part = np.empty(n_clients, dtype=np.int64)
    if weight is None:
        part[order] = np.arange(n_clients) % k
        return part
    w = np.asarray(weight, dtype=float).reshape(n_clients, -1)
    s = np.ones(w.shape[1]) if supply is None else np.maximum(np.asarray(supply, dtype=float), 1e-12)
    load = np.zeros((k, w.shape[1]))
    size = w.sum(axis=1)
    for c in order[np.argsort(-size[order], kind="stable")]:
        grow = (((load + w[c]) / s) ** 2 - (load / s) ** 2).sum(axis=1)
        j = int(np.argmin(grow))
        part[c] = j
        load[j] += w[c]
    return part


def coalesce(parts: Sequence[Mapping[str, str | None]], owner: Mapping[str, str]) -> dict[str, str | None]:
    """One assignment from the parts' assignments: each virtual client name mapped back to its owner.

    ``parts`` assign disjoint resources; a resource named twice is a bug in the partition (raises).
    """
    out: dict[str, str | None] = {}
    for a in parts:
        for s, e in a.items():
            if s in out:
                raise PopError(f"resource {s} appears in two sub-problems")
            out[s] = owner.get(e, e) if e is not None else None
    return out

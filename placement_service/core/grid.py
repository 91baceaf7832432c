"""The 3x3 replica-placement grid: reimage-frequency rows x peak-CPU columns, equal storage per cell.

Replica placement spreads a block's replicas over cells of this grid so that no two replicas share a
reimage-frequency group (durability) or a peak-CPU group (availability). Each cell should hold the
same share of the storage that primary tenants let HDFS use, so that no cell fills up long before the
others, and a tenant is never split across cells (splitting would let two replicas land in one
tenant, which defeats the diversity the grid is for).

Procedure (pure and deterministic; numbers in, cells out):

1. Weigh every tenant by its available storage ``storage_gb`` (when every tenant has 0 GB, every
   tenant weighs 1, so the grid still splits the tenants evenly by count).
2. Rows: sort the tenants by reimage rate ascending (ties broken by a stable hash of the tenant name,
   then the name, so tied tenants are not grouped by how they happen to be named). Walk the sorted
   list accumulating weight; a tenant whose weight midpoint ``cum_before + w / 2`` lies in
   ``[i * W / 3, (i + 1) * W / 3)`` of the total weight ``W`` goes to row ``i``
   (0 = infrequent, 1 = intermediate, 2 = frequent reimages).
3. Columns: within each row separately, sort that row's tenants by peak CPU ascending (same tie
   breaking) and cut the row's own weight into thirds with the same midpoint rule (0 = low peak,
   1 = medium, 2 = high). Column boundaries therefore differ from row to row, which is what keeps
   every cell near ``W / 9``.

Properties: rows and columns are contiguous in the sort order, so every tenant of row ``r`` has a
reimage rate <= every tenant of row ``r + 1`` (and likewise for columns within a row). The midpoint
rule puts a tenant that straddles a boundary on the side holding most of it, so a row deviates from
``W / 3`` by at most the largest tenant's weight, and a cell from ``W / 9`` by at most ``4/3`` of it.
A tenant larger than a third of the total takes its row on its own and may leave a neighbouring row
(or cell) empty: replica placement then skips empty cells; the grid never splits a tenant to fill
them.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence

import numpy as np

from placement_service.core.types import GridCell, PolicyError

N_GROUPS = 3


def build_grid(
    reimage_rate: Mapping[str, float],
    peak_cpu: Mapping[str, float],
    storage_gb: Mapping[str, float],
) -> dict[str, GridCell]:
    """Assign each tenant one cell of the 3x3 grid (see the module docstring for the procedure).

    ``reimage_rate``: reimages per server per month of each tenant; ``peak_cpu``: the tenant's peak
    CPU fraction (0..1); ``storage_gb``: the storage the tenant lets HDFS use, summed over its
    servers. All three must name the same tenants; values must be finite and >= 0.
    """
    tenants = sorted(reimage_rate)
    _check_inputs(tenants, reimage_rate, peak_cpu, storage_gb)
    if not tenants:
        return {}
    weight = np.array([float(storage_gb[t]) for t in tenants], dtype=np.float64)
    if weight.sum() <= 0.0:
        weight = np.ones(len(tenants), dtype=np.float64)
    tie = [_tie_key(t) for t in tenants]

    # Step 2: rows by reimage rate.
    row_order = sorted(
        range(len(tenants)), key=lambda i: (float(reimage_rate[tenants[i]]), tie[i], tenants[i])
    )
    rows = _cut_thirds(weight[row_order])
    cells: dict[str, GridCell] = {}
    for row in range(N_GROUPS):
        members = [row_order[p] for p in np.flatnonzero(rows == row)]
        if not members:
            continue
        # Step 3: columns by peak CPU, within this row.
        col_order = sorted(members, key=lambda i: (float(peak_cpu[tenants[i]]), tie[i], tenants[i]))
        row_weight = weight[col_order]
        if row_weight.sum() <= 0.0:
            row_weight = np.ones(len(col_order), dtype=np.float64)
        cols = _cut_thirds(row_weight)
        for i, col in zip(col_order, cols, strict=True):
            cells[tenants[i]] = GridCell(reimage_row=row, peak_column=int(col))
    return cells


def cell_storage_gb(grid: Mapping[str, GridCell], storage_gb: Mapping[str, float]) -> np.ndarray:
    """Total storage per cell as a 3x3 array ``[reimage_row, peak_column]`` (GB)."""
    out = np.zeros((N_GROUPS, N_GROUPS), dtype=np.float64)
    for tenant, cell in grid.items():
        out[cell.reimage_row, cell.peak_column] += float(storage_gb.get(tenant, 0.0))
    return out


def _cut_thirds(weight: np.ndarray) -> np.ndarray:
    """Group index 0..2 of each item of an ordered list, cutting the total weight into thirds.

    Item ``i`` goes to group ``floor(3 * (cum_before_i + w_i / 2) / W)`` (clipped to 0..2), which is
    non-decreasing along the list, so groups are contiguous.
    """
    total = float(weight.sum())
    cum_before = np.cumsum(weight) - weight
    midpoint = (cum_before + weight / 2.0) / total
    return np.clip(np.floor(midpoint * N_GROUPS), 0, N_GROUPS - 1).astype(np.int64)


def _tie_key(tenant: str) -> int:
    """Stable (process-independent) hash of a tenant name, to break ties without name-order bias."""
    return int.from_bytes(hashlib.blake2b(tenant.encode("utf-8"), digest_size=8).digest(), "big")


def _check_inputs(
    tenants: Sequence[str],
    reimage_rate: Mapping[str, float],
    peak_cpu: Mapping[str, float],
    storage_gb: Mapping[str, float],
) -> None:
    names = set(tenants)
    for label, mapping in (("peak_cpu", peak_cpu), ("storage_gb", storage_gb)):
        missing = sorted(names - set(mapping))
        extra = sorted(set(mapping) - names)
        if missing or extra:
            raise PolicyError(
                f"build_grid: {label} must cover the same tenants as reimage_rate "
                f"(missing: {missing[:5]}{'...' if len(missing) > 5 else ''}, "
                f"unknown: {extra[:5]}{'...' if len(extra) > 5 else ''})"
            )
    for label, mapping in (
        ("reimage_rate", reimage_rate),
        ("peak_cpu", peak_cpu),
        ("storage_gb", storage_gb),
    ):
        for tenant in tenants:
            value = float(mapping[tenant])
            if not math.isfinite(value) or value < 0.0:
                raise PolicyError(
                    f"build_grid: {label}[{tenant!r}] must be a finite number >= 0, got {value}"
                )

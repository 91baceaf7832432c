"""How much ``harvest whatif`` simulates: block counts and horizons sized to the cluster.

A what-if runs interactively, so its durability and availability runs are sized to the cluster
they describe rather than fixed (a fixed 500,000 blocks was 100 blocks a server on 5,000 servers,
1,250 on 400, and 16 servers of 2 TB could not hold them: every read of a block that found no space
counted as a failed read). Rules, per run (a flag the user gives wins, within the storage bound):

1. **Storage bound**: the blocks must fit in ``STORAGE_FILL`` of the HDFS storage the inventory
   lends at the highest replication simulated::

       fit_blocks = STORAGE_FILL * sum_s floor(storage_gb_s * 1024 / block_mb) / max(replicas)

   Fewer than ``MIN_BLOCKS`` fit: the what-if refuses and says why (losses and failed reads of a
   few hundred blocks say nothing). A user's block count above the bound is refused too.
2. **Durability**: ``DURABILITY_BLOCKS_PER_SERVER`` blocks a server (the density of the former
   default on 5,000 servers), at most ``DURABILITY_MAX_BLOCKS`` and the storage bound; over
   ``durability_days`` (a year: reimages are rare, and losses are counted per year).
3. **Availability**: ``AVAILABILITY_BLOCKS_PER_SERVER`` blocks a server, at most
   ``AVAILABILITY_MAX_BLOCKS`` and the storage bound; accesses ``ACCESSES_PER_BLOCK`` per block, at
   most ``AVAILABILITY_MAX_ACCESSES``; over the data's days after the history, at most
   ``AVAILABILITY_MAX_DAYS``.

Every choice is written into the report (``RunSize.notes``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from placement_service import HarvestError
from placement_service.core.placement_base import MB_PER_GB
from placement_service.core.types import Inventory

STORAGE_FILL = 0.5
MIN_BLOCKS = 1_000
DURABILITY_BLOCKS_PER_SERVER = 100
DURABILITY_MAX_BLOCKS = 500_000
AVAILABILITY_BLOCKS_PER_SERVER = 100
AVAILABILITY_MAX_BLOCKS = 100_000
ACCESSES_PER_BLOCK = 5
AVAILABILITY_MAX_ACCESSES = 500_000
AVAILABILITY_MAX_DAYS = 21.0


class SizeError(HarvestError):
    """The cluster's storage cannot hold a useful simulation, or a requested block count does not fit."""


@dataclass(frozen=True)
class RunSize:
    durability_blocks: int
    durability_days: float
    availability_blocks: int
    availability_accesses: int
    availability_days: float
    fit_blocks: int
    """Blocks that fit in ``STORAGE_FILL`` of the storage at the highest replication."""
    notes: tuple[str, ...]
    """One sentence per choice, for the report."""


def storage_blocks(inventory: Inventory, block_size_mb: float, replicas: int) -> int:
    """Blocks of ``block_size_mb`` at ``replicas`` replicas the inventory's storage holds in all."""
    per_server = np.floor(np.asarray(inventory.storage_gb, dtype=np.float64) * MB_PER_GB / block_size_mb)
    return int(per_server.sum()) // max(1, int(replicas))


def size_runs(
    inventory: Inventory,
    *,
    replicas: tuple[int, ...],
    block_size_mb: float,
    sim_days: float,
    durability_days: float,
    durability_blocks: int | None = None,
    availability_blocks: int | None = None,
) -> RunSize:
    """The sizes of the module docstring; ``*_blocks``: the user's counts (None: sized here)."""
    n = len(inventory)
    r_max = max(replicas)
    total = storage_blocks(inventory, block_size_mb, r_max)
    fit = int(STORAGE_FILL * total)
    tb = float(np.sum(inventory.storage_gb)) / 1000.0
    where = (f"{n:,} servers lending {tb:,.1f} TB hold {total:,} blocks of {block_size_mb:g} MB at {r_max} "
             f"replicas; the simulations fill at most {100 * STORAGE_FILL:.0f}% ({fit:,} blocks)")
    if fit < MIN_BLOCKS:
        raise SizeError(
            f"{where}: fewer than {MIN_BLOCKS:,}, too few blocks for lost blocks or failed reads to mean "
            "anything. Check the inventory's storage_gb (HDFS storage each server lends) or simulate fewer "
            "replicas")
    for flag, given in (("--durability-blocks", durability_blocks), ("--availability-blocks", availability_blocks)):
        if given is not None and given > fit:
            raise SizeError(f"{flag} {given:,}: {where}; more would fail for want of space, which is not a "
                            "reimage loss or a busy read. Give at most that many")
    notes = [where + "."]
    if durability_blocks is None:
        dur = min(DURABILITY_MAX_BLOCKS, DURABILITY_BLOCKS_PER_SERVER * n, fit)
        notes.append(f"Durability: {dur:,} blocks ({DURABILITY_BLOCKS_PER_SERVER} a server, at most "
                     f"{DURABILITY_MAX_BLOCKS:,} and the storage bound; --durability-blocks to change) over "
                     f"{durability_days:g} days.")
    else:
        dur = int(durability_blocks)
        notes.append(f"Durability: {dur:,} blocks (--durability-blocks) over {durability_days:g} days.")
    if availability_blocks is None:
        av = min(AVAILABILITY_MAX_BLOCKS, AVAILABILITY_BLOCKS_PER_SERVER * n, fit)
    else:
        av = int(availability_blocks)
    av = max(1, av)
    accesses = min(AVAILABILITY_MAX_ACCESSES, ACCESSES_PER_BLOCK * av)
    av_days = min(sim_days, AVAILABILITY_MAX_DAYS)
    notes.append(f"Availability: {av:,} blocks" + (
        f" ({AVAILABILITY_BLOCKS_PER_SERVER} a server, at most {AVAILABILITY_MAX_BLOCKS:,} and the storage bound)"
        if availability_blocks is None else " (--availability-blocks)")
        + f", {accesses:,} reads over {av_days:.3g} days after the history.")
    return RunSize(dur, float(durability_days), av, accesses, float(av_days), fit, tuple(notes))

"""Why HDFS-H loses no block where HDFS-Stock does, on real-trace datacenters (issue 14, item 5).

Stock's losses on real-trace years are all one correlated event (an environment reimaged at once)
taking every replica of a block. HDFS-H keeps a block's replicas in distinct environments, first
placement and every re-replication alike, and (when the grid allows it) in distinct reimage rows,
so one replica always sits in the least-reimaged row: one event takes at most one replica, and a
loss needs independent events on three specific servers within the repair time. These tests pin
that structure on real-trace grids, so a regression in the placement rules is caught.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from placement_service.sim.datacenter import SimDatacenter
from placement_service.sim.durability import DurabilityConfig, simulate_durability
from placement_service.sim.policy import HdfsSystem, Placer, make_placer
from placement_service.sim.real import real_sim_datacenter
from placement_service.sim.run import system_grids, year_of_reimages
from placement_service.sim.streams import Streams

EXCERPT = Path(__file__).resolve().parents[1] / "fixtures" / "sim" / "azure_avg_10vms_7days.csv.gz"
AZURE = Path(__file__).resolve().parents[3] / "shared" / "data" / "cpu" / "azure_v1_microsoft_avg_100.csv.gz"


def _structure(dc: SimDatacenter) -> tuple[dict, np.ndarray, np.ndarray, np.ndarray]:  # type: ignore[type-arg]
    grid = system_grids(dc, dc.cpu, int(7 * 86400 / dc.series.interval_s), 0)[HdfsSystem.H]
    tenants = dc.inventory.tenant
    row = np.array([grid[t].reimage_row for t in tenants])
    col = np.array([grid[t].peak_column for t in tenants])
    env = np.unique(np.asarray(dc.inventory.environment, dtype=object), return_inverse=True)[1]
    return grid, row, col, env


def _distinct(values: np.ndarray) -> np.ndarray:
    """Per block (row of ``values``): are all its replicas' values different?"""
    return np.all(np.diff(np.sort(values, axis=1), axis=1) > 0, axis=1)


@pytest.mark.skipif(not AZURE.exists(), reason="needs ../shared/data")
def test_every_block_keeps_one_replica_per_row_and_environment_on_the_azure_grid() -> None:
    # 100 Azure VMs as tenants, 3 servers each, a year-long reimage log next to 28 days of CPU.
    dc = real_sim_datacenter("azure", n_servers=300, seed=1, path=AZURE, reimage_days=365)
    grid, row, col, env = _structure(dc)
    placer = make_placer(HdfsSystem.H, dc, grid, seed=3, block_size_mb=256.0)
    rng = np.random.default_rng(0)
    placed = placer.place_many_indices(rng.integers(0, dc.n_servers, 5000), 3, rng=rng)  # type: ignore[union-attr]
    assert not placed.failed.any() and not placed.relaxed.any()
    targets = placed.targets
    for _ in range(4):  # re-replication after a reimage must keep the structure, round after round
        assert np.all(np.sort(row[targets], axis=1) == [0, 1, 2])  # one replica in the least-reimaged row
        assert np.all(np.sort(col[targets], axis=1) == [0, 1, 2])
        assert _distinct(env[targets]).all()  # one environment-wide event takes at most one replica
        wiped = rng.integers(0, 3, len(targets))
        holders = targets.copy()
        holders[np.arange(len(targets)), wiped] = -1
        repaired = placer.place_one_more_indices(holders, rng=rng)  # type: ignore[union-attr]
        assert not repaired.failed.any() and not repaired.relaxed.any()
        holders[np.arange(len(targets)), wiped] = repaired.targets[:, 0]
        targets = holders


def test_a_degenerate_grid_relaxes_rows_but_never_environments_and_loses_nothing() -> None:
    # 10 real VMs, 3 environments, a grid row of one tenant: most blocks cannot get three rows.
    dc = real_sim_datacenter("azure", n_servers=60, seed=1, path=EXCERPT, reimage_days=365)
    grid, row, _, env = _structure(dc)
    assert sorted(np.bincount(row).tolist()) == [6, 18, 36]  # a row that is too small
    placer = make_placer(HdfsSystem.H, dc, grid, seed=3, block_size_mb=256.0)
    rng = np.random.default_rng(0)
    placed = placer.place_many_indices(rng.integers(0, dc.n_servers, 2000), 3, rng=rng)  # type: ignore[union-attr]
    assert placed.relaxed.mean() > 0.3 and not _distinct(row[placed.targets]).all()
    assert _distinct(env[placed.targets]).all()  # the environment rule is the last one relaxed

    streams = Streams(0, 0)
    schedule = year_of_reimages(dc, 365.0, streams.get("reimages"))
    shared_env_losses = {}
    lost = {}
    for system in (HdfsSystem.STOCK, HdfsSystem.H):
        wipes: dict[int, list[int]] = {}
        dead_blocks: list[int] = []

        def on_wipe(t: float, blocks: np.ndarray, servers: np.ndarray, dead: np.ndarray,
                    wipes: dict[int, list[int]] = wipes, dead_blocks: list[int] = dead_blocks) -> None:
            for b, s in zip(blocks.tolist(), servers.tolist(), strict=True):
                wipes.setdefault(b, []).append(s)
            dead_blocks.extend(dead.tolist())

        def factory(system: HdfsSystem = system) -> Placer:
            return make_placer(system, dc, grid, seed=1, block_size_mb=256.0)

        res = simulate_durability(
            dc, factory, system, 3, schedule, DurabilityConfig(days=365.0, blocks=4000),
            create_rng=streams.fresh("blocks"), place_rng=streams.fresh("placement"),
            repair_rng=streams.fresh("repair"), on_wipe=on_wipe,
        )
        lost[system] = res.lost_blocks
        shared_env_losses[system] = sum(len(set(env[wipes[b][-3:]].tolist())) < 3 for b in dead_blocks)
    # Stock loses blocks whose replicas shared an environment; HDFS-H keeps them apart and loses none.
    assert lost[HdfsSystem.STOCK] > 50 and shared_env_losses[HdfsSystem.STOCK] == lost[HdfsSystem.STOCK]
    assert lost[HdfsSystem.H] == 0 and shared_env_losses[HdfsSystem.H] == 0

"""Replica placement chooses the rest of a round jointly: a block relaxes only when no assignment
under all rules (distinct rows, columns and environments; usable, distinct servers) exists.

The brute force below enumerates every assignment of the block's servers on small grids with shared
environments and busy servers, and is compared with the placer's ``relaxed`` flag.
"""

from __future__ import annotations

import itertools

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from placement_service.core.placement import ReplicaPlacer
from placement_service.core.types import GridCell, PlacementError
from tests.core.test_placement import BLOCK_MB, Cluster, _check_round_diversity, clusters, make_inventory


def _assignment_exists(c: Cluster, placer: ReplicaPlacer, writer: str | None, replicas: int) -> bool:
    usable = [
        s
        for s in c.inventory.server
        if placer.free_mb(s) >= BLOCK_MB and s not in c.busy and s not in c.excluded
    ]
    in_grid = [s for s in usable if c.cell_of(s) is not None]
    fixed: tuple[str, ...] = (writer,) if writer in usable else ()
    for rest in itertools.combinations([s for s in in_grid if s not in fixed], replicas - len(fixed)):
        block = fixed + rest
        cells = [g for s in block if (g := c.cell_of(s)) is not None]
        if (
            len({c.env_of(s) for s in block}) == len(block)
            and len({g.reimage_row for g in cells}) == len(cells)
            and len({g.peak_column for g in cells}) == len(cells)
        ):
            return True
    return False


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=clusters(max_tenants=10), replicas=st.integers(2, 3), seed=st.integers(0, 2**16))
def test_relaxes_exactly_when_brute_force_finds_no_assignment(c: Cluster, replicas: int, seed: int) -> None:
    _check_relaxed_iff_no_assignment(c, ReplicaPlacer(c.inventory, c.grid, seed=seed), replicas, seed)


def _check_relaxed_iff_no_assignment(c: Cluster, placer: ReplicaPlacer, replicas: int, seed: int) -> None:
    for s in c.busy:
        placer.set_busy(s, True)
    rng = np.random.default_rng(seed)
    for writer in c.writers:
        exists = _assignment_exists(c, placer, writer, replicas)
        try:
            res = placer.place(writer, replicas, excluded=c.excluded, rng=rng)
        except PlacementError:
            assert not exists
            event("too few servers")
            continue
        event(f"assignment exists: {exists}")
        assert res.relaxed == (not exists), (writer, res)


def _one_tenant_cell() -> Cluster:
    """Writer in (0, 0). Cell (2, 2) has one tenant, in environment X, which tenant a of cell (1, 1)
    shares: replicas on (1, 1) and (2, 2) work only with b (environment Y) on (1, 1). The other
    pair of cells, (1, 2) and (2, 1), always works."""
    tenants = {
        "w": ((0, 0), "W"),
        "a": ((1, 1), "X"),
        "b": ((1, 1), "Y"),
        "c": ((2, 2), "X"),
        "d": ((1, 2), "X"),
        "f": ((2, 1), "Z"),
    }
    rows = [(f"{t}-s{k}", t, env, "r0", 100.0) for t, (_, env) in tenants.items() for k in range(2)]
    grid = {t: GridCell(*cell) for t, (cell, _) in tenants.items()}
    return Cluster(make_inventory(rows), grid, set(), set(), ["w-s0"])


def test_single_tenant_cell_sharing_an_environment_never_relaxes() -> None:
    c = _one_tenant_cell()
    relaxed = 0
    for seed in range(200):
        placer = ReplicaPlacer(c.inventory, c.grid, seed=seed)
        res = placer.place("w-s0", 3)
        relaxed += res.relaxed
        assert len({c.env_of(s) for s in res.targets}) == 3
    assert relaxed == 0


def test_busy_servers_count_in_the_joint_choice() -> None:
    # As above, but b's servers are busy: only (1, 2) + (2, 1) is left, and it is always found.
    c = _one_tenant_cell()
    for seed in range(100):
        placer = ReplicaPlacer(c.inventory, c.grid, seed=seed)
        placer.set_busy("b-s0", True)
        placer.set_busy("b-s1", True)
        res = placer.place("w-s0", 3)
        assert not res.relaxed, res.reason
        assert {c.tenant_of(s) for s in res.targets[1:]} == {"d", "f"}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    c=clusters(max_tenants=12), replicas=st.integers(1, 4), seed=st.integers(0, 2**16), dup=st.integers(1, 30)
)
def test_place_many_keeps_every_rule(c: Cluster, replicas: int, seed: int, dup: int) -> None:
    placer = ReplicaPlacer(c.inventory, c.grid, seed=seed)
    for s in c.busy:
        placer.set_busy(s, True)
    cap = {s: placer.free_mb(s) for s in c.inventory.server}
    writers = (c.writers * dup)[:60]  # the same writers again and again: space runs out mid-batch
    batch = placer.place_many(writers, replicas, rng=np.random.default_rng(seed))
    used = dict.fromkeys(c.inventory.server, 0.0)
    for b, writer in enumerate(writers):
        names = batch.names(c.inventory.server, b)
        if batch.failed[b]:
            assert names == () and "found" in batch.reasons[b]
            continue
        assert len(names) == replicas == len(set(names))
        assert not set(names) & c.busy
        for s in names:
            used[s] += BLOCK_MB
        if not batch.relaxed[b]:
            assert len({c.env_of(s) for s in names}) == replicas
            _check_round_diversity(c, names)
        else:
            assert batch.reasons[b]
        del writer
    for s in c.inventory.server:  # space taken exactly once per replica, never over the disk
        assert placer.free_mb(s) == cap[s] - used[s] >= 0.0


def test_place_many_on_a_full_grid_is_diverse_and_local() -> None:
    rows, grid = [], {}
    for cell in range(9):
        for j in range(4):
            tenant = f"c{cell}-t{j}"
            grid[tenant] = GridCell(cell // 3, cell % 3)
            rows.extend((f"{tenant}-s{k}", tenant, f"env-{tenant}", "r0", 20.0) for k in range(3))
    inv = make_inventory(rows)
    placer = ReplicaPlacer(inv, grid, seed=5)
    rng = np.random.default_rng(5)
    writers = [inv.server[i] for i in rng.integers(0, len(inv), 1500)]
    batch = placer.place_many(writers, 3, rng=rng)
    placed = ~batch.failed
    assert placed.all() and not batch.relaxed[placed].any()
    for b in np.flatnonzero(placed).tolist():
        names = batch.names(inv.server, b)
        if b < 100:
            assert names[0] == writers[b]  # early blocks: every writer still has space
        cells = [grid[inv.tenant[inv.server.index(s)]] for s in names]
        assert len({g.reimage_row for g in cells}) == 3 and len({g.peak_column for g in cells}) == 3
    assert min(placer.free_mb(s) for s in inv.server) >= 0.0


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    c=clusters(max_tenants=10),
    replicas=st.integers(2, 3),
    seed=st.integers(0, 2**16),
    masks=st.lists(st.integers(0, 7), min_size=10, max_size=10),
)
def test_busy_hour_preference_keeps_the_joint_rule(
    c: Cluster, replicas: int, seed: int, masks: list[int]
) -> None:
    busy_hours = {f"t{i}": m for i, m in enumerate(masks)}
    placer = ReplicaPlacer(c.inventory, c.grid, seed=seed, busy_hours=busy_hours)
    _check_relaxed_iff_no_assignment(c, placer, replicas, seed)


def test_busy_hours_keep_a_blocks_replicas_on_tenants_not_busy_together() -> None:
    # Every cell holds a tenant busy in the morning (bit 0) and one busy in the evening (bit 1).
    rows, grid, busy_hours = [], {}, {}
    for cell in range(9):
        for j, mask in enumerate((0b01, 0b10)):
            tenant = f"c{cell}-t{j}"
            grid[tenant] = GridCell(cell // 3, cell % 3)
            busy_hours[tenant] = mask
            rows.extend((f"{tenant}-s{k}", tenant, f"env-{tenant}", "r0", 100.0) for k in range(2))
    inv = make_inventory(rows)
    tenant_of = dict(zip(inv.server, inv.tenant, strict=True))
    plain = ReplicaPlacer(inv, grid, seed=3)
    timed = ReplicaPlacer(inv, grid, seed=3, busy_hours=busy_hours)
    rng_a, rng_b = np.random.default_rng(3), np.random.default_rng(3)
    all_busy_plain = all_busy_timed = 0
    for i in range(300):
        writer = inv.server[i % len(inv)]
        for placer, rng in ((plain, rng_a), (timed, rng_b)):
            res = placer.place(writer, 2, rng=rng)
            assert not res.relaxed
            both = busy_hours[tenant_of[res.targets[0]]] & busy_hours[tenant_of[res.targets[1]]]
            if placer is plain:
                all_busy_plain += both != 0
            else:
                all_busy_timed += both != 0
    assert all_busy_timed == 0 and all_busy_plain > 100  # about half of the blocks without the profiles


def test_batch_re_replication_keeps_every_rule() -> None:
    rows, grid = [], {}
    for cell in range(9):
        for j in range(3):
            tenant = f"c{cell}-t{j}"
            grid[tenant] = GridCell(cell // 3, cell % 3)
            env = f"env-{cell}-{j % 2}" if cell != 4 else "env-shared"  # cell (1, 1): one environment
            rows.extend((f"{tenant}-s{k}", tenant, env, "r0", 1.0) for k in range(2))
    inv = make_inventory(rows)
    placer = ReplicaPlacer(inv, grid, seed=7)
    rng = np.random.default_rng(7)
    holders = np.full((400, 3), -1, dtype=np.int64)
    for b in range(400):
        picks = rng.choice(len(inv), size=int(rng.integers(1, 3)), replace=False)
        holders[b, : picks.size] = picks
    free_before = [placer.free_mb(s) for s in inv.server]
    batch = placer.place_one_more_indices(holders, rng=rng)
    used = np.zeros(len(inv))
    for b in range(400):
        if batch.failed[b]:
            continue
        new = int(batch.targets[b, 0])
        used[new] += BLOCK_MB
        survivors = [int(x) for x in holders[b] if x >= 0]
        assert new not in survivors
        if not batch.relaxed[b]:  # the new replica avoids the survivors' environments, rows and columns
            cell = grid[inv.tenant[new]]
            assert inv.environment[new] not in {inv.environment[s] for s in survivors}
            assert cell.reimage_row not in {grid[inv.tenant[s]].reimage_row for s in survivors}
            assert cell.peak_column not in {grid[inv.tenant[s]].peak_column for s in survivors}
    for s, name in enumerate(inv.server):  # space: one block per new replica, never below zero
        assert placer.free_mb(name) == free_before[s] - used[s] >= 0.0
    assert (~batch.failed).sum() > 100 and (~batch.relaxed).sum() > 50

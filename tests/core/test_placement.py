"""Tests of placement_service/core/placement.py: grid replica placement (property and table tests)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from placement_service.core.placement import PlacementConfig, ReplicaPlacer
from placement_service.core.types import GridCell, Inventory, PlacementError, PolicyError

BLOCK_MB = 256.0


@dataclass
class Cluster:
    inventory: Inventory
    grid: dict[str, GridCell]
    busy: set[str]
    excluded: set[str]
    writers: list[str | None]

    def tenant_of(self, server: str) -> str:
        return self.inventory.tenant[self.inventory.server.index(server)]

    def env_of(self, server: str) -> str:
        return self.inventory.environment[self.inventory.server.index(server)]

    def cell_of(self, server: str) -> GridCell | None:
        return self.grid.get(self.tenant_of(server))


def make_inventory(rows: list[tuple[str, str, str, str, float]]) -> Inventory:
    """rows: (server, tenant, environment, rack, storage_gb)."""
    n = len(rows)
    return Inventory(
        server=tuple(r[0] for r in rows),
        tenant=tuple(r[1] for r in rows),
        environment=tuple(r[2] for r in rows),
        rack=tuple(r[3] for r in rows),
        cores=np.full(n, 16.0),
        memory_mb=np.full(n, 65536.0),
        storage_gb=np.array([r[4] for r in rows], dtype=np.float64),
    )


@st.composite
def clusters(draw: st.DrawFn, *, unique_envs: bool = False, max_tenants: int = 14) -> Cluster:
    n_tenants = draw(st.integers(1, max_tenants))
    n_envs = draw(st.integers(1, n_tenants))
    rows: list[tuple[str, str, str, str, float]] = []
    grid: dict[str, GridCell] = {}
    for t in range(n_tenants):
        tenant = f"t{t}"
        env = f"e{t}" if unique_envs else f"e{draw(st.integers(0, n_envs - 1))}"
        if draw(st.integers(0, 9)) > 0:  # one tenant in ten is not in the grid
            grid[tenant] = GridCell(draw(st.integers(0, 2)), draw(st.integers(0, 2)))
        for k in range(draw(st.integers(1, 4))):
            storage_gb = draw(st.sampled_from([0.0, 0.25, 0.5, 1.0, 0.3]))  # 0.3 GB: one block + a remainder
            rows.append((f"{tenant}-s{k}", tenant, env, f"r{len(rows) % 3}", storage_gb))
    servers = [r[0] for r in rows]
    busy = set(draw(st.lists(st.sampled_from(servers), max_size=3)))
    excluded = set(draw(st.lists(st.sampled_from(servers), max_size=2)))
    writers = draw(
        st.lists(
            st.one_of(st.none(), st.just("no-such-server"), st.sampled_from(servers)), min_size=1, max_size=6
        )
    )
    return Cluster(make_inventory(rows), grid, busy, excluded, writers)


def _usable(placer: ReplicaPlacer, c: Cluster, server: str) -> bool:
    return placer.free_mb(server) >= BLOCK_MB and server not in c.busy


def _check_round_diversity(c: Cluster, targets: tuple[str, ...], forget_every: int = 3) -> None:
    for start in range(0, len(targets), forget_every):
        cells = [c.cell_of(s) for s in targets[start : start + forget_every]]
        in_grid = [g for g in cells if g is not None]
        assert len({g.reimage_row for g in in_grid}) == len(in_grid), targets
        assert len({g.peak_column for g in in_grid}) == len(in_grid), targets


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(c=clusters(), replicas=st.integers(1, 5), strict=st.booleans(), seed=st.integers(0, 2**16))
def test_placement_invariants(c: Cluster, replicas: int, strict: bool, seed: int) -> None:
    placer = ReplicaPlacer(c.inventory, c.grid, config=PlacementConfig(strict=strict), seed=seed)
    for s in c.busy:
        placer.set_busy(s, True)
    rng = np.random.default_rng(seed)
    for writer in c.writers:
        before = {s: placer.free_mb(s) for s in c.inventory.server}
        usable = [s for s in c.inventory.server if _usable(placer, c, s) and s not in c.excluded]
        try:
            res = placer.place(writer, replicas, excluded=c.excluded, rng=rng)
        except PlacementError as exc:
            event("refused")
            # Refused only when too few servers have space, or by a strict constraint it names.
            if len(usable) < replicas:
                assert f"found {len(usable)}" in str(exc)
            else:
                assert strict and "constraint" in str(exc) or strict and "first replica" in str(exc)
            assert {s: placer.free_mb(s) for s in c.inventory.server} == before  # nothing allocated
            continue
        t = res.targets
        assert len(t) == replicas == len(set(t))  # distinct servers
        assert all(s in usable for s in t)  # never busy, excluded or without a block of space
        for s in c.inventory.server:  # exactly one block allocated per target, never below zero
            assert placer.free_mb(s) == pytest.approx(before[s] - (BLOCK_MB if s in t else 0.0))
            assert placer.free_mb(s) >= 0.0
        if writer in usable:
            assert t[0] == writer  # locality: the writer's own server first
        if strict:
            assert not res.relaxed
        if not res.relaxed:
            assert len({c.env_of(s) for s in t}) == len(t)  # distinct environments
            _check_round_diversity(c, t)
            first_is_writer = writer in usable
            assert all(c.cell_of(s) is not None for s in t[1 if first_is_writer else 0 :])
        else:
            assert res.reason


def _transversal_exists(
    cells_with_space: set[tuple[int, int]], fixed: tuple[int, int] | None, k: int
) -> bool:
    """k cells with space (plus the fixed one) in pairwise distinct rows and columns."""
    pool = [x for x in cells_with_space if fixed is None or (x[0] != fixed[0] and x[1] != fixed[1])]
    for combo in itertools.combinations(pool, k):
        if len({r for r, _ in combo}) == k and len({col for _, col in combo}) == k:
            return True
    return False


@settings(max_examples=200, deadline=None)
@given(c=clusters(unique_envs=True), replicas=st.integers(2, 3), seed=st.integers(0, 2**16))
def test_distinct_rows_and_columns_whenever_the_cells_with_space_allow(
    c: Cluster, replicas: int, seed: int
) -> None:
    placer = ReplicaPlacer(c.inventory, c.grid, seed=seed)
    for s in c.busy:
        placer.set_busy(s, True)
    writer = c.writers[0]
    usable = [s for s in c.inventory.server if _usable(placer, c, s) and s not in c.excluded]
    spaced = {(g.reimage_row, g.peak_column) for s in usable if (g := c.cell_of(s)) is not None}
    writer_used = writer in usable
    fixed = c.cell_of(writer) if writer_used and writer is not None else None
    fixed_rc = (fixed.reimage_row, fixed.peak_column) if fixed is not None else None
    need = replicas - 1 if writer_used else replicas
    if fixed_rc is not None:
        spaced.discard(fixed_rc)  # the writer's cell already holds the first replica
    if not _transversal_exists(spaced, fixed_rc, need):
        event("no transversal through the writer's cell: nothing to check")
        return
    event("transversal exists")
    res = placer.place(writer, replicas, excluded=c.excluded, rng=np.random.default_rng(seed))
    assert not res.relaxed, res.reason
    _check_round_diversity(c, res.targets)


def _full_grid(tenants_per_cell: int = 2, servers: int = 3, storage_gb: float = 10.0) -> Cluster:
    rows, grid = [], {}
    for cell in range(9):
        for j in range(tenants_per_cell):
            tenant = f"c{cell}-t{j}"
            grid[tenant] = GridCell(cell // 3, cell % 3)
            for k in range(servers):
                rows.append((f"{tenant}-s{k}", tenant, f"env-{tenant}", f"r{k}", storage_gb))
    return Cluster(make_inventory(rows), grid, set(), set(), [None])


@pytest.mark.parametrize("replicas", [1, 2, 3, 4, 6])
def test_full_grid_always_gives_distinct_rows_and_columns_per_round(replicas: int) -> None:
    c = _full_grid(storage_gb=100.0)
    placer = ReplicaPlacer(c.inventory, c.grid, seed=1)
    rng = np.random.default_rng(1)
    for i in range(200):
        writer = c.inventory.server[i % len(c.inventory)]
        res = placer.place(writer, replicas, rng=rng)
        assert not res.relaxed and res.targets[0] == writer
        _check_round_diversity(c, res.targets)
        assert len({c.env_of(s) for s in res.targets}) == replicas


def test_fill_to_the_brim_never_exceeds_storage() -> None:
    c = _full_grid(tenants_per_cell=1, servers=2, storage_gb=0.6)  # 2 blocks per server, 36 blocks of space
    placer = ReplicaPlacer(c.inventory, c.grid, seed=4)
    placed = 0
    with pytest.raises(PlacementError, match=r"need 3 servers with space .* found [0-2]"):
        for _ in range(100):
            placer.place(None, 3)
            placed += 1
    assert placed == 12  # 36 slots / 3 replicas: every block of space is used
    for s in c.inventory.server:
        assert 0.0 <= placer.free_mb(s) < BLOCK_MB


def _tiny(cells: dict[str, tuple[int, int] | None], envs: dict[str, str] | None = None) -> Cluster:
    rows, grid = [], {}
    for tenant, cell in cells.items():
        if cell is not None:
            grid[tenant] = GridCell(*cell)
        env = (envs or {}).get(tenant, f"env-{tenant}")
        rows.append((f"{tenant}-s0", tenant, env, "r0", 5.0))
    return Cluster(make_inventory(rows), grid, set(), set(), [])


@pytest.mark.parametrize(
    ("cells", "envs", "dropped"),
    [
        ({"w": (0, 0), "a": (1, 0)}, None, "column"),  # same column only: keep the row, drop the column
        ({"w": (0, 0), "a": (0, 1)}, None, "row and column"),  # same row only
        ({"w": (0, 0), "a": (1, 1)}, {"a": "env-w"}, "row, column and environment"),
        ({"w": (0, 0), "a": None}, None, "no grid server left"),  # only a tenant outside the grid
    ],
)
def test_relaxation_order_and_strict_refusal(
    cells: dict[str, tuple[int, int] | None], envs: dict[str, str] | None, dropped: str
) -> None:
    c = _tiny(cells, envs)
    res = ReplicaPlacer(c.inventory, c.grid, seed=0).place("w-s0", 2)
    assert res.targets == ("w-s0", "a-s0") and res.relaxed and dropped in res.reason
    strict = ReplicaPlacer(c.inventory, c.grid, config=PlacementConfig(strict=True), seed=0)
    with pytest.raises(PlacementError, match="constraint") as err:
        strict.place("w-s0", 2)
    assert strict.free_mb("w-s0") == 5.0 * 1024  # a refused block allocates nothing
    expected = "environment constraint" if envs else "row/column constraint"
    assert expected in str(err.value)


def test_relaxation_prefers_keeping_the_row() -> None:
    # Writer in (0, 0); (1, 0) shares its column, (0, 1) its row: the column goes first.
    c = _tiny({"w": (0, 0), "a": (1, 0), "b": (0, 1)})
    for seed in range(20):
        res = ReplicaPlacer(c.inventory, c.grid, seed=seed).place("w-s0", 2)
        assert res.targets[1] == "a-s0" and "column" in res.reason


def test_busy_release_reset_and_space_accounting() -> None:
    c = _full_grid(tenants_per_cell=1, servers=1, storage_gb=0.5)  # 2 blocks per server
    placer = ReplicaPlacer(c.inventory, c.grid, seed=2)
    w = c.inventory.server[0]
    placer.set_busy(w, True)
    res = placer.place(w, 3)
    assert w not in res.targets and "writer" in res.reason and not res.relaxed
    placer.set_busy(w, False)
    assert placer.place(w, 3).targets[0] == w
    assert placer.place(w, 3).targets[0] == w  # second block fills it
    assert not placer.has_space(w) and placer.free_mb(w) == 0.0
    assert w not in placer.place(w, 1).targets
    placer.release(w, BLOCK_MB)
    assert placer.has_space(w) and placer.place(w, 1).targets == (w,)
    placer.release(w, 10_000.0)  # capped at the server's storage
    assert placer.free_mb(w) == 512.0
    placer.place(w, 1)
    placer.reset_server(w)
    assert placer.free_mb(w) == 512.0
    with pytest.raises(PolicyError, match="unknown server"):
        placer.free_mb("nope")
    for bad in (float("nan"), -1.0):
        with pytest.raises(PolicyError):
            placer.release(w, bad)
        with pytest.raises(PlacementError):
            placer.allocate(w, bad)
    with pytest.raises(PlacementError, match="cannot take"):
        placer.allocate(w, 10_000.0)
    assert placer.free_mb(w) == 512.0
    with pytest.raises(PolicyError, match="replicas"):
        placer.place(w, 0)


def test_existing_replicas_steer_re_replication() -> None:
    c = _full_grid(tenants_per_cell=2, servers=2)
    placer = ReplicaPlacer(c.inventory, c.grid, seed=3)
    rng = np.random.default_rng(3)
    for _ in range(100):
        holders = ("c0-t0-s0", "c4-t0-s1")  # cells (0, 0) and (1, 1)
        res = placer.place(None, 1, existing=holders, rng=rng)
        (new,) = res.targets
        assert c.cell_of(new) == GridCell(2, 2) and not res.relaxed
        placer.release(new, BLOCK_MB)


def test_same_seed_same_choices() -> None:
    c = _full_grid()
    a = ReplicaPlacer(c.inventory, c.grid, seed=9)
    b = ReplicaPlacer(c.inventory, c.grid, seed=9)
    assert [a.place(None, 3).targets for _ in range(50)] == [b.place(None, 3).targets for _ in range(50)]


def test_bad_inputs() -> None:
    c = _full_grid()
    with pytest.raises(PolicyError, match="block_size_mb"):
        PlacementConfig(block_size_mb=0)
    with pytest.raises(PolicyError, match="0..2"):
        ReplicaPlacer(c.inventory, {"c0-t0": GridCell(3, 0)})
    dup = make_inventory([("s", "t", "e", "r", 1.0), ("s", "t", "e", "r", 1.0)])
    with pytest.raises(PolicyError, match="unique"):
        ReplicaPlacer(dup, {})


def test_without_a_grid_strict_refuses_and_relaxed_uses_any_server() -> None:
    c = _tiny({"a": None, "b": None, "c": None})
    with pytest.raises(PlacementError, match="grid"):
        ReplicaPlacer(c.inventory, {}, config=PlacementConfig(strict=True)).place(None, 2)
    res = ReplicaPlacer(c.inventory, {}).place("a-s0", 3)
    assert res.targets[0] == "a-s0" and len(set(res.targets)) == 3 and res.relaxed


def test_re_replication_counts_a_usable_holder_once() -> None:
    # One grid tenant with two servers; the block survives on a0. Its re-replication can only stay
    # in the grid by dropping row, column and environment (a1 shares all three with a0): it must
    # not fall through to the tenant outside the grid.
    inv = make_inventory(
        [("a0", "A", "eA", "r0", 5.0), ("a1", "A", "eA", "r1", 5.0), ("z0", "Z", "eZ", "r2", 5.0)]
    )
    for seed in range(20):
        placer = ReplicaPlacer(inv, {"A": GridCell(0, 0)}, seed=seed)
        res = placer.place(None, 1, existing=("a0",))
        assert res.targets == ("a1",) and "environment" in res.reason


@settings(max_examples=100, deadline=None)
@given(c=clusters(), data=st.data(), replicas=st.integers(1, 3), seed=st.integers(0, 2**16))
def test_re_replication_invariants(c: Cluster, data: st.DataObject, replicas: int, seed: int) -> None:
    holders = data.draw(st.lists(st.sampled_from(c.inventory.server), max_size=2, unique=True))
    placer = ReplicaPlacer(c.inventory, c.grid, seed=seed)
    usable = [s for s in c.inventory.server if placer.has_space(s) and s not in holders]
    try:
        res = placer.place(None, replicas, existing=holders, rng=np.random.default_rng(seed))
    except PlacementError as exc:
        assert len(usable) < replicas and f"found {len(usable)}" in str(exc)
        return
    assert len(set(res.targets)) == replicas and not set(res.targets) & set(holders)
    if not res.relaxed:
        # The new replicas avoid each other's and the surviving replicas' environments ...
        new_envs = [c.env_of(s) for s in res.targets]
        assert len(set(new_envs)) == len(new_envs) and not set(new_envs) & {c.env_of(s) for s in holders}
        # ... and, within the first round of 3, their rows and columns.
        if len(holders) + replicas <= 3:
            old = [g for s in holders if (g := c.cell_of(s)) is not None]
            new = [c.cell_of(s) for s in res.targets]
            assert all(g is not None for g in new)
            rows = [g.reimage_row for g in new if g is not None]
            cols = [g.peak_column for g in new if g is not None]
            assert len(set(rows)) == len(rows) and not set(rows) & {g.reimage_row for g in old}
            assert len(set(cols)) == len(cols) and not set(cols) & {g.peak_column for g in old}

"""Tests of placement_service/core/stock_placement.py: the stock HDFS rack-aware baseline."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement_service.core.placement import PlacementConfig
from placement_service.core.stock_placement import StockPlacer
from placement_service.core.types import Inventory, PlacementError

BLOCK_MB = 256.0


def _inventory(racks: int, per_rack: int, storage_gb: float = 10.0) -> Inventory:
    n = racks * per_rack
    return Inventory(
        server=tuple(f"r{i // per_rack}-s{i % per_rack}" for i in range(n)),
        tenant=tuple(f"t{i % 5}" for i in range(n)),
        environment=tuple(f"e{i % 5}" for i in range(n)),
        rack=tuple(f"r{i // per_rack}" for i in range(n)),
        cores=np.full(n, 8.0),
        memory_mb=np.full(n, 32768.0),
        storage_gb=np.full(n, storage_gb),
    )


def _rack(server: str) -> str:
    return server.split("-")[0]


def test_writer_then_remote_rack_then_the_remote_replicas_rack() -> None:
    inv = _inventory(racks=4, per_rack=5)
    placer = StockPlacer(inv, {}, seed=1)
    rng = np.random.default_rng(1)
    for i in range(100):
        writer = inv.server[i % len(inv)]
        res = placer.place(writer, 3, rng=rng)
        a, b, c = res.targets
        assert a == writer and not res.relaxed
        assert _rack(b) != _rack(a)
        assert _rack(c) == _rack(b) and c != b


def test_one_rack_falls_back_and_says_so() -> None:
    inv = _inventory(racks=1, per_rack=6)
    res = StockPlacer(inv, {}, seed=0).place("r0-s0", 3)
    assert len(set(res.targets)) == 3 and res.relaxed and "rack rule" in res.reason


def test_busy_and_full_servers_are_skipped_and_too_few_is_an_error() -> None:
    inv = _inventory(racks=2, per_rack=2, storage_gb=0.25)  # one block per server
    placer = StockPlacer(inv, {}, seed=0)
    placer.set_busy("r0-s0", True)
    res = placer.place("r0-s0", 3)
    assert "r0-s0" not in res.targets
    assert all(not placer.has_space(s) for s in res.targets)
    with pytest.raises(PlacementError, match="found 0"):
        placer.place(None, 1)
    placer.set_busy("r0-s0", False)
    assert placer.place(None, 1).targets == ("r0-s0",)


@settings(max_examples=100, deadline=None)
@given(
    racks=st.integers(1, 4),
    per_rack=st.integers(1, 4),
    storage_gb=st.sampled_from([0.25, 0.5, 1.0]),
    replicas=st.integers(1, 4),
    seed=st.integers(0, 1000),
)
def test_distinct_servers_and_never_over_storage(
    racks: int, per_rack: int, storage_gb: float, replicas: int, seed: int
) -> None:
    inv = _inventory(racks, per_rack, storage_gb)
    placer = StockPlacer(inv, None, config=PlacementConfig(), seed=seed)
    placed = 0
    for _ in range(40):
        try:
            res = placer.place(None, replicas)
        except PlacementError:
            break
        assert len(set(res.targets)) == replicas
        placed += 1
    used = sum(storage_gb * 1024 - placer.free_mb(s) for s in inv.server)
    assert used == pytest.approx(placed * replicas * BLOCK_MB)
    assert all(placer.free_mb(s) >= 0.0 for s in inv.server)


def test_existing_replicas_count_as_chosen() -> None:
    inv = _inventory(racks=3, per_rack=4)
    placer = StockPlacer(inv, {}, seed=0)
    for _ in range(50):
        # Two replicas on different racks exist: the third goes to the second one's rack.
        (new,) = placer.place(None, 1, existing=("r0-s0", "r1-s0")).targets
        assert _rack(new) == "r1" and new != "r1-s0"
        placer.release(new, BLOCK_MB)

"""The 3x3 replica-placement grid (placement_service/core/grid.py)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from placement_service.core.grid import build_grid, cell_storage_gb
from placement_service.core.types import GridCell, PolicyError


def _tenants(n: int, seed: int, *, storage: str = "lognormal") -> tuple[dict[str, float], ...]:
    rng = np.random.default_rng(seed)
    names = [f"t{i:04d}" for i in range(n)]
    rate = rng.exponential(0.5, n)
    peak = rng.uniform(0.05, 1.0, n)
    size = rng.lognormal(0.0, 1.0, n) * 1000.0 if storage == "lognormal" else np.full(n, 500.0)
    return (
        dict(zip(names, rate.tolist(), strict=True)),
        dict(zip(names, peak.tolist(), strict=True)),
        dict(zip(names, size.tolist(), strict=True)),
    )


def test_nine_equal_tenants_fill_the_nine_cells() -> None:
    names = [f"t{i}" for i in range(9)]
    rate = {t: float(i // 3) for i, t in enumerate(names)}  # rows of three
    peak = {t: float(i % 3) / 3 for i, t in enumerate(names)}  # each row has low / mid / high peaks
    storage = dict.fromkeys(names, 100.0)
    grid = build_grid(rate, peak, storage)
    assert grid == {t: GridCell(i // 3, i % 3) for i, t in enumerate(names)}
    assert np.all(cell_storage_gb(grid, storage) == 100.0)


def test_many_tenants_get_equal_storage_per_cell() -> None:
    rate, peak, storage = _tenants(2000, seed=1)
    grid = build_grid(rate, peak, storage)
    cells = cell_storage_gb(grid, storage)
    total = sum(storage.values())
    assert cells.sum() == pytest.approx(total)
    # Within 4/3 of the largest tenant of each cell's ideal share (the bound of the midpoint rule).
    assert np.all(np.abs(cells - total / 9) <= 4 / 3 * max(storage.values()) + 1e-6)
    assert np.all(np.abs(cells - total / 9) <= 0.05 * total / 9)  # and, with many tenants, within 5%


def test_rows_follow_reimage_rate_and_columns_follow_peak_cpu() -> None:
    rate, peak, storage = _tenants(300, seed=2)
    grid = build_grid(rate, peak, storage)
    _assert_monotone(grid, rate, peak)


def test_a_huge_tenant_is_never_split_and_takes_a_row_alone() -> None:
    rate, peak, storage = _tenants(60, seed=3, storage="equal")
    rate["huge"], peak["huge"], storage["huge"] = 0.5, 0.5, 60 * 500.0  # half of all storage
    grid = build_grid(rate, peak, storage)
    assert set(grid) == set(rate)
    huge_row = grid["huge"].reimage_row
    assert [t for t, c in grid.items() if c.reimage_row == huge_row] == ["huge"]
    _assert_monotone(grid, rate, peak)


def test_zero_storage_everywhere_splits_by_count() -> None:
    names = [f"t{i:02d}" for i in range(27)]
    rate = {t: float(i) for i, t in enumerate(names)}
    peak = {t: float((i * 5) % 27) for i, t in enumerate(names)}
    grid = build_grid(rate, peak, dict.fromkeys(names, 0.0))
    counts = np.zeros((3, 3), dtype=int)
    for cell in grid.values():
        counts[cell.reimage_row, cell.peak_column] += 1
    assert np.all(counts == 3)


def test_ties_are_broken_deterministically_and_independently_of_input_order() -> None:
    names = [f"t{i:03d}" for i in range(90)]
    rate = dict.fromkeys(names, 0.0)  # every tenant tied (nobody reimaged)
    peak = dict.fromkeys(names, 0.3)
    storage = dict.fromkeys(names, 10.0)
    a = build_grid(rate, peak, storage)
    b = build_grid(
        dict(reversed(rate.items())), dict(reversed(peak.items())), dict(reversed(storage.items()))
    )
    assert a == b
    assert np.all(cell_storage_gb(a, storage) == 100.0)
    # Tied tenants are not grouped by name order.
    first_row = sorted(t for t, c in a.items() if c.reimage_row == 0)
    assert first_row != names[:30]


def test_empty_input_gives_an_empty_grid() -> None:
    assert build_grid({}, {}, {}) == {}


@pytest.mark.parametrize(
    ("rate", "peak", "storage", "message"),
    [
        ({"a": 1.0}, {}, {"a": 1.0}, "peak_cpu must cover the same tenants.*missing: \\['a'\\]"),
        ({"a": 1.0}, {"a": 0.5}, {"a": 1.0, "b": 2.0}, "storage_gb.*unknown: \\['b'\\]"),
        ({"a": -1.0}, {"a": 0.5}, {"a": 1.0}, "reimage_rate\\['a'\\]"),
        ({"a": 1.0}, {"a": float("nan")}, {"a": 1.0}, "peak_cpu\\['a'\\]"),
    ],
)
def test_bad_inputs_name_the_field_and_tenant(
    rate: dict[str, float], peak: dict[str, float], storage: dict[str, float], message: str
) -> None:
    with pytest.raises(PolicyError, match=message):
        build_grid(rate, peak, storage)


def _assert_monotone(grid: dict[str, GridCell], rate: dict[str, float], peak: dict[str, float]) -> None:
    for r in range(2):
        lower = [rate[t] for t, c in grid.items() if c.reimage_row == r]
        upper = [rate[t] for t, c in grid.items() if c.reimage_row > r]
        if lower and upper:
            assert max(lower) <= min(upper)
    for r in range(3):
        for col in range(2):
            left = [peak[t] for t, c in grid.items() if c.reimage_row == r and c.peak_column == col]
            right = [peak[t] for t, c in grid.items() if c.reimage_row == r and c.peak_column > col]
            if left and right:
                assert max(left) <= min(right)


tenant_facts = st.lists(
    st.tuples(
        st.floats(0.0, 20.0, allow_nan=False),  # reimages per server per month
        st.floats(0.0, 1.0, allow_nan=False),  # peak CPU
        st.floats(0.0, 1e5, allow_nan=False),  # storage GB
    ),
    min_size=1,
    max_size=80,
)


@settings(max_examples=150, deadline=None)
@given(tenant_facts)
def test_grid_properties(facts: list[tuple[float, float, float]]) -> None:
    names = [f"t{i}" for i in range(len(facts))]
    rate = {t: f[0] for t, f in zip(names, facts, strict=True)}
    peak = {t: f[1] for t, f in zip(names, facts, strict=True)}
    storage = {t: f[2] for t, f in zip(names, facts, strict=True)}
    grid = build_grid(rate, peak, storage)
    # One cell per tenant, inside the 3x3 grid.
    assert set(grid) == set(names)
    assert all(0 <= c.reimage_row <= 2 and 0 <= c.peak_column <= 2 for c in grid.values())
    _assert_monotone(grid, rate, peak)
    total = sum(storage.values())
    if total > 0:
        cells = cell_storage_gb(grid, storage)
        assert np.all(np.abs(cells - total / 9) <= 4 / 3 * max(storage.values()) + 1e-6 * total)
    # Deterministic.
    assert build_grid(rate, peak, storage) == grid

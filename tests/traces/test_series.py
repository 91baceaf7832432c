"""Average-server series on a grid, gap filling and reporting, reimage rates, inventory facts."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from placement_service.core.types import Inventory, ReimageEvents
from placement_service.traces.io import UtilizationSamples
from placement_service.traces.series import (
    MONTH_S,
    fill_gaps,
    infer_interval_s,
    reimage_rates,
    server_reimage_counts,
    tenant_environment,
    tenant_series,
    tenant_server_counts,
    tenant_storage_gb,
)
from tests.fixtures.clustering.servers import resending_servers

T0 = 1456790400.0


def samples(rows: list[tuple[float, str, str, float]]) -> UtilizationSamples:
    ts, server, tenant, cpu = zip(*rows, strict=True)
    return UtilizationSamples(
        timestamp_s=np.asarray(ts, dtype=np.float64),
        server=np.asarray(server, dtype=object),
        tenant=np.asarray(tenant, dtype=object),
        cpu=np.asarray(cpu, dtype=np.float64),
    )


def test_tenant_value_is_the_mean_over_its_servers_per_slot():
    s = samples(
        [
            (T0, "a1", "a", 0.2), (T0, "a2", "a", 0.4), (T0 + 120, "a1", "a", 0.6), (T0 + 120, "a2", "a", 0.8),
            (T0, "b1", "b", 0.1), (T0 + 120, "b1", "b", 0.3),
        ]
    )
    ts = tenant_series(s)
    assert ts.tenants == ("a", "b") and ts.interval_s == 120.0 and ts.start_s == T0
    np.testing.assert_allclose(ts.cpu, [[0.3, 0.7], [0.1, 0.3]])


def test_interval_is_inferred_despite_missing_samples():
    t = T0 + 300.0 * np.array([0, 1, 2, 4, 5, 9, 10, 11])
    assert infer_interval_s(t) == 300.0
    with pytest.raises(ValueError):
        infer_interval_s(np.array([T0, T0]))


def test_interval_is_per_server_when_servers_sample_at_different_offsets():
    # Server a reports on the minute, server b 30 s later: 60 s apart each, 30 s apart together.
    rows = [(T0 + 60.0 * j, "a", "t", 0.2) for j in range(20)]
    rows += [(T0 + 30.0 + 60.0 * j, "b", "t", 0.4) for j in range(20)]
    s = samples(rows)
    assert infer_interval_s(s.timestamp_s) == 30.0  # what the times alone suggest
    series = tenant_series(s)
    assert series.interval_s == 60.0
    np.testing.assert_allclose(series.cpu[0, 1:-1], 0.3)  # both servers land in each slot


def test_off_grid_samples_go_to_the_nearest_slot():
    s = samples([(T0, "a", "t", 0.1), (T0 + 125, "a", "t", 0.2), (T0 + 238, "a", "t", 0.3)])
    np.testing.assert_allclose(tenant_series(s, interval_s=120).cpu, [[0.1, 0.2, 0.3]])


def test_short_gaps_are_interpolated_and_long_gaps_reported(caplog):
    # Slots 0..13 of tenant "t": slots 2-3 missing (short), slots 6-10 missing (long, 5 > 3).
    present = [0, 1, 4, 5, 11, 12, 13]
    rows = [(T0 + 120.0 * j, "s", "t", 0.1 * j / 2) for j in present]
    rows += [(T0 + 120.0 * j, "u", "u", 0.5) for j in range(14)]
    with caplog.at_level(logging.WARNING, logger="placement_service.traces.series"):
        ts = tenant_series(samples(rows), max_fill_slots=3)
    t = ts.cpu[ts.tenants.index("t")]
    np.testing.assert_allclose(t[[2, 3]], [0.1, 0.15])  # linear between slot 1 (0.05) and slot 4 (0.2)
    assert np.isnan(t[6:11]).all() and not np.isnan(np.delete(t, range(6, 11))).any()
    assert ts.long_gaps == (("t", 6, 5),)
    assert "1 gap(s) longer than 3 slots (5 slots in all) in 1 of 2 tenants" in caplog.text


def test_fill_gaps_edges_and_all_missing_rows():
    x = np.array(
        [
            [np.nan, np.nan, 0.3, 0.4, np.nan],  # leading run of 2, trailing run of 1: copy nearest
            [np.nan] * 5,  # nothing to fill from: one long gap
            [0.1, np.nan, np.nan, np.nan, np.nan],  # trailing run of 4 > 3: long gap
        ]
    )
    out, gaps = fill_gaps(x, max_fill_slots=3)
    np.testing.assert_allclose(out[0], [0.3, 0.3, 0.3, 0.4, 0.4])
    assert np.isnan(out[1]).all() and np.isnan(out[2, 1:]).all()
    assert gaps == [(1, 0, 5), (2, 1, 4)]
    out0, gaps0 = fill_gaps(x, max_fill_slots=0)
    assert len(gaps0) == 4 and np.isnan(out0[0, :2]).all()


def test_fill_gaps_matches_a_loop_on_random_holes():
    rng = np.random.default_rng(3)
    x = rng.random((20, 200))
    x[rng.random(x.shape) < 0.3] = np.nan
    out, gaps = fill_gaps(x, max_fill_slots=2)
    for r in range(x.shape[0]):
        row, j = x[r], 0
        while j < len(row):
            if not np.isnan(row[j]):
                assert out[r, j] == row[j]
                j += 1
                continue
            k = j
            while k < len(row) and np.isnan(row[k]):
                k += 1
            n = k - j
            if n > 2:
                assert (r, j, n) in gaps and np.isnan(out[r, j:k]).all()
            elif 0 < j and k < len(row):
                expect = row[j - 1] + (row[k] - row[j - 1]) * np.arange(1, n + 1) / (n + 1)
                np.testing.assert_allclose(out[r, j:k], expect)
            j = k


def _inventory() -> Inventory:
    return Inventory(
        server=("s1", "s2", "s3", "s4"),
        tenant=("a", "a", "b", "c"),
        environment=("prod-1", "prod-1", "dev-1", "dev-1"),
        rack=("r1", "r1", "r2", "r2"),
        cores=np.full(4, 16.0),
        memory_mb=np.full(4, 65536.0),
        storage_gb=np.array([100.0, 50.0, 0.0, 10.0]),
    )


def test_reimage_rates_per_server_per_month():
    inv = _inventory()
    ev = ReimageEvents(
        timestamp_s=np.array([0.0, 10.0, 20.0, 30.0, 40.0]), server=("s1", "s1", "s2", "s3", "zz")
    )
    np.testing.assert_array_equal(server_reimage_counts(ev, inv), [2, 1, 1, 0])
    rates = reimage_rates(ev, inv, span_s=2 * MONTH_S)
    assert rates == {"a": pytest.approx(3 / 2 / 2), "b": pytest.approx(0.5), "c": 0.0}


def test_inventory_facts_per_tenant():
    inv = _inventory()
    assert tenant_storage_gb(inv) == {"a": 150.0, "b": 0.0, "c": 10.0}
    assert tenant_environment(inv) == {"a": "prod-1", "b": "dev-1", "c": "dev-1"}
    assert tenant_server_counts(inv) == {"a": 2, "b": 1, "c": 1}


def test_series_built_in_row_chunks_equals_the_one_pass_result(monkeypatch: pytest.MonkeyPatch) -> None:
    import placement_service.traces.series as series_mod

    rng = np.random.default_rng(4)
    rows = [(T0 + 300 * j + rng.integers(-20, 20), f"{t}{k}", t, float(rng.random()))
            for t in "abc" for k in range(3) for j in range(200) if rng.random() > 0.05]
    order = rng.permutation(len(rows))  # rows of one tenant spread over every chunk
    s = samples([rows[i] for i in order])
    whole = tenant_series(s)
    monkeypatch.setattr(series_mod, "_CHUNK_ROWS", 97)
    chunked = tenant_series(s)
    assert chunked.tenants == whole.tenants and chunked.long_gaps == whole.long_gaps
    np.testing.assert_allclose(chunked.cpu, whole.cpu, rtol=1e-12, equal_nan=True)


# --- per-server sampling intervals (issue 39, finding 2) ------------------------------------------


def test_interval_is_each_servers_median_spacing_not_the_union_of_their_times():
    from placement_service.core.patterns import classify_patterns
    from placement_service.core.types import Pattern

    s = resending_servers()
    series = tenant_series(s)
    assert 60.0 <= series.interval_s <= 70.0  # the former inference (the most common step): 10 s
    from placement_service.traces.series import build_tenant_series

    summary = build_tenant_series(s)[1]
    assert set(summary.server_interval_s) == {f"m{i:02d}" for i in range(16)}
    assert all(60.0 <= v <= 70.0 for v in summary.server_interval_s.values())
    assert series.long_gaps == ()
    patterns = classify_patterns(series.cpu, series.interval_s)
    assert int(np.sum(patterns == Pattern.PERIODIC)) == 16
    notes = "\n".join(summary.notes())
    assert "per-server sampling intervals" in notes and "irregular sampling within servers: 10-90% of the steps 10-70 s" in notes
    # --interval-s stays an override.
    assert build_tenant_series(s, interval_s=120.0)[0].interval_s == 120.0


def test_mixed_intervals_are_resampled_per_server_without_inventing_gaps():
    rows = [(T0 + 60.0 * j, f"fast{k}", "fast", 0.2 + 0.01 * k) for k in range(3) for j in range(200)]
    rows += [(T0 + 15.0 + 300.0 * j, "slow0", "slow", 0.1 * (j % 2)) for j in range(40)]
    series = tenant_series(samples(rows))
    assert series.interval_s == 60.0
    assert series.long_gaps == () and not np.isnan(series.cpu).any()
    slow = series.cpu[series.tenants.index("slow")]
    # Sample j (at 15 + 300 j s) holds over the 60-s slots whose start is within 150 s of it.
    np.testing.assert_allclose(slow[:8], [0.0, 0.0, 0.0, 0.1, 0.1, 0.1, 0.1, 0.1])
    from placement_service.traces.series import build_tenant_series

    summary = build_tenant_series(samples(rows))[1]
    assert summary.server_interval_s["slow0"] == 300.0 and summary.mixed_intervals
    assert any("mixed sampling intervals: 60 s x3, 300 s x1" in n for n in summary.notes())


def test_a_server_finer_than_the_grid_counts_once_per_slot():
    rows = [(T0 + 10.0 * j, "fine", "t", 0.6) for j in range(60)]
    rows += [(T0 + 60.0 * j, "coarse", "t", 0.2) for j in range(10)]
    series = tenant_series(samples(rows), interval_s=60.0)
    np.testing.assert_allclose(series.cpu[0, 1:9], 0.4)  # the mean of the two servers, not 6:1


def test_tenants_in_disjoint_windows_are_named():
    from placement_service.traces.series import build_tenant_series

    rows = [(T0 + 300.0 * j, "a1", "a", 0.2) for j in range(300)]
    rows += [(T0 + 86400.0 * 30 + 300.0 * j, "b1", "b", 0.3) for j in range(300)]
    _, summary = build_tenant_series(samples(rows))
    assert summary.partial_window_tenants() == ["a", "b"] and summary.disjoint_windows
    assert any("2 of 2 tenants observed over part of the 31.0 days only" in n and "do not overlap" in n
               for n in summary.notes())
    assert not summary.mixed_intervals


def test_coarse_servers_spread_over_slots_in_bounded_pieces(monkeypatch: pytest.MonkeyPatch) -> None:
    import placement_service.traces.series as series_mod

    rng = np.random.default_rng(8)
    rows = [(T0 + 60.0 * j, f"f{k}", "a", float(rng.random())) for k in range(2) for j in range(300)]
    rows += [(T0 + 7.0 + 900.0 * j, "c0", "b", float(rng.random())) for j in range(20)]  # 15 slots each
    rows += [(T0 + 300.0 * j, "m0", "a", float(rng.random())) for j in range(60)]
    s = samples([rows[i] for i in rng.permutation(len(rows))])
    whole = tenant_series(s)
    monkeypatch.setattr(series_mod, "_CHUNK_ROWS", 7)
    pieces = tenant_series(s)
    assert whole.interval_s == 60.0 and not np.isnan(whole.cpu[:, :285]).any()  # b ends at slot 292
    np.testing.assert_allclose(pieces.cpu, whole.cpu, rtol=1e-12, equal_nan=True)

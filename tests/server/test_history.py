"""Parquet history: exact aggregation, atomic files, merge and the containment rule."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from placement_service.server.history import Aggregate, HistoryStore, add_reports, visible_files
from placement_service.server.reports import NodeReport

DAY0 = 1_767_225_600  # 2026-01-01T00:00:00Z


def rep(tenant: str, ts: float, cpu: float, node: str = "n") -> NodeReport:
    return NodeReport(node, tenant, ts, cpu, 100.0, 10.0, 1000.0, False, 1.0)


def test_slot_aggregate_is_sum_and_count_across_segments(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path, 300)
    a: Aggregate = {}
    b: Aggregate = {}
    add_reports(a, [rep("t", DAY0 + 10, 2.0), rep("t", DAY0 + 20, 4.0)], 300)
    add_reports(b, [rep("t", DAY0 + 30, 6.0), rep("t", DAY0 + 400, 1.0), rep("u", DAY0 + 10, 5.0)], 300)
    store.write_segment(1, a)
    store.write_segment(2, b)
    samples = store.samples("t", DAY0, DAY0 + 86400)
    assert [(s.slot_start_s, s.n_reports) for s in samples] == [(DAY0, 3), (DAY0 + 300, 1)]
    assert samples[0].cpu_frac_sum == pytest.approx(0.2 + 0.4 + 0.6)
    # Pending (not yet compacted) aggregates add up with stored ones.
    c: Aggregate = {}
    add_reports(c, [rep("t", DAY0 + 50, 10.0)], 300)
    assert store.samples("t", DAY0, DAY0 + 300, [c])[0].n_reports == 4
    tenants, first, cpu = store.tenant_matrix(DAY0, DAY0 + 86400)
    assert tenants == ["t", "u"] and first == DAY0
    assert cpu[0, 0] == pytest.approx(0.4) and cpu[1, 0] == pytest.approx(0.5)


def test_merge_keeps_totals_and_a_crash_before_deleting_inputs_counts_nothing_twice(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path, 300, merge_threshold=100)
    for seg in range(1, 6):
        agg: Aggregate = {}
        add_reports(agg, [rep("t", DAY0 + seg, 1.0)], 300)
        store.write_segment(seg, agg)
    day_dir = tmp_path / "day=2026-01-01"
    before = store.samples("t", DAY0, DAY0 + 300)[0].n_reports
    # Simulate a crash after the merged file was renamed in but before the inputs were deleted.
    inputs = {p.name: p.read_bytes() for _, _, p in visible_files(day_dir)}
    merged = store.merge_day(day_dir)
    assert merged is not None and merged.name == "seg-1-5.parquet"
    for name, data in inputs.items():
        (day_dir / name).write_bytes(data)
    assert before == 5
    assert store.samples("t", DAY0, DAY0 + 300)[0].n_reports == 5
    HistoryStore(tmp_path, 300)  # start-up removes the superseded inputs
    assert sorted(p.name for p in day_dir.iterdir()) == ["seg-1-5.parquet"]


def test_half_written_files_are_never_read_and_removed_at_start(tmp_path: Path) -> None:
    store = HistoryStore(tmp_path, 300)
    agg: Aggregate = {}
    add_reports(agg, [rep("t", DAY0, 1.0)], 300)
    path = store.write_segment(1, agg)[0]
    (path.parent / "seg-2-2.parquet.tmp").write_bytes(path.read_bytes()[:20])
    assert store.samples("t", DAY0, DAY0 + 300)[0].n_reports == 1
    HistoryStore(tmp_path, 300)
    assert not list(path.parent.glob("*.tmp"))
    assert pq.read_table(path).num_rows == 1


def _matrix_by_rows(store: HistoryStore, since_s: float, until_s: float) -> tuple[list[str], int, np.ndarray]:
    """Reference for ``tenant_matrix``: every row at once, summed per (tenant, slot)."""
    table = store.read_table(since_s, until_s)
    if table.num_rows == 0:
        return [], 0, np.zeros((0, 0))
    names = sorted(set(table["tenant"].to_pylist()))
    row = {t: i for i, t in enumerate(names)}
    slots = table["slot_start_s"].to_numpy()
    first = int(slots.min())
    n = np.zeros((len(names), (int(slots.max()) - first) // store.slot_s + 1))
    c = np.zeros_like(n)
    for t, s, k, v in zip(table["tenant"].to_pylist(), slots, table["n_reports"].to_numpy(),
                          table["cpu_frac_sum"].to_numpy(), strict=True):
        n[row[t], (s - first) // store.slot_s] += k
        c[row[t], (s - first) // store.slot_s] += v
    with np.errstate(invalid="ignore", divide="ignore"):
        return names, first, np.where(n > 0, c / np.maximum(n, 1), np.nan)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tenant_matrix_streams_files_and_sums_exactly_like_all_rows_at_once(tmp_path: Path, seed: int) -> None:
    """Several days, several segments per day (the same slot in two segments), tenants that appear
    only in later files, gaps, and window edges that cut through days and slots."""
    rng = np.random.default_rng(seed)
    store = HistoryStore(tmp_path, 300)
    tenants = [f"t{k:02d}" for k in range(12)]
    for seg in range(1, 9):
        agg: Aggregate = {}
        day = int(rng.integers(0, 4))
        live = tenants[: 4 + seg]  # later segments bring new tenants
        reps = [rep(str(rng.choice(live)), DAY0 + day * 86400 + float(rng.uniform(0, 86400)), float(rng.uniform(0, 10)),
                    node=f"n{k}") for k in range(300)]
        reps += [rep("t00", DAY0 + 5, 3.0)]  # the same slot in every segment
        add_reports(agg, reps, 300)
        store.write_segment(seg, agg)
    for since, until in [(DAY0, DAY0 + 4 * 86400), (DAY0 + 4000.5, DAY0 + 2 * 86400 + 123.0), (DAY0 + 9 * 86400, DAY0 + 10 * 86400)]:
        names, first, cpu = store.tenant_matrix(since, until)
        want_names, want_first, want = _matrix_by_rows(store, since, until)
        assert names == want_names and first == want_first
        assert cpu.shape == want.shape and cpu.flags["C_CONTIGUOUS"]
        np.testing.assert_allclose(cpu, want, rtol=1e-12, equal_nan=True)
    assert store.tenant_matrix(DAY0 + 9 * 86400, DAY0 + 10 * 86400)[0] == []

"""Busy-hour profiles in the service: the re-clustering stores them in the class table, the replica
placer uses them (``placement_busy_hours``), and the class table's reader rejects bad ones."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from placement_service.core.busy_hours import busy_hour_masks
from placement_service.core.types import ClassTable, PolicyError
from placement_service.server.config import build_config
from placement_service.server.history import SCHEMA, day_of, write_parquet_atomic
from placement_service.server.policy import build_policy_view
from placement_service.server.recluster import ReclusterInput, compute_class_table
from placement_service.server.reports import NodeReport

SLOT_S = 300
DAYS = 3
NIGHT = (1 << 6) - 1  # hours 00-05 UTC
AFTERNOON = ((1 << 18) - 1) ^ ((1 << 12) - 1)  # hours 12-17 UTC


def _cpu(n_tenants: int, start: int) -> np.ndarray:
    """Tenants 0-5 busy every night (00-06 UTC), 6-8 every afternoon (12-18), 0.2 otherwise (a
    little noise so that the clustering has something to do). Tenant i sits in grid row i % 3 (its
    reimage rate) and its busy level ranks it within the row so that the afternoon tenants take the
    diagonal: whatever the writer's cell, one of the cells left for the other two replicas holds an
    afternoon tenant."""
    n_slots = DAYS * 86400 // SLOT_S
    hour = ((start + np.arange(n_slots) * SLOT_S) % 86400) // 3600
    rng = np.random.default_rng(3)
    cpu = 0.2 + 0.02 * rng.random((n_tenants, n_slots))
    for t in range(n_tenants):
        row = t % 3
        rank = row if t >= 6 else [c for c in range(3) if c != row][t // 3]
        busy = (hour < 6) if t < 6 else ((hour >= 12) & (hour < 18))
        cpu[t, busy] = 0.85 + 0.03 * rank
    return cpu


def _write_history(root: Path, cpu: np.ndarray, start: int) -> list[str]:
    names = [f"t{t}" for t in range(cpu.shape[0])]
    per_day = 86400 // SLOT_S
    slots = start + np.arange(cpu.shape[1]) * SLOT_S
    for d in range(DAYS):
        sl = slice(d * per_day, (d + 1) * per_day)
        table = pa.table({
            "tenant": np.repeat(names, per_day), "slot_start_s": np.tile(slots[sl], len(names)).astype(np.int64),
            "n_reports": np.full(len(names) * per_day, 2, dtype=np.int64),
            "cpu_frac_sum": (cpu[:, sl] * 2).ravel(), "memory_frac_sum": np.full(len(names) * per_day, 1.0),
        }, schema=SCHEMA)
        day_dir = root / f"day={day_of(int(slots[sl][0]))}"
        day_dir.mkdir(parents=True, exist_ok=True)
        write_parquet_atomic(table, day_dir / "seg-0-0.parquet")
    return names


def recluster_input(tmp_path: Path, busy_profile_cpu: float | None, cobusy_cpu: float | None = None) -> ReclusterInput:
    """The re-clustering child's input over three days of history written under ``tmp_path``
    (tenants t0-t5 busy every night, t6-t8 every afternoon)."""
    start = (int(time.time()) // 86400 - DAYS) * 86400
    names = _write_history(tmp_path / "history", _cpu(9, start), start)
    return ReclusterInput(
        history_dir=tmp_path / "history", slot_s=SLOT_S, since_s=start, until_s=start + DAYS * 86400.0,
        servers_per_tenant={t: 3 for t in names}, cores_per_tenant={t: 48.0 for t in names},
        storage_gb_per_tenant={t: 3000.0 for t in names},
        reimage_rate_per_tenant={t: float(i % 3) for i, t in enumerate(names)}, busy_profile_cpu=busy_profile_cpu,
        cobusy_cpu=cobusy_cpu,
    )


def _recluster(tmp_path: Path, busy_profile_cpu: float | None) -> dict[str, object]:
    return compute_class_table(recluster_input(tmp_path, busy_profile_cpu))


def test_reclustering_stores_each_tenants_busy_hours(tmp_path: Path) -> None:
    doc = _recluster(tmp_path, 2.0 / 3.0)
    assert doc["busy_hours"] == {f"t{t}": NIGHT if t < 6 else AFTERNOON for t in range(9)}
    table = ClassTable.from_json(doc)
    assert table.busy_hours == doc["busy_hours"] and table.to_json()["busy_hours"] == doc["busy_hours"]
    # off: no profiles in the table (the paper's HDFS-H)
    assert "busy_hours" not in _recluster(tmp_path / "off", None)


def test_masks_follow_the_threshold_and_the_clock() -> None:
    start = 86400 * 20000 + 3600  # series starts at 01:00 UTC
    cpu = np.full((2, 48), 0.1)
    cpu[0, 0] = 0.8  # one sample at 01:00 of two (50% > 5%)
    cpu[1, 5] = np.nan  # a gap is a sample that was not busy
    cpu[1, 29] = 0.67  # 06:00 on day 2, above 2/3
    masks = busy_hour_masks(cpu, start, 3600.0, 2.0 / 3.0)
    assert masks.tolist() == [1 << 1, 1 << 6]
    assert busy_hour_masks(cpu, start, 3600.0, 0.9).tolist() == [0, 0]
    assert busy_hour_masks(cpu, start, 3600.0, 2.0 / 3.0, min_share=0.5).tolist() == [0, 0]
    with pytest.raises(ValueError, match="finite"):
        busy_hour_masks(cpu, start, 3600.0, float("nan"))


def _nodes(now: float) -> dict[str, NodeReport]:
    return {f"t{t}-{k}": NodeReport(f"t{t}-{k}", f"t{t}", now, 1.0, 1.0, 16.0, 1000.0, False, 500.0)
            for t in range(9) for k in range(3)}


@pytest.mark.parametrize("enabled", [True, False])
def test_placement_keeps_a_blocks_replicas_off_tenants_busy_at_the_same_hours(tmp_path: Path, enabled: bool) -> None:
    # Every grid row holds two night tenants and one afternoon tenant (on the diagonal): by the grid
    # alone some blocks land on night tenants only (all busy at 00-06); with the profiles none does.
    doc = _recluster(tmp_path, 2.0 / 3.0)
    cfg = build_config(None, {}, {"placement_busy_hours": enabled})
    view = build_policy_view(cfg, 1, doc, _nodes(time.time()), None)
    assert view.placer is not None and view.placer.uses_busy_hours is enabled
    masks = doc["busy_hours"]
    assert isinstance(masks, dict)
    co_busy = 0
    for b in range(600):
        decision = view.place(f"t{b % 9}-{b % 3}", 3, (), 128 << 20, strict=False)
        assert len(decision.targets) == 3 and not decision.relaxed
        common = ((1 << 24) - 1)
        for target in decision.targets:
            common &= masks[target.split("-")[0]]
        co_busy += common != 0
    if enabled:
        assert co_busy == 0
    else:
        assert co_busy > 0


@pytest.mark.parametrize("bad, where", [
    ([1, 2], "busy_hours: must be an object"),
    ({"t0": -1}, "busy_hours['t0']"),
    ({"t0": 1 << 24}, "busy_hours['t0']"),
    ({"t0": 3.5}, "busy_hours['t0']"),
    ({"t0": True}, "busy_hours['t0']"),
    ({"t0\n": 1}, "busy_hours['t0\\n']"),
])
def test_bad_busy_hours_are_named(tmp_path: Path, bad: object, where: str) -> None:
    doc = dict(_recluster(tmp_path, 2.0 / 3.0))
    doc["busy_hours"] = bad
    with pytest.raises(PolicyError, match=__import__("re").escape(where)):
        ClassTable.from_json(doc, "classes.json")

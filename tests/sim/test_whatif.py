"""``harvest whatif`` (placement_service/sim/whatif.py): trace files -> report.md with figures."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from placement_service.cli import main
from placement_service.sim.whatif import levels_around, reserve_fraction


def test_levels_are_the_data_level_and_one_step_either_side_inside_bounds():
    assert levels_around(0.3, 0.1) == [0.2, 0.3, 0.4]
    assert levels_around(0.03, 0.1) == [0.05, 0.13]  # clipped at 5%, no repeat
    assert levels_around(0.9, 0.1) == [0.8, 0.85]


def test_reserve_is_the_weighted_p99_of_rises_between_samples():
    flat = np.full((1, 200), 0.3)
    steps = np.tile([0.1, 0.5], 100)[None, :]  # rises of 0.4 half the time
    assert reserve_fraction(flat, np.ones(1)) == 0.0
    assert reserve_fraction(steps, np.ones(1)) == pytest.approx(0.4)
    both = np.vstack([flat, steps])
    assert reserve_fraction(both, np.array([3.0, 1.0])) == pytest.approx(0.1)  # weighted by cores
    gaps = steps.copy()
    gaps[0, ::3] = np.nan  # gaps count as no rise
    assert reserve_fraction(gaps, np.ones(1)) <= 0.4


def write_small_dc(folder: Path, *, servers_per_tenant: int = 2, storage_gb: float = 2000.0, days: float = 9.0,
                   interval_s: float = 600.0) -> Path:
    """Trace files of a small cluster: 8 tenants x ``servers_per_tenant`` servers (16 by default, 2 TB
    each): daily cycles, flat tenants and bursty ones, one CPU sample per server per interval."""
    from placement_service.traces import io
    from placement_service.traces.io import UtilizationSamples
    from tests.sim.conftest import make_inventory

    rng = np.random.default_rng(7)
    names = [f"t{i}" for i in range(8)]
    inv = make_inventory(names, servers_per_tenant, storage_gb=storage_gb)
    n = int(days * 86400 / interval_s)
    t = np.arange(n) * interval_s
    rows = []
    for i in range(8):
        if i % 3 == 0:
            rows.append(0.25 + 0.2 * np.sin(2 * np.pi * (t / 86400 + i / 8)) + rng.normal(0, 0.01, n))
        elif i % 3 == 1:
            rows.append(np.full(n, 0.1 + 0.03 * i) + rng.normal(0, 0.003, n))
        else:
            rows.append(0.15 + 0.5 * (rng.random(n) < 0.05) + rng.normal(0, 0.02, n))
    cpu = np.clip(np.array(rows), 0.0, 1.0)
    server = np.array(inv.server, dtype=object)
    tenant_row = np.repeat(np.arange(8), servers_per_tenant)
    ts = np.repeat(t, len(server))
    samples = UtilizationSamples(ts + 1.7e9, np.tile(server, n), np.tile(np.array(inv.tenant, dtype=object), n),
                                 cpu[tenant_row][:, :].T.reshape(-1))
    folder.mkdir(parents=True, exist_ok=True)
    io.write_utilization(samples, folder / "utilization.parquet")
    io.write_inventory(inv, folder / "inventory.parquet")
    # A reimage log of 20 days from the first sample: one server every 12 hours, the last on day 19.5.
    from placement_service.core.types import ReimageEvents

    rt = 1.7e9 + 43200.0 * np.arange(1, 40)
    io.write_reimages(ReimageEvents(rt, tuple(inv.server[i % len(inv.server)] for i in range(rt.size))),
                      folder / "reimages.parquet")
    return folder


def test_whatif_on_a_small_cluster_sizes_the_runs_and_says_only_what_they_show(tmp_path, capsys):
    # Issue 39 finding 5: 16 servers x 2 TB cannot hold 100,000 blocks x 256 MB x 3; reads of blocks
    # that found no space were failed reads, and the advice ("use the highest replication and lower the
    # harvested utilization") followed from them. Finding 6 / issue 38: the report said HDFS-H-hours is
    # "simulator only" while the service runs it by default. Finding 8: say how the reimages were used.
    dc = write_small_dc(tmp_path / "dc")
    out = tmp_path / "wi"
    capsys.readouterr()
    assert main(["whatif", "--utilization", str(dc / "utilization.parquet"), "--inventory",
                 str(dc / "inventory.parquet"), "--reimages", str(dc / "reimages.parquet"), "--durability-days", "20",
                 "--schedule-step-s", "3600", "--workers", "1", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "[1/6]" in err and "[6/6]" in err and "wrote" in err and "s left" in err  # progress on stderr, with ETA
    report = (out / "report.md").read_text()
    for section in ("## 1.", "## 2.", "## 3.", "## 4.", "## 5."):
        assert section in report
    av = json.loads((out / "availability" / "results.json").read_text())["records"]
    dur = json.loads((out / "durability" / "results.json").read_text())["records"]
    # Sized to the storage: every block found space, so no read failed for want of it.
    assert av and all(r["unplaced_blocks"] == 0 and r["unplaced_accesses"] == 0 for r in av)
    assert dur and all(r["failed_placements"] == 0 for r in dur)
    assert dur[0]["blocks"] <= 0.5 * 16 * 2000 * 1024 / 256 / 4 and av[0]["blocks"] == 1600  # 100 a server
    assert "16 servers lending 32.0 TB hold 32,000 blocks of 256 MB at 4 replicas" in report
    assert "Durability: 1,600 blocks" in report
    # The failed-read table is the simulation's own per-million figures of placed blocks.
    r0 = next(r for r in av if r["system"] == "HDFS-Stock" and r["replicas"] == 3)
    assert f"| {100 * r0['level']:.0f}% | 3 | {1e6 * r0['failed_accesses'] / r0['accesses']:,.1f} |" in report
    # No advice the records do not support.
    assert "use the highest and lower the harvested utilization" not in report
    # Policy names and where they run come from the service's configuration.
    assert "not yet in the service" not in report
    assert "HDFS-H-hours: HDFS-H that also keeps" in report and "the placement service's default" in report
    # Which reimages were used: the 20-day log covers the 20 days (its last event on day 19.5).
    assert "Reimages: the reimage log" in report and "used as it is (20.0 days" in report
    assert {r["reimage_source"] for r in dur} == {"as-is"}
    assert report.startswith("# What-if report: dc\n")
    for link in re.findall(r"\]\(([^)]+\.png)\)", report):
        assert (out / link).is_file(), link
    # The durability table holds the durability simulation's lost blocks.
    stock3 = [r["lost_blocks"] for r in dur if r["system"] == "HDFS-Stock" and r["replicas"] == 3]
    assert f"| 3 | {np.mean(stock3):,.1f} |" in report
    # The job-time table holds the schedule simulation's own means.
    sched = json.loads((out / "schedule" / "results.json").read_text())["records"]
    pt = min((r for r in sched if r["system"] == "YARN-PT"), key=lambda r: r["level"])
    assert f"| {100 * pt['level']:.0f}% | {pt['avg_job_time_s']:,.0f} |" in report


def test_whatif_refuses_a_cluster_whose_storage_cannot_hold_a_useful_run(tmp_path, capsys):
    dc = write_small_dc(tmp_path / "dc", storage_gb=20.0)
    assert main(["whatif", "--utilization", str(dc / "utilization.parquet"), "--inventory",
                 str(dc / "inventory.parquet"), "--out", str(tmp_path / "wi")]) == 2
    err = capsys.readouterr().err
    assert "hold 320 blocks of 256 MB at 4 replicas" in err and "Traceback" not in err
    dc = write_small_dc(tmp_path / "dc2")
    assert main(["whatif", "--utilization", str(dc / "utilization.parquet"), "--inventory",
                 str(dc / "inventory.parquet"), "--durability-blocks", "100000", "--out", str(tmp_path / "wi2")]) == 2
    assert "--durability-blocks 100,000" in capsys.readouterr().err


def test_example_tenants_are_representative_and_the_axis_fits_the_data():
    # Issue 39 finding 6: the first three tenants by name on a 0-100% axis made flat 2% lines of
    # periodic and constant tenants look alike.
    from placement_service.core.types import TenantSeries
    from placement_service.sim.whatif_report import pattern_panels

    n = 288
    t = np.arange(n) * 300.0
    names = [f"a{i}" for i in range(9)]
    level = np.linspace(0.005, 0.045, 9)  # a0 the quietest ... a8 the busiest
    cpu = np.array([lv * (1 + 0.5 * np.sin(2 * np.pi * t / 86400)) for lv in level])
    series = TenantSeries(tuple(names), 0.0, 300.0, cpu)
    classes = {"tenants": {x: {"pattern": "periodic"} for x in names}}
    (panel,) = pattern_panels(series, classes, dict.fromkeys(names, 1), n)
    assert panel.members == 9 and panel.tenants == ("a2", "a4", "a6")  # 25th, 50th, 75th percentile
    assert 100 * cpu[6].max() <= panel.ymax_pct <= 10.0  # the axis fits the data, not 0-100%


def test_whatif_refuses_a_trace_too_short_for_history(tmp_path, capsys):
    dc = tmp_path / "dc"
    assert main(["generate", "--servers", "20", "--days", "5", "--seed", "1", "--out", str(dc)]) == 0
    assert main(["whatif", "--utilization", str(dc / "utilization.parquet"), "--inventory",
                 str(dc / "inventory.parquet"), "--out", str(tmp_path / "wi")]) == 2
    err = capsys.readouterr().err
    assert "5.0 days of samples" in err and "Traceback" not in err


def test_the_sweeps_of_one_datacenter_share_one_clustering_per_level(tiny_dc):
    # Issue 41 item 2: the three simulations of a what-if share one trace load and one clustering.
    from placement_service.sim.availability import AvailabilityConfig
    from placement_service.sim.datacenter import Scaling
    from placement_service.sim.policy import fit_classes
    from placement_service.sim.run import SharedInputs, run_availability, run_schedule
    from placement_service.sim.schedule import ScheduleConfig, YarnSystem
    from tests.sim.conftest import chain_job

    shared = SharedInputs(tiny_dc, seed=0)
    levels = [0.2, 0.3]
    run_schedule(tiny_dc, levels=levels, scaling=Scaling.LINEAR, runs=1, seed=0,
                 config=ScheduleConfig(days=0.5, history_days=2.0, step_s=600.0), systems=(YarnSystem.H,),
                 jobs=[chain_job("j", [2, 2])], shared=shared)
    run_availability(tiny_dc, levels=levels, replicas=[3], scaling=Scaling.LINEAR, runs=1, seed=0,
                     config=AvailabilityConfig(days=0.5, history_days=2.0, blocks=200, accesses=500), shared=shared)
    assert shared.fits_made == len(levels)
    # The shared fit (with the placement grid's sigmas) has the plain fit's class table.
    hist = int(2.0 * 86400 / tiny_dc.series.interval_s)
    plain = fit_classes(tiny_dc, shared.scaled(0.3, Scaling.LINEAR)[0], hist, seed=0)[0]
    assert shared.fit(0.3, Scaling.LINEAR, hist)[0] == plain


def test_policy_descriptions_follow_the_services_configuration(monkeypatch):
    # Issue 38 point 4: the report and help said HDFS-H-hours is "simulator only" while the service
    # runs it by default; what runs where now comes from the service's configuration defaults.
    from placement_service.core import service_defaults
    from placement_service.server.config import ServiceConfig
    from placement_service.sim.policy import HdfsSystem, service_placement

    config = ServiceConfig()  # the service takes its defaults from the same place
    assert (config.placement_busy_hours, config.placement_cobusy) == (
        service_defaults.PLACEMENT_BUSY_HOURS, service_defaults.PLACEMENT_COBUSY)
    svc = service_placement()
    assert svc.system is HdfsSystem.H_COBUSY  # placement_cobusy on by default (issue 38 point 3)
    assert "the placement service's default: `placement_busy_hours, placement_cobusy` on" in svc.describe(HdfsSystem.H_COBUSY)
    assert "in the service with `placement_busy_hours` on; default on" in svc.describe(HdfsSystem.H_HOURS)
    monkeypatch.setattr(service_defaults, "PLACEMENT_COBUSY", False)
    assert service_placement().system is HdfsSystem.H_HOURS
    assert "the placement service's default" in service_placement().describe(HdfsSystem.H_HOURS)

"""``harvest whatif`` (placement_service/sim/whatif.py): trace files -> report.md with figures."""

from __future__ import annotations

import json
import re

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


@pytest.mark.slow
def test_whatif_writes_a_report_whose_numbers_are_the_simulations(tmp_path, capsys):
    dc = tmp_path / "dc"
    assert main(["generate", "--servers", "80", "--days", "9", "--seed", "5", "--out", str(dc)]) == 0
    out = tmp_path / "wi"
    capsys.readouterr()
    assert main(["whatif", "--utilization", str(dc / "utilization.parquet"), "--inventory",
                 str(dc / "inventory.parquet"), "--durability-blocks", "3000", "--durability-days", "30",
                 "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "[1/6]" in printed and "[6/6]" in printed and "wrote" in printed
    report = (out / "report.md").read_text()
    for section in ("## 1.", "## 2.", "## 3.", "## 4.", "## 5."):
        assert section in report
    assert (out / "figures" / "tenants_by_pattern.png").stat().st_size > 10_000
    for link in re.findall(r"\]\(([^)]+\.png)\)", report):
        assert (out / link).is_file(), link
    assert "synthetic reimages" in report  # no --reimages: said so
    # Named after the data's folder (not "utilization"), in the report and the results.
    assert report.startswith("# What-if report: dc\n")
    assert json.loads((out / "durability" / "results.json").read_text())["datacenter"] == "dc"
    # The job-time table holds the schedule simulation's own means.
    sched = json.loads((out / "schedule" / "results.json").read_text())["records"]
    pt = [r for r in sched if r["system"] == "YARN-PT"]
    assert pt, "YARN-PT ran"
    r0 = min(pt, key=lambda r: r["level"])
    assert f"| {100 * r0['level']:.0f}% | {r0['avg_job_time_s']:,.0f} |" in report
    # The durability table holds the durability simulation's lost blocks.
    dur = json.loads((out / "durability" / "results.json").read_text())["records"]
    stock3 = [r["lost_blocks"] for r in dur if r["system"] == "HDFS-Stock" and r["replicas"] == 3]
    assert f"| 3 | {np.mean(stock3):,.1f} |" in report


def test_whatif_refuses_a_trace_too_short_for_history(tmp_path, capsys):
    dc = tmp_path / "dc"
    assert main(["generate", "--servers", "20", "--days", "5", "--seed", "1", "--out", str(dc)]) == 0
    assert main(["whatif", "--utilization", str(dc / "utilization.parquet"), "--inventory",
                 str(dc / "inventory.parquet"), "--out", str(tmp_path / "wi")]) == 2
    err = capsys.readouterr().err
    assert "5.0 days of samples" in err and "Traceback" not in err

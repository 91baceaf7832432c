from __future__ import annotations

import json
from pathlib import Path

import pytest

from placement_service.sim.results import read_results, summarize, write_results


def test_summary_min_mean_max_per_point() -> None:
    recs = [
        {"datacenter": "d", "system": "A", "level": 0.3, "run": i, "avg_job_time_s": v, "killed_tasks": k}
        for i, (v, k) in enumerate([(10.0, 1), (20.0, 3), (30.0, 2)])
    ] + [{"datacenter": "d", "system": "B", "level": 0.3, "run": 0, "avg_job_time_s": 5.0, "killed_tasks": 0}]
    out = {s["system"]: s for s in summarize(recs)}
    assert out["A"]["runs"] == 3
    assert out["A"]["avg_job_time_s"] == {"min": 10.0, "mean": 20.0, "max": 30.0}
    assert out["A"]["killed_tasks"]["mean"] == pytest.approx(2.0)
    assert "lost_blocks" not in out["A"]
    assert out["B"]["runs"] == 1


def test_write_and_read_back(tmp_path: Path) -> None:
    recs = [{"datacenter": "d", "system": "HDFS-H", "replicas": 3, "run": 0, "lost_blocks": 2, "blocks": 10}]
    write_results(tmp_path / "o", "durability", "d", {"seed": 1}, recs)
    doc = read_results(tmp_path / "o")
    assert doc["records"] == recs and doc["summary"][0]["lost_blocks"]["max"] == 2
    assert json.loads((tmp_path / "o" / "results.json").read_text())["settings"] == {"seed": 1}
    assert (tmp_path / "o" / "results.csv").read_text().splitlines()[0].startswith("datacenter,system")
    assert not [p for p in (tmp_path / "o").iterdir() if p.name.startswith(".")]  # no temp file left

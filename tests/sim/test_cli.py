"""``harvest sim ...`` end to end on a tiny generated datacenter written to trace files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placement_service.cli import main
from placement_service.sim.report import write_report
from placement_service.traces.generate import generate_datacenter, write_datacenter


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("traces")
    return write_datacenter(generate_datacenter(80, seed=3, days=3), out)


def _common(traces: dict[str, Path], out: Path) -> list[str]:
    return ["--utilization", str(traces["utilization"]), "--inventory", str(traces["inventory"]),
            "--reimages", str(traces["reimages"]), "--runs", "2", "--history-days", "1", "--out", str(out)]


def test_schedule_durability_availability_and_report(
    traces: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sched, dur, avail = tmp_path / "sched", tmp_path / "dur", tmp_path / "avail"
    assert main(["sim", "schedule", *_common(traces, sched), "--levels", "0.3,0.5", "--days", "1",
                 "--step-s", "120", "--systems", "YARN-Stock,YARN-PT,YARN-H"]) == 0
    # Progress without -v: one line on stderr per finished run, counted, so a long sweep never looks stuck.
    progress = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("harvest sim: schedule [")]
    assert len(progress) == 12 and progress[-1].startswith("harvest sim: schedule [12/12]")
    doc = json.loads((sched / "results.json").read_text())
    assert doc["experiment"] == "schedule"
    assert len(doc["records"]) == 3 * 2 * 2  # systems x levels x runs
    for r in doc["records"]:
        assert {"system", "level", "run", "avg_job_time_s", "killed_tasks", "utilization"} <= set(r)
        assert r["utilization"] == pytest.approx(r["level"], abs=0.06)
        if r["system"] == "YARN-Stock":
            assert r["killed_tasks"] == 0
    assert (sched / "schedule_job_time.png").stat().st_size > 1000
    assert (sched / "results.csv").read_text().count("\n") == 13

    assert main(["sim", "durability", *_common(traces, dur), "--replicas", "3,4", "--blocks", "3000",
                 "--days", "60"]) == 0
    ddoc = json.loads((dur / "results.json").read_text())
    assert len(ddoc["records"]) == 2 * 2 * 2
    assert all(r["lost_blocks"] >= 0 and r["blocks"] == 3000 for r in ddoc["records"])
    assert (dur / "durability_lost.png").exists()

    assert main(["sim", "availability", *_common(traces, avail), "--levels", "0.3,0.6", "--replicas", "3",
                 "--days", "1", "--blocks", "2000", "--accesses", "5000"]) == 0
    adoc = json.loads((avail / "results.json").read_text())
    assert len(adoc["records"]) == 2 * 2 * 2
    assert all(0.0 <= r["failed_access_pct"] <= 100.0 for r in adoc["records"])
    by = {(r["system"], r["level"]): r["failed_access_pct"] for r in adoc["records"]}
    assert by[("HDFS-Stock", 0.6)] >= by[("HDFS-Stock", 0.3)]

    # The same points in two worker processes: the same records (wall times aside).
    def same(a: Path, b: Path) -> None:
        ra, rb = (json.loads((d / "results.json").read_text())["records"] for d in (a, b))
        assert [{k: v for k, v in r.items() if k != "wall_s"} for r in ra] == [
            {k: v for k, v in r.items() if k != "wall_s"} for r in rb]

    assert main(["sim", "durability", *_common(traces, tmp_path / "dur2"), "--replicas", "3,4", "--blocks", "3000",
                 "--days", "60", "--workers", "2"]) == 0
    same(dur, tmp_path / "dur2")
    assert main(["sim", "availability", *_common(traces, tmp_path / "avail2"), "--levels", "0.3,0.6", "--replicas",
                 "3", "--days", "1", "--blocks", "2000", "--accesses", "5000", "--workers", "2"]) == 0
    same(avail, tmp_path / "avail2")

    md = write_report([sched, dur, avail], tmp_path / "docs" / "results.md", notes="Notes here.")
    text = md.read_text()
    assert "## Claims checked" in text and "Notes here." in text
    assert "schedule: " in text and "durability: " in text and "availability: " in text
    assert text.count("**yes**") + text.count("**NO**") >= 3
    # Every section says which run made it: finish time and commit (or "not recorded" for old results).
    assert text.count("Run: finished ") == 3 and "Run: not recorded" not in text
    assert ddoc["settings"]["finished"].endswith("UTC")
    figs = list((tmp_path / "docs" / "figures" / "sim").rglob("*.png"))
    assert len(figs) >= 5
    assert main(["sim", "report", str(sched), "--out", str(tmp_path / "r2.md")]) == 0


def test_bad_inputs_exit_2(traces: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sim", "schedule", "--out", str(tmp_path / "x")]) == 2
    assert "exactly one of" in capsys.readouterr().err
    assert main(["sim", "schedule", *_common(traces, tmp_path / "y"), "--levels", "1.5", "--days", "1"]) == 2
    assert "level" in capsys.readouterr().err
    # (durability without --reimages now draws synthetic ones: tests/sim/test_durability_synthetic.py)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y" / "results.json").exists()
    for experiment, bad, listed in (("schedule", "YARN-X", "YARN-H-forecast"), ("availability", "HDFS-X", "HDFS-H-risk"),
                                    ("durability", " , ", "HDFS-Stock")):
        out = tmp_path / f"sys-{experiment}"
        assert main(["sim", experiment, *_common(traces, out), "--systems", bad]) == 2
        err = capsys.readouterr().err
        assert "--systems" in err and listed in err and not out.exists()


def test_mover_options_in_availability_and_durability(
    traces: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for experiment in ("availability", "durability"):
        for bad in (["--move-every-days", "0"], ["--move-max-frac", "2"], ["--move-risk-max", "-1"]):
            out = tmp_path / f"{experiment}{len(bad[0])}{bad[1]}"
            assert main(["sim", experiment, *_common(traces, out), "--systems", "HDFS-H-cobusy-mover", *bad]) == 2
            assert "HDFS-H-cobusy-mover options" in capsys.readouterr().err and not out.exists()
        for target in ("1", "-0.1"):
            out = tmp_path / f"{experiment}-target{target}"
            assert main(["sim", experiment, *_common(traces, out), "--systems", "HDFS-H-cobusy",
                         "--cobusy-risk-target", target]) == 2
            assert "--cobusy-risk-target must be in [0, 1)" in capsys.readouterr().err and not out.exists()
        for every in ("-1", "nan"):
            out = tmp_path / f"{experiment}-watch{every}"
            assert main(["sim", experiment, *_common(traces, out), "--systems", "HDFS-H-cobusy-mover",
                         "--watch-every-hours", every]) == 2
            assert "--watch-every-hours" in capsys.readouterr().err and not out.exists()
        for spread in ("0.5", "-1", "nan"):
            out = tmp_path / f"{experiment}-spread{spread}"
            assert main(["sim", experiment, *_common(traces, out), "--systems", "HDFS-H-cobusy",
                         "--cobusy-spread", spread]) == 2
            assert "--cobusy-spread" in capsys.readouterr().err and not out.exists()
    # The durability year runs the mover too (the CPU series repeats over the simulated days).
    out = tmp_path / "dur"
    assert main(["sim", "durability", *_common(traces, out), "--replicas", "3", "--blocks", "3000", "--days", "6",
                 "--systems", "HDFS-H-cobusy,HDFS-H-cobusy-mover", "--move-risk-max", "0", "--move-max-frac", "1",
                 "--watch-every-hours", "1"]) == 0
    recs = json.loads((out / "results.json").read_text())["records"]
    assert {r["system"] for r in recs} == {"HDFS-H-cobusy", "HDFS-H-cobusy-mover"}
    for r in recs:
        if r["system"] == "HDFS-H-cobusy":
            assert r["moved_replicas"] == 0 and "watch_moved" not in r
        else:  # the daily passes' (one replica per block and pass at most) and the hourly watch's
            assert 0 < r["moved_replicas"] and 0 <= r["watch_moved"] <= r["moved_replicas"]
            assert r["moved_replicas"] - r["watch_moved"] <= 5 * 3000
    # With the spread bound on, the run's settings and its report section say so (off: not shown).
    spread = tmp_path / "dur-spread"
    assert main(["sim", "durability", *_common(traces, spread), "--replicas", "3", "--blocks", "3000", "--days", "6",
                 "--systems", "HDFS-H-cobusy", "--cobusy-spread", "2"]) == 0
    assert json.loads((spread / "results.json").read_text())["settings"]["cobusy_spread"] == 2.0
    text = write_report([tmp_path / "dur", spread], tmp_path / "r.md").read_text()
    assert text.count("`cobusy_spread=2.0`") == 1
    out = tmp_path / "avail"
    # Two days of accesses: the second day's pass refits on the first and finds better tenants.
    assert main(["sim", "availability", *_common(traces, out), "--levels", "0.5", "--replicas", "3", "--days", "2",
                 "--blocks", "1000", "--accesses", "3000", "--systems", "HDFS-H-cobusy,HDFS-H-cobusy-mover",
                 "--move-risk-max", "0", "--move-max-frac", "1"]) == 0
    recs = {r["system"]: r for r in json.loads((out / "results.json").read_text())["records"]}
    assert recs["HDFS-H-cobusy"]["moved_replicas"] == 0
    # --watch-every-hours 0: the daily passes alone, the same as with a watch that never moves.
    daily = tmp_path / "avail-daily"
    assert main(["sim", "availability", *_common(traces, daily), "--levels", "0.5", "--replicas", "3", "--days", "2",
                 "--blocks", "1000", "--accesses", "3000", "--systems", "HDFS-H-cobusy-mover",
                 "--move-risk-max", "0", "--move-max-frac", "1", "--watch-every-hours", "0"]) == 0
    only = json.loads((daily / "results.json").read_text())["records"][0]
    assert only["watch_moved"] == 0 and only["moved_replicas"] > 0
    assert 0 < recs["HDFS-H-cobusy-mover"]["moved_replicas"] <= 2 * 1000  # one per block and pass at most


def test_interval_s_overrides_the_inferred_interval(traces: dict[str, Path], tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    # Issue 39 finding 2: an operator must be able to correct the inferred sampling interval.
    from placement_service.sim.datacenter import load_datacenter

    inferred = load_datacenter(traces["utilization"], traces["inventory"]).series
    doubled = load_datacenter(traces["utilization"], traces["inventory"], interval_s=2 * inferred.interval_s).series
    assert doubled.interval_s == 2 * inferred.interval_s
    assert doubled.n_slots == pytest.approx(inferred.n_slots / 2, abs=1)
    out = tmp_path / "avail"
    assert main(["sim", "availability", *_common(traces, out), "--levels", "0.3", "--days", "0.5", "--runs", "1",
                 "--blocks", "200", "--accesses", "1000", "--replicas", "3", "--systems", "HDFS-H",
                 "--interval-s", f"{2 * inferred.interval_s:g}"]) == 0
    assert json.loads((out / "results.json").read_text())["settings"]["interval_s"] == 2 * inferred.interval_s
    assert main(["sim", "availability", "--generate", "20", "--out", str(tmp_path / "g"), "--interval-s", "60"]) == 2
    assert "--interval-s applies to --utilization" in capsys.readouterr().err

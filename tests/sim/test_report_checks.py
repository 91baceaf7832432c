"""The report's claim checks read what an experiment ran, whichever systems it compared."""

from __future__ import annotations

from placement_service.sim.report import SECTIONS


def _durability_doc(lost: dict[str, list[int]]) -> dict:
    records = [{"replicas": 3, "system": system, "lost_blocks": n, "blocks": 4_000_000, "run": run}
               for system, runs in lost.items() for run, n in enumerate(runs)]
    return {"experiment": "durability", "datacenter": "dc", "settings": {}, "records": records}


def test_hours_durability_is_checked_against_hdfs_h_without_stock_in_the_run() -> None:
    """More seeds of only the two history-based placements (stock adds nothing to that comparison)
    still state whether HDFS-H-hours loses durability against HDFS-H."""
    _, checks = SECTIONS["durability"](_durability_doc({"HDFS-H": [0, 2, 0, 1], "HDFS-H-hours": [1, 0, 0, 0]}))
    (hours,) = [c for c in checks if "HDFS-H-hours" in c]
    assert "over 4 runs" in hours and hours.endswith("**yes**")
    assert not any("HDFS-Stock" in c for c in checks)  # no stock, no stock-vs-H claim
    _, checks = SECTIONS["durability"](_durability_doc({"HDFS-H": [0, 0], "HDFS-H-hours": [1, 1]}))
    assert [c for c in checks if "HDFS-H-hours" in c][0].endswith("**NO**")


def test_stock_contrast_still_checked_with_all_three() -> None:
    _, checks = SECTIONS["durability"](
        _durability_doc({"HDFS-Stock": [473, 473], "HDFS-H": [0, 1], "HDFS-H-hours": [1, 1]}))
    assert any("HDFS-Stock 473.0 vs HDFS-H 0.5" in c and c.endswith("**yes**") for c in checks)
    assert any("HDFS-H-hours" in c and c.endswith("**NO**") for c in checks)


def _availability_doc(failed_pct: dict[tuple[str, float], float]) -> dict:
    summary = [{"level": level, "replicas": 3, "system": system, "utilization": {"mean": level},
                "failed_access_pct": {"min": pct, "mean": pct, "max": pct}}
               for (system, level), pct in failed_pct.items()]
    return {"experiment": "availability", "datacenter": "dc", "settings": {}, "summary": summary}


def test_every_placement_beyond_the_paper_gets_its_own_checks() -> None:
    """HDFS-H-cobusy is checked like HDFS-H-hours: 0 failed accesses up to 41%, no more lost blocks."""
    _, checks = SECTIONS["availability"](_availability_doc({
        ("HDFS-Stock", 0.3): 0.02, ("HDFS-H", 0.3): 0.001, ("HDFS-H-hours", 0.3): 0.0005,
        ("HDFS-H-cobusy", 0.3): 0.0, ("HDFS-H-cobusy", 0.5): 0.01,  # 50% is beyond the claim
    }))
    (cob,) = [c for c in checks if "HDFS-H-cobusy" in c]
    (hrs,) = [c for c in checks if "HDFS-H-hours" in c]
    assert cob.endswith("**yes**") and hrs.endswith("**NO**") and "5 per million" in hrs
    _, checks = SECTIONS["durability"](_durability_doc({"HDFS-H": [1, 1], "HDFS-H-cobusy": [2, 1]}))
    (cob,) = [c for c in checks if "HDFS-H-cobusy" in c]
    assert "vs HDFS-H 1.0" in cob and cob.endswith("**NO**")


def test_the_mover_is_checked_and_its_cost_stated() -> None:
    doc = _availability_doc({
        ("HDFS-Stock", 0.3): 0.02, ("HDFS-H", 0.3): 0.001, ("HDFS-H-cobusy", 0.3): 0.0002,
        ("HDFS-H-cobusy-mover", 0.3): 0.0, ("HDFS-H-cobusy-mover", 0.4): 0.0,
    })
    for s in doc["summary"]:
        if s["system"] == "HDFS-H-cobusy-mover":
            n = 28_000 if s["level"] == 0.4 else 14_000
            s["moved_replicas"] = {"min": n, "mean": n, "max": n}
    doc["settings"] = {"blocks": 200_000, "days": 14}
    _, checks = SECTIONS["availability"](doc)
    (mover,) = [c for c in checks if "HDFS-H-cobusy-mover worst" in c]
    (cob,) = [c for c in checks if "HDFS-H-cobusy worst" in c]
    assert mover.endswith("**yes**") and cob.endswith("**NO**")
    (cost,) = [c for c in checks if c.startswith("- cost of HDFS-H-cobusy-mover")]
    assert "2,000 replicas moved a day" in cost and "(1.00% of the blocks a day)" in cost


def test_durability_states_repair_traffic_and_moves_against_hdfs_h() -> None:
    """A placement that keeps every block can still cost the primary tenants disk and network: the
    section gives each system's re-replications and moves, and the ratio to HDFS-H's."""
    doc = _durability_doc({"HDFS-H": [0, 0], "HDFS-H-cobusy": [0, 0], "HDFS-H-cobusy-mover": [0, 0]})
    traffic = {"HDFS-H": (1000, 0), "HDFS-H-cobusy": (1100, 0), "HDFS-H-cobusy-mover": (1300, 250)}
    for r in doc["records"]:
        r["repairs"], r["moved_replicas"] = traffic[r["system"]]
    rows, checks = SECTIONS["durability"](doc)
    (mover_row,) = [r for r in rows if "| HDFS-H-cobusy-mover |" in r]
    assert "1,300" in mover_row and "250" in mover_row
    (cost,) = [c for c in checks if c.startswith("- traffic of HDFS-H-cobusy-mover")]
    assert "1.30x HDFS-H's re-replications" in cost and "250 replicas moved" in cost
    (cob,) = [c for c in checks if c.startswith("- traffic of HDFS-H-cobusy,")]
    assert "1.10x" in cob


def test_exposure_is_checked_where_the_records_count_it() -> None:
    """Lost blocks are 0-2 a run, too few to tell two placements apart; the blocks taken to one
    replica or none are hundreds, and the section checks them when every run counted them."""
    doc = _durability_doc({"HDFS-H": [0, 0], "HDFS-H-cobusy": [0, 0], "HDFS-H-cobusy-mover": [1, 0]})
    one_left = {"HDFS-H": [1200, 1180], "HDFS-H-cobusy": [1250, 1190], "HDFS-H-cobusy-mover": [900, 950]}
    for r in doc["records"]:
        r["one_left"] = one_left[r["system"]][r["run"]]
    rows, checks = SECTIONS["durability"](doc)
    (mover_row,) = [r for r in rows if "| HDFS-H-cobusy-mover |" in r]
    assert "| 925 |" in mover_row
    (mover,) = [c for c in checks if "HDFS-H-cobusy-mover let reimages take" in c]
    assert "925 blocks a run" in mover and "vs HDFS-H 1,190" in mover and mover.endswith("**yes**")
    (cob,) = [c for c in checks if "HDFS-H-cobusy let reimages take" in c]
    assert "1,220 blocks a run" in cob and cob.endswith("**NO**")
    # lost blocks are still checked on their own: the mover's 0.5 vs 0 stays NO
    (lost,) = [c for c in checks if "HDFS-H-cobusy-mover lost" in c]
    assert lost.endswith("**NO**")
    # a run without the count (records from before the HDFS source choice): no exposure claim, "-"
    # in the table, and the section says which simulator it came from
    assert not any("simulated before" in c for c in checks)
    del doc["records"][0]["one_left"]
    rows, checks = SECTIONS["durability"](doc)
    assert not any("let reimages take" in c and "vs HDFS-H" in c for c in checks)
    assert any(c.startswith("- simulated before 2026-11-27") for c in checks)
    (h_row,) = [r for r in rows if "| HDFS-H |" in r]
    assert "| - |" in h_row


def test_the_exact_expectation_is_stated_when_every_record_has_it() -> None:
    """Records since the exact expectation came in state it beside the sampled count; a section
    with records from before it (some without the figure) states nothing rather than a partial max."""
    doc = _availability_doc({
        ("HDFS-Stock", 0.3): 0.02, ("HDFS-H", 0.3): 0.001, ("HDFS-H-cobusy-mover", 0.3): 0.0,
        ("HDFS-H-cobusy-mover", 0.4): 0.0,
    })
    exact = {("HDFS-H", 0.3): 9.5, ("HDFS-H-cobusy-mover", 0.3): 0.043, ("HDFS-H-cobusy-mover", 0.4): 0.25}
    for s in doc["summary"]:
        e = exact.get((s["system"], s["level"]))
        if e is not None:
            s["expected_failed_per_million"] = {"min": e / 2, "mean": e, "max": e}
    _, checks = SECTIONS["availability"](doc)
    (line,) = [c for c in checks if c.startswith("- expected failed accesses of HDFS-H-cobusy-mover")]
    assert "up to 0.250 per million" in line and "HDFS-H up to 9.50" in line
    del doc["summary"][-1]["expected_failed_per_million"]
    _, checks = SECTIONS["availability"](doc)
    assert not any(c.startswith("- expected failed accesses") for c in checks)

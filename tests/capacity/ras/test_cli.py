"""``harvest ras ...`` end to end through the real CLI entry point, on files."""

from __future__ import annotations

import json

from placement_service.capacity.ras import io
from placement_service.cli import main


def test_generate_solve_check_explain_export_move(tmp_path, capsys):
    d = tmp_path / "region"
    assert main(["ras", "generate", "--servers", "400", "--reservations", "6", "--msbs", "6", "--out-dir", str(d),
                 "--format", "parquet", "--seed", "2"]) == 0  # fmt: skip
    inv, res, plan = d / "inventory.parquet", d / "reservations.json", tmp_path / "A.json"
    rc = main(["ras", "solve", "--inventory", str(inv), "--reservations", str(res), "--out", str(plan),
               "--time-limit-s", "5", "--harvestable-out", str(tmp_path / "h.csv"), "--buffer-bound"])  # fmt: skip
    assert rc == 0
    doc = json.loads(plan.read_text())
    for key in ("assignment", "reservations", "moves", "unmet", "harvestable", "solver"):
        assert key in doc
    for key in ("status", "objective", "bound", "gap", "wall_s"):
        assert key in doc["solver"]
    fig = next(iter(doc["reservations"].values()))
    for key in ("capacity_rru", "capacity_after_worst_msb_loss_rru", "max_msb_share", "servers"):
        assert key in fig
    assert doc["check"]["ok"] is True
    assert main(["ras", "check", "--inventory", str(inv), "--reservations", str(res), "--plan", str(plan)]) == 0
    rid = next(iter(doc["reservations"]))
    assert main(["ras", "explain", "--plan", str(plan), "--id", rid, "--inventory", str(inv),
                 "--reservations", str(res)]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "RRU per MSB" in out and "capacity_after_worst_msb_loss_rru" in out
    harvest = io.read_table(tmp_path / "h.csv").to_pydict()
    assert set(harvest["server"]) == set(doc["harvestable"])
    victim = doc["reservations"][rid]["servers"][0]
    rc = main(["ras", "move", "--inventory", str(inv), "--reservations", str(res), "--plan", str(plan),
               "--failed", victim, "--out", str(tmp_path / "A2.json"), "--revocations-out", str(tmp_path / "rev.csv"),
               "--timestamp", "1700000000"])  # fmt: skip
    assert rc == 0
    moved = json.loads((tmp_path / "A2.json").read_text())
    assert moved["assignment"][victim] is None
    rev = io.read_table(tmp_path / "rev.csv").to_pydict()
    assert rev["timestamp"] and set(rev["server"]) == {n for _, n in moved["online"]["replacements"]}
    assert main(["ras", "check", "--inventory", str(inv), "--reservations", str(res), "--plan",
                 str(tmp_path / "A2.json")]) == 0  # fmt: skip
    # emergency grant on the hardware type whose unassigned servers span the most MSBs
    table = io.read_table(inv).to_pydict()
    spread: dict[str, set[str]] = {}
    for s, h, m in zip(table["server"], table["hardware"], table["msb"], strict=True):
        if doc["assignment"][s] is None:
            spread.setdefault(h, set()).add(m)
    hw = max(spread, key=lambda h: len(spread[h]))
    assert len(spread[hw]) >= 3
    rc = main(["ras", "grant", "--inventory", str(inv), "--reservations", str(res), "--plan", str(plan),
               "--request", json.dumps({"id": "urgent", "capacity_rru": 6, "rru": {hw: 1}}),
               "--out", str(tmp_path / "A4.json")])  # fmt: skip
    granted = json.loads((tmp_path / "A4.json").read_text())
    assert rc == 0 and granted["reservations"]["urgent"]["capacity_after_worst_msb_loss_rru"] >= 6
    assert all(doc["assignment"][s] is None for s in granted["emergency"]["servers"])
    # re-solve from the previous plan with nothing changed: no moves
    rc = main(["ras", "solve", "--inventory", str(inv), "--reservations", str(res), "--previous", str(plan),
               "--out", str(tmp_path / "A3.json"), "--time-limit-s", "5"])  # fmt: skip
    assert rc == 0 and json.loads((tmp_path / "A3.json").read_text())["moves"] == []


def test_infeasible_request_is_explained_and_bad_input_is_a_clean_error(tmp_path, capsys):
    inv = tmp_path / "inv.csv"
    inv.write_text("server,hardware,datacenter,msb,rack,available,in_use\n"
                   + "".join(f"s{i},h1,d1,m{i % 3},r{i},true,false\n" for i in range(12)))  # fmt: skip
    res = tmp_path / "R.json"
    res.write_text(json.dumps({"reservations": [
        {"id": "big", "capacity_rru": 50, "rru": {"h1": 1}},
        {"id": "ok", "capacity_rru": 4, "rru": {"h1": 1}},
        {"id": "odd", "capacity_rru": 2, "rru": {"h1": 1}, "datacenter_affinity": {"d1": 0.2, "d9": 0.3}},
    ]}))  # fmt: skip
    rc = main(["ras", "solve", "--inventory", str(inv), "--reservations", str(res), "--out", str(tmp_path / "A.json")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "unmet big: capacity" in out and "unmet odd: datacenter-affinity" in out
    doc = json.loads((tmp_path / "A.json").read_text())
    assert doc["reservations"]["ok"]["capacity_after_worst_msb_loss_rru"] >= 4
    res.write_text("{not json")
    rc = main(["ras", "solve", "--inventory", str(inv), "--reservations", str(res), "--out", str(tmp_path / "B.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "not valid JSON" in err and "Traceback" not in err
    assert not (tmp_path / "B.json").exists()

"""End to end through the CLI: generate -> model -> plan -> check -> execute through the ledger (a failing
event, an operator approval) -> to-ras -> harvest ras solve -> harvest ras check."""

from __future__ import annotations

import json

from placement_service.capacity.flux.ledger import Ledger
from placement_service.cli import main


def test_generate_model_plan_check_execute_to_ras(tmp_path, capsys):
    d = tmp_path / "in"
    assert main(["flux", "generate", "--regions", "4", "--services", "18", "--products", "4", "--hardware", "2",
                 "--timesteps", "3", "--seed", "7", "--refresh", "1", "--traces", "--out", str(d)]) == 0  # fmt: skip
    model = tmp_path / "model.json"
    assert (
        main(["flux", "model", "--traces", str(d / "traces"), "--gateway", "svc00", "--out", str(model)]) == 0
    )
    plan = tmp_path / "plan.json"
    assert main(["flux", "plan", "--model", str(model), "--demand", str(d / "demand.json"), "--supply",
                 str(d / "supply.json"), "--out", str(plan)]) == 0  # fmt: skip
    doc = json.loads(plan.read_text())
    assert doc["deficits"] == [] and doc["solver"]["status"] == "Optimal"
    assert main(["flux", "check", str(plan)]) == 0

    # one upsized service needs review: the orchestrator holds its resizes until an operator approves
    from placement_service.capacity.flux.execution import build_dag

    dag = build_dag(doc, start_ts=0.0, plan_id="plan")
    up = next(a for a in dag if a.phase == "upsize" and a.id.startswith("plan/t1/"))
    reviewed = up.payload["service"]
    for sv in doc["services"]:
        sv["review"] = sv["name"] == reviewed
    plan.write_text(json.dumps(doc))
    ledger = tmp_path / "ledger.sqlite"
    capsys.readouterr()
    assert main(["flux", "execute", "--plan", str(plan), "--ledger", str(ledger), "--start-ts", "0",
                 "--auto-complete"]) == 0  # fmt: skip
    assert f"held for review: {up.id}" in capsys.readouterr().out
    with Ledger(ledger) as led:
        evs = {e["id"]: e for e in led.events()}
    assert evs[up.id]["state"] == "proposed"
    waiting = [e for e in evs.values() if up.id in e["antecedents"]]
    assert waiting and all(e["state"] == "proposed" for e in waiting)
    assert main(["flux", "ledger", "approve", "--ledger", str(ledger), "--operator", "alice",
                 *[e["id"] for e in evs.values() if e["review"] and e["state"] == "proposed"]]) == 0  # fmt: skip
    with Ledger(ledger) as led:
        assert led.events("active")[0]["approved_by"] == "alice"
    # the executing systems run the rest; one downsize fails: it blocks its dependents, reported
    down = next(a for a in dag if a.phase == "downsize" and a.id.startswith("plan/t1/"))
    capsys.readouterr()
    assert main(["flux", "ledger", "run", "--ledger", str(ledger), "--fail-event", down.id]) == 1
    out = capsys.readouterr().out
    assert f"FAILED: {down.id}" in out and "blocked: plan/t1/checkpoint" in out
    with Ledger(ledger) as led:
        evs = {e["id"]: e for e in led.events()}
    assert evs[down.id]["state"] == "failed" and evs["plan/t1/checkpoint"]["state"] == "proposed"
    assert all(e["state"] == "proposed" for i, e in evs.items() if i.startswith("plan/t2/"))
    assert evs[up.id]["state"] == "succeeded"

    # the next plan starts from the ledger's future events (failed ones left out)
    plan2 = tmp_path / "plan2.json"
    assert main(["flux", "plan", "--model", str(model), "--demand", str(d / "demand.json"), "--supply",
                 str(d / "supply.json"), "--ledger", str(ledger), "--out", str(plan2)]) == 0  # fmt: skip

    # hand-off to RAS for one region, then RAS solves and checks it unchanged
    region = doc["regions"][0]
    res, inv, hv = tmp_path / "reservations.json", tmp_path / "inventory.csv", tmp_path / "harvestable.json"
    assert main(["flux", "to-ras", "--plan", str(plan), "--region", region, "--out", str(res),
                 "--inventory-out", str(inv)]) == 0  # fmt: skip
    reservations = json.loads(res.read_text())["reservations"]
    assert reservations and all("@" in r["id"] and r["capacity_rru"] > 0 for r in reservations)
    a = tmp_path / "A.json"
    assert main(["ras", "solve", "--inventory", str(inv), "--reservations", str(res), "--out", str(a),
                 "--time-limit-s", "10"]) == 0  # fmt: skip
    assert main(["ras", "check", "--inventory", str(inv), "--reservations", str(res), "--plan", str(a)]) == 0
    assert json.loads(a.read_text())["unmet"] == []
    assert main(["flux", "to-ras", "--plan", str(plan), "--region", region, "--out", str(res), "--inventory",
                 str(inv), "--ras-plan", str(a), "--harvestable-out", str(hv)]) == 0  # fmt: skip
    body = json.loads(hv.read_text())
    assert isinstance(body["nodes"], list)
    assert set(body["nodes"]) <= set(json.loads(a.read_text())["harvestable"])

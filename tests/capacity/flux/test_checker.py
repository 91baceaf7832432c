"""The independent checker: finds under-provisioning and supply overruns in each phase; imports no planner."""

from __future__ import annotations

import ast
import copy
from pathlib import Path

import pytest

import placement_service.capacity.flux.checker as checker_mod
from placement_service.capacity.flux.checker import check
from placement_service.capacity.flux.generate import generate
from placement_service.capacity.flux.planner import plan


@pytest.fixture(scope="module")
def doc():
    inst, _ = generate(
        n_regions=4, n_services=16, n_products=4, n_hardware=2, n_timesteps=3, seed=11, refresh=1
    )
    return plan(inst)


def test_checker_imports_nothing_of_the_planner():
    tree = ast.parse(Path(checker_mod.__file__).read_text())
    names = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)] + [
        a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names
    ]
    assert not [n for n in names if n and n.startswith("placement_service")]


def test_feasible_plan_passes(doc):
    assert check(doc) == []


def test_cut_capacity_is_under_provisioned_in_the_downsize_phase(doc):
    bad = copy.deepcopy(doc)
    row = max((r for r in bad["capacity"] if r["t"] == "t2"), key=lambda r: r["amount"])
    row["amount"] *= 0.5
    v = check(bad)
    assert v and v[0].step == "t2" and v[0].phase == "downsize" and "under-provisioned" in v[0].what
    assert row["service"] in v[0].what


def test_double_occupancy_overrun_is_caught_in_the_upsize_phase(doc):
    """Move a service between regions while the source region has no room for both sizes at once."""
    bad = copy.deepcopy(doc)
    # shrink the t1 supply of every pool to exactly what t1 uses: any upsize-before-downsize overruns
    use = {}
    for r in bad["capacity"]:
        if r["t"] == "t1":
            use[(r["region"], r["hardware"])] = use.get((r["region"], r["hardware"]), 0.0) + r["amount"]
    t0_use = {}
    for r in bad["capacity"]:
        if r["t"] == "t0":
            t0_use[(r["region"], r["hardware"])] = t0_use.get((r["region"], r["hardware"]), 0.0) + r["amount"]
    for s in bad["supply"]:
        key = (s["region"], s["hardware"])
        if s["t"] in ("t0", "t1"):
            s["available"] = max(use.get(key, 0.0), t0_use.get(key, 0.0)) + 1e-3
    v = check(bad)
    assert v and v[0].phase == "upsize" and "exceeds" in v[0].what


def test_traffic_not_fully_placed_is_reported(doc):
    bad = copy.deepcopy(doc)
    bad["traffic"] = [r for r in bad["traffic"] if not (r["t"] == "t1" and r["region"] == bad["regions"][0])]
    v = check(bad)
    assert any(x.phase == "placement" for x in v)


def test_cli_check_exit_codes(doc, tmp_path, capsys):
    import json

    from placement_service.cli import main

    good = tmp_path / "plan.json"
    good.write_text(json.dumps(doc))
    assert main(["flux", "check", str(good)]) == 0
    bad = copy.deepcopy(doc)
    next(r for r in bad["capacity"] if r["t"] == "t1")["amount"] = 0.0
    bad_p = tmp_path / "bad.json"
    bad_p.write_text(json.dumps(bad))
    assert main(["flux", "check", str(bad_p)]) == 1
    assert "INFEASIBLE: step" in capsys.readouterr().out

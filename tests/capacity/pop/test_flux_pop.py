"""POP for the Flux joint plan: coalesced plan passes the checker, every service once, k = 1 is the
single solve, the traffic stage's aggregation adds up, the repair pass, bad k, the CLI option."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from placement_service.capacity.flux.checker import check
from placement_service.capacity.flux.domain import baseline_residual
from placement_service.capacity.flux.generate import generate
from placement_service.capacity.flux.plan_model import build
from placement_service.capacity.flux.planner import arrays, plan, solve
from placement_service.capacity.pop import flux_pop
from placement_service.capacity.pop.partition import PopError


@pytest.fixture(scope="module")
def tight():
    """Three of five regions lose 30% of their supply: the pools there are full in the optimum."""
    inst, _ = generate(n_regions=5, n_services=24, n_products=10, n_hardware=3, n_timesteps=5, seed=1, refresh=3)
    return inst


@pytest.fixture(scope="module")
def single(tight):
    return plan(tight)


def test_k1_is_the_single_solve(tight, single):
    doc = flux_pop.solve_pop(tight, 1)
    assert doc["solver"]["objective"] == pytest.approx(single["solver"]["objective"], rel=1e-7)
    assert check(doc) == []
    assert doc["pop"]["max_bound_violation"] < 1e-6


def test_completion_scores_the_optimum_like_the_solver(tight):
    model = build(tight)
    status, sol, obj, _b, _w = solve(model)
    a = arrays(model, sol)
    point = flux_pop.complete(model, a["c"], a["x"], a["res"])
    assert float(model.cost @ point) == pytest.approx(obj, rel=1e-7)
    assert flux_pop.violation(model, point) < 1e-6
    # stage 2 with the optimum's traffic fixed finds the optimum again
    whole = flux_pop.FluxPart(0, np.arange(len(tight.services)), np.ones(tight.supply.shape),
                              np.ones(tight.supply[:, :, 1:].shape))  # fmt: skip
    r = flux_pop.solve_part((tight, flux_pop.normalise_traffic(tight, a["x"])), whole)
    assert r.objective == pytest.approx(obj, rel=1e-6)


@pytest.mark.parametrize("k", [2, 3, 4])
def test_coalesced_plan_passes_the_checker_and_holds_every_service_once(tight, single, k):
    doc = flux_pop.solve_pop(tight, k, seed=k)
    assert check(doc) == []
    assert doc["deficits"] == []
    assert [s["name"] for s in doc["services"]] == list(tight.services)
    parts = doc["pop"]["parts"]
    assert len(parts) == k and sum(p["services"] for p in parts) == len(tight.services)
    # a feasible point of the same model: never below the optimum; close to it on this instance
    obj, best = doc["solver"]["objective"], single["solver"]["objective"]
    assert obj >= best * (1 - 1e-7)
    assert obj <= best * 1.02
    # every product still places 1 + growth at every step
    for p in range(len(tight.products)):
        for t in range(len(tight.timesteps)):
            total = sum(r["share"] for r in doc["traffic"]
                        if r["product"] == tight.products[p] and r["t"] == tight.timesteps[t])  # fmt: skip
            assert total == pytest.approx(1.0 + (tight.tau[p, t] if t else 0.0), abs=1e-6)


def test_split_covers_every_service_once_and_shares_add_up(tight):
    x, _ = flux_pop.traffic_stage(tight)
    parts = flux_pop.split_parts(tight, x, 4, seed=0)
    assert sorted(np.concatenate([p.services for p in parts]).tolist()) == list(range(len(tight.services)))
    assert max(len(p.services) for p in parts) - min(len(p.services) for p in parts) <= 1
    np.testing.assert_allclose(sum(p.share for p in parts), 1.0)
    np.testing.assert_allclose(sum(p.phase_share for p in parts), 1.0)
    # the parts' transition headroom adds up to the whole's
    whole = np.maximum(tight.supply[:, :, :-1], tight.supply[:, :, 1:])
    np.testing.assert_allclose(sum(flux_pop.sub_phase_supply(tight, p) for p in parts), whole)


def test_aggregation_keeps_baseline_units_and_residuals(tight):
    cls = flux_pop.service_classes(tight)
    agg, floor = flux_pop.aggregate(tight, cls)
    base = flux_pop.baseline_hardware(tight)
    norm = tight.ratio[np.arange(len(tight.services)), base]
    onehot = np.eye(cls.max() + 1)[cls]
    np.testing.assert_allclose(baseline_residual(agg), onehot.T @ (baseline_residual(tight) / norm[:, None]),
                               atol=1e-9)  # fmt: skip
    assert (floor <= np.minimum(baseline_residual(agg), 0.0) + 1e-9).all()  # a relaxation of the members'


def test_repair_is_what_clears_the_split_deficits(tight):
    """On the tight instance the fixed supply shares leave regions short; the region re-solve clears them."""
    raw = flux_pop.solve_pop(tight, 2, do_repair=False)
    assert raw["deficits"] and check(raw)
    fixed = flux_pop.solve_pop(tight, 2)
    repair = [ph for ph in fixed["pop"]["phases"] if ph["phase"] == "repair"]
    assert repair and repair[0]["regions"]
    assert fixed["deficits"] == [] and check(fixed) == []


@pytest.mark.parametrize("k", [0, -1, 25, 2.5])
def test_bad_k_is_a_clear_error(tight, k):
    with pytest.raises(PopError, match=r"pop k must be an integer in 1\.\.24"):
        flux_pop.solve_pop(tight, k)


def test_cli_plan_pop_k(tmp_path, capsys):
    from placement_service.cli import main

    d = tmp_path / "in"
    assert main(["flux", "generate", "--regions", "4", "--services", "18", "--products", "4", "--hardware", "2",
                 "--timesteps", "3", "--seed", "7", "--refresh", "1", "--out", str(d)]) == 0  # fmt: skip
    out = tmp_path / "plan.json"
    assert main(["flux", "plan", "--inputs", str(d), "--pop-k", "3", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["solver"]["status"] == "pop" and doc["pop"]["k"] == 3
    assert main(["flux", "check", str(out)]) == 0
    capsys.readouterr()
    assert main(["flux", "plan", "--inputs", str(d), "--pop-k", "0", "--out", str(tmp_path / "bad.json")]) == 2
    assert "pop k must be an integer in 1..18" in capsys.readouterr().err
    assert not (tmp_path / "bad.json").exists()


def test_parts_on_a_dask_local_cluster_give_the_inline_plan(tight):
    from placement_service.capacity.pop.execute import connect, map_parts

    inline = flux_pop.solve_pop(tight, 2)
    client, cluster = connect(None, 1)
    try:
        on_dask = flux_pop.solve_pop(tight, 2, runner=map_parts(client, 120.0))
    finally:
        client.close()
        cluster.close()
    assert on_dask["solver"]["objective"] == pytest.approx(inline["solver"]["objective"], rel=1e-9)
    assert on_dask["capacity"] == inline["capacity"]
    assert check(on_dask) == []


def test_coalesce_refuses_a_service_in_two_parts_or_none(tight):
    x, _ = flux_pop.traffic_stage(tight)
    parts = flux_pop.split_parts(tight, x, 2, seed=0)
    results = flux_pop.run_inline(flux_pop.solve_part, (tight, x), parts, (60.0,))
    twice = [parts[0], flux_pop.FluxPart(1, np.concatenate([parts[1].services, parts[0].services[:1]]),
                                         parts[1].share, parts[1].phase_share)]  # fmt: skip
    with pytest.raises(PopError, match="not in exactly one part"):
        flux_pop.coalesce(tight, twice, [results[0], replace(results[1], c=np.concatenate(
            [results[1].c, results[0].c[:1]]), res=np.concatenate([results[1].res, results[0].res[:1]]))])  # fmt: skip
    missing = [parts[0], flux_pop.FluxPart(1, parts[1].services[1:], parts[1].share, parts[1].phase_share)]
    with pytest.raises(PopError, match="not in exactly one part"):
        flux_pop.coalesce(tight, missing, [results[0], replace(results[1], c=results[1].c[1:], res=results[1].res[1:])])

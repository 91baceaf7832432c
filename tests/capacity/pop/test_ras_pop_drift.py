"""POP on regions with hardware drift: rare equivalence classes (1-3 servers of a generation in an MSB)
never make POP refuse; ``--pop-k auto`` picks k and says why."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from placement_service.capacity.pop.partition import PopError
from placement_service.capacity.pop.ras_pop import build_parts, class_key, max_k
from placement_service.capacity.pop.solve import PopOptions, auto_k, solve_pop
from placement_service.capacity.ras import io
from placement_service.capacity.ras.check import check_plan
from placement_service.capacity.ras.domain import Problem, Settings
from placement_service.capacity.ras.generate import generate_region, generate_requests
from placement_service.cli import main


@pytest.fixture(scope="module")
def drifted() -> Problem:
    region = generate_region(n_servers=2400, n_msbs=8, n_hardware=6, drift=0.2, seed=5)
    requests = generate_requests(region, n_reservations=24, fill=0.7, seed=5)
    return Problem(region, requests, Settings(time_limit_s=20.0))


def test_drift_makes_rare_classes_and_leaves_the_undrifted_region_unchanged() -> None:
    plain = generate_region(n_servers=2400, n_msbs=8, n_hardware=6, seed=5)
    same = generate_region(n_servers=2400, n_msbs=8, n_hardware=6, drift=0.0, seed=5)
    assert np.array_equal(plain.hardware, same.hardware) and np.array_equal(plain.available, same.available)
    region = generate_region(n_servers=2400, n_msbs=8, n_hardware=6, drift=0.2, seed=5)
    _, sizes = np.unique(class_key(region)[region.available], return_counts=True)
    assert 1 <= int((sizes <= 3).sum()) and int((sizes <= 3).sum()) < len(sizes) // 2
    assert int(np.sum(region.hardware != plain.hardware)) <= 3 * 8 * 6  # a few servers, not a reshuffle


def test_rare_classes_are_kept_whole_in_one_part_and_common_classes_split_evenly(drifted: Problem) -> None:
    limit, _ = max_k(drifted.region)
    assert limit < 4  # the refusal this replaces: "every sub-problem must see every class, so k <= ..."
    parted = build_parts(drifted, 4, seed=3)
    key = class_key(drifted.region)
    avail = drifted.region.available.astype(bool)
    classes, sizes = np.unique(key[avail], return_counts=True)
    for c, n in zip(classes, sizes, strict=True):
        per_part = [int(np.sum(key[p.servers] == c)) for p in parted.parts]
        if n < 4:
            assert sorted(per_part)[-1] == n, (c, per_part)  # whole, in one part
        else:
            assert max(per_part) - min(per_part) <= 1, (c, per_part)
    seen = np.concatenate([p.servers for p in parted.parts])
    assert len(seen) == len(set(seen.tolist())) == int(avail.sum())


@pytest.mark.parametrize("k", [4, 8])
def test_pop_on_a_drifted_region_meets_every_constraint(drifted: Problem, k: int) -> None:
    plan, pop = solve_pop(drifted, PopOptions(k=k, seed=1, inline=True), progress=None)
    settings = {"random_failure_buffer": drifted.settings.random_failure_buffer,
                "affinity_tolerance": drifted.settings.affinity_tolerance}  # fmt: skip
    problems = check_plan(io.region_columns(drifted.region), io.requests_to_json(drifted.requests, settings),
                          plan.to_json())  # fmt: skip
    assert problems == [] and plan.unmet == () and pop["complete"]
    assert plan.solver.objective >= plan.solver.lp_bound - 1e-6


def test_k_beyond_the_servers_is_still_an_error(drifted: Problem) -> None:
    with pytest.raises(PopError, match="must be >= 1"):
        build_parts(drifted, 0)
    n = int(drifted.region.available.sum())
    with pytest.raises(PopError, match=f"{n} available servers"):
        build_parts(drifted, n + 1)


def test_auto_k_follows_the_region_size_and_gives_its_reason(drifted: Problem) -> None:
    k, why = auto_k(drifted.region)
    assert k == 1 and "full solve" in why and "2,3" in why  # the count of available servers is named
    big = generate_region(n_servers=120_000, n_msbs=16, n_hardware=6, drift=0.1, seed=1)
    k, why = auto_k(big)
    assert k >= 2 and "sub-problem" in why


def test_cli_pop_k_auto_prints_the_choice_and_solves(drifted: Problem, tmp_path: Path,
                                                     capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    assert main(["ras", "generate", "--servers", "600", "--msbs", "8", "--hardware", "6", "--drift", "0.3",
                 "--reservations", "8", "--out-dir", str(tmp_path)]) == 0  # fmt: skip
    capsys.readouterr()
    rc = main(["ras", "solve", "--inventory", str(tmp_path / "inventory.csv"), "--reservations",
               str(tmp_path / "reservations.json"), "--pop-k", "auto", "--out", str(tmp_path / "A.json")])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 0 and "--pop-k auto: 1" in err
    assert io.load_json(tmp_path / "A.json")["check"]["ok"]
    assert main(["ras", "generate", "--servers", "60", "--drift", "1.5", "--out-dir", str(tmp_path / "x")]) == 2
    assert "--drift must be within [0, 1]" in capsys.readouterr().err

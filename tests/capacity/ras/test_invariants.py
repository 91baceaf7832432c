"""The capacity service's publish invariants (issue 37, finding 1), on the real loop and solver.

A failure signal or an emergency request that arrives while a solve runs is simulated by running it
inside the solve (the loop calls the solver outside its lock, so this is the same interleaving as
a signal from another thread): deterministic, no sleeps. The invariants are checked here from the
outside, independently of the loop's own check:

- before any plan, nothing is lent (every elastic set is empty);
- a published plan never gives a reservation less capacity after the worst MSB loss than the
  previous plan gave it on the servers still alive (or than it asked for, whichever is less);
- no failed server and no server a reservation holds is lent;
- a failure during a solve never loses the solve: the solve publishes, with the failed servers
  replaced (no failed server assigned to a reservation afterwards).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from placement_service.capacity.ras import io
from placement_service.capacity.ras import loop as loop_mod
from placement_service.capacity.ras.domain import CAPACITY_TOLERANCE_RRU, Region, Request
from placement_service.capacity.ras.generate import generate_region, generate_requests
from placement_service.capacity.ras.loop import CapacityLoop, LoopConfig, elastic
from placement_service.capacity.ras.store import CapacityStore

REAL_SOLVE = loop_mod.solve


def _region(n: int = 60) -> Region:
    region = generate_region(n_servers=n, n_msbs=3, n_hardware=2, seed=7)
    clusters = tuple("c1" if i % 2 == 0 else "c2" for i in range(len(region)))
    return dataclasses.replace(region, extra={**region.extra, "cluster": clusters})


def _loop(tmp: Path, region: Region) -> CapacityLoop:
    requests = generate_requests(region, n_reservations=3, fill=0.5, seed=7)
    doc = io.requests_to_json(requests, {"time_limit_s": 2})
    return CapacityLoop(region, doc, CapacityStore(tmp / "capacity.sqlite"), LoopConfig(budget_s=2, interval_s=0))


def _during_solve(monkeypatch: pytest.MonkeyPatch, events: Callable[[], object]) -> None:
    """Run ``events`` while the next solve is under way (after the solver computed its plan)."""
    calls = {"n": 0}

    def solve(problem: Any) -> Any:
        plan = REAL_SOLVE(problem)
        calls["n"] += 1
        if calls["n"] == 1:
            events()
        return plan

    monkeypatch.setattr(loop_mod, "solve", solve)


def _capacity(region: Region, req: Request, assignment: dict[str, str | None], alive: np.ndarray) -> float:
    idx = region.index()
    members = np.array([idx[s] for s, e in assignment.items() if e == req.id and s in idx and alive[idx[s]]], dtype=int)
    if len(members) == 0:
        return 0.0
    value = np.array([req.rru.get(h, 0.0) for h in region.hardware_names])
    per_msb = np.bincount(region.msb[members], weights=value[region.hardware[members]], minlength=len(region.msb_names))
    return float(per_msb.sum() - per_msb.max())


def _lent(loop: CapacityLoop) -> set[str]:
    return {n for c in loop.clusters() for n in loop.elastic_set(c)["nodes"]}


def _check_invariants(loop: CapacityLoop, before: dict[str, str | None]) -> None:
    """The current plan against ``before`` (the plan before the last operation)."""
    lent = _lent(loop)
    if loop.version == 0:
        assert lent == set(), "servers lent before any plan"
        return
    failed = set(loop.store.failed())
    assignment = loop.assignment()
    assert not lent & failed, f"failed servers lent: {sorted(lent & failed)[:5]}"
    held = {s for s, e in assignment.items() if not elastic(e)}
    assert not lent & held, f"reservation servers lent: {sorted(lent & held)[:5]}"
    alive = loop.live_region().available.astype(bool)
    for req in loop.requests():
        now = _capacity(loop.region, req, assignment, alive)
        floor = min(req.capacity_rru, _capacity(loop.region, req, before, alive))
        assert now >= floor - 1e-6 - CAPACITY_TOLERANCE_RRU, (req.id, now, floor, loop.version)


def _reservation_servers(loop: CapacityLoop) -> list[str]:
    return sorted(s for s, e in loop.assignment().items() if not elastic(e))


def test_failure_during_the_first_solve_never_publishes_an_empty_plan(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    loop = _loop(tmp_path, _region())
    seen: list[dict[str, Any]] = []
    _during_solve(monkeypatch, lambda: seen.append(loop.signal_failure([loop.region.server[0]], "disk", "test")))
    result = loop.solve_now()
    assert result["published"], result  # the solve is not lost
    assert seen[0]["version"] == 0  # the failure before any plan published nothing ...
    assert _lent(loop) - set(loop.elastic_set("c1")["nodes"]) - set(loop.elastic_set("c2")["nodes"]) == set()
    versions = [loop.store.plan(v) for v in range(1, loop.version + 1)]
    for doc in versions:  # ... and no published version assigns nothing
        assert doc is not None and any(not elastic(e) for e in doc["assignment"].values())
    assert loop.region.server[0] not in _reservation_servers(loop)  # ... and the failure is folded in
    assert not loop.plan.get("unmet"), loop.plan.get("unmet")


def test_failure_during_a_later_solve_is_folded_into_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    loop = _loop(tmp_path, _region())
    assert loop.solve_now()["published"]
    victim = _reservation_servers(loop)[0]
    before = loop.assignment()
    _during_solve(monkeypatch, lambda: loop.signal_failure([victim], "disk", "test"))
    result = loop.solve_now()
    assert result["published"] and "stale" not in str(result.get("reason", "")), result
    assert victim not in _reservation_servers(loop)
    _check_invariants(loop, before)


def test_grant_during_the_first_solve_waits_for_a_plan_and_is_folded_in(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    loop = _loop(tmp_path, _region())
    hw = loop.region.hardware_names[0]
    out: list[dict[str, Any]] = []
    _during_solve(monkeypatch, lambda: out.append(loop.grant({"id": "urgent", "capacity_rru": 2, "rru": {hw: 1}})))
    assert loop.solve_now()["published"]
    assert out[0]["version"] == 0 and out[0]["granted"] == []
    assert any(e == "urgent" for e in loop.assignment().values())


# -- property: failures, recoveries, requests and solves in any order ------------------------------
OPS = st.lists(st.one_of(
    st.tuples(st.just("fail"), st.integers(0, 59)),
    st.tuples(st.just("recover"), st.integers(0, 59)),
    st.tuples(st.just("grant"), st.integers(1, 4)),
    st.tuples(st.just("solve"), st.lists(st.tuples(st.sampled_from(["fail", "grant"]), st.integers(0, 59)),
                                         max_size=2)),
), min_size=1, max_size=6)


@settings(max_examples=15, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(ops=OPS)
def test_invariants_hold_under_any_order_of_failures_requests_and_solves(
        tmp_path_factory: pytest.TempPathFactory, ops: list[tuple[str, Any]]) -> None:
    region = _region()
    loop = _loop(tmp_path_factory.mktemp("prop"), region)
    hw = region.hardware_names
    grants = iter(range(1000))

    def run(op: str, arg: int) -> None:
        if op == "fail":
            loop.signal_failure([region.server[arg]], "prop", "test")
        elif op == "recover":
            loop.recover([region.server[arg]])
        elif op == "grant":
            loop.grant({"id": f"g{next(grants)}", "capacity_rru": arg % 3 + 1, "rru": {hw[arg % len(hw)]: 1}})

    with pytest.MonkeyPatch.context() as mp:
        for op, arg in ops:
            before = loop.assignment()
            if op == "solve":
                def during(events: list[tuple[str, int]] = arg) -> None:
                    for o, a in events:
                        run(o, a)

                _during_solve(mp, during)
                result = loop.solve_now()
                assert "stale" not in str(result.get("reason", "")), result  # a solve is never lost
                failed = set(loop.store.failed())
                if result["published"]:
                    assert not failed & set(_reservation_servers(loop)), "a failure during the solve was lost"
            else:
                run(op, arg)
            _check_invariants(loop, before)


def test_the_event_table_keeps_only_the_newest_events(tmp_path: Path) -> None:
    store = CapacityStore(tmp_path / "c.sqlite", max_events=50)
    for k in range(500):  # e.g. a stream of repeated or refused signals
        store.event("noise", {"k": k})
    assert store.event_count() == 50
    assert [e["k"] for e in store.events(3)] == [499, 498, 497]

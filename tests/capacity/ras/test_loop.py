"""The capacity service's core: async solve gated by the checker, emergency path, mover, revocations."""

from __future__ import annotations

import dataclasses
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from placement_service.capacity import CapacityError
from placement_service.capacity.ras import io
from placement_service.capacity.ras import loop as loop_mod
from placement_service.capacity.ras.domain import Region
from placement_service.capacity.ras.generate import generate_region, generate_requests
from placement_service.capacity.ras.loop import CapacityLoop, LoopConfig, StalePlanError, UnknownServerError
from placement_service.capacity.ras.store import CapacityStore


def _region() -> Region:
    region = generate_region(n_servers=240, n_msbs=4, n_hardware=2, seed=11)
    clusters = tuple("c1" if i % 2 == 0 else "c2" for i in range(len(region)))
    return dataclasses.replace(region, extra={**region.extra, "cluster": clusters})


@pytest.fixture()
def loop(tmp_path: Path) -> CapacityLoop:
    region = _region()
    requests = generate_requests(region, n_reservations=5, fill=0.5, seed=11)
    doc = io.requests_to_json(requests, {"time_limit_s": 3})
    store = CapacityStore(tmp_path / "capacity.sqlite")
    return CapacityLoop(region, doc, store, LoopConfig(budget_s=3, interval_s=0, ack_timeout_s=0.5))


def test_solve_publishes_a_checked_plan_and_survives_a_restart(loop: CapacityLoop, tmp_path: Path) -> None:
    result = loop.solve_now()
    assert result["published"] and result["version"] == 1
    assert loop.plan["check"]["ok"] and loop.check(loop.plan) == []
    # a re-solve starts from the previous plan: nothing moves
    again = loop.solve_now()
    assert again["published"] and again["moves"] == 0
    reopened = CapacityLoop(loop.region, loop.base_doc, CapacityStore(tmp_path / "capacity.sqlite"), loop.cfg)
    assert reopened.version == 2 and reopened.assignment() == loop.assignment()


def test_a_plan_the_checker_refuses_is_not_published(loop: CapacityLoop, monkeypatch: pytest.MonkeyPatch) -> None:
    loop.solve_now()
    before = (loop.version, loop.assignment())
    monkeypatch.setattr(loop_mod, "check_plan", lambda *a: ["reservation x: 1 RRU after losing its worst MSB < 2"])
    result = loop.solve_now()
    assert not result["published"] and "checker" in result["reason"]
    assert (loop.version, loop.assignment()) == before
    assert loop.store.events()[0]["kind"] == "solve-refused"


def test_mover_replaces_a_failed_msb_and_revokes_elastic_servers(loop: CapacityLoop) -> None:
    loop.solve_now()
    rid = max(loop.plan["reservations"], key=lambda r: len(loop.plan["reservations"][r]["servers"]))
    worst = loop.plan["reservations"][rid]["worst_msb"]
    idx = loop.region.index()
    failed = [s for s in loop.plan["reservations"][rid]["servers"]
              if loop.region.msb_names[loop.region.msb[idx[s]]] == worst]  # fmt: skip
    t0 = time.monotonic()
    result = loop.signal_failure(failed, "MSB down", "operator")
    assert time.monotonic() - t0 < 5.0
    assert result["revoked"] and {r[0] for r in result["replacements"]} <= set(failed)
    pending = loop.store.revocations("pending")
    assert {r["server"] for r in pending} == set(result["revoked"])
    assert all("replaces" in r["reason"] and "MSB down" in r["reason"] for r in pending)
    status = loop.reservation_status(rid)
    assert status["check_ok"] and not status["whole"]  # whole in the plan, waiting for the handover
    # the revoked servers are no longer in their cluster's elastic set, and are listed as revocations
    for cluster in ("c1", "c2"):
        body = loop.elastic_set(cluster)
        assert not set(body["nodes"]) & set(result["revoked"])
        # each lent node's pool: the tenant its reports count for in the placement service
        assignment = loop.assignment()
        assert set(body["pools"]) == set(body["nodes"])
        assert all(body["pools"][n] == f"elastic:{assignment[n] or 'unassigned'}" for n in body["nodes"])
        assert {r["node"] for r in body["revocations"]} == {r["server"] for r in pending if r["cluster"] == cluster}
    first = pending[0]["id"]
    assert loop.ack(first)["state"] == "acked" and not loop.ack(first)["changed"]  # idempotent
    time.sleep(0.6)
    expired = loop.expire()
    assert set(expired) == {r["id"] for r in pending[1:]}
    states = {r["id"]: r["state"] for r in loop.store.revocations()}
    assert states[first] == "acked" and all(states[i] == "timeout" for i in expired)
    assert loop.reservation_status(rid)["whole"]
    # signalling the same servers again changes nothing
    assert loop.signal_failure(failed, "MSB down", "operator")["replacements"] == []


def test_bad_input_is_refused_with_a_reason(loop: CapacityLoop) -> None:
    loop.solve_now()
    with pytest.raises(UnknownServerError, match="unknown server"):
        loop.signal_failure(["no-such-server"], "x", "operator")
    with pytest.raises(UnknownServerError, match="no revocation with id 999"):
        loop.ack(999)
    with pytest.raises(StalePlanError, match="stale"):
        loop.grant({"id": "late", "capacity_rru": 1, "rru": {"hw00": 1}}, base_version=loop.version - 1)
    with pytest.raises(CapacityError, match="capacity_rru"):
        loop.grant({"id": "bad", "rru": {"hw00": 1}})
    assert loop.version == 1  # nothing was published by the refusals


def test_emergency_grant_is_immediate_and_folded_into_the_next_solve(loop: CapacityLoop) -> None:
    loop.solve_now()
    result = loop.grant({"id": "urgent", "capacity_rru": 6, "rru": {"hw00": 1.0, "hw01": 1.0}},
                        base_version=loop.version)  # fmt: skip
    assert result["granted"] and result["unmet"] == []
    assert loop.reservation_status("urgent")["check_ok"]
    assert {r["server"] for r in loop.store.revocations("pending")} >= {
        s for s in result["granted"] if s in loop.cluster_of}  # fmt: skip
    solved = loop.solve_now()
    assert solved["published"]
    assert "urgent" in loop.plan["reservations"] and loop.check(loop.plan) == []


def test_unmeetable_request_gets_a_reason(loop: CapacityLoop) -> None:
    loop.solve_now()
    result = loop.grant({"id": "huge", "capacity_rru": 10_000, "rru": {"hw00": 1.0}})
    assert "not enough free eligible servers" in result["unmet"][0]
    loop.solve_now()
    reason = next(u["reason"] for u in loop.plan["unmet"] if u["id"] == "huge")
    assert "short by" in reason


def test_pusher_retries_a_cluster_that_is_down_and_never_goes_back(loop: CapacityLoop) -> None:
    loop.solve_now()
    held: dict[str, int] = {}
    down = {"c2"}
    calls: list[tuple[str, int]] = []

    def push(cluster: str, body: dict[str, Any]) -> int:
        calls.append((cluster, int(body["version"])))
        if cluster in down:
            raise ConnectionRefusedError("connection refused")
        held[cluster] = max(held.get(cluster, 0), int(body["version"]))
        return held[cluster]

    stop = threading.Event()
    t = threading.Thread(target=loop_mod.run_pusher, args=(loop, stop, push), daemon=True)
    t.start()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and loop.store.push_state("c2")["attempts"] < 3:
        time.sleep(0.05)
    assert held == {"c1": 1}
    assert loop.store.push_state("c2")["attempts"] >= 3 and "refused" in loop.store.push_state("c2")["last_error"]
    down.clear()
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline and held.get("c2") != 1:
        time.sleep(0.05)
    stop.set()
    loop.changed.set()
    t.join(5)
    assert held == {"c1": 1, "c2": 1} and loop.store.push_state("c2")["attempts"] == 0
    assert np.all(np.diff([v for c, v in calls if c == "c1"]) >= 0)


def test_revocation_log_is_read_as_reimage_events(loop: CapacityLoop, tmp_path: Path) -> None:
    from placement_service.capacity.ras.revlog import revocation_events
    from placement_service.traces.io import load_reimages

    loop.solve_now()
    rid = next(iter(loop.plan["reservations"]))
    before = loop.assignment()
    result = loop.signal_failure(loop.plan["reservations"][rid]["servers"][:3], "disk", "operator")
    cols = revocation_events(tmp_path)
    assert sorted(cols["server"]) == sorted(result["revoked"])
    assert all(p == f"elastic:{before[s] or 'unassigned'}" for s, p in zip(cols["server"], cols["pool"], strict=True))
    io.write_table(tmp_path / "revocations.csv", cols)
    events = load_reimages(tmp_path / "revocations.csv")  # the reimage contract of harvest sim durability
    assert sorted(events.server) == sorted(result["revoked"])

"""Capacity ledger + orchestrator: antecedents, review holds, failures block dependents, several writers."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3

import pytest

from placement_service.capacity.flux import FluxError
from placement_service.capacity.flux.ledger import Ledger


def ev(eid, kind="resize", ants=(), review=False, ts=0.0):
    return {"id": eid, "kind": kind, "timestamp": ts, "payload": {"service": "s", "region": "r", "hardware": "h",
            "amount": 1.0}, "antecedents": list(ants), "review": review}  # fmt: skip


def test_activation_order_review_hold_and_failure_blocking(tmp_path):
    with Ledger(tmp_path / "l.sqlite") as led:
        led.add([ev("a"), ev("b", ants=["a"]), ev("c", ants=["b"]), ev("r", review=True), ev("d", ants=["r"])],
                writer="flux")  # fmt: skip
        rep = led.orchestrate()
        assert rep.activated == ("a",) and rep.held_for_review == ("r",)
        led.complete(["a"])
        assert led.orchestrate().activated == ("b",)
        led.fail(["b"], note="autoscaler refused")
        rep = led.orchestrate()
        assert (
            rep.activated == () and ("c", "b") in rep.blocked and rep.failed == (("b", "autoscaler refused"),)
        )
        led.approve(["r"], operator="alice")
        assert led.orchestrate().activated == ("r",)
        with pytest.raises(FluxError, match="only active events"):
            led.complete(["d"])
        states = {e["id"]: e["state"] for e in led.events()}
        assert states == {"a": "succeeded", "b": "failed", "c": "proposed", "r": "active", "d": "proposed"}


def test_missing_antecedent_rejects_the_whole_batch(tmp_path):
    with Ledger(tmp_path / "l.sqlite") as led:
        with pytest.raises(
            FluxError, match=r"row 1 \('y'\): field 'antecedents\[0\]': event 'nope' does not exist"
        ):
            led.add([ev("x"), ev("y", ants=["nope"])], writer="w", source="events.json")
        assert led.events() == []
        with pytest.raises(FluxError, match="field 'kind'"):
            led.add([{"id": "z", "kind": "teleport", "timestamp": 0}], writer="w")
        led.add([ev("x")], writer="w")
        with pytest.raises(FluxError, match="already in the ledger"):
            led.add([ev("x")], writer="w")


def _writer(path, k, n):
    with Ledger(path) as led:
        for i in range(n):
            led.add([ev(f"w{k}-{i}", ants=[f"w{k}-{i - 1}"] if i else [])], writer=f"writer{k}")


def test_several_writer_processes(tmp_path):
    path = str(tmp_path / "l.sqlite")
    Ledger(path).close()
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(path, k, 30)) for k in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    with Ledger(path) as led:
        evs = led.events()
        assert len(evs) == 90 and {e["writer"] for e in evs} == {"writer0", "writer1", "writer2"}
        assert len(led.orchestrate().activated) == 3  # the first event of each chain
    assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone()[0] == "wal"

"""Crash safety: ``kill -9`` a real server during sustained ingest, restart, and find every report
that got a 202 (count and values); a request is stored all-or-nothing; no half-written Parquet file
is ever visible; replayed seqs stay de-duplicated across the crash."""

from __future__ import annotations

import http.client
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from tests.server.conftest import ServerProc, report, start_server


def _batch(worker: int, i: int, now: float) -> tuple[str, list[dict[str, Any]]]:
    tenant = f"crash-{worker}-{i}"
    reps = [
        report(f"{tenant}-n{k}", tenant, now - 30 * j, cpu=0.5 + ((worker * 31 + i * 7 + k * 3 + j) % 13) * 0.5,
               seq=j + 1)
        for k in range(5) for j in range(30)
    ]
    return tenant, reps


def _ingest_until_killed(server: ServerProc, worker: int, start_i: int, acked: dict[str, list[dict[str, Any]]],
                         sent: dict[str, list[dict[str, Any]]], stop: threading.Event) -> None:
    i = start_i
    while not stop.is_set():
        tenant, reps = _batch(worker, i, time.time())
        sent[tenant] = reps
        try:
            status, body = server.call("POST", "/v1/reports", {"reports": reps}, timeout_s=10)
        except (OSError, http.client.HTTPException):
            return  # the server died under us: this request is not acknowledged
        if status == 202:
            assert body["stored"] == len(reps)
            acked[tenant] = reps
        i += 1


def _expected(reps: list[dict[str, Any]]) -> dict[int, tuple[int, float]]:
    out: dict[int, tuple[int, float]] = {}
    for r in reps:
        slot = int(r["timestamp"] // 300) * 300
        n, c = out.get(slot, (0, 0.0))
        out[slot] = (n + 1, c + r["primary_cpu_cores"] / r["capacity_cores"])
    return out


def _stored(server: ServerProc, tenant: str) -> dict[int, tuple[int, float]] | None:
    status, doc = server.call("GET", f"/v1/tenants/{tenant}/samples?since=0")
    if status == 404:
        return None
    assert status == 200
    return {s["slot_start_s"]: (s["reports"], s["cpu_frac_sum"]) for s in doc["samples"]}


def _assert_complete_parquet(data_dir: Path) -> None:
    for path in (data_dir / "history").rglob("*.parquet"):
        pq.read_table(path)  # raises on a truncated or half-written file


@pytest.mark.slow
def test_kill9_during_ingest_loses_nothing_acknowledged(tmp_path: Path) -> None:
    data = tmp_path / "data"
    acked: dict[str, list[dict[str, Any]]] = {}
    sent: dict[str, list[dict[str, Any]]] = {}
    for cycle in range(2):
        server = start_server(data, "--compact-interval-s", "0.3")
        stop = threading.Event()
        workers = [
            threading.Thread(target=_ingest_until_killed, args=(server, w + 10 * cycle, 0, acked, sent, stop))
            for w in range(4)
        ]
        for w in workers:
            w.start()
        time.sleep(1.5)
        server.kill9()
        stop.set()
        for w in workers:
            w.join(timeout=20)
        _assert_complete_parquet(data)
    assert len(acked) > 50, "too little load to test anything"
    server = start_server(data)
    try:
        for tenant, reps in sent.items():
            got = _stored(server, tenant)
            if tenant in acked:
                assert got is not None, f"{tenant}: acknowledged but lost"
            if got is None:
                continue
            want = _expected(reps)
            # Acknowledged requests are all there; an unacknowledged one is all there or absent.
            assert set(got) == set(want), tenant
            for slot, (n, c) in want.items():
                assert got[slot][0] == n and got[slot][1] == pytest.approx(c, rel=1e-12), (tenant, slot)
        # Replays of acknowledged reports are still recognised after the crash.
        for tenant in list(acked)[:10]:
            status, body = server.call("POST", "/v1/reports", {"reports": acked[tenant]})
            assert status == 202 and body["stored"] == 0 and body["duplicates"] == len(acked[tenant])
    finally:
        server.stop()
    assert not list((data / "history").rglob("*.tmp"))


def test_sigterm_compacts_the_log_into_parquet(tmp_path: Path) -> None:
    from placement_service.server.wal import list_segments, read_frames

    data = tmp_path / "data"
    server = start_server(data, "--compact-interval-s", "3600")  # only the shutdown compacts
    now = time.time()
    reps = [report(f"term-{i}", "term-t", now - i, cpu=1.0 + i, seq=1) for i in range(7)]
    assert server.call("POST", "/v1/reports", {"reports": reps})[0] == 202
    server.stop()
    assert server.proc.returncode == 0
    frames = [f for seg in list_segments(data / "log") for f in read_frames(seg.path)]
    assert frames == []  # everything left the log ...
    tables = [pq.read_table(p) for p in (data / "history").rglob("*.parquet")]
    rows = [r for t in tables for r in t.to_pylist() if r["tenant"] == "term-t"]
    assert sum(r["n_reports"] for r in rows) == 7  # ... and is in the Parquet history
    assert sum(r["cpu_frac_sum"] for r in rows) == pytest.approx(sum((1.0 + i) / 8.0 for i in range(7)))

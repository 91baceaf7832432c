"""State damaged on disk: a truncated Parquet file, a lost SQLite WAL, a corrupt log frame in the
middle of a segment, and a tenant's history once none of its nodes reports any more."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from placement_service.server.wal import ReportLog, read_frames, segment_path
from tests.server.conftest import ServerProc, report, start_server

DAY_S = 86400.0


def _count(srv: ServerProc, tenant: str) -> int:
    status, doc = srv.call("GET", f"/v1/tenants/{tenant}/samples?since=0")
    assert status == 200, doc
    return sum(s["reports"] for s in doc["samples"])


def _two_days(tenant: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    base = (int(time.time() // DAY_S) - 2) * DAY_S + 3600  # 01:00 two days ago
    old = [report(f"{tenant}-n{i}", tenant, base + 60 * i, seq=1) for i in range(20)]
    new = [report(f"{tenant}-n{i}", tenant, base + DAY_S + 60 * i, seq=2) for i in range(30)]
    return old, new


def test_truncated_parquet_is_quarantined_at_start_and_on_read(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = start_server(data)
    old, new = _two_days("dmg")
    try:
        assert srv.call("POST", "/v1/reports", {"reports": old})[0] == 202
        assert srv.call("POST", "/v1/flush")[0] == 200
        assert srv.call("POST", "/v1/reports", {"reports": new})[0] == 202
        assert srv.call("POST", "/v1/flush")[0] == 200
    finally:
        srv.stop()
    days = sorted((data / "history").glob("day=*"))
    assert len(days) == 2
    first = next(days[0].glob("seg-*.parquet"))
    first.write_bytes(first.read_bytes()[: first.stat().st_size // 2])  # torn: footer gone

    srv = start_server(data)
    try:
        status, health = srv.call("GET", "/healthz")
        assert status == 200 and health["status"] == "degraded"
        assert [q["file"] for q in health["quarantined_files"]] == [str(first.relative_to(data / "history"))]
        assert "harvest_history_quarantined_files 1" in srv.call("GET", "/metrics")[1]
        assert not first.exists() and list((data / "history" / "quarantine").rglob("*.reason"))
        assert _count(srv, "dmg") == 30  # the other day is still served
        # Damage found on read (after start-up): the query still answers, the file is quarantined.
        second = next(days[1].glob("seg-*.parquet"))
        second.write_bytes(b"PAR1" + b"\0" * 100 + b"PAR1")
        assert _count(srv, "dmg") == 0
        status, health = srv.call("GET", "/healthz")
        assert status == 200 and len(health["quarantined_files"]) == 2
        assert "harvest_history_quarantined_files 2" in srv.call("GET", "/metrics")[1]
        # Ingest and compaction keep working.
        assert srv.call("POST", "/v1/reports", {"reports": [report("dmg-n0", "dmg", time.time(), seq=3)]})[0] == 202
        assert srv.call("POST", "/v1/flush")[0] == 200
        assert _count(srv, "dmg") == 1
    finally:
        srv.stop()


@pytest.mark.parametrize("lost", ["state.sqlite-wal", "state.sqlite"])
def test_lost_sqlite_state_never_double_stores_replays(tmp_path: Path, lost: str) -> None:
    data = tmp_path / "data"
    srv = start_server(data)
    now = time.time()
    reps = [report(f"wal-n{i}", "wal-t", now - 10, seq=7) for i in range(100)]
    try:
        status, doc = srv.call("POST", "/v1/reports", {"reports": reps})
        assert status == 202 and doc["stored"] == 100
        assert srv.call("POST", "/v1/flush")[0] == 200
    finally:
        srv.kill9()
    doomed = ["state.sqlite-wal", "state.sqlite-shm"] + (["state.sqlite"] if lost == "state.sqlite" else [])
    assert (data / lost).exists()
    for name in doomed:
        (data / name).unlink(missing_ok=True)
    srv = start_server(data)
    try:
        status, doc = srv.call("POST", "/v1/reports", {"reports": reps})  # the agents replay
        assert status == 202 and doc["stored"] == 0 and doc["duplicates"] == 100, doc
        assert _count(srv, "wal-t") == 100
        assert srv.call("POST", "/v1/reports", {"reports": [report("wal-n0", "wal-t", now, seq=8)]})[1]["stored"] == 1
        assert srv.call("POST", "/v1/flush")[0] == 200  # new segments never hide behind old files
        assert _count(srv, "wal-t") == 101
    finally:
        srv.stop()


def test_read_frames_resynchronises_after_a_corrupt_middle_frame(tmp_path: Path) -> None:
    log = ReportLog(tmp_path, 1)
    for payload in (b"[[1]]", b"[[2]]", b"[[3]]", b"[[4]]"):
        log.wait(log.append(payload), 5)
    log.close()
    path = segment_path(tmp_path, 1)
    data = bytearray(path.read_bytes())
    data[13 + 8 + 2] ^= 0xFF  # a byte inside the second frame's payload
    path.write_bytes(bytes(data))
    assert list(read_frames(path)) == [b"[[1]]", b"[[3]]", b"[[4]]"]
    assert list(read_frames(path, payload_prefix=b"[[")) == [b"[[1]]", b"[[3]]", b"[[4]]"]
    data[13 + 3] = 0x7F  # the second frame's length now points past the end
    path.write_bytes(bytes(data))
    assert list(read_frames(path, truncate_torn=True)) == [b"[[1]]", b"[[3]]", b"[[4]]"]
    assert path.stat().st_size == len(data)  # good frames at the end: nothing cut


def test_corrupt_log_frame_in_the_middle_keeps_the_later_frames(tmp_path: Path) -> None:
    data = tmp_path / "data"
    srv = start_server(data, "--compact-interval-s", "3600")
    now = time.time()
    try:
        for k in range(3):
            batch = [report(f"frm-n{i}", f"frm-{k}", now - 10, seq=k + 1) for i in range(5)]
            assert srv.call("POST", "/v1/reports", {"reports": batch})[0] == 202
    finally:
        srv.kill9()
    seg = max((data / "log").glob("seg-*.log"))
    raw = bytearray(seg.read_bytes())
    frames = list(read_frames(seg))
    assert len(frames) == 3
    raw[8 + len(frames[0]) + 8 + 20] ^= 0xFF  # inside the second frame
    seg.write_bytes(bytes(raw))
    srv = start_server(data)
    try:
        assert _count(srv, "frm-0") == 5
        assert srv.call("GET", "/v1/tenants/frm-1/samples?since=0")[0] == 404  # the damaged frame only
        assert _count(srv, "frm-2") == 5
    finally:
        srv.stop()


def test_tenant_history_is_served_when_no_node_reports_for_it(server: ServerProc) -> None:
    now = time.time()
    assert server.call("POST", "/v1/reports", {"reports": [report("mv-n1", "mv-old", now - 600, seq=1)]})[0] == 202
    assert server.call("POST", "/v1/flush")[0] == 200
    # The only node of mv-old now belongs to another tenant.
    assert server.call("POST", "/v1/reports", {"reports": [report("mv-n1", "mv-new", now, seq=2)]})[0] == 202
    assert _count(server, "mv-old") == 1
    assert server.call("GET", "/v1/tenants/never-reported/samples")[0] == 404

"""Disk full on a real tmpfs: ingest refuses at once (HTTP 503 / gRPC UNAVAILABLE) with the reason,
``/healthz`` and a gauge say why, refused reports are counted nowhere (and their seqs are free for
the resend), and ingest and compaction resume by themselves once space is back.

Needs root to mount a 4 MiB tmpfs (skipped otherwise: the fault is then not reproduced here)."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest

from placement_service.proto_gen import harvest_pb2, harvest_pb2_grpc
from tests.server.conftest import TOKEN, ServerProc, report, start_server


@pytest.fixture()
def small_fs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "fs"
    mnt.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(mnt)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def _fill(mnt: Path, leave_bytes: int) -> Path:
    """Take all free space but ``leave_bytes`` with one file."""
    filler = mnt / "filler"
    st = os.statvfs(mnt)
    free = st.f_bavail * st.f_frsize
    with open(filler, "wb") as fh:
        remaining = max(0, free - leave_bytes)
        while remaining > 0:
            n = min(remaining, 1 << 16)
            try:
                fh.write(b"\0" * n)
                fh.flush()
            except OSError:
                break
            remaining -= n
    return filler


def _batch(tenant: str, n_nodes: int, seq: int, ts: float) -> dict[str, Any]:
    return {"reports": [report(f"{tenant}-n{i:04d}", tenant, ts, seq=seq) for i in range(n_nodes)]}


def _count(srv: ServerProc, tenant: str) -> int:
    status, doc = srv.call("GET", f"/v1/tenants/{tenant}/samples?since=0")
    assert status == 200, doc
    return sum(s["reports"] for s in doc["samples"])


def _wait_health(srv: ServerProc, pred: Any, timeout_s: float = 15.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        status, doc = srv.call("GET", "/healthz")
        if pred(status, doc):
            return dict(doc)
        assert time.monotonic() < deadline, f"health never matched: {status} {doc}"
        time.sleep(0.2)


def test_disk_full_refuses_at_once_reports_why_and_recovers(small_fs: Path) -> None:
    srv = start_server(small_fs / "data", "--compact-interval-s", "1")
    channel = grpc.insecure_channel(srv.grpc)
    stub = harvest_pb2_grpc.PlacementStub(channel)
    try:
        now = time.time()
        assert srv.call("POST", "/v1/reports", _batch("full", 1000, 1, now - 60))[0] == 202
        assert srv.call("POST", "/v1/flush")[0] == 200
        filler = _fill(small_fs, 0)

        # HTTP: refused at once, naming the cause; nothing of it counted.
        start = time.monotonic()
        status, doc = srv.call("POST", "/v1/reports", _batch("full", 1000, 2, now), timeout_s=10)
        assert status == 503 and "ENOSPC" in doc["error"]["message"], doc
        assert time.monotonic() - start < 3.0
        status, doc = srv.call("POST", "/v1/reports", _batch("full", 10, 3, now), timeout_s=10)
        assert status == 503  # still refused while the disk is full
        # gRPC: UNAVAILABLE with the reason, well before the client's deadline.
        msg = harvest_pb2.NodeReport(node="full-n0000", tenant="full", timestamp=now, primary_cpu_cores=1.0,
                                     primary_memory_mb=1.0, capacity_cores=8.0, capacity_memory_mb=16384.0,
                                     busy=False, free_storage_gb=1.0, seq=4)
        start = time.monotonic()
        with pytest.raises(grpc.RpcError) as err:
            list(stub.Report(iter([msg]), metadata=(("authorization", f"Bearer {TOKEN}"),), timeout=20))
        assert err.value.code() == grpc.StatusCode.UNAVAILABLE and "ENOSPC" in (err.value.details() or "")
        assert time.monotonic() - start < 5.0
        # Health and metrics say why.
        health = _wait_health(srv, lambda s, d: s == 503)
        assert health["status"] == "unhealthy" and health["problems"]["report_log"]["cause"] == "ENOSPC"
        metrics = srv.call("GET", "/metrics")[1]
        assert 'harvest_health_problem{cause="ENOSPC",component="report_log"} 1' in metrics
        assert "harvest_healthy 0" in metrics
        assert _count(srv, "full") == 1000  # the refused batches count nowhere

        # Space back: everything resumes without a restart; the resend is stored, not a replay.
        filler.unlink()
        _wait_health(srv, lambda s, d: s == 200 and d["status"] == "ok")
        status, doc = srv.call("POST", "/v1/reports", _batch("full", 1000, 2, now))
        assert status == 202 and doc["stored"] == 1000 and doc["duplicates"] == 0, doc
        assert _count(srv, "full") == 2000
        deadline = time.monotonic() + 10
        while len(list((small_fs / "data" / "log").glob("seg-*.log"))) > 1:  # compaction resumed
            assert time.monotonic() < deadline, "compaction did not resume"
            time.sleep(0.2)
        assert "harvest_healthy 1" in srv.call("GET", "/metrics")[1]
    finally:
        channel.close()
        srv.stop()
    srv2 = start_server(small_fs / "data")
    try:
        assert _count(srv2, "full") == 2000  # nothing refused was stored, nothing acked was lost
    finally:
        srv2.stop()


def test_failed_compaction_is_retried_in_the_running_process(small_fs: Path) -> None:
    srv = start_server(small_fs / "data", "--compact-interval-s", "1")
    try:
        now = time.time()
        assert srv.call("POST", "/v1/reports", _batch("cmp", 10, 1, now - 60))[0] == 202
        assert srv.call("POST", "/v1/flush")[0] == 200
        # Room for the log frame (~120 KB) but not for storing 1,000 nodes in SQLite.
        filler = _fill(small_fs, 200 * 1024)
        status, doc = srv.call("POST", "/v1/reports", _batch("cmp", 1000, 2, now))
        assert status == 202, doc
        health = _wait_health(srv, lambda s, d: "compaction" in d.get("problems", {}))
        assert health["status"] == "unhealthy"
        assert _count(srv, "cmp") == 1010  # acknowledged reports are served while not yet stored
        filler.unlink()
        _wait_health(srv, lambda s, d: s == 200 and d["status"] == "ok")
        deadline = time.monotonic() + 10
        while len(list((small_fs / "data" / "log").glob("seg-*.log"))) > 1:
            assert time.monotonic() < deadline, "the failed compaction was not retried"
            time.sleep(0.2)
        assert _count(srv, "cmp") == 1010
    finally:
        srv.stop()

"""One owner per data directory, and no re-clustering child outliving (or writing for) its parent."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from placement_service.server.state import StaleInstanceError, StateStore
from tests.server.conftest import RECLUSTER_WAIT_S, report, start_server


def test_second_server_on_the_same_data_dir_exits_2_naming_the_holder(tmp_path: Path) -> None:
    first = start_server(tmp_path / "data")
    try:
        done = subprocess.run(
            [sys.executable, "-m", "placement_service.cli", "serve", "--data-dir", str(tmp_path / "data"),
             "--http-port", "0", "--grpc-port", "0"],
            capture_output=True, text=True, timeout=60,
        )
        assert done.returncode == 2
        assert f"pid {first.proc.pid}" in done.stderr, done.stderr
        assert "Traceback" not in done.stderr
        # The first one is untouched and still serving.
        assert first.call("GET", "/healthz")[0] == 200
    finally:
        first.stop()
    # A stopped (or killed) owner leaves no stale lock behind.
    again = start_server(tmp_path / "data")
    try:
        again.kill9()
        third = start_server(tmp_path / "data")
        third.stop()
    finally:
        again.stop()


def _children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(entry))
    return out


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            state = fh.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _maps_has(pid: int, needle: str) -> bool:
    try:
        with open(f"/proc/{pid}/maps") as fh:
            return needle in fh.read()
    except OSError:
        return False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_kill9_during_reclustering_leaves_no_orphan(tmp_path: Path) -> None:
    srv = start_server(tmp_path / "data", "--recluster-priority", "normal", "--recluster-interval-s", "0")
    child = 0
    try:
        start = time.time() - 3 * 86400
        reps = [report(f"o{t}-n", f"orph-{t}", start + 300 * k, cpu=1.0 + (t * k) % 5, seq=k + 1)
                for t in range(12) for k in range(0, 864, 2)]
        assert srv.call("POST", "/v1/reports", {"reports": reps})[0] == 202
        assert srv.call("POST", "/v1/recluster")[0] == 202
        deadline = time.monotonic() + 60
        while True:  # the child is at work once it has loaded numpy
            kids = [c for c in _children(srv.proc.pid) if _maps_has(c, "numpy")]
            if kids:
                child = kids[0]
                break
            assert time.monotonic() < deadline, "no re-clustering child appeared"
            time.sleep(0.05)
        srv.kill9()
        deadline = time.monotonic() + 5
        while _alive(child):
            assert time.monotonic() < deadline, f"re-clustering child {child} outlived its parent"
            time.sleep(0.05)
    finally:
        srv.stop()
        if child and _alive(child):
            os.kill(child, signal.SIGKILL)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_no_reclustering_process_stays_between_runs(tmp_path: Path) -> None:
    """The clustering process lives for its run only: between the daily runs the service holds no
    second process with the clustering's libraries and its last run's memory (0.3-0.4 GB at 5,000
    tenants when it stayed). A second run starts a new one and succeeds."""
    srv = start_server(tmp_path / "data", "--recluster-priority", "normal", "--recluster-interval-s", "0")
    try:
        start = time.time() - 3 * 86400
        reps = [report(f"b{t}-n", f"betw-{t}", start + 300 * k, cpu=1.0 + (t * k) % 5, seq=k + 1)
                for t in range(12) for k in range(0, 864, 2)]
        assert srv.call("POST", "/v1/reports", {"reports": reps})[0] == 202
        for run in (1, 2):
            status, st = srv.call("POST", "/v1/recluster?wait=1", timeout_s=RECLUSTER_WAIT_S)
            assert status == 200 and st["runs"] == run and st["failures"] == 0, st
            deadline = time.monotonic() + 10
            while [c for c in _children(srv.proc.pid) if _maps_has(c, "numpy")]:
                assert time.monotonic() < deadline, "the re-clustering process stayed after its run"
                time.sleep(0.05)
    finally:
        srv.stop()


def test_class_table_from_a_previous_incarnation_is_refused(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.sqlite")
    try:
        store.set_meta("instance_id", "new-incarnation")
        doc = {"classes": [], "tenants": {}}
        with pytest.raises(StaleInstanceError, match="old-incarnation"):
            store.save_class_table(doc, {"n1": "c1"}, instance_id="old-incarnation")
        assert store.load_class_table() == (0, None)
        assert store.load_node_labels() == {}
        assert store.save_class_table(doc, {"n1": "c1"}, instance_id="new-incarnation") == 1
    finally:
        store.close()

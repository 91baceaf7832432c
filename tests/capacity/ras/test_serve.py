"""``harvest ras serve`` as a process (issue 37, findings 3-6): the placement service's serving layer.

Each test failed on the code before the capacity service used ``placement_service/server/serving.py``:
two services on one data dir both ran, an empty token file accepted an empty bearer, a non-UTF-8 one
gave a traceback, werkzeug's server let idle sockets starve other clients, and bad query values
answered 500 or were acted on.
"""

from __future__ import annotations

import http.client
import json
import resource
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.hostile.services import capacity_region, start_capacity, wait_for_plan
from tests.server.conftest import ServerProc


@pytest.fixture(scope="module")
def cap(tmp_path_factory: pytest.TempPathFactory) -> Any:
    srv = start_capacity(tmp_path_factory.mktemp("cap") / "data")
    try:
        wait_for_plan(srv)
        yield srv
    finally:
        srv.stop()


def _serve_argv(region: Path, data: Path, token: Path) -> list[str]:
    return [sys.executable, "-m", "placement_service.cli", "ras", "serve", "--inventory", str(region / "inventory.csv"),
            "--reservations", str(region / "reservations.json"), "--data-dir", str(data), "--http-port", "0",
            "--token-file", str(token), "--interval-s", "0"]


def test_second_capacity_service_on_one_data_dir_exits_2_naming_the_holder(cap: ServerProc, tmp_path: Path) -> None:
    region = capacity_region(tmp_path / "region")
    token = cap.data_dir.parent / f"{cap.data_dir.name}.token"
    run = subprocess.run(_serve_argv(region, cap.data_dir, token), capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr[-2000:]
    last = run.stderr.strip().splitlines()[-1]
    assert f"pid {cap.proc.pid}" in last and "Traceback" not in run.stderr
    assert cap.call("GET", "/healthz")[0] == 200  # the first keeps serving


@pytest.mark.parametrize("content", [b"", b"  \n", b"\xff\xfe\x00bad\n"], ids=["empty", "blank", "not-utf8"])
def test_empty_or_undecodable_token_file_is_refused_at_start(tmp_path: Path, content: bytes) -> None:
    region = capacity_region(tmp_path / "region")
    token = tmp_path / "token"
    token.write_bytes(content)
    run = subprocess.run(_serve_argv(region, tmp_path / "data", token), capture_output=True, text=True, timeout=60)
    assert run.returncode == 2, run.stderr[-2000:]
    last = run.stderr.strip().splitlines()[-1]
    assert str(token) in last and "Traceback" not in run.stderr


def _limit_nofile(n: int) -> Any:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))

    return apply


def test_idle_sockets_past_the_handle_limit_do_not_starve_other_clients(tmp_path: Path) -> None:
    srv = start_capacity(tmp_path / "data", preexec_fn=_limit_nofile(128))
    host, port = srv.http.split("://", 1)[1].rsplit(":", 1)
    idle: list[socket.socket] = []
    try:
        for _ in range(150):  # more sockets than the process has descriptors
            try:
                idle.append(socket.create_connection((host, int(port)), timeout=5))
            except OSError:
                break
        conn = http.client.HTTPConnection(host, int(port), timeout=5)  # werkzeug: times out (no thread answers)
        conn.request("GET", "/healthz")
        resp = conn.getresponse()
        doc = json.loads(resp.read())
        assert resp.status in (200, 503), doc
        if resp.status == 503:  # refused at the connection cap: the JSON error shape, at once
            assert set(doc) == {"error"} and "connections" in doc["error"]["message"]
        conn.close()
    finally:
        for s in idle:
            s.close()
        srv.stop()


@pytest.mark.parametrize(("method", "path", "field"), [
    ("GET", "/v1/plan?version=%C2%B2", "version"),
    ("GET", "/v1/plan?version=99999999999999999999999", "version"),
    ("GET", "/v1/plan?version=0", "version"),
    ("GET", "/v1/plan?version=-1", "version"),
    ("POST", "/v1/solve?budget_s=nan", "budget_s"),
    ("POST", "/v1/solve?budget_s=-5", "budget_s"),
    ("POST", "/v1/solve?budget_s=1e-300", "budget_s"),
    ("POST", "/v1/solve?budget_s=inf", "budget_s"),
    ("POST", "/v1/solve?budget_s=abc", "budget_s"),
    ("POST", "/v1/revocations/99999999999999999999999/ack", "revocation"),
    ("GET", "/v1/revocations?cluster=a%0Ab", "cluster"),
])
def test_bad_query_values_answer_400_naming_the_field(cap: ServerProc, method: str, path: str, field: str) -> None:
    version = cap.call("GET", "/healthz")[1]["plan_version"]
    status, doc = cap.call(method, path)
    assert status == 400, (status, doc)
    assert doc["error"]["field"] == field and field in doc["error"]["message"]
    assert cap.call("GET", "/healthz")[1]["plan_version"] == version  # nothing published


@pytest.mark.parametrize(("request_doc", "field"), [
    ({"id": "huge", "capacity_rru": 1e300, "rru": {"hw00": 1e-300}}, "capacity_rru"),
    ({"id": "tiny", "capacity_rru": 1, "rru": {"hw00": 1e-300}}, "rru"),
    ({"id": "prio", "capacity_rru": 1, "rru": {"hw00": 1}, "priority": 10**400}, "priority"),
    ({"id": "bad\nid", "capacity_rru": 1, "rru": {"hw00": 1}}, "id"),
])
def test_out_of_range_request_numbers_are_refused(cap: ServerProc, request_doc: dict[str, Any], field: str) -> None:
    version = cap.call("GET", "/healthz")[1]["plan_version"]
    status, doc = cap.call("POST", "/v1/requests", {"request": request_doc})
    assert status == 400, (status, doc)
    assert field in doc["error"]["message"]
    assert cap.call("GET", "/healthz")[1]["plan_version"] == version


def test_stdout_holds_only_our_lines_when_the_solver_runs_before_ready(tmp_path: Path) -> None:
    """CI failure (2026-11-29): HiGHS prints a licence banner to fd 1 on its first construction in a
    process. When the first solve started before the ready line was printed, the first stdout line a
    supervisor read was the banner. Our stdout carries our lines only."""
    region = capacity_region(tmp_path / "region")
    data = tmp_path / "data"
    data.mkdir()
    token = tmp_path / "token"
    token.write_text("t0ken-for-stdout\n")
    proc = subprocess.Popen(_serve_argv(region, data, token), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().decode()  # --interval-s 0 solves at start, in its own thread
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert first.startswith("harvest ras serve:"), (first, err.decode()[-2000:])


def test_a_solve_writes_nothing_but_its_answer_to_stdout(tmp_path: Path) -> None:
    """``harvest ras solve`` over every HiGHS path (per-request LP, rack spread, POP load balance):
    stdout is our summary alone, whatever the solver library prints on its own."""
    region = capacity_region(tmp_path / "region")
    proc = subprocess.run([sys.executable, "-m", "placement_service.cli", "ras", "solve", "--inventory",
                           str(region / "inventory.csv"), "--reservations", str(region / "reservations.json"),
                           "--out", str(tmp_path / "plan.json"), "--pop-k", "2", "--workers", "1",
                           "--time-limit-s", "20"], capture_output=True, timeout=300)  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert b"HiGHS" not in proc.stdout, proc.stdout[:500]

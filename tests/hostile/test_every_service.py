"""The one hostile suite, run against every HTTP service of the project (issue 37, "What to build").

Parametrized over ``tests/hostile/services.py::SERVICES`` (the placement service and the capacity
service; a new service is added there and gets every case): auth on every state-changing call,
hostile JSON bodies, out-of-range numbers in query parameters, idle and half-open sockets, two
instances on one data dir, ``kill -9`` during each kind of write, a damaged state file. No answer
may be a 5xx, every error has the JSON shape and names its field, no acknowledged write is lost.
"""

from __future__ import annotations

import collections
import http.client
import json
import socket
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.hostile.services import SERVICES, Service, wait_for_plan
from tests.server.conftest import ServerProc, report

COUNTS: collections.Counter[str] = collections.Counter()
HYPO = settings(max_examples=25, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="module", params=sorted(SERVICES))
def svc(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Service, ServerProc]]:
    service = SERVICES[request.param]
    srv = service.start(tmp_path_factory.mktemp(f"hostile-{service.name}") / "data")
    try:
        if service.name == "capacity":
            wait_for_plan(srv)
        yield service, srv
    finally:
        srv.stop()


def _answer(service: Service, status: int, doc: Any) -> None:
    COUNTS[f"{service.name} {status}"] += 1
    assert status < 500, (service.name, status, doc)
    if status >= 400:
        assert isinstance(doc, dict) and set(doc) == {"error"}, doc
        message, field = doc["error"]["message"], doc["error"]["field"]
        assert isinstance(message, str) and message and "Traceback" not in message
        if status in (400, 401, 413):
            assert isinstance(field, str) and field and field in message, doc


def _raw(srv: ServerProc, method: str, path: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, Any]:
    req = urllib.request.Request(srv.http + path, data=body, method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            status, text = resp.status, resp.read()
    except urllib.error.HTTPError as exc:
        status, text = exc.code, exc.read()
    try:
        return status, json.loads(text)
    except ValueError:
        return status, text.decode(errors="replace")


def _state(service: Service, srv: ServerProc) -> Any:
    """What a refused call must leave as it was."""
    if service.name == "capacity":
        return srv.call("GET", "/v1/status")[1]["version"], srv.call("GET", "/v1/status")[1]["failed"]
    return srv.call("GET", "/v1/harvestable")[1], srv.call("GET", "/v1/reimages?since=0")[1]


# -- auth on every state-changing call ----------------------------------------------------------------
AUTH_VARIANTS = {
    "none": {},
    "wrong": {"Authorization": "Bearer not-the-token"},
    "empty": {"Authorization": "Bearer "},
    "scheme": {"Authorization": "Basic dGVzdDp0ZXN0"},
}


@pytest.mark.parametrize("variant", sorted(AUTH_VARIANTS))
def test_every_state_changing_call_needs_the_token(svc: tuple[Service, ServerProc], variant: str) -> None:
    service, srv = svc
    before = _state(service, srv)
    for method, path, body in service.mutating:
        headers = {"Content-Type": "application/json", **AUTH_VARIANTS[variant]}
        status, doc = _raw(srv, method, path, None if body is None else json.dumps(body).encode(), headers)
        _answer(service, status, doc)
        assert status == 401 and doc["error"]["field"] == "Authorization", (method, path, status, doc)
    assert _state(service, srv) == before


# -- hostile JSON bodies --------------------------------------------------------------------------------
_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**70), 2**70), st.floats(),
                     st.sampled_from([10**400, 1e308, -1, 0, "", "x\n", "é" * 300, "srv01", "hw00"]))
_json = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                         st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                     max_leaves=10)
BODIES = st.one_of(
    _json.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=48),
    st.sampled_from([b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 1000 + b"1" + b"}" * 1000, b"\xff\xfe{}", b"",
                     b'{"servers": ["srv01"' + b', "srv01"' * 20_000 + b"]}",
                     b'{"request": {"id": "h", "capacity_rru": 1e300, "rru": {"hw00": 1e-300}}}',
                     b'{"request": {"id": "h", "capacity_rru": 1, "rru": {"hw00": 1}, "priority": 1' + b"0" * 400 + b"}}",
                     b'{"excluded": [' + b'"x", ' * 12_000 + b'"y"]}', b'{"reports": [' + b"9" * 5000 + b"]}"]),
)


@HYPO
@given(which=st.integers(0, 10), body=BODIES)
def test_hostile_bodies_answer_4xx_in_the_json_shape(svc: tuple[Service, ServerProc], which: int, body: bytes) -> None:
    service, srv = svc
    with_body = [(m, p) for m, p, b in service.mutating if b is not None]
    method, path = with_body[which % len(with_body)]
    _answer(service, *srv.call(method, path, raw=body))


# -- out-of-range numbers in query parameters -------------------------------------------------------------
BAD_NUMBERS = ["nan", "inf", "-inf", "1e400", "-5", "99999999999999999999999", "\u00b2", "abc", "0x10", "1" + "0" * 400]


@pytest.mark.parametrize("value", BAD_NUMBERS)
def test_out_of_range_query_numbers_answer_400_naming_the_parameter(svc: tuple[Service, ServerProc],
                                                                   value: str) -> None:
    service, srv = svc
    before = _state(service, srv)
    for method, template, field in service.numeric_queries:
        status, doc = srv.call(method, template.format(v=quote(value, safe="")))
        _answer(service, status, doc)
        assert status == 400 and doc["error"]["field"] == field, (template, value, status, doc)
    assert _state(service, srv) == before


# -- idle and half-open sockets -------------------------------------------------------------------------------
def test_idle_and_half_open_sockets_do_not_stop_other_clients(svc: tuple[Service, ServerProc]) -> None:
    service, srv = svc
    host, port = srv.http.split("://", 1)[1].rsplit(":", 1)
    idle = [socket.create_connection((host, int(port)), timeout=10) for _ in range(300)]
    try:
        for s in idle[:20]:
            s.send(b"POST /v1/fail")  # half a request line, then silence
        for _ in range(5):
            status, doc = srv.call("GET", service.health, timeout_s=10)
            assert status == 200, doc
    finally:
        for s in idle:
            s.close()


# -- two instances on one data dir ------------------------------------------------------------------------------
def test_a_second_instance_on_the_same_data_dir_exits_naming_the_holder(svc: tuple[Service, ServerProc]) -> None:
    service, srv = svc
    with pytest.raises(RuntimeError) as err:
        service.start(srv.data_dir)
    assert f"pid {srv.proc.pid}" in str(err.value) and "Traceback" not in str(err.value)
    assert srv.call("GET", service.health)[0] == 200


# -- kill -9 during each kind of write ------------------------------------------------------------------------------
class Writes:
    """Acknowledged writes of one kind and how to find each again after a restart."""

    def __init__(self, kind: str, send: Callable[[ServerProc, int], tuple[int, Any]],
                 present: Callable[[ServerProc, list[tuple[int, Any]]], bool]) -> None:
        self.kind, self.send, self.present = kind, send, present


def _placement_writes() -> list[Writes]:
    t0 = time.time()

    def rep(srv: ServerProc, k: int) -> tuple[int, Any]:
        return srv.call("POST", "/v1/reports", {"reports": [report("k9-node", "k9-t", t0 + k, seq=k + 1)]})

    def reps_present(srv: ServerProc, acked: list[tuple[int, Any]]) -> bool:
        status, doc = srv.call("GET", "/v1/nodes/k9-node")
        return status == 200 and doc["last_seq"] >= max(k for k, _ in acked) + 1

    def reimage(srv: ServerProc, k: int) -> tuple[int, Any]:
        return srv.call("POST", "/v1/reimages", {"events": [{"node": "k9-node", "timestamp": t0 - 1000 + k}]})

    def reimages_present(srv: ServerProc, acked: list[tuple[int, Any]]) -> bool:
        stored = {r["timestamp"] for r in srv.call("GET", "/v1/reimages?since=0")[1]["reimages"]}
        return all(t0 - 1000 + k in stored for k, _ in acked)

    def harvestable(srv: ServerProc, k: int) -> tuple[int, Any]:
        return srv.call("PUT", "/v1/harvestable", {"nodes": [f"h{k}"]})

    def harvestable_present(srv: ServerProc, acked: list[tuple[int, Any]]) -> bool:
        return srv.call("GET", "/v1/harvestable")[1]["harvestable"] in ([f"h{k}"] for k in range(100))

    return [Writes("reports", rep, reps_present), Writes("reimages", reimage, reimages_present),
            Writes("harvestable", harvestable, harvestable_present)]


def _capacity_writes() -> list[Writes]:
    def version_at_least(srv: ServerProc, acked: list[tuple[int, Any]]) -> bool:
        return srv.call("GET", "/v1/status")[1]["version"] >= max(int(doc.get("version", 0)) for _, doc in acked)

    def fail(srv: ServerProc, k: int) -> tuple[int, Any]:
        return srv.call("POST", "/v1/failures", {"servers": [f"srv{k + 10:02d}"], "reason": "k9"})

    def failed_present(srv: ServerProc, acked: list[tuple[int, Any]]) -> bool:
        return srv.call("GET", "/v1/status")[1]["failed"] >= len(acked) and version_at_least(srv, acked)

    def grant(srv: ServerProc, k: int) -> tuple[int, Any]:
        return srv.call("POST", "/v1/requests", {"request": {"id": f"k9-{k}", "capacity_rru": 1, "rru": {"hw00": 1}}})

    def grants_present(srv: ServerProc, acked: list[tuple[int, Any]]) -> bool:
        return all(srv.call("GET", f"/v1/reservations/k9-{k}")[0] == 200 for k, _ in acked) and \
            version_at_least(srv, acked)

    def solve(srv: ServerProc, k: int) -> tuple[int, Any]:
        del k
        return srv.call("POST", "/v1/solve?budget_s=1")

    return [Writes("solve", solve, version_at_least), Writes("failures", fail, failed_present),
            Writes("requests", grant, grants_present)]


def test_kill9_during_each_kind_of_write_loses_no_acknowledged_write(svc: tuple[Service, ServerProc],
                                                                     tmp_path: Path) -> None:
    service, _ = svc
    srv = service.start(tmp_path / "data")
    try:
        if service.name == "capacity":
            wait_for_plan(srv)
        kinds = _capacity_writes() if service.name == "capacity" else _placement_writes()
        if service.name == "placement":
            assert kinds[0].send(srv, 0)[0] == 202  # the node the reimages name
        for writes in kinds:
            acked: list[tuple[int, Any]] = []
            for k in range(1, 4):
                status, doc = writes.send(srv, k)
                assert status < 300, (writes.kind, status, doc)
                acked.append((k, doc))
            in_flight = threading.Thread(target=lambda w=writes, p=srv: _ignore_errors(lambda: w.send(p, 4)), daemon=True)
            in_flight.start()
            time.sleep(0.02)
            srv.kill9()
            in_flight.join(30)
            srv = service.start(srv.data_dir)
            if service.name == "capacity":
                wait_for_plan(srv)
            assert writes.present(srv, acked), f"{service.name}: an acknowledged {writes.kind} write was lost"
            COUNTS[f"{service.name} kill -9 during {writes.kind}: 0 lost"] += 1
    finally:
        srv.stop()


def _ignore_errors(fn: Callable[[], Any]) -> None:
    try:
        fn()
    except (OSError, http.client.HTTPException):  # e.g. IncompleteRead: the answer cut off mid-body
        pass  # the server died under the request: that is the test


# -- a damaged state file ------------------------------------------------------------------------------------------
STATE_FILES = {"placement": "state.sqlite", "capacity": "capacity.sqlite"}


def test_a_damaged_state_file_is_refused_or_survived_without_a_5xx(svc: tuple[Service, ServerProc],
                                                                   tmp_path: Path) -> None:
    service, _ = svc
    srv = service.start(tmp_path / "data")
    if service.name == "capacity":
        wait_for_plan(srv)
    srv.stop()
    state = tmp_path / "data" / STATE_FILES[service.name]
    raw = bytearray(state.read_bytes())
    raw[:100] = b"\x00damaged" * 12 + b"\x00" * 4  # the SQLite header
    state.write_bytes(bytes(raw))
    try:
        again = service.start(tmp_path / "data")
    except RuntimeError as exc:  # refused at start: one line naming the file, no traceback
        assert str(state) in str(exc) and "Traceback" not in str(exc), str(exc)[-2000:]
        COUNTS[f"{service.name} damaged state: refused at start"] += 1
        return
    try:
        for path in (service.health, "/metrics"):
            status, doc = again.call("GET", path)
            assert status < 500 or (status == 503 and "error" not in doc), (path, status, doc)
        COUNTS[f"{service.name} damaged state: served"] += 1
    finally:
        again.stop()


def test_zz_outcomes() -> None:
    print("\nhostile suite, every service:", dict(sorted(COUNTS.items())))

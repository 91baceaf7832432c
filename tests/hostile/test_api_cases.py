"""Issue 13, item 6, API half: each hostile request of the issue against a real ``harvest serve``.

Every case must answer 400 (gRPC INVALID_ARGUMENT) in the JSON error shape with the field named, store
nothing, and leave the server serving. Before the fix these answered 500 / UNKNOWN or were stored.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from placement_service.proto_gen import harvest_pb2, harvest_pb2_grpc
from tests.hostile.conftest import AUTH
from tests.server.conftest import ServerProc, report, start_server


@pytest.fixture(scope="module")
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    server = start_server(tmp_path_factory.mktemp("hostile-api") / "data")
    try:
        now = time.time()
        status, _ = server.call("POST", "/v1/reports", {"reports": [report("base-1", "base-t", now, seq=1)]})
        assert status == 202
        yield server
    finally:
        server.stop()


def _body(reports_text: str) -> bytes:
    return ('{"reports": [' + reports_text + "]}").encode()


def _report_text(**raw_fields: str) -> str:
    """One report as JSON text, with some fields replaced by raw JSON text (e.g. a 400-digit integer)."""
    doc = report("h-x", "hostile-t", time.time(), seq=1)
    text = json.dumps(doc)
    for name, raw in raw_fields.items():
        text = text.replace(f'"{name}": {json.dumps(doc[name])}', f'"{name}": {raw}')
    return text


HUGE = "1" + "0" * 400

HTTP_CASES: list[tuple[str, str, str, Any, str]] = [
    # (case, method, path, body (bytes = raw, else JSON), field named)
    ("huge integer cpu", "POST", "/v1/reports", _body(_report_text(primary_cpu_cores=HUGE)),
     "reports[0].primary_cpu_cores"),
    ("huge integer timestamp", "POST", "/v1/reports", _body(_report_text(timestamp=HUGE)), "reports[0].timestamp"),
    ("huge integer seq", "POST", "/v1/reports", _body(_report_text(seq=HUGE)), "reports[0].seq"),
    ("nested 100,000 deep", "POST", "/v1/reports", b"[" * 100_000 + b"]" * 100_000, "body"),
    ("object nested 100,000 deep", "POST", "/v1/jobs/select", b'{"a":' * 100_000 + b"1" + b"}" * 100_000, "body"),
    ("node ending in newline", "POST", "/v1/reports", {"reports": [report("h-nl\n", "hostile-t", 0.0)]},
     "reports[0].node"),
    ("tenant ending in newline", "POST", "/v1/reports", {"reports": [report("h-nl", "hostile-t\n", 0.0)]},
     "reports[0].tenant"),
    ("harvestable name ending in newline", "PUT", "/v1/harvestable", {"nodes": ["base-1\n"]}, "nodes[0]"),
    ("node path ending in newline", "GET", "/v1/nodes/base-1%0A", None, "node"),
    ("last_duration_s huge integer", "POST", "/v1/jobs/select",
     b'{"name": "j", "last_duration_s": ' + HUGE.encode() + b', "vertices": {"a": {"tasks": 1}}}', "last_duration_s"),
    ("last_duration_s 1e308", "POST", "/v1/jobs/select",
     {"name": "j", "last_duration_s": 1e308, "vertices": {"a": {"tasks": 1}}}, "last_duration_s"),
    ("tasks huge integer", "POST", "/v1/jobs/select",
     b'{"name": "j", "last_duration_s": 5, "vertices": {"a": {"tasks": ' + HUGE.encode() + b"}}}", "vertices['a'].tasks"),
    ("since=1e17", "GET", "/v1/tenants/base-t/samples?since=1e17", None, "since"),
    ("since and until past year 9999", "GET", "/v1/tenants/base-t/samples?since=1e17&until=1e18", None, "since"),
    ("until=1e300", "GET", "/v1/tenants/base-t/samples?until=1e300", None, "until"),
    ("since=nan", "GET", "/v1/tenants/base-t/samples?since=nan", None, "since"),
    ("timeout_s=abc", "POST", "/v1/recluster?wait=1&timeout_s=abc", None, "timeout_s"),
    ("timeout_s=nan", "POST", "/v1/recluster?wait=1&timeout_s=nan", None, "timeout_s"),
    ("wait=maybe", "POST", "/v1/recluster?wait=maybe", None, "wait"),
    ("job body null", "POST", "/v1/jobs/select", b"null", "body"),
    ("elastic set version huge integer", "PUT", "/v1/harvestable",
     b'{"version": ' + HUGE.encode() + b', "nodes": []}', "version"),
    ("elastic revocation id huge integer", "PUT", "/v1/harvestable",
     b'{"version": 1, "nodes": [], "revocations": [{"id": ' + HUGE.encode() + b', "node": "base-1"}]}',
     "revocations[0].id"),
    ("drained revocation id huge integer", "POST", "/v1/nodes/base-1/drained",
     b'{"revocations": [' + HUGE.encode() + b"]}", "revocations[0]"),
    ("reimage timestamp huge integer", "POST", "/v1/reimages",
     b'{"events": [{"node": "base-1", "timestamp": ' + HUGE.encode() + b"}]}", "events[0].timestamp"),
    ("reimage node ending in newline", "POST", "/v1/reimages",
     {"events": [{"node": "base-1\n", "timestamp": 1.7e9}]}, "events[0].node"),
    ("writer 0", "POST", "/v1/blocks/place", {"writer": 0}, "writer"),
    ("writer false", "POST", "/v1/blocks/place", {"writer": False}, "writer"),
    ("block_size huge", "POST", "/v1/blocks/place", b'{"block_size": ' + HUGE.encode() + b"}", "block_size"),
    ("timestamps spanning decades", "POST", "/v1/reports",
     {"reports": [report("h-old", "hostile-t", 978_307_200.0 + i * 365 * 86400, seq=i + 1) for i in range(25)]},
     "reports[0].timestamp"),
    ("timestamp 31 days old", "POST", "/v1/reports", {"reports": [report("h-old", "hostile-t", 0.0)]},
     "reports[0].timestamp"),
]


def _fill_times(body: Any) -> Any:
    """Reports written with timestamp 0.0 above get 'now' (31 days ago for the old-timestamp case)."""
    if isinstance(body, dict) and "reports" in body:
        for r in body["reports"]:
            if r["timestamp"] == 0.0:
                r["timestamp"] = time.time() - (31 * 86400 if r["node"] == "h-old" else 1)
    return body


def _recluster_requests(srv: ServerProc) -> tuple[int, bool]:
    status, doc = srv.call("GET", "/v1/recluster")
    assert status == 200
    return doc["runs"] + doc["failures"] + int(doc["running"]), doc["queued"]


@pytest.mark.parametrize(("case", "method", "path", "body", "field"), HTTP_CASES, ids=[c[0] for c in HTTP_CASES])
def test_http_case_is_rejected_naming_the_field(srv: ServerProc, case: str, method: str, path: str, body: Any,
                                                field: str) -> None:
    before = _recluster_requests(srv)
    raw = body if isinstance(body, bytes) else None
    status, doc = srv.call(method, path, None if raw is not None else _fill_times(body), raw=raw)
    assert status == 400, (case, doc)
    assert isinstance(doc, dict) and set(doc) == {"error"}, doc
    assert doc["error"]["field"] == field and field in doc["error"]["message"], doc
    assert "\n" not in doc["error"]["message"] and len(doc["error"]["message"]) < 300
    # Nothing changed: no node of the request is known, the harvestable set is untouched, no
    # re-clustering was queued (timeout_s=abc used to queue one before failing with 500).
    for node in ("h-x", "h-nl", "h-old"):
        assert srv.call("GET", f"/v1/nodes/{node}")[0] == 404
    assert srv.call("GET", "/v1/harvestable")[1] == {"harvestable": None}
    assert _recluster_requests(srv) == before
    assert srv.call("GET", "/healthz")[0] == 200


def _raw_call(channel: grpc.Channel, method: str, payload: bytes, stream: bool) -> grpc.RpcError:
    """Send raw bytes as the request message (no client-side serialization)."""
    path = f"/harvest.v1.Placement/{method}"
    with pytest.raises(grpc.RpcError) as err:
        if stream:
            call = channel.stream_stream(path, request_serializer=None, response_deserializer=None)
            list(call(iter([payload]), metadata=AUTH, timeout=10))
        else:
            unary = channel.unary_unary(path, request_serializer=None, response_deserializer=None)
            unary(payload, metadata=AUTH, timeout=10)
    return err.value


# Bytes that are not a message: a truncated varint, a length-delimited field running past the end,
# invalid UTF-8 in a string field (node = 1), a wire type that does not exist.
GARBAGE = [b"\x08\xff\xff\xff", b"\x0a\x10abc", b"\x0a\x02\xff\xfe", b"\x0f\x00", b"\xff" * 64]


@pytest.mark.parametrize("payload", GARBAGE, ids=[p[:6].hex() for p in GARBAGE])
@pytest.mark.parametrize(("method", "stream"), [("Report", True), ("ChooseTargets", False), ("NodeClass", False)])
def test_grpc_garbage_bytes_are_invalid_argument(channel: grpc.Channel, payload: bytes, method: str,
                                                 stream: bool) -> None:
    err = _raw_call(channel, method, payload, stream)
    assert err.code() == grpc.StatusCode.INVALID_ARGUMENT, err.details()
    assert "not a valid" in (err.details() or "")


@pytest.mark.parametrize(("over", "field"), [({"node": "g-nl\n"}, "report.node"), ({"tenant": "t\n"}, "report.tenant"),
                                              ({"timestamp": 978_307_200.0}, "report.timestamp")])
def test_grpc_report_names_checked_like_http(srv: ServerProc, channel: grpc.Channel, over: dict[str, Any],
                                             field: str) -> None:
    doc = report("g-nl", "grpc-hostile", time.time(), seq=1)
    doc.update(over)
    stub = harvest_pb2_grpc.PlacementStub(channel)
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Report(iter([harvest_pb2.NodeReport(**doc)]), metadata=AUTH, timeout=10))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (err.value.details() or "")
    assert srv.call("GET", "/v1/nodes/g-nl")[0] == 404


def test_grpc_choose_targets_checks_like_http(channel: grpc.Channel) -> None:
    stub = harvest_pb2_grpc.PlacementStub(channel)
    for request, field in ((harvest_pb2.ChooseTargetsRequest(writer="base-1\n", replicas=3), "writer"),
                           (harvest_pb2.ChooseTargetsRequest(replicas=3, block_size=2**63), "block_size"),
                           (harvest_pb2.ChooseTargetsRequest(replicas=3, excluded=["a\n"]), "excluded[0]")):
        with pytest.raises(grpc.RpcError) as err:
            stub.ChooseTargets(request, timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert field in (err.value.details() or "")

"""gRPC API against a real server: Report stream (seq, acked_seq, auth, bad input), NodeClass and
ChooseTargets, and agreement with the HTTP API."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator

import grpc
import pytest

from placement_service.proto_gen import harvest_pb2, harvest_pb2_grpc
from tests.server.conftest import TOKEN, ServerProc, report

AUTH = (("authorization", f"Bearer {TOKEN}"),)


@pytest.fixture(scope="module")
def stub(server: ServerProc) -> Iterator[harvest_pb2_grpc.PlacementStub]:
    channel = grpc.insecure_channel(server.grpc)
    try:
        yield harvest_pb2_grpc.PlacementStub(channel)
    finally:
        channel.close()


def msg(node_: str, tenant_: str, seq: int, cpu: float = 2.0, **over: object) -> harvest_pb2.NodeReport:
    doc = report(node_, tenant_, time.time(), cpu=cpu, seq=seq)
    doc.update(over)
    return harvest_pb2.NodeReport(**doc)


def test_report_stream_acks_each_report_and_dedups_replays(server: ServerProc, stub: harvest_pb2_grpc.PlacementStub) -> None:
    sent = [msg("g-1", "grpc-t", 1), msg("g-1", "grpc-t", 2), msg("g-1", "grpc-t", 3), msg("g-1", "grpc-t", 2)]
    replies = list(stub.Report(iter(sent), metadata=AUTH, timeout=30))
    assert [r.acked_seq for r in replies] == [1, 2, 3, 3]
    assert all(r.node == "g-1" for r in replies)
    _, doc = server.call("GET", f"/v1/tenants/grpc-t/samples?since={time.time() - 900}")
    assert sum(s["reports"] for s in doc["samples"]) == 3
    # Agreement: NodeClass over gRPC and GET /v1/nodes over HTTP.
    reply = stub.NodeClass(harvest_pb2.NodeClassRequest(node="g-1"), timeout=10)
    _, node = server.call("GET", "/v1/nodes/g-1")
    assert (reply.class_id, reply.label, reply.busy, reply.harvestable) == (
        node["class_id"], node["label"], node["busy"], node["harvestable"])
    assert reply.last_report_timestamp == node["last_report"]["timestamp"]


def test_report_needs_token(stub: harvest_pb2_grpc.PlacementStub) -> None:
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Report(iter([msg("g-noauth", "grpc-t", 1)]), timeout=10))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Report(iter([msg("g-noauth", "grpc-t", 1)]), metadata=(("authorization", "Bearer nope"),),
                         timeout=10))
    assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as err:
        stub.NodeClass(harvest_pb2.NodeClassRequest(node="g-noauth"), timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND


@pytest.mark.parametrize(
    ("over", "field"),
    [({"primary_cpu_cores": math.nan}, "primary_cpu_cores"), ({"capacity_cores": 0.0}, "capacity_cores"),
     ({"timestamp": time.time() + 7200}, "timestamp"), ({"node": ""}, "node"), ({"tenant": "a b"}, "tenant")],
)
def test_bad_report_is_invalid_argument_naming_the_field(
    server: ServerProc, stub: harvest_pb2_grpc.PlacementStub, over: dict[str, object], field: str
) -> None:
    bad = msg("g-bad", "grpc-bad", 1, **over)
    with pytest.raises(grpc.RpcError) as err:
        list(stub.Report(iter([bad]), metadata=AUTH, timeout=10))
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert field in (err.value.details() or "")
    assert server.call("GET", "/v1/nodes/g-bad")[0] == 404


def test_choose_targets_and_http_place_agree_on_rules(server: ServerProc, stub: harvest_pb2_grpc.PlacementStub) -> None:
    now = time.time()
    nodes = [f"p-{i}" for i in range(6)]
    reps = [report(n, f"place-{i % 3}", now, seq=1) for i, n in enumerate(nodes)]
    assert server.call("POST", "/v1/reports", {"reports": reps})[0] == 202
    req = harvest_pb2.ChooseTargetsRequest(writer="p-0", replicas=3, excluded=["p-1"], block_size=128 << 20)
    g = stub.ChooseTargets(req, timeout=10)
    status, h = server.call("POST", "/v1/blocks/place",
                            {"writer": "p-0", "replicas": 3, "excluded": ["p-1"], "block_size": 128 << 20})
    assert status == 200
    for targets in (list(g.targets), h["targets"]):
        assert len(targets) == 3 and len(set(targets)) == 3
        assert "p-1" not in targets
        _, known = server.call("GET", f"/v1/nodes/{targets[0]}")
        assert known["node"] == targets[0]
    with pytest.raises(grpc.RpcError) as err:
        stub.ChooseTargets(harvest_pb2.ChooseTargetsRequest(writer="nope", replicas=3), timeout=10)
    assert err.value.code() == grpc.StatusCode.NOT_FOUND
    assert server.call("POST", "/v1/blocks/place", {"writer": "nope", "replicas": 3})[0] == 404
    with pytest.raises(grpc.RpcError) as err:
        stub.ChooseTargets(harvest_pb2.ChooseTargetsRequest(writer="p-0", replicas=0), timeout=10)
    assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT

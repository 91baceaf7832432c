"""Placement decisions (``POST /v1/blocks/place``, gRPC ``ChooseTargets``): unauthenticated, so they
book nothing; they honour the block size; fewer usable nodes than replicas gives a short answer;
each decision is logged (INFO, rate-limited)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest

from placement_service.proto_gen import harvest_pb2, harvest_pb2_grpc
from tests.server.conftest import ServerProc, report, start_server

GIB = 1 << 30


@pytest.fixture()
def srv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    s = start_server(tmp_path_factory.mktemp("place") / "data", "--compact-interval-s", "1")
    try:
        yield s
    finally:
        s.stop()


def _register(srv: ServerProc, nodes: dict[str, float], seq: int = 1, busy: frozenset[str] = frozenset()) -> None:
    now = time.time()
    reps = [report(n, f"t-{n}", now, seq=seq, free_storage_gb=free, busy=n in busy) for n, free in nodes.items()]
    assert srv.call("POST", "/v1/reports", {"reports": reps})[0] == 202


def _place(srv: ServerProc, replicas: int, block_size: int, **extra: object) -> tuple[int, dict]:
    status, doc = srv.call("POST", "/v1/blocks/place", {"replicas": replicas, "block_size": block_size, **extra},
                           token=None)
    return status, doc


def test_decisions_book_nothing_so_huge_blocks_cannot_starve_others(srv: ServerProc) -> None:
    _register(srv, {f"p{i:02d}": 1.0 for i in range(12)})  # 1 GiB free each
    for _ in range(4):  # the hostile calls: 1 TiB blocks
        status, doc = _place(srv, 3, 1 << 40)
        assert status == 409 and doc["error"]["field"] == "replicas"
    for _ in range(60):  # 180 replicas of 256 MiB on 12 GiB: only possible when nothing is booked
        status, doc = _place(srv, 3, 256 << 20)
        assert status == 200 and len(doc["targets"]) == 3 and not doc["short"], doc


def test_block_size_is_honoured_on_http_and_grpc(srv: ServerProc) -> None:
    small = {f"s{i}": 0.5 for i in range(6)}  # 512 MiB free
    big = {f"b{i}": 100.0 for i in range(6)}
    _register(srv, {**small, **big})
    for _ in range(20):
        status, doc = _place(srv, 3, GIB)
        assert status == 200 and set(doc["targets"]) <= set(big), doc
    seen: set[str] = set()
    for _ in range(40):
        status, doc = _place(srv, 3, 128 << 20)
        assert status == 200
        seen.update(doc["targets"])
    assert seen & set(small), "128 MiB blocks should also land on nodes with 512 MiB free"
    channel = grpc.insecure_channel(srv.grpc)
    try:
        stub = harvest_pb2_grpc.PlacementStub(channel)
        for _ in range(10):
            reply = stub.ChooseTargets(harvest_pb2.ChooseTargetsRequest(replicas=3, block_size=GIB), timeout=10)
            assert set(reply.targets) <= set(big) and not reply.short
    finally:
        channel.close()
    # Free space follows the reports, without a view rebuild: the big nodes fill up.
    _register(srv, {n: 0.1 for n in big}, seq=2)
    assert _place(srv, 3, GIB)[0] == 409


def test_more_replicas_than_usable_nodes_answers_short(srv: ServerProc) -> None:
    nodes = {f"u{i}": 50.0 for i in range(5)}
    _register(srv, nodes, busy=frozenset({"u2", "u3", "u4"}))
    status, doc = _place(srv, 3, 128 << 20)
    assert status == 200 and doc["short"] is True and sorted(doc["targets"]) == ["u0", "u1"], doc
    assert "short: only 2 usable node(s) for 3 replicas" in doc["reason"]
    channel = grpc.insecure_channel(srv.grpc)
    try:
        stub = harvest_pb2_grpc.PlacementStub(channel)
        reply = stub.ChooseTargets(harvest_pb2.ChooseTargetsRequest(replicas=10, excluded=["u0"]), timeout=10)
        assert reply.short and list(reply.targets) == ["u1"]
    finally:
        channel.close()
    srv.stop()
    log = srv.log.read_text()
    lines = [ln for ln in log.splitlines() if "INFO" in ln and "place block_size=" in ln]
    assert any("short=True" in ln and "targets=" in ln for ln in lines), log[-2000:]

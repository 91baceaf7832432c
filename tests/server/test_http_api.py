"""HTTP API against a real ``harvest serve`` process: ingest, queries, bad input, access."""

from __future__ import annotations

import json
import math
import time
import urllib.request

import pytest

from tests.server.conftest import ServerProc, report


def stored_total(server: ServerProc) -> float:
    status, text = server.call("GET", "/metrics", token=None)
    assert status == 200
    for line in text.splitlines():
        if line.startswith("harvest_reports_stored_total "):
            return float(line.split()[1])
    return 0.0


def test_ingest_is_visible_in_node_and_samples(server: ServerProc) -> None:
    now = time.time()
    slot = int(now // 300) * 300
    reps = [report("h-a1", "http-a", now - 1, cpu=2.0, seq=1), report("h-a2", "http-a", now - 1, cpu=6.0),
            report("h-a1", "http-a", now, cpu=4.0, seq=2, busy=True)]
    status, body = server.call("POST", "/v1/reports", {"reports": reps})
    assert (status, body) == (202, {"accepted": 3, "stored": 3, "duplicates": 0})
    status, node = server.call("GET", "/v1/nodes/h-a1")
    assert status == 200
    assert node["busy"] is True and node["last_seq"] == 2 and node["last_report"]["primary_cpu_cores"] == 4.0
    assert node["tenant"] == "http-a" and node["harvestable"] is True
    status, doc = server.call("GET", f"/v1/tenants/http-a/samples?since={slot - 300}&until={slot + 300}")
    assert status == 200
    by_slot = {s["slot_start_s"]: s for s in doc["samples"]}
    total = sum(s["reports"] for s in doc["samples"])
    assert total == 3
    cpu_sum = sum(s["cpu_frac_sum"] for s in by_slot.values())
    assert cpu_sum == pytest.approx((2.0 + 6.0 + 4.0) / 8.0)


def test_replayed_seq_is_acknowledged_but_not_stored(server: ServerProc) -> None:
    now = time.time()
    assert server.call("POST", "/v1/reports", {"reports": [report("h-d", "http-d", now, seq=10)]})[0] == 202
    status, body = server.call("POST", "/v1/reports", {"reports": [report("h-d", "http-d", now, seq=10),
                                                                   report("h-d", "http-d", now, seq=9)]})
    assert (status, body) == (202, {"accepted": 2, "stored": 0, "duplicates": 2})
    _, doc = server.call("GET", f"/v1/tenants/http-d/samples?since={now - 600}")
    assert sum(s["reports"] for s in doc["samples"]) == 1


@pytest.mark.parametrize(
    ("body", "field", "status"),
    [
        (b"{not json", "body", 400),
        (b'{"reports": [{"node": "x"', "body", 400),
        ({"reports": [report("h-bad", "http-bad", 0.0 + time.time(), cpu="2")]}, "reports[0].primary_cpu_cores", 400),
        ({"reports": [report("h-bad", "http-bad", time.time(), busy="false")]}, "reports[0].busy", 400),
        ({"reports": [report("h-bad", "http-bad", time.time(), capacity_cores=math.nan)]},
         "reports[0].capacity_cores", 400),
        ({"reports": [report("h-bad", "http-bad", time.time() + 86400)]}, "reports[0].timestamp", 400),
        ({"reports": [report("h-ok", "http-bad", time.time()), {**report("h-bad", "http-bad", time.time()),
                                                                     "node": None}]}, "reports[1].node", 400),
        ({"reports": "x"}, "reports", 400),
        ([1, 2], "body", 400),
    ],
)
def test_bad_reports_are_rejected_naming_the_field_and_nothing_is_stored(
    server: ServerProc, body: object, field: str, status: int
) -> None:
    before = stored_total(server)
    if isinstance(body, bytes):
        got, doc = server.call("POST", "/v1/reports", raw=body)
    else:
        raw = json.dumps(body).encode()  # NaN goes out as the literal NaN, as a careless client would send it
        got, doc = server.call("POST", "/v1/reports", raw=raw)
    assert got == status
    assert doc["error"]["field"] == field
    assert field.split(".")[-1].split("[")[0] in doc["error"]["message"]
    assert stored_total(server) == before
    assert server.call("GET", "/v1/nodes/h-bad")[0] == 404
    assert server.call("GET", "/v1/nodes/h-ok")[0] == 404


def test_oversized_body_and_missing_or_wrong_token(server: ServerProc) -> None:
    before = stored_total(server)
    big = b'{"reports": [' + b" " * (9 * 1024 * 1024) + b"]}"
    status, doc = server.call("POST", "/v1/reports", raw=big)
    assert status == 413 and doc["error"]["field"] == "body"
    one = {"reports": [report("h-auth", "http-auth", time.time())]}
    for token in (None, "wrong"):
        status, doc = server.call("POST", "/v1/reports", one, token=token)
        assert status == 401 and doc["error"]["field"] == "Authorization"
    assert server.call("POST", "/v1/recluster", token=None)[0] == 401
    assert server.call("PUT", "/v1/harvestable", {"nodes": None}, token=None)[0] == 401
    assert stored_total(server) == before
    assert server.call("GET", "/v1/nodes/h-auth")[0] == 404


def test_unknown_node_tenant_and_bad_query(server: ServerProc) -> None:
    assert server.call("GET", "/v1/nodes/never-seen")[0] == 404
    status, doc = server.call("POST", "/v1/blocks/place", {"writer": "never-seen", "replicas": 1})
    assert status == 404 and doc["error"]["field"] == "node"
    assert server.call("GET", "/v1/tenants/never-seen/samples")[0] == 404
    status, doc = server.call("GET", "/v1/tenants/http-a/samples?since=abc")
    assert status == 400 and doc["error"]["field"] == "since"
    status, doc = server.call("POST", "/v1/blocks/place", {"replicas": 0})
    assert status == 400 and doc["error"]["field"] == "replicas"
    status, doc = server.call("POST", "/v1/jobs/select", {"name": "j", "last_duration_s": None, "vertices": {}})
    assert status == 400 and "vertices" in doc["error"]["message"]


def test_health_metrics_and_openapi(server: ServerProc) -> None:
    assert server.call("GET", "/healthz", token=None)[1]["status"] == "ok"
    status, text = server.call("GET", "/metrics", token=None)
    assert status == 200 and "harvest_http_request_seconds_bucket" in text
    with urllib.request.urlopen(server.http + "/openapi.json", timeout=10) as resp:
        spec = json.loads(resp.read())
    for path in ("/v1/reports", "/v1/jobs/select", "/v1/blocks/place", "/v1/classes", "/v1/nodes/{node}",
                 "/v1/tenants/{tenant}/samples", "/v1/recluster", "/healthz", "/metrics"):
        assert path in spec["paths"]


def test_harvestable_set_limits_placement_targets(server: ServerProc) -> None:
    now = time.time()
    nodes = [f"hv-{i}" for i in range(8)]
    reps = [report(n, f"hv-t{i}", now, seq=1) for i, n in enumerate(nodes)]
    assert server.call("POST", "/v1/reports", {"reports": reps})[0] == 202
    allowed = nodes[:4]
    try:
        status, doc = server.call("PUT", "/v1/harvestable", {"nodes": allowed})
        assert status == 200 and doc["harvestable"] == sorted(allowed)
        assert server.call("GET", "/v1/nodes/hv-6")[1]["harvestable"] is False
        assert server.call("GET", "/v1/nodes/hv-1")[1]["harvestable"] is True
        for _ in range(5):
            status, placed = server.call("POST", "/v1/blocks/place", {"writer": "hv-7", "replicas": 3})
            assert status == 200 and set(placed["targets"]) <= set(allowed), placed
        status, doc = server.call("PUT", "/v1/harvestable", {"nodes": ["ok", 3]})
        assert status == 400 and doc["error"]["field"] == "nodes[1]"
        assert server.call("GET", "/v1/harvestable")[1]["harvestable"] == sorted(allowed)
    finally:
        assert server.call("PUT", "/v1/harvestable", {"nodes": None})[0] == 200

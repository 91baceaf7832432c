"""``harvest ras serve``'s HTTP API on a real server (127.0.0.1, free port): auth, error shapes, OpenAPI."""

from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from placement_service.capacity.ras import io
from placement_service.capacity.ras.api import create_app
from placement_service.capacity.ras.generate import generate_region, generate_requests
from placement_service.capacity.ras.loop import CapacityLoop, LoopConfig
from placement_service.capacity.ras.store import CapacityStore
from placement_service.server.metrics import Metrics
from placement_service.server.serving import HttpLimits, start_http

TOKEN = "s3cret"


@pytest.fixture()
def base(tmp_path: Path) -> Iterator[str]:
    region = generate_region(n_servers=120, n_msbs=4, n_hardware=2, seed=2)
    doc = io.requests_to_json(generate_requests(region, n_reservations=3, fill=0.5, seed=2))
    loop = CapacityLoop(region, doc, CapacityStore(tmp_path / "c.sqlite"), LoopConfig(budget_s=2, interval_s=0))
    loop.solve_now()
    http = start_http(create_app(loop, TOKEN, Metrics()), "127.0.0.1", 0, HttpLimits(threads=4))
    t = threading.Thread(target=http.serve, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{http.port}"
    http.stop()
    t.join(5)


def call(base: str, method: str, path: str, body: Any = None, token: str | None = TOKEN) -> tuple[int, Any]:
    req = urllib.request.Request(base + path, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw[:1] in (b"{", b"[") else raw.decode()
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_mutations_need_the_token_and_errors_have_one_shape(base: str) -> None:
    code, doc = call(base, "POST", "/v1/failures", {"servers": ["srv001"]}, token=None)
    assert code == 401 and doc["error"]["field"] == "Authorization"
    code, doc = call(base, "POST", "/v1/failures", {"servers": ["nope"], "reason": "x"})
    assert code == 404 and "unknown server" in doc["error"]["message"] and doc["error"]["field"] == "servers"
    code, doc = call(base, "POST", "/v1/failures", {"servers": []})
    assert code == 400 and doc["error"]["field"] == "servers"
    code, doc = call(base, "POST", "/v1/revocations/77/ack", {})
    assert code == 404 and doc["error"]["field"] == "revocation"
    code, doc = call(base, "POST", "/v1/requests", {"request": {"id": "a", "capacity_rru": 1, "rru": {"hw00": 1}},
                                                     "plan_version": 0})  # fmt: skip
    assert code == 409 and doc["error"]["field"] == "plan_version"
    code, doc = call(base, "POST", "/v1/requests", {"request": {"id": "a", "capacity_rru": "x", "rru": {}}})
    assert code == 400 and "capacity_rru" in doc["error"]["message"]


def test_operator_failure_signal_runs_the_mover(base: str) -> None:
    _, plan = call(base, "GET", "/v1/plan")
    rid = next(iter(plan["reservations"]))
    victim = plan["reservations"][rid]["servers"][0]
    code, doc = call(base, "POST", "/v1/failures", {"servers": [victim], "reason": "disk", "source": "operator"})
    assert code == 200 and doc["version"] == plan["version"] + 1 and doc["replacements"][0][0] == victim
    _, events = call(base, "GET", "/v1/events")
    assert events["events"][0]["kind"] == "mover" and events["events"][0]["reason"] == "disk"
    _, status = call(base, "GET", f"/v1/reservations/{rid}")
    assert status["check_ok"]
    code, moved_plan = call(base, "GET", "/v1/plan")  # an online plan has no objective: null, not NaN
    assert code == 200 and moved_plan["solver"]["objective"] is None


def test_placement_service_signals_silent_nodes_once(base: str, tmp_path: Path) -> None:
    from placement_service.server.elastic import CapacityLink, ElasticState

    _, plan = call(base, "GET", "/v1/plan")
    rid = next(iter(plan["reservations"]))
    quiet = plan["reservations"][rid]["servers"][0]
    seen = {quiet: 1000.0, "srv-not-silent": 1095.0}
    link = CapacityLink(ElasticState(tmp_path / "e.sqlite"), base, "c1", TOKEN, lambda: seen, silent_after_s=30)
    link.once(now=1100.0)
    _, events = call(base, "GET", "/v1/events")
    assert events["events"][0]["failed"] == [quiet] and events["events"][0]["source"] == "placement:c1"
    link.once(now=1200.0)  # still silent, same last report: not signalled again
    _, events2 = call(base, "GET", "/v1/events")
    assert len(events2["events"]) == len(events["events"])


def test_openapi_lists_every_route_and_metrics_render(base: str) -> None:
    code, spec = call(base, "GET", "/openapi.json")
    assert code == 200
    for path in ("/v1/plan", "/v1/solve", "/v1/requests", "/v1/failures", "/v1/revocations/{id}/ack",
                 "/v1/elastic/{cluster}", "/v1/reservations/{id}"):  # fmt: skip
        assert path in spec["paths"]
    call(base, "GET", "/v1/status")
    code, text = call(base, "GET", "/metrics")
    assert code == 200 and "harvest_capacity_plan_version 1" in text and 'route="/v1/status"' in text

"""HTTP/JSON adapter of ``harvest ras serve`` (Flask), built with the project's one serving layer
(``server/serving.py``, ``server/http_common.py``): the same bearer-token check on every mutating
call, the same JSON error shape, body and per-list limits, query parameters parsed finite and in
range with the field named, per-route metrics and OpenAPI.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from flask import Flask, Response, request

from placement_service.capacity import CapacityError
from placement_service.capacity.ras.loop import CapacityLoop, StalePlanError, UnknownServerError
from placement_service.server.http_common import (
    MAX_ID,
    check_bearer,
    check_list,
    error_response,
    json_body,
    json_response,
    query_float,
    query_int,
    query_name,
)
from placement_service.server.metrics import Metrics
from placement_service.server.reports import RequestError, check_name
from placement_service.server.serving import HttpLimits, create_json_app

MAX_BUDGET_S = 3600.0  # longest ``budget_s`` of POST /v1/solve
MIN_BUDGET_S = 0.1  # shortest: a solver needs some time to publish anything
MAX_EVENTS = 1000  # most events one GET /v1/events returns

OPENAPI_PATH = Path(__file__).resolve().parent / "openapi.json"


def _servers(doc: Any, max_items: int) -> list[str]:
    if not isinstance(doc, dict) or not isinstance(doc.get("servers"), list) or not doc["servers"]:
        raise RequestError("servers: required, a non-empty list of server names", "servers")
    check_list(doc["servers"], "servers", max_items, what="server names")
    return [check_name(s, f"servers[{i}]") for i, s in enumerate(doc["servers"])]


def _text(doc: dict[str, Any], key: str, default: str) -> str:
    value = doc.get(key, default)
    if not isinstance(value, str) or len(value) > 500:
        raise RequestError(f"{key}: must be a string of at most 500 characters", key)
    return value


def create_app(loop: CapacityLoop, token: str | None, metrics: Metrics, limits: HttpLimits | None = None) -> Flask:
    limits = limits or HttpLimits()
    app = create_json_app("harvest-capacity", metrics, limits)
    solving = threading.Lock()

    @app.errorhandler(UnknownServerError)
    def _unknown(exc: UnknownServerError) -> Response:
        field = str(exc).split(":", 1)[0]
        return error_response(str(exc), field, 404)

    @app.errorhandler(StalePlanError)
    def _stale(exc: StalePlanError) -> Response:
        return error_response(str(exc), "plan_version", 409)

    @app.errorhandler(CapacityError)
    def _bad(exc: CapacityError) -> Response:
        field = getattr(exc, "field", None) or "request"
        return error_response(str(exc), field, 400)

    @app.get("/v1/plan")
    def get_plan() -> Response:
        version = query_int("version", None, minimum=1)
        if version is None:
            return json_response(loop.plan)
        doc = loop.store.plan(version)
        if doc is None:
            raise RequestError(f"version: no plan version {version} (current is {loop.version})", "version", 404)
        return json_response(doc)

    @app.get("/v1/status")
    def get_status() -> Response:
        return json_response(loop.status())

    @app.post("/v1/solve")
    def post_solve() -> Response:
        check_bearer(token)
        budget_s = query_float("budget_s", loop.cfg.budget_s, minimum=MIN_BUDGET_S, maximum=MAX_BUDGET_S)
        if not solving.acquire(blocking=False):
            raise RequestError("solve: a solve is already running", None, 409)
        try:
            result = loop.solve_now(budget_s)
        finally:
            solving.release()
        metrics.inc("harvest_capacity_solves_total", published=str(result["published"]).lower())
        return json_response(result, 200 if result["published"] else 409)

    @app.post("/v1/requests")
    def post_request() -> Response:
        check_bearer(token)
        doc = json_body()
        if not isinstance(doc, dict) or not isinstance(doc.get("request"), dict):
            raise RequestError("request: required, one reservation request object (as in R.json)", "request")
        version = doc.get("plan_version")
        if version is not None and (isinstance(version, bool) or not isinstance(version, int)
                                    or not 0 <= version <= MAX_ID):
            raise RequestError(f"plan_version: must be an integer 0..{MAX_ID}", "plan_version")
        result = loop.grant(doc["request"], version)
        metrics.inc("harvest_capacity_grants_total")
        return json_response(result, 201)

    @app.post("/v1/failures")
    def post_failures() -> Response:
        check_bearer(token)
        doc = json_body()
        servers = _servers(doc, limits.max_list_items)
        result = loop.signal_failure(servers, _text(doc, "reason", "operator"), _text(doc, "source", "operator"))
        metrics.inc("harvest_capacity_failure_signals_total", len(servers))
        return json_response(result)

    @app.post("/v1/recoveries")
    def post_recoveries() -> Response:
        check_bearer(token)
        servers = _servers(json_body(), limits.max_list_items)
        loop.recover(servers)
        return json_response({"recovered": servers})

    @app.get("/v1/elastic/<cluster>")
    def get_elastic(cluster: str) -> Response:
        check_name(cluster, "cluster")
        if cluster not in loop.clusters():
            raise RequestError(f"cluster: unknown cluster {cluster!r} (known: {loop.clusters()})", "cluster", 404)
        return json_response(loop.elastic_set(cluster))

    @app.get("/v1/revocations")
    def get_revocations() -> Response:
        state = request.args.get("state")
        if state not in (None, "pending", "acked", "timeout"):
            raise RequestError(f"state: one of pending, acked, timeout; got {state!r}", "state")
        return json_response({"revocations": loop.store.revocations(state, query_name("cluster"))})

    @app.post("/v1/revocations/<rid>/ack")
    def post_ack(rid: str) -> Response:
        check_bearer(token)
        if not rid.isascii() or not rid.isdigit() or len(rid) > 19 or not 1 <= int(rid) <= MAX_ID:
            raise RequestError(f"revocation: the id must be an integer 1..{MAX_ID}, got {rid[:40]!r}", "revocation")
        result = loop.ack(int(rid))
        metrics.inc("harvest_capacity_revocation_acks_total")
        return json_response(result)

    @app.get("/v1/reservations/<rid>")
    def get_reservation(rid: str) -> Response:
        check_name(rid, "reservation")
        return json_response(loop.reservation_status(rid))

    @app.get("/v1/events")
    def get_events() -> Response:
        limit = query_int("limit", 100, minimum=1, maximum=MAX_EVENTS)
        return json_response({"events": loop.store.events(limit or 100)})

    @app.get("/healthz")
    def healthz() -> Response:
        return json_response({"status": "ok", "plan_version": loop.version})

    @app.get("/metrics")
    def get_metrics() -> Response:
        metrics.set("harvest_capacity_plan_version", loop.version)
        metrics.set("harvest_capacity_pending_revocations", len(loop.store.revocations("pending")))
        metrics.set("harvest_capacity_events_kept", loop.store.event_count())
        return Response(metrics.render(), mimetype="text/plain; version=0.0.4")

    @app.get("/openapi.json")
    def openapi() -> Response:
        return Response(OPENAPI_PATH.read_text(), mimetype="application/json")

    return app

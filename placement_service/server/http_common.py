"""HTTP helpers shared by ``harvest serve`` and ``harvest ras serve``: JSON answers, the error shape
``{"error": {"message": str, "field": str | null}}``, bearer-token checks and per-route metrics.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from typing import Any

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException

from placement_service.server.metrics import Metrics
from placement_service.server.reports import RequestError
from placement_service.validate import InputError, loads_json

logger = logging.getLogger(__name__)


def json_response(doc: Any, status: int = 200) -> Response:
    return Response(json.dumps(doc, allow_nan=False), status=status, mimetype="application/json")


def error_response(message: str, field: str | None, status: int) -> Response:
    return json_response({"error": {"message": message, "field": field}}, status)


def json_body() -> Any:
    """The JSON body (depth-limited, see ``placement_service.validate.loads_json``)."""
    return loads_json(request.get_data(cache=False), "body")


def check_bearer(token: str | None) -> None:
    """Raise a 401 ``RequestError`` unless the request carries ``Authorization: Bearer <token>``."""
    if token is None:
        return
    header = request.headers.get("Authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token.encode()):
        raise RequestError("Authorization: a valid 'Bearer <token>' header is required", "Authorization", 401)


def install_common(app: Flask, metrics: Metrics) -> None:
    """Per-route latency/count metrics, ``WWW-Authenticate`` on 401, ``Retry-After`` on 503, and the
    JSON error handlers."""

    @app.before_request
    def _start() -> None:
        g.start = time.perf_counter()

    @app.after_request
    def _done(resp: Response) -> Response:
        rule = request.url_rule.rule if request.url_rule is not None else "unmatched"
        metrics.observe("harvest_http_request_seconds", time.perf_counter() - g.get("start", time.perf_counter()),
                        route=rule)
        metrics.inc("harvest_http_requests_total", route=rule, status=str(resp.status_code))
        if resp.status_code == 401:
            resp.headers["WWW-Authenticate"] = 'Bearer realm="harvest"'
        elif resp.status_code == 503:
            resp.headers["Retry-After"] = "5"
        return resp

    @app.errorhandler(InputError)
    def _request_error(exc: InputError) -> Response:
        return error_response(str(exc), exc.field, getattr(exc, "status", 400))

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        field = "body" if exc.code == 413 else None
        return error_response(exc.description or exc.name, field, exc.code or 500)

    @app.errorhandler(Exception)
    def _internal(exc: Exception) -> Response:
        logger.exception("internal error on %s %s", request.method, request.path)
        return error_response(f"internal error: {type(exc).__name__}", None, 500)

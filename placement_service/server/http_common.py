"""HTTP helpers shared by every service (``serving.py``): JSON answers, the error shape
``{"error": {"message": str, "field": str | null}}``, bearer-token checks, per-route metrics, and
the parsing of query parameters and request lists (finite, in range, the field named in the error).
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from typing import Any

from flask import Flask, Response, g, request
from werkzeug.exceptions import HTTPException

from placement_service import validate
from placement_service.server.metrics import Metrics
from placement_service.server.reports import RequestError
from placement_service.validate import InputError, loads_json

MAX_ID = 2**63 - 1  # the largest integer id or version (SQLite's INTEGER)

logger = logging.getLogger(__name__)


def json_response(doc: Any, status: int = 200) -> Response:
    return Response(json.dumps(doc, allow_nan=False), status=status, mimetype="application/json")


def error_response(message: str, field: str | None, status: int) -> Response:
    return json_response({"error": {"message": message, "field": field}}, status)


def json_body() -> Any:
    """The JSON body (depth-limited, see ``placement_service.validate.loads_json``)."""
    return loads_json(request.get_data(cache=False), "body")


def query_float(name: str, default: float, *, minimum: float | None = None, maximum: float | None = None,
                positive: bool = False) -> float:
    """A number query parameter (absent or empty: ``default``): finite, within the bounds, else a 400
    naming ``name``."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    return validate.parse_float(raw, name, minimum=minimum, maximum=maximum, positive=positive)


def query_int(name: str, default: int | None, *, minimum: int | None = 0, maximum: int | None = MAX_ID) -> int | None:
    """An integer query parameter (absent or empty: ``default``), within the bounds, else a 400 naming it."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    if not raw.strip().lstrip("+-").isascii():
        raise RequestError(f"{name}: must be an integer, got {validate.short_repr(raw)}", name)
    return validate.parse_int(raw, name, minimum=minimum, maximum=maximum)


def query_name(name: str) -> str | None:
    """A name query parameter (node, cluster, ...), checked as every name is (``validate.check_name``)."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return None
    return validate.check_name(raw, name)


def check_list(value: Any, field: str, max_items: int, *, what: str = "items") -> list[Any]:
    """A list field of a request body with at most ``max_items`` items (``HttpLimits.max_list_items``):
    a caller cannot make the service parse, hold or log more than that per list."""
    if not isinstance(value, list):
        raise RequestError(f"{field}: must be a list of {what}", field)
    if len(value) > max_items:
        raise RequestError(f"{field}: at most {max_items} {what} per request, got {len(value)}", field)
    return value


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

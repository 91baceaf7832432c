"""HTTP/JSON adapter (Flask): translates requests into ``PlacementService`` calls.

Every error answers ``{"error": {"message": str, "field": str | null}}`` with a 4xx status naming
what is wrong; a rejected request stores nothing. Mutating endpoints (reports, re-clustering, the
harvestable set, flush) need ``Authorization: Bearer <token>`` when the service has a token.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from flask import Flask, Response, request

from placement_service import HarvestError, validate
from placement_service.core.types import PlacementError, PolicyError
from placement_service.server.elastic import parse_elastic_set
from placement_service.server.http_common import check_bearer, check_list
from placement_service.server.http_common import error_response as _error
from placement_service.server.http_common import json_body as _body
from placement_service.server.http_common import json_response as _json
from placement_service.server.mover import MOVER_MODES
from placement_service.server.recluster import FORECAST_KEY
from placement_service.server.reports import (
    AGENT_VERSION_RE,
    RequestError,
    check_name,
    check_place_request,
    parse_report_batch,
    unknown_field,
)
from placement_service.server.service import PlacementService
from placement_service.server.serving import create_json_app

logger = logging.getLogger(__name__)

OPENAPI_PATH = Path(__file__).resolve().parent.parent / "openapi.json"
MAX_RECLUSTER_WAIT_S = 86400.0  # longest ``timeout_s`` of POST /v1/recluster?wait=1


def _flag(name: str) -> bool:
    """A boolean query parameter: 1/true/yes/on or 0/false/no/off (absent: false); anything else is a 400."""
    return validate.parse_bool(request.args.get(name, "0") or "0", name)


def _epoch_arg(name: str, default: float) -> float:
    """An epoch-seconds query argument: a finite number in 0 .. 2100-01-01."""
    raw = request.args.get(name)
    if raw is None or raw == "":
        return default
    return validate.parse_epoch_s(raw, name)


def create_app(service: PlacementService, token: str | None) -> Flask:
    cfg = service.cfg
    metrics = service.metrics
    app = create_json_app("harvest-placement", metrics, cfg.http_limits())

    def require_token() -> None:
        check_bearer(token)

    @app.errorhandler(PlacementError)
    def _placement_error(exc: PlacementError) -> Response:
        return _error(str(exc), "replicas", 409)

    @app.errorhandler(PolicyError)
    def _policy_error(exc: PolicyError) -> Response:
        return _error(str(exc), None, 400)

    # -- agents ----------------------------------------------------------------------------------
    @app.post("/v1/reports")
    def post_reports() -> Response:
        require_token()
        reports = parse_report_batch(_body(), time.time(), cfg.max_future_s, cfg.max_reports_per_request,
                                     cfg.max_report_age_s)
        result = service.ingest_and_wait(reports)
        metrics.inc("harvest_reports_accepted_total", len(reports), api="http")
        revocations = {n: list(ids) for n in {r.node for r in reports} if (ids := service.revocations_for(n))}
        return _json({"accepted": len(reports), "stored": len(result.stored), "duplicates": result.duplicates,
                      **({"revocations": revocations} if revocations else {})}, 202)

    # -- decisions -------------------------------------------------------------------------------
    @app.post("/v1/jobs/select")
    def post_select() -> Response:
        from placement_service.core.dag import parse_job

        doc = _body()
        try:
            job = parse_job(doc, "body")
        except PolicyError as exc:
            raise RequestError(str(exc), _field_of(str(exc))) from None
        policy = service.policy
        explain = _flag("explain")
        decision = service.select(job, explain=explain)
        sel = decision.selection
        extra = {"explain": decision.explanation} if explain else {}
        return _json({**extra,
            "job": job.name,
            "job_type": sel.job_type.value,
            "max_concurrency": sel.max_concurrency,
            "classes": list(sel.classes),
            "queue": decision.queue,
            "node_label": decision.node_label,
            "wait": not sel.classes,
            "class_table_version": policy.version,
        })

    @app.post("/v1/blocks/place")
    def post_place() -> Response:
        doc = _body()
        writer, replicas, excluded, block_size, chosen = parse_place_request(doc, cfg.max_list_items)
        block = request.args.get("block", "")
        if block:
            check_name(block, "block")
        explain = _flag("explain")
        result, why = service.place_explained(writer, replicas, excluded, block_size, block=block, rules=explain,
                                              chosen=chosen)
        extra = {"explain": why} if explain else {}
        return _json({"targets": list(result.targets), "relaxed": result.relaxed, "reason": result.reason,
                      "short": result.short, "decision": why["decision"], **extra})

    @app.post("/v1/blocks/drop")
    def post_drop() -> Response:
        """The shim's ``chooseReplicaToDelete``: which of a block's holders to drop (the old replica
        of a move in flight, server/mover.py), or null for the stock choice."""
        doc = _body()
        if not isinstance(doc, dict) or set(doc) - {"replicas"}:
            raise RequestError("body: must be {\"replicas\": [node names]}", "body")
        holders = [check_name(h, f"replicas[{i}]") for i, h in
                   enumerate(check_list(doc.get("replicas"), "replicas", cfg.max_list_items, what="node names"))]
        return _json({"drop": service.mover.drop_for(holders)})

    @app.get("/v1/mover")
    def get_mover() -> Response:
        return _json(service.mover.status())

    @app.put("/v1/mover")
    def put_mover() -> Response:
        """The kill switch: ``{"mode": "off" | "dry-run" | "on"}``."""
        require_token()
        doc = _body()
        if not isinstance(doc, dict) or set(doc) != {"mode"} or not isinstance(doc["mode"], str):
            raise RequestError("body: must be {\"mode\": \"off\" | \"dry-run\" | \"on\"}", "mode")
        try:
            service.mover.set_mode(doc["mode"])
        except HarvestError as exc:
            raise RequestError(str(exc), "mode", 409 if doc["mode"] in MOVER_MODES else 400) from None
        return _json(service.mover.status())

    @app.get("/v1/explain/moves")
    def get_explain_moves() -> Response:
        """The mover's last moves (planned, made, rolled back, deferred), newest last."""
        return _json({"moves": list(service.mover.explained)})

    @app.post("/v1/reimages")
    def post_reimages() -> Response:
        require_token()
        events = parse_reimages(_body(), time.time(), cfg.max_future_s)
        new, known = service.record_reimages(events)
        return _json({"stored": new, "duplicates": known}, 202)

    @app.get("/v1/reimages")
    def get_reimages() -> Response:
        since = _epoch_arg("since", 0.0)
        rows = service.state.load_reimages(since)
        return _json({"since": since, "reimages": [{"node": n, "timestamp": t, "tenant": te, "how": h}
                                                   for n, t, te, h in rows]})

    @app.get("/v1/explain/place")
    def get_explain_place() -> Response:
        block, node = request.args.get("block", ""), request.args.get("node", "")
        for name, value in (("block", block), ("node", node)):
            if value:
                check_name(value, name)
        entries = service.insight.explain_place(block=block or None, node=node or None)
        if block and not entries:
            raise RequestError(f"no decision for block {block!r} in the decision log (sampled, bounded: "
                               f"at most the last {cfg.decision_log_size} and {cfg.decision_log_bytes} bytes kept)",
                               "block", 404)
        return _json({"decisions": entries, "quality": service.placement_quality()})

    @app.get("/v1/placement/quality")
    def get_placement_quality() -> Response:
        return _json(service.placement_quality())

    @app.get("/v1/nodes/silent")
    def get_silent_nodes() -> Response:
        silent = service.silent_nodes()
        return _json({"silent_after_s": cfg.silent_after_s, "count": len(silent),
                      "nodes": [{"node": n, "silent_s": s} for n, s in sorted(silent.items(), key=lambda kv: -kv[1])]})

    # -- queries ---------------------------------------------------------------------------------
    @app.get("/v1/classes")
    def get_classes() -> Response:
        policy = service.policy
        doc: dict[str, Any] = dict(policy.doc) if policy.doc else {"classes": [], "tenants": {}}
        doc["version"] = policy.version
        if policy.selector is not None:
            doc["current_cpu"] = policy.selector.current()
        return _json(doc)

    @app.get("/v1/agents")
    def get_agents() -> Response:
        """Which agent release runs where: counts per version and the nodes (``?version=``, ``?limit=``)."""
        version = request.args.get("version")
        if version is not None and not AGENT_VERSION_RE.match(version):
            raise RequestError("version: must be at most 64 characters of [0-9A-Za-z.+_-]", "version")
        limit = validate.parse_int(request.args.get("limit") or "1000", "limit", minimum=0, maximum=100_000)
        return _json(service.agent_versions.snapshot(version, limit))

    @app.get("/v1/nodes/<node>")
    def get_node(node: str) -> Response:
        check_name(node, "node")
        return _json(service.node_info(node))

    @app.get("/v1/tenants/<tenant>/forecast")
    def get_forecast(tenant: str) -> Response:
        """The tenant's headroom forecast from the adopted class table, as the node agent reads it
        (``core.headroom_policy.TenantForecast``; refitted at every re-clustering)."""
        check_name(tenant, "tenant")
        doc = service.policy.doc or {}
        fc = doc.get(FORECAST_KEY)
        hourly = fc.get("hourly_peak_frac", {}).get(tenant) if isinstance(fc, dict) else None
        if fc is None or hourly is None:
            raise RequestError(f"no headroom forecast for tenant {tenant!r} (the class table in force has none: "
                               f"it is fitted at every re-clustering from the tenant's history)", "tenant", 404)
        return _json({"tenant": tenant, "horizon_s": fc["horizon_s"], "quantile": fc["quantile"],
                      "hourly_peak_frac": hourly, "class_table_version": service.policy.version})

    @app.get("/v1/tenants/<tenant>/samples")
    def get_samples(tenant: str) -> Response:
        check_name(tenant, "tenant")
        since = _epoch_arg("since", 0.0)
        until = _epoch_arg("until", min(time.time() + cfg.max_future_s + cfg.slot_s, validate.MAX_EPOCH_S))
        if until < since:
            raise RequestError(f"until: must be >= since ({since}), got {until}", "until")
        if not service.known_tenant(tenant):
            raise RequestError(f"tenant {tenant!r} is unknown", "tenant", 404)
        samples = service.samples(tenant, since, until)
        return _json({"tenant": tenant, "slot_s": cfg.slot_s, "since": since, "until": until,
                      "samples": [s.to_json() for s in samples]})

    # -- operations ------------------------------------------------------------------------------
    @app.post("/v1/recluster")
    def post_recluster() -> Response:
        require_token()
        # Arguments are checked before the run is queued: a bad request changes nothing.
        wait = _flag("wait")
        timeout_s = validate.parse_float(request.args.get("timeout_s", "600"), "timeout_s", minimum=0.0,
                                         maximum=MAX_RECLUSTER_WAIT_S)
        queued = service.recluster.request()
        if wait:
            service.recluster.wait_idle(timeout_s=timeout_s)
        status = service.recluster.status()
        status["class_table_version"] = service.policy.version
        return _json({"queued": queued, **status}, 200 if wait else 202)

    @app.get("/v1/recluster")
    def get_recluster() -> Response:
        status = service.recluster.status()
        status["class_table_version"] = service.policy.version
        status["resource_manager"] = service.rm_status
        return _json(status)

    @app.put("/v1/harvestable")
    def put_harvestable() -> Response:
        require_token()
        doc = _body()
        if isinstance(doc, dict) and "version" in doc:  # the capacity service's elastic set (elastic.py)
            version, elastic_nodes, revocations, pools = parse_elastic_set(doc)
            applied = service.apply_elastic_set(version, elastic_nodes, revocations, pools)
            return _json({"version": service.elastic.version, "applied": applied})
        if not isinstance(doc, dict) or "nodes" not in doc:
            raise RequestError("nodes: required (a list of node names, or null for every node)", "nodes")
        nodes = doc["nodes"]
        if nodes is not None:
            if not isinstance(nodes, list):
                raise RequestError("nodes: must be a list or null", "nodes")
            nodes = [check_name(n, f"nodes[{i}]") for i, n in enumerate(nodes)]
        service.set_harvestable(nodes)
        return _json({"harvestable": None if nodes is None else sorted(nodes)})

    @app.get("/v1/elastic")
    def get_elastic() -> Response:
        return _json(service.elastic.to_json())

    @app.post("/v1/nodes/<node>/drained")
    def post_drained(node: str) -> Response:
        require_token()
        check_name(node, "node")
        doc = _body()
        ids = doc.get("revocations") if isinstance(doc, dict) else None
        ids = [validate.check_int(i, f"revocations[{k}]", minimum=1, maximum=2**63 - 1)
               for k, i in enumerate(check_list(ids, "revocations", cfg.max_list_items, what="revocation ids"))]
        return _json({"drained": service.revocations_drained(node, ids)})

    @app.get("/v1/harvestable")
    def get_harvestable() -> Response:
        h = service.harvestable
        return _json({"harvestable": None if h is None else sorted(h)})

    @app.post("/v1/flush")
    def post_flush() -> Response:
        require_token()
        return _json({"segments_compacted": service.compact()})

    @app.get("/healthz")
    def healthz() -> Response:
        doc = service.health_snapshot()
        doc.update({"class_table_version": service.policy.version, "log_segment": service.wal.segment_id})
        return _json(doc, 503 if doc["status"] == "unhealthy" else 200)

    @app.get("/metrics")
    def get_metrics() -> Response:
        return Response(service.metrics.render(), mimetype="text/plain; version=0.0.4")

    @app.get("/openapi.json")
    def openapi() -> Response:
        return Response(OPENAPI_PATH.read_text(), mimetype="application/json")

    return app


def _field_of(message: str) -> str:
    """Field named by a core ``PolicyError`` message: ``body: vertices['a'].tasks: ...`` names
    ``vertices['a'].tasks``, ``body: expected a JSON object`` names the body."""
    parts = [p.strip() for p in message.split(":")]
    return parts[1] if len(parts) > 2 else parts[0]


def parse_place_request(doc: Any, max_items: int = 10_000) -> tuple[str, int, list[str], int, list[str]]:
    if not isinstance(doc, dict):
        raise RequestError("body: must be a JSON object", "body")
    unknown = sorted(set(doc) - {"writer", "replicas", "excluded", "block_size", "chosen"})
    if unknown:
        raise unknown_field(unknown[0])
    return check_place_request(doc.get("writer"), doc.get("replicas", 3), doc.get("excluded", []),
                               doc.get("block_size", 0), doc.get("chosen", []), max_items)


REIMAGE_MAX_AGE_S = 10 * 365 * 86400.0  # older reports of reimages are refused (typo guard)


def parse_reimages(doc: Any, now_s: float, max_future_s: float) -> list[tuple[str, float, str]]:
    """``{"events": [{"node", "timestamp", "how"?}]}`` -> (node, epoch s, how); errors name the field."""
    if not isinstance(doc, dict) or set(doc) != {"events"} or not isinstance(doc["events"], list):
        raise RequestError('body: expected {"events": [{"node": ..., "timestamp": ...}, ...]}', "events")
    if not 1 <= len(doc["events"]) <= 10_000:
        raise RequestError(f"events: expected 1..10000 events, got {len(doc['events'])}", "events")
    out = []
    for i, e in enumerate(doc["events"]):
        where = f"events[{i}]"
        if not isinstance(e, dict):
            raise RequestError(f"{where}: must be an object", where)
        unknown = sorted(set(e) - {"node", "timestamp", "how"})
        if unknown:
            raise unknown_field(unknown[0], where)
        node = check_name(e.get("node"), f"{where}.node")
        ts = validate.check_finite(e.get("timestamp"), f"{where}.timestamp", minimum=now_s - REIMAGE_MAX_AGE_S,
                                   maximum=now_s + max_future_s)
        how = e.get("how", "declared")
        if how not in ("detected", "declared"):
            raise RequestError(f"{where}.how: must be 'detected' or 'declared', got {how!r}", f"{where}.how")
        out.append((node, float(ts), how))
    return out

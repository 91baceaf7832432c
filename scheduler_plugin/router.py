"""Job router: job JSON -> classes (service, else local class selection, else default) -> settings.

Steps for one job:

1. Ask the placement service: ``POST <service>/v1/jobs/select`` with the job JSON as the body and
   ``Authorization: Bearer <token>``; the answer carries ``classes`` (ids), ``job_type`` and
   ``max_concurrency``, and ``queue`` / ``node_label`` when the service maps the selection onto
   YARN itself (then they are used as given).
2. Service unreachable or wrong answer: with a class table (``classes.json``) run class selection
   locally (``placement_service.core.selection``), the same code the service runs.
3. No class table either, or nothing fits now (empty selection): the default queue, no label.
4. Map the selection onto YARN, which has one partition per node and no label disjunction in a
   request (see :class:`MultiClassPolicy`), and hand back the settings:
   Tez ``tez.queue.name=<queue>`` (the queue's ``default-node-label-expression`` is the class
   label); MapReduce ``mapreduce.job.queuename`` and ``mapreduce.job.node-label-expression``.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from placement_service import HarvestError
from placement_service.core.types import ClassTable, JobType

logger = logging.getLogger(__name__)

DEFAULT_QUEUE = "default"
SELECT_PATH = "/v1/jobs/select"


class RouterError(HarvestError):
    """The router was given an unusable job or setting."""


class ServiceError(Exception):
    """The placement service could not be asked or gave an answer the router cannot use."""


class Engine(StrEnum):
    TEZ = "tez"
    MAPREDUCE = "mapreduce"


class MultiClassPolicy(StrEnum):
    """How a selection of several classes maps onto YARN (a request names at most one label).

    ``largest-headroom``: run the job in the one selected class with the most free cores
    for its job type (known from the class table; without one, the first class the service
    listed, which is its most preferred). The job keeps the class's isolation but may wait for
    containers when that class alone cannot hold its peak concurrency.
    ``default-partition`` (default, as the placement service does): run it in the default queue
    without a label. With the class labels
    created ``exclusive=false`` (what ``harvest capacity-scheduler`` prints) and the default queue
    given a share of every label, its containers use idle capacity of any non-exclusive partition
    plus the unlabelled nodes: more room, but no control over which classes.
    """

    LARGEST_HEADROOM = "largest-headroom"
    DEFAULT_PARTITION = "default-partition"


@dataclass(frozen=True)
class RouteDecision:
    job_name: str
    source: str  # "service", "local" or "default"
    job_type: JobType | None
    max_concurrency: int | None
    classes: tuple[str, ...]
    queue: str
    label: str  # "" = DEFAULT partition
    reason: str
    settings: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "job": self.job_name,
            "source": self.source,
            "job_type": self.job_type.value if self.job_type else None,
            "max_concurrency": self.max_concurrency,
            "classes": list(self.classes),
            "queue": self.queue,
            "label": self.label,
            "reason": self.reason,
            "settings": dict(self.settings),
        }


@dataclass(frozen=True)
class ServiceEndpoint:
    url: str  # base URL, e.g. http://placement:8080
    token: str = ""
    timeout_s: float = 2.0


def engine_settings(queue: str, label: str, engine: Engine) -> dict[str, str]:
    """The job settings that route it to ``queue`` (and ``label`` for MapReduce)."""
    if engine is Engine.TEZ:
        return {"tez.queue.name": queue}
    out = {"mapreduce.job.queuename": queue}
    if label:
        out["mapreduce.job.node-label-expression"] = label
    return out


def ask_service(endpoint: ServiceEndpoint, job: Mapping[str, Any]) -> dict[str, Any]:
    """POST the job to the service; raise ServiceError on any failure or malformed answer."""
    body = json.dumps(job).encode()
    req = urllib.request.Request(endpoint.url.rstrip("/") + SELECT_PATH, data=body, method="POST")
    req.add_header("Content-Type", "application/json")
    if endpoint.token:
        req.add_header("Authorization", f"Bearer {endpoint.token}")
    try:
        with urllib.request.urlopen(req, timeout=endpoint.timeout_s) as resp:
            answer = json.loads(resp.read().decode() or "null")
    except urllib.error.HTTPError as exc:
        detail = exc.read().decode(errors="replace")[:200]
        raise ServiceError(f"HTTP {exc.code} from {endpoint.url}{SELECT_PATH}: {detail}") from None
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise ServiceError(f"cannot reach {endpoint.url}: {exc}") from None
    except ValueError as exc:
        raise ServiceError(f"answer of {endpoint.url}{SELECT_PATH} is not JSON: {exc}") from None
    if not isinstance(answer, Mapping):
        raise ServiceError(f"answer of {endpoint.url}{SELECT_PATH} is not an object: {answer!r}"[:300])
    classes = answer.get("classes")
    if not isinstance(classes, list) or not all(isinstance(c, str) and c for c in classes):
        raise ServiceError(f"answer of {endpoint.url}{SELECT_PATH} lacks a 'classes' list of ids: {answer!r}"[:300])
    return dict(answer)


def _parse_job_type(value: Any) -> JobType | None:
    try:
        return JobType(value) if value is not None else None
    except ValueError:
        return None


def pick_class(
    classes: Sequence[str], policy: MultiClassPolicy, table: ClassTable | None, job_type: JobType | None
) -> tuple[str, str]:
    """(queue, label) for a selection; see :class:`MultiClassPolicy`."""
    if not classes:
        return DEFAULT_QUEUE, ""
    if len(classes) == 1:
        return classes[0], classes[0]
    if policy is MultiClassPolicy.DEFAULT_PARTITION:
        return DEFAULT_QUEUE, ""
    best = classes[0]
    if table is not None:
        from placement_service.core.selection import headroom  # lazy: pulls numpy

        by_id = table.by_id()
        jt = job_type or JobType.MEDIUM

        def free_cores(cid: str) -> float:
            c = by_id.get(cid)
            if c is None:
                return -1.0
            h = headroom(jt, c)
            return h * c.cores if c.cores > 0 else h

        best = max(classes, key=lambda cid: (free_cores(cid), -classes.index(cid)))
    return best, best


@dataclass(frozen=True)
class Router:
    """Routes jobs; every collaborator is optional so each fallback can be exercised alone."""

    endpoint: ServiceEndpoint | None = None
    table: ClassTable | None = None
    policy: MultiClassPolicy = MultiClassPolicy.DEFAULT_PARTITION
    engine: Engine = Engine.TEZ
    seed: int | None = None

    def route(self, job: Mapping[str, Any]) -> RouteDecision:
        from placement_service.core.dag import parse_job  # validates the job JSON

        parsed = parse_job(job, source=f"job {job.get('name', '?')!r}")
        name = parsed.name
        errors: list[str] = []
        if self.endpoint is not None:
            try:
                answer = ask_service(self.endpoint, job)
            except ServiceError as exc:
                logger.warning("job %s: placement service unusable, falling back: %s", name, exc)
                errors.append(str(exc))
            else:
                classes = tuple(answer["classes"])
                jt = _parse_job_type(answer.get("job_type"))
                mc = answer.get("max_concurrency")
                mc_int = int(mc) if isinstance(mc, int | float) and not isinstance(mc, bool) else None
                queue, label = pick_class(classes, self.policy, self.table, jt)
                svc_queue = answer.get("queue")
                if isinstance(svc_queue, str) and svc_queue:  # the service mapped it itself
                    queue = svc_queue
                    label = str(answer.get("node_label") or answer.get("label") or "")
                reason = "selected by the placement service" if classes else "service: nothing fits now"
                return self._decision(name, "service", jt, mc_int, classes, queue, label, reason)
        if self.table is not None:
            import numpy as np

            from placement_service.core.selection import ClassSelector

            selection = ClassSelector(self.table).select(parsed, np.random.default_rng(self.seed))
            queue, label = pick_class(selection.classes, self.policy, self.table, selection.job_type)
            reason = "local class selection" + (f" (service: {errors[0]})" if errors else "")
            if not selection.classes:
                reason = "local class selection: nothing fits now, default queue"
            return self._decision(
                name, "local", selection.job_type, selection.max_concurrency, selection.classes, queue, label, reason
            )
        reason = "no service and no class table: default queue" + (f" (service: {errors[0]})" if errors else "")
        return self._decision(name, "default", None, None, (), DEFAULT_QUEUE, "", reason)

    def _decision(
        self,
        name: str,
        source: str,
        job_type: JobType | None,
        max_concurrency: int | None,
        classes: tuple[str, ...],
        queue: str,
        label: str,
        reason: str,
    ) -> RouteDecision:
        settings = engine_settings(queue, label, self.engine)
        return RouteDecision(name, source, job_type, max_concurrency, classes, queue, label, reason, settings)

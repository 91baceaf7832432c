"""The capacity service's core (``harvest ras serve``): async solver, emergency path, Online Mover,
elastic sets per cluster and the revocation lifecycle. No HTTP here (``api.py``), no threads of its
own except through ``run_*`` methods that ``serve.py`` starts.

- **Async solver** (``solve_now``): re-solves from the current plan (previous-plan stability) within
  ``budget_s``, with failed servers unavailable, the region's ``R.json`` requests plus those added
  through the API (emergency grants included: this is where they are folded in). The plan is
  published only if the independent checker (``check.py``) finds nothing; otherwise the current plan
  stays and the refusal is recorded.
- **Emergency path** (``grant``): a new request is granted at once from unassigned servers (then the
  shared buffer), published as a new plan version; the next solve optimises it.
- **Online Mover** (``signal_failure``): failed servers are marked, each failed reservation server is
  replaced from the shared buffer (then unassigned servers), and the plan is published at once with
  the reason. Each replacement was lent out as elastic capacity: a *revocation* is recorded for it.
- **Revocations** travel to the server's cluster with the next elastic-set push; the placement
  service forwards the agent's acknowledgement (``ack``); after ``ack_timeout_s`` without one, the
  server is handed over anyway and the revocation records ``timeout``.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from placement_service.capacity import CapacityError
from placement_service.capacity.ras import io
from placement_service.capacity.ras.check import check_plan
from placement_service.capacity.ras.domain import (
    SHARED_BUFFER_PREFIX,
    Problem,
    Region,
    Request,
    elastic_pool,
)
from placement_service.capacity.ras.invariants import publish_violations
from placement_service.capacity.ras.online import emergency_grant, online_move
from placement_service.capacity.ras.plan import replan
from placement_service.capacity.ras.solve import solve
from placement_service.capacity.ras.store import CapacityStore

logger = logging.getLogger(__name__)


class UnknownServerError(CapacityError):
    """A signal or revocation names a server (or revocation) the region does not have."""


class StalePlanError(CapacityError):
    """A change was made against a plan version that is no longer the current one."""


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    budget_s: float = 10.0  # time budget of one async solve
    interval_s: float = 300.0  # re-solve this often (0: only on demand)
    ack_timeout_s: float = 60.0  # hand a revoked server over after this long without an acknowledgement
    push_interval_s: float = 0.5  # retry pushes of the elastic set this often


def elastic(entity: str | None) -> bool:
    return entity is None or entity.startswith(SHARED_BUFFER_PREFIX)


class CapacityLoop:
    """State and decisions of one region's capacity service (thread-safe: one lock around changes)."""

    def __init__(self, region: Region, requests_doc: Mapping[str, Any], store: CapacityStore,
                 cfg: LoopConfig = LoopConfig()) -> None:  # fmt: skip
        self.region = region
        self.base_doc = dict(requests_doc)
        self.base_requests, self.settings = io.parse_requests(requests_doc, "reservations")
        self.store = store
        self.cfg = cfg
        self._lock = threading.RLock()
        self._index = region.index()
        clusters = region.extra.get("cluster")
        self.cluster_of: dict[str, str] = (
            {s: str(c) for s, c in zip(region.server, clusters, strict=True)} if clusters is not None else {}
        )
        self.changed = threading.Event()  # set when a new plan version exists (the pusher waits on it)
        latest = store.latest_plan()
        self.version, self.plan = latest if latest else (0, {})

    # -- inputs ----------------------------------------------------------------------------------
    def requests(self) -> tuple[Request, ...]:
        extra = [d for d, _ in self.store.requests()]
        base_ids = {r.id for r in self.base_requests}
        added, _ = io.parse_requests({"reservations": [d for d in extra if d["id"] not in base_ids]}, "requests")
        return self.base_requests + added

    def requests_doc(self) -> dict[str, Any]:
        doc = dict(self.base_doc)
        base_ids = {r["id"] for r in self.base_doc.get("reservations", [])}
        doc["reservations"] = list(self.base_doc.get("reservations", [])) + [
            d for d, _ in self.store.requests() if d["id"] not in base_ids]  # fmt: skip
        return doc

    def live_region(self) -> Region:
        failed = self.store.failed()
        avail = self.region.available.copy()
        for s in failed:
            if s in self._index:
                avail[self._index[s]] = False
        return dataclasses.replace(self.region, available=avail)

    def assignment(self) -> dict[str, str | None]:
        return dict(self.plan.get("assignment", {}))

    def check(self, doc: Mapping[str, Any], region: Region | None = None) -> list[str]:
        return check_plan(io.region_columns(region or self.live_region()), self.requests_doc(), doc)

    # -- async solver ----------------------------------------------------------------------------
    def solve_now(self, budget_s: float | None = None) -> dict[str, Any]:
        """One re-solve from the current plan; publishes only a plan the checker and the publish
        invariants (``invariants.py``) accept. Failure signals and requests that arrive while the
        solver runs are folded into its plan (Online Mover, emergency path), never lost."""
        with self._lock:
            region = self.live_region()
            failed_at_start = set(self.store.failed())
            requests = self.requests()
            settings = dataclasses.replace(self.settings, time_limit_s=budget_s or self.cfg.budget_s)
            problem = Problem(region, requests, settings, self.assignment())
        t0 = time.monotonic()
        plan = solve(problem)  # outside the lock: the mover and the emergency path stay immediate
        doc = plan.to_json()
        new_assignment: dict[str, str | None] = dict(plan.assignment)
        with self._lock:
            folded = self._fold(new_assignment, failed_at_start, {r.id for r in requests})
            if folded is not None:
                new_assignment, note = folded
                region = self.live_region()
                solver_doc = doc["solver"]
                doc = replan(region, self.requests(), self.settings, new_assignment, self.assignment(),
                             plan.solver.status).to_json()  # fmt: skip
                doc["solver"] = solver_doc
                doc["notes"] = [*list(doc.get("notes") or []), note]  # type: ignore[call-overload]
            problems = self.check(doc, region)
            doc["check"] = {"ok": not problems, "violations": problems[:50]}
            if problems:
                self.store.event("solve-refused", {"violations": problems[:20], "wall_s": time.monotonic() - t0})
                logger.error("solve refused by the checker: %s", problems[0])
                return {"published": False, "reason": f"checker: {problems[0]}", "violations": problems[:20]}
            current = self.assignment()
            revoked = [(s, self.cluster_of[s], f"re-solve: assigned to {e}")
                       for s, e in new_assignment.items()
                       if not elastic(e) and s in current and elastic(current[s]) and s in self.cluster_of
                       and region.available[self._index[s]]]  # fmt: skip
            summary = doc["summary"]
            version = self._publish("solve", doc, revoked, {
                "wall_s": time.monotonic() - t0, "moves": summary["moves"],  # type: ignore[index]
                "moves_in_use": summary["moves_in_use"], "unmet": summary["unmet"],  # type: ignore[index]
                "status": plan.solver.status, **({"folded": folded[1]} if folded else {}),
            }, region)  # fmt: skip
            if version is None:
                violations = doc["check"]["violations"]  # type: ignore[index]
                return {"published": False, "reason": f"invariant: {violations[0]}", "violations": violations}
            return {"published": True, "version": version, "revocations": len(revoked),
                    "moves": summary["moves"], "moves_in_use": summary["moves_in_use"],  # type: ignore[index]
                    "wall_s": time.monotonic() - t0, "status": plan.solver.status,
                    **({"folded": folded[1]} if folded else {})}  # fmt: skip

    def _fold(self, assignment: dict[str, str | None], failed_at_start: set[str],
              ids_at_start: set[str]) -> tuple[dict[str, str | None], str] | None:
        """The solver's ``assignment`` with what arrived during the solve applied to it, as the online
        paths would have: failed servers replaced (Online Mover), new requests granted (emergency
        path); ``None`` when nothing arrived. Caller holds the lock."""
        failed = sorted(s for s in set(self.store.failed()) - failed_at_start if s in self._index)
        new = [r for r in self.requests() if r.id not in ids_at_start]
        if not failed and not new:
            return None
        region = self.live_region()
        out = dict(online_move(region, self.requests(), assignment, failed).assignment) if failed else assignment
        for req in new:
            out = dict(emergency_grant(region, req, out, use_shared_buffer=True).assignment)
        note = (f"folded in what arrived during the solve: {len(failed)} failed server(s) {failed[:5]}, "
                f"{len(new)} new request(s) {[r.id for r in new][:5]}")  # fmt: skip
        return out, note

    def _publish(self, source: str, doc: dict[str, Any], revoked: list[tuple[str, str, str]],
                 event: dict[str, Any], region: Region) -> int | None:  # fmt: skip
        """Store ``doc`` as the next plan version unless it breaks a publish invariant (then the last
        good plan stays, the refusal is an event and ``doc["check"]`` names it; returns ``None``)."""
        last = self.assignment() if self.version else None
        violations = publish_violations(region, self.requests(), last, dict(doc.get("assignment", {})), source)
        if violations:
            doc["check"] = {"ok": False, "violations": violations[:50]}
            self.store.event(f"{source}-refused", {"invariants": violations[:20], **event})
            logger.error("%s plan not published (invariant): %s", source, violations[0])
            return None
        version, _, stored = self.store.publish(source, doc, revoked, event)
        self.version, self.plan = version, stored
        self.changed.set()
        logger.info("plan version %d published (%s), %d revocation(s)", version, source, len(revoked))
        return version

    def _online_plan(self, region: Region, assignment: dict[str, str | None], label: str) -> dict[str, Any]:
        previous = self.assignment()
        doc = replan(region, self.requests(), self.settings, assignment, previous, label).to_json()
        problems = self.check(doc, region)
        doc["check"] = {"ok": not problems, "violations": problems[:50]}
        return doc

    # -- emergency path --------------------------------------------------------------------------
    def grant(self, request_doc: Mapping[str, Any], base_version: int | None = None) -> dict[str, Any]:
        (req,), _ = io.parse_requests({"reservations": [dict(request_doc)]}, "request")
        with self._lock:
            self._check_version(base_version)
            if req.id in {r.id for r in self.requests()}:
                raise CapacityError(f"request: id {req.id!r} exists already")
            region = self.live_region()
            self.store.add_request(req.id, dict(request_doc), emergency=True)
            if self.version == 0:  # no plan to grant from yet: the first solve (or the one running) takes it
                self.store.event("grant-deferred", {"request": req.id, "reason": "no plan yet"})
                return {"version": 0, "granted": [], "unmet": [], "deferred": "no plan yet: the first solve "
                        "includes this request"}  # fmt: skip
            res = emergency_grant(region, req, self.assignment(), use_shared_buffer=True)
            doc = self._online_plan(region, dict(res.assignment), "emergency")
            revoked = [(s, self.cluster_of[s], f"emergency grant of {req.id}") for s in res.revoked
                       if s in self.cluster_of]  # fmt: skip
            version = self._publish("grant", doc, revoked, {"request": req.id, "servers": list(res.revoked),
                                                            "unmet": list(res.unmet)}, region)  # fmt: skip
            if version is None:
                return {"version": self.version, "granted": [], "unmet": list(res.unmet),
                        "refused": doc["check"]["violations"]}  # fmt: skip
            return {"version": version, "granted": list(res.revoked), "unmet": list(res.unmet)}

    def _check_version(self, base_version: int | None) -> None:
        if base_version is not None and base_version != self.version:
            raise StalePlanError(f"plan_version: {base_version} is stale, the current plan is version {self.version}")

    # -- Online Mover ----------------------------------------------------------------------------
    def signal_failure(self, servers: list[str], reason: str, source: str) -> dict[str, Any]:
        unknown = [s for s in servers if s not in self._index]
        if unknown:
            raise UnknownServerError(f"servers: unknown server(s) {unknown[:5]} (not in the region's inventory)")
        t0 = time.monotonic()
        with self._lock:
            already = self.store.failed()
            new = [s for s in servers if s not in already]
            if not new:
                return {"version": self.version, "replacements": [], "already_failed": servers}
            self.store.mark_failed(new, reason, source)
            if self.version == 0:  # nothing assigned, nothing lent: the first solve leaves them out
                self.store.event("mover-deferred", {"failed": new, "reason": reason, "source": source})
                return {"version": 0, "replacements": [], "revoked": [], "unmet": [],
                        "deferred": "no plan yet: the first solve leaves the failed servers out"}  # fmt: skip
            region = self.live_region()
            res = online_move(region, self.requests(), self.assignment(), new)
            doc = self._online_plan(region, dict(res.assignment), "online-mover")
            by_failed: dict[str, list[str]] = {}
            for old, rep in res.replacements:
                by_failed.setdefault(old, []).append(rep)
            old_assign = self.assignment()
            revoked = [(rep, self.cluster_of[rep], f"replaces {old} of {old_assign.get(old)}: {reason} ({source})")
                       for old, reps in by_failed.items() for rep in reps if rep in self.cluster_of]  # fmt: skip
            version = self._publish("mover", doc, revoked, {
                "failed": new, "reason": reason, "source": source, "replacements": res.replacements,
                "unmet": list(res.unmet), "decide_s": time.monotonic() - t0,
            }, region)  # fmt: skip
            if version is None:
                return {"version": self.version, "replacements": [], "revoked": [], "unmet": list(res.unmet),
                        "refused": doc["check"]["violations"]}  # fmt: skip
            return {"version": version, "replacements": [list(r) for r in res.replacements],
                    "revoked": [r[0] for r in revoked], "unmet": list(res.unmet)}  # fmt: skip

    def recover(self, servers: list[str]) -> None:
        unknown = [s for s in servers if s not in self._index]
        if unknown:
            raise UnknownServerError(f"servers: unknown server(s) {unknown[:5]}")
        self.store.mark_healthy(servers)

    # -- elastic sets and revocations ------------------------------------------------------------
    def clusters(self) -> list[str]:
        return sorted(set(self.cluster_of.values()))

    def elastic_set(self, cluster: str) -> dict[str, Any]:
        """What the cluster's placement service gets: version, harvestable nodes, each node's pool
        (``elastic:<entity>``, the tenant its reports count for there), pending revocations."""
        with self._lock:
            failed = self.store.failed()
            assignment = self.assignment()
            pending = self.store.revocations("pending", cluster)
            gone = {r["server"] for r in pending}
            nodes = sorted(s for s, c in self.cluster_of.items() if c == cluster and s not in failed
                           and s not in gone and s in assignment and elastic(assignment[s]))  # fmt: skip
            return {"version": self.version, "nodes": nodes, "cluster": cluster,
                    "pools": {s: elastic_pool(assignment[s]) for s in nodes},
                    "revocations": [{"id": r["id"], "node": r["server"], "reason": r["reason"]} for r in pending]}

    def ack(self, revocation_id: int) -> dict[str, Any]:
        rows = [r for r in self.store.revocations() if r["id"] == revocation_id]
        if not rows:
            raise UnknownServerError(f"revocation: no revocation with id {revocation_id}")
        changed = self.store.finish_revocation(revocation_id, "acked")
        if changed:
            self.changed.set()
        row = [r for r in self.store.revocations() if r["id"] == revocation_id][0]
        return {"id": revocation_id, "state": row["state"], "changed": changed}

    def expire(self, now: float | None = None) -> list[int]:
        """Hand over revoked servers whose acknowledgement is overdue (state ``timeout``)."""
        now = time.time() if now is None else now
        out = []
        for r in self.store.revocations("pending"):
            if now - float(r["created_s"]) >= self.cfg.ack_timeout_s and self.store.finish_revocation(r["id"], "timeout"):
                logger.warning("revocation %d of %s: no acknowledgement after %.0f s, handed over anyway",
                               r["id"], r["server"], self.cfg.ack_timeout_s)  # fmt: skip
                out.append(int(r["id"]))
        if out:
            self.changed.set()
        return out

    def reservation_status(self, rid: str) -> dict[str, Any]:
        """Is the reservation whole in the current plan (checker) and are its new servers handed over?"""
        with self._lock:
            if rid not in {r.id for r in self.requests()}:
                raise UnknownServerError(f"reservation: unknown reservation {rid!r}")
            region = self.live_region()
            doc = self.plan
            problems = [p for p in self.check(doc, region) if p.startswith(f"reservation {rid}:")]
            servers = {s for s, e in self.assignment().items() if e == rid}
            pending = [r for r in self.store.revocations("pending") if r["server"] in servers]
            unmet = [u for u in doc.get("unmet", []) if u["id"] == rid]
            fig = (doc.get("reservations") or {}).get(rid, {})
            return {"id": rid, "version": self.version, "check_ok": not problems and not unmet,
                    "violations": problems, "unmet": unmet, "pending_handover": [r["server"] for r in pending],
                    "whole": not problems and not unmet and not pending,
                    "capacity_after_worst_msb_loss_rru": fig.get("capacity_after_worst_msb_loss_rru"),
                    "requested_rru": fig.get("requested_rru")}  # fmt: skip

    def status(self) -> dict[str, Any]:
        doc = self.plan
        return {"version": self.version, "servers": len(self.region), "failed": len(self.store.failed()),
                "summary": doc.get("summary", {}), "check": doc.get("check"),
                "pending_revocations": len(self.store.revocations("pending")),
                "clusters": {c: self.store.push_state(c) for c in self.clusters()}}  # fmt: skip


def run_solver(loop: CapacityLoop, stop: threading.Event) -> None:
    """Re-solve every ``interval_s`` (the first one at once when there is no plan yet)."""
    if loop.version == 0:
        try:
            loop.solve_now()
        except Exception:  # the service stays up (nothing is lent without a plan); the next interval retries
            logger.exception("first solve failed; nothing is lent until a solve publishes a plan")
    while loop.cfg.interval_s > 0 and not stop.wait(loop.cfg.interval_s):
        try:
            loop.solve_now()
        except Exception:  # a failed solve must not end the loop; the current plan stays
            logger.exception("async solve failed; the current plan stays")


def run_pusher(loop: CapacityLoop, stop: threading.Event, push: Callable[[str, dict[str, Any]], int]) -> None:
    """Push each cluster's elastic set until it accepts the current version; expire overdue revocations.

    ``push(cluster, body)`` returns the version the placement service holds (it never goes back to
    an older one) or raises; failures are recorded and retried every ``push_interval_s``.
    """
    sent: dict[str, tuple[int, int]] = {}  # cluster -> (version, pending revocations) last accepted
    while not stop.is_set():
        loop.changed.clear()
        loop.expire()
        for cluster in loop.clusters():
            body = loop.elastic_set(cluster)
            key = (int(body["version"]), len(body["revocations"]))
            if sent.get(cluster) == key:
                continue
            try:
                accepted = push(cluster, body)
                loop.store.record_push(cluster, accepted, "")
                sent[cluster] = key
            except Exception as exc:  # down or refusing: retried next round, never dropped
                loop.store.record_push(cluster, None, f"{type(exc).__name__}: {exc}")
                logger.warning("push to cluster %s failed (retrying): %s", cluster, exc)
        loop.changed.wait(loop.cfg.push_interval_s)


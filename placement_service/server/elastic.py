"""Elastic servers and revocations in the placement service (the cluster's end of ``harvest ras serve``).

The capacity service pushes the cluster's *elastic set* with ``PUT /v1/harvestable`` and a
``version``: the nodes it lends to this cluster and the pending *revocations* (servers it takes back).
Versions only go forward: a set older than the stored one is answered with the stored version and
not applied; the same version again is a no-op (pushes are retried, so they must be idempotent).

An elastic node's primary tenant is idle by construction: it is harvestable whole (the agent keeps a
small reserve), is in class ``elastic`` and carries the YARN label ``elastic``. The set may name each
node's *pool* (``pools: {node: "elastic:<entity>"}``, the tenant of ``harvest ras export`` and the
``pool`` of ``harvest ras revocations``): while the node is lent out, its reports count for that
tenant (history, re-clustering, reimage rates), so its idle utilisation is the pool's CPU history and
the pool is clustered and placed in the grid like any tenant. A revoked node is
no longer harvestable (no new blocks or containers); its next report reply lists the revocation ids,
the agent drains it and lists the ids it drained in a later report; the acknowledgement is stored
and forwarded to the capacity service by ``CapacityLink`` (retried until it is accepted, so none is
lost when the capacity service is down). ``CapacityLink`` also signals nodes that stopped reporting
for ``silent_after_s`` as failed.

State is durable in its own SQLite file (WAL): ``elastic(node)``, ``revocations(id, node, reason,
state pending|drained|forwarded, times)``, ``elastic_pool(node, pool)`` and ``meta(version)``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from placement_service.server.reports import RequestError, check_name
from placement_service.sqlite_wal import open_db, transaction
from placement_service.validate import InputError, check_int

logger = logging.getLogger(__name__)

ELASTIC_CLASS = "elastic"  # class id and YARN label of elastic nodes

_SCHEMA = """
CREATE TABLE IF NOT EXISTS elastic (node TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS elastic_pool (node TEXT PRIMARY KEY, pool TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS revocations (id INTEGER PRIMARY KEY, node TEXT NOT NULL, reason TEXT NOT NULL,
    state TEXT NOT NULL, received_s REAL NOT NULL, drained_s REAL, forwarded_s REAL);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""


MAX_SQLITE_INT = 2**63 - 1


def parse_elastic_set(doc: Any) -> tuple[int, list[str], list[tuple[int, str, str]], dict[str, str]]:
    """``{"version": int >= 1, "nodes": [...], "revocations": [{"id", "node", "reason"?}],
    "pools"?: {node: tenant}}`` -> (version, nodes, revocations, pools)."""
    try:  # SQLite stores integers up to 2^63-1: a larger one would fail after validation (a 500)
        version = check_int(doc.get("version"), "version", minimum=1, maximum=MAX_SQLITE_INT)
    except InputError as exc:
        raise RequestError(str(exc), exc.field) from None
    nodes = doc.get("nodes")
    if not isinstance(nodes, list):
        raise RequestError("nodes: must be a list of node names (the cluster's elastic set)", "nodes")
    names = [check_name(n, f"nodes[{i}]") for i, n in enumerate(nodes)]
    revs = doc.get("revocations", [])
    if not isinstance(revs, list):
        raise RequestError("revocations: must be a list of {id, node, reason}", "revocations")
    out = []
    for i, r in enumerate(revs):
        if not isinstance(r, Mapping):
            raise RequestError(f"revocations[{i}]: must be an object", f"revocations[{i}]")
        try:
            rid = check_int(r.get("id"), f"revocations[{i}].id", minimum=1, maximum=MAX_SQLITE_INT)
        except InputError as exc:
            raise RequestError(str(exc), exc.field) from None
        reason = r.get("reason", "")
        out.append((rid, check_name(r.get("node"), f"revocations[{i}].node"), str(reason)[:500]))
    raw_pools = doc.get("pools", {})
    if not isinstance(raw_pools, Mapping):
        raise RequestError("pools: must be an object {node: pool tenant}", "pools")
    listed = set(names)
    pools = {}
    for node, pool in raw_pools.items():
        field = f"pools[{node!r}]"
        if check_name(node, field) not in listed:
            raise RequestError(f"{field}: node {node!r} is not in nodes", field)
        pools[node] = check_name(pool, field)
    return version, names, out, pools


class ElasticState:
    """The cluster's elastic set and revocations, durable (one SQLite file, WAL)."""

    def __init__(self, path: Path) -> None:
        self._lock = threading.Lock()
        self._db = open_db(path, _SCHEMA)
        self._load()

    def _load(self) -> None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = 'version'").fetchone()
            self.version = int(row[0]) if row else 0
            self.nodes: frozenset[str] = frozenset(r[0] for r in self._db.execute("SELECT node FROM elastic"))
            pending = self._db.execute("SELECT id, node FROM revocations WHERE state = 'pending'").fetchall()
            self.pending: dict[str, tuple[int, ...]] = {}
            for rid, node in pending:
                self.pending[node] = (*self.pending.get(node, ()), int(rid))
            pools = dict(self._db.execute("SELECT node, pool FROM elastic_pool").fetchall())
            revoked = self._revoked_locked()
            # the tenant a lent node's reports count for (read on every report: a plain dict)
            self.history_tenant: dict[str, str] = {n: str(p) for n, p in pools.items()
                                                   if n in self.nodes and n not in revoked}  # fmt: skip

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def apply(self, version: int, nodes: list[str], revocations: list[tuple[int, str, str]],
              pools: Mapping[str, str] | None = None) -> bool:  # fmt: skip
        """Store a newer set (True) or keep the stored one (False: ``version`` is not newer)."""
        now = time.time()
        with self._lock:
            if version <= self.version:
                return False
            with transaction(self._db) as db:
                db.execute("DELETE FROM elastic")
                db.executemany("INSERT INTO elastic(node) VALUES (?)", [(n,) for n in sorted(set(nodes))])
                db.execute("DELETE FROM elastic_pool")
                db.executemany("INSERT INTO elastic_pool(node, pool) VALUES (?, ?)", sorted((pools or {}).items()))
                db.executemany(
                    "INSERT INTO revocations(id, node, reason, state, received_s) VALUES (?, ?, ?, 'pending', ?) "
                    "ON CONFLICT(id) DO NOTHING", [(rid, node, reason, now) for rid, node, reason in revocations])
                db.execute("INSERT INTO meta(key, value) VALUES ('version', ?) "
                           "ON CONFLICT(key) DO UPDATE SET value=excluded.value", (str(version),))
        self._load()
        return True

    def drained(self, node: str, ids: list[int]) -> list[int]:
        """The node's agent drained these revocations; returns the ones that were pending for it."""
        mine = set(self.pending.get(node, ()))
        done = [i for i in ids if i in mine]
        if not done:
            return []
        with self._lock:
            self._db.executemany("UPDATE revocations SET state = 'drained', drained_s = ? WHERE id = ? AND "
                                 "state = 'pending'", [(time.time(), i) for i in done])  # fmt: skip
        self._load()
        return done

    def to_forward(self) -> list[tuple[int, str]]:
        with self._lock:
            return [(int(i), str(n)) for i, n in
                    self._db.execute("SELECT id, node FROM revocations WHERE state = 'drained' ORDER BY id")]  # fmt: skip

    def forwarded(self, rid: int) -> None:
        with self._lock:
            self._db.execute("UPDATE revocations SET state = 'forwarded', forwarded_s = ? WHERE id = ?",
                             (time.time(), rid))
        self._load()

    def revoked(self) -> frozenset[str]:
        """Nodes taken back: a revocation in progress, or handed over and not lent again since."""
        with self._lock:
            return self._revoked_locked()

    def _revoked_locked(self) -> frozenset[str]:
        rows = self._db.execute("SELECT node, state FROM revocations").fetchall()
        return frozenset(n for n, st in rows if st != "forwarded" or n not in self.nodes)

    def to_json(self) -> dict[str, Any]:
        with self._lock:
            revs = self._db.execute("SELECT id, node, reason, state, received_s, drained_s, forwarded_s "
                                    "FROM revocations ORDER BY id").fetchall()  # fmt: skip
        keys = ("id", "node", "reason", "state", "received_s", "drained_s", "forwarded_s")
        return {"version": self.version, "nodes": sorted(self.nodes), "pools": dict(sorted(self.history_tenant.items())),
                "revocations": [dict(zip(keys, r, strict=True)) for r in revs]}  # fmt: skip


def _post(url: str, body: Any, token: str | None, timeout_s: float) -> Any:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})  # fmt: skip
    if token:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 (operator-given URL)
        return json.loads(resp.read() or b"{}")


class CapacityLink:
    """Background thread: forwards drained revocations and signals silent nodes to the capacity service."""

    def __init__(self, state: ElasticState, capacity_url: str, cluster: str, token: str | None,
                 last_seen: Callable[[], Mapping[str, float]], silent_after_s: float, interval_s: float = 1.0,
                 timeout_s: float = 5.0) -> None:  # fmt: skip
        self.state = state
        self.url = capacity_url.rstrip("/")
        self.cluster = cluster
        self.token = token
        self.last_seen = last_seen
        self.silent_after_s = silent_after_s
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.signalled: dict[str, float] = {}  # node -> last report timestamp when it was signalled
        self.last_error = ""
        self.wake = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="capacity-link", daemon=True)

    def start(self) -> CapacityLink:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self.wake.set()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.once()
                self.last_error = ""
            except (OSError, ValueError, urllib.error.URLError) as exc:  # down: retried next round
                self.last_error = str(exc)
                logger.warning("capacity service %s: %s (retrying)", self.url, exc)
            self.wake.wait(self.interval_s)
            self.wake.clear()

    def once(self, now: float | None = None) -> None:
        for rid, node in self.state.to_forward():
            try:
                _post(f"{self.url}/v1/revocations/{rid}/ack", {"cluster": self.cluster, "node": node}, self.token,
                      self.timeout_s)  # fmt: skip
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    raise
                logger.error("capacity service does not know revocation %d of %s; marked forwarded", rid, node)
            self.state.forwarded(rid)
        if self.silent_after_s <= 0:
            return
        now = time.time() if now is None else now
        seen = self.last_seen()
        silent = sorted(n for n, t in seen.items() if now - t >= self.silent_after_s and self.signalled.get(n) != t)
        if silent:
            try:
                _post(f"{self.url}/v1/failures", {"servers": silent, "source": f"placement:{self.cluster}",
                                                 "reason": f"no report for {self.silent_after_s:g} s"},
                      self.token, self.timeout_s)  # fmt: skip
            except urllib.error.HTTPError as exc:
                if exc.code != 404:
                    raise
                logger.error("capacity service refused silent nodes %s: %s", silent[:5], exc.read()[:300])
            for n in silent:
                self.signalled[n] = seen[n]

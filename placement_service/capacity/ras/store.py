"""Durable state of ``harvest ras serve`` in SQLite (WAL journal, one transaction per change).

Tables:
- ``plans``: every published plan (``A.json`` document), version = row id; the newest is current;
- ``requests``: reservation requests added through the API (``emergency`` = granted by the
  emergency path, folded into the next solve), on top of the region's ``R.json``;
- ``health``: servers reported failed (by whom, why, since when);
- ``revocations``: elastic servers taken back: server, cluster, why, the plan version that took
  it, state ``pending`` -> ``acked`` | ``timeout`` (how it was handed over) and when;
- ``pushes``: per cluster, the newest elastic-set version the placement service accepted, attempts
  and the last error (a placement service that is down is retried, never skipped);
- ``events``: what the solver, the mover and the emergency path did and why (the newest
  ``max_events``, 100,000 by default).
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from placement_service.sqlite_wal import open_db, transaction

_SCHEMA = """
CREATE TABLE IF NOT EXISTS plans (version INTEGER PRIMARY KEY, created_s REAL NOT NULL, source TEXT NOT NULL,
                                  doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS requests (id TEXT PRIMARY KEY, doc TEXT NOT NULL, emergency INTEGER NOT NULL,
                                     created_s REAL NOT NULL);
CREATE TABLE IF NOT EXISTS health (server TEXT PRIMARY KEY, reason TEXT NOT NULL, source TEXT NOT NULL,
                                   since_s REAL NOT NULL);
CREATE TABLE IF NOT EXISTS revocations (id INTEGER PRIMARY KEY AUTOINCREMENT, server TEXT NOT NULL,
    cluster TEXT NOT NULL, reason TEXT NOT NULL, plan_version INTEGER NOT NULL, created_s REAL NOT NULL,
    state TEXT NOT NULL, done_s REAL);
CREATE TABLE IF NOT EXISTS pushes (cluster TEXT PRIMARY KEY, accepted_version INTEGER NOT NULL,
    attempts INTEGER NOT NULL, last_error TEXT NOT NULL, last_s REAL NOT NULL);
CREATE TABLE IF NOT EXISTS events (id INTEGER PRIMARY KEY AUTOINCREMENT, t REAL NOT NULL, kind TEXT NOT NULL,
                                   doc TEXT NOT NULL);
"""


def json_safe(doc: Any) -> Any:
    """``doc`` with NaN / infinite floats as ``null`` (online plans have no objective or bound)."""
    if isinstance(doc, float):
        return doc if math.isfinite(doc) else None
    if isinstance(doc, dict):
        return {k: json_safe(v) for k, v in doc.items()}
    if isinstance(doc, list | tuple):
        return [json_safe(v) for v in doc]
    return doc


class CapacityStore:
    """One SQLite connection guarded by a lock; every method is one transaction."""

    def __init__(self, path: Path, max_events: int = 100_000) -> None:
        self.max_events = max_events  # events kept (the newest); plans, requests, revocations are all kept
        self._lock = threading.Lock()
        self._db = open_db(path, _SCHEMA)  # a damaged file: DamagedStateError naming it (exit 2 at start)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def _tx(self, statements: Iterable[tuple[str, tuple[Any, ...]]]) -> list[int | None]:
        with self._lock, transaction(self._db) as db:
            return [db.execute(sql, args).lastrowid for sql, args in statements]

    def _all(self, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return list(self._db.execute(sql, args).fetchall())

    # -- plans -----------------------------------------------------------------------------------
    def publish(self, source: str, doc: dict[str, Any], revocations: list[tuple[str, str, str]],
                event: dict[str, Any]) -> tuple[int, list[int], dict[str, Any]]:  # fmt: skip
        """Store a plan, its revocations ``(server, cluster, reason)`` and the event, atomically."""
        now = time.time()
        with self._lock, transaction(self._db) as db:
            row = db.execute("SELECT COALESCE(MAX(version), 0) FROM plans").fetchone()
            version = int(row[0]) + 1
            doc = json_safe({**doc, "version": version})
            db.execute("INSERT INTO plans(version, created_s, source, doc) VALUES (?, ?, ?, ?)",
                       (version, now, source, json.dumps(doc)))
            ids = []
            for server, cluster, reason in revocations:
                cur = db.execute(
                    "INSERT INTO revocations(server, cluster, reason, plan_version, created_s, state) "
                    "VALUES (?, ?, ?, ?, ?, 'pending')", (server, cluster, reason, version, now))
                ids.append(int(cur.lastrowid or 0))
            cur = db.execute("INSERT INTO events(t, kind, doc) VALUES (?, ?, ?)",
                             (now, source, json.dumps(json_safe({**event, "version": version, "revocations": ids}))))
            db.execute("DELETE FROM events WHERE id <= ?", (int(cur.lastrowid or 0) - self.max_events,))
        return version, ids, doc

    def latest_plan(self) -> tuple[int, dict[str, Any]] | None:
        rows = self._all("SELECT version, doc FROM plans ORDER BY version DESC LIMIT 1")
        return (int(rows[0][0]), json.loads(rows[0][1])) if rows else None

    def plan(self, version: int) -> dict[str, Any] | None:
        rows = self._all("SELECT doc FROM plans WHERE version = ?", (version,))
        return json.loads(rows[0][0]) if rows else None

    # -- requests, health, events ----------------------------------------------------------------
    def add_request(self, rid: str, doc: dict[str, Any], emergency: bool) -> None:
        self._tx([("INSERT INTO requests(id, doc, emergency, created_s) VALUES (?, ?, ?, ?) ON CONFLICT(id) "
                   "DO UPDATE SET doc=excluded.doc, emergency=excluded.emergency",
                   (rid, json.dumps(doc), int(emergency), time.time()))])  # fmt: skip

    def requests(self) -> list[tuple[dict[str, Any], bool]]:
        return [(json.loads(d), bool(e)) for d, e in self._all("SELECT doc, emergency FROM requests ORDER BY created_s")]

    def mark_failed(self, servers: list[str], reason: str, source: str) -> None:
        now = time.time()
        self._tx([("INSERT INTO health(server, reason, source, since_s) VALUES (?, ?, ?, ?) "
                   "ON CONFLICT(server) DO NOTHING", (s, reason, source, now)) for s in servers])  # fmt: skip

    def mark_healthy(self, servers: list[str]) -> None:
        self._tx([("DELETE FROM health WHERE server = ?", (s,)) for s in servers])

    def failed(self) -> dict[str, dict[str, Any]]:
        return {s: {"reason": r, "source": src, "since_s": t}
                for s, r, src, t in self._all("SELECT server, reason, source, since_s FROM health")}  # fmt: skip

    def event(self, kind: str, doc: dict[str, Any]) -> None:
        """Record an event; only the newest ``max_events`` are kept (a stream of refused or repeated
        signals cannot grow the file without bound)."""
        with self._lock, transaction(self._db) as db:
            cur = db.execute("INSERT INTO events(t, kind, doc) VALUES (?, ?, ?)",
                             (time.time(), kind, json.dumps(json_safe(doc))))
            db.execute("DELETE FROM events WHERE id <= ?", (int(cur.lastrowid or 0) - self.max_events,))

    def event_count(self) -> int:
        return int(self._all("SELECT COUNT(*) FROM events")[0][0])

    def events(self, limit: int = 100) -> list[dict[str, Any]]:
        rows = self._all("SELECT id, t, kind, doc FROM events ORDER BY id DESC LIMIT ?", (limit,))
        return [{"id": i, "t": t, "kind": k, **json.loads(d)} for i, t, k, d in rows]

    # -- revocations -----------------------------------------------------------------------------
    def revocations(self, state: str | None = None, cluster: str | None = None) -> list[dict[str, Any]]:
        sql = "SELECT id, server, cluster, reason, plan_version, created_s, state, done_s FROM revocations"
        cond, args = [], []
        if state is not None:
            cond.append("state = ?")
            args.append(state)
        if cluster is not None:
            cond.append("cluster = ?")
            args.append(cluster)
        if cond:
            sql += " WHERE " + " AND ".join(cond)
        keys = ("id", "server", "cluster", "reason", "plan_version", "created_s", "state", "done_s")
        return [dict(zip(keys, r, strict=True)) for r in self._all(sql + " ORDER BY id", tuple(args))]

    def finish_revocation(self, rid: int, state: str) -> bool:
        """``pending`` -> ``acked`` | ``timeout``; False if it was not pending (idempotent)."""
        with self._lock:
            cur = self._db.execute("UPDATE revocations SET state = ?, done_s = ? WHERE id = ? AND state = 'pending'",
                                   (state, time.time(), rid))  # fmt: skip
            return cur.rowcount == 1

    # -- pushes ----------------------------------------------------------------------------------
    def push_state(self, cluster: str) -> dict[str, Any]:
        rows = self._all("SELECT accepted_version, attempts, last_error, last_s FROM pushes WHERE cluster = ?",
                         (cluster,))  # fmt: skip
        if not rows:
            return {"accepted_version": 0, "attempts": 0, "last_error": "", "last_s": 0.0}
        v, a, e, t = rows[0]
        return {"accepted_version": v, "attempts": a, "last_error": e, "last_s": t}

    def record_push(self, cluster: str, accepted_version: int | None, error: str) -> None:
        old = self.push_state(cluster)
        version = max(int(old["accepted_version"]), accepted_version or 0)
        attempts = 0 if accepted_version is not None else int(old["attempts"]) + 1
        self._tx([("INSERT INTO pushes(cluster, accepted_version, attempts, last_error, last_s) VALUES (?, ?, ?, ?, ?) "
                   "ON CONFLICT(cluster) DO UPDATE SET accepted_version=excluded.accepted_version, "
                   "attempts=excluded.attempts, last_error=excluded.last_error, last_s=excluded.last_s",
                   (cluster, version, attempts, error, time.time()))])  # fmt: skip

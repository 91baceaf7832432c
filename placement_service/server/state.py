"""Durable node and class state in SQLite (WAL journal): the part of the state that is not history.

Tables:

- ``nodes``: node -> tenant, last stored ``seq``, last report (JSON), busy flag. Written by the
  compactor in one transaction per log segment (idempotent upserts that keep the newest report), so
  a crash between the SQLite commit and the segment's deletion replays harmlessly.
- ``node_class``: node -> class id and YARN label, replaced in one transaction per re-clustering.
- ``class_tables``: the last ``CLASS_TABLES_KEPT`` class tables the service adopted (``classes.json``
  documents), newest wins; older ones are deleted in the adopting transaction (a daily table at
  thousands of tenants is megabytes: kept forever, they grew the database by gigabytes a year).
- ``cobusy_estimates``: the co-busy estimates of the newest class table, when fitted (an ``.npz``
  BLOB keyed by the table's version, written and pruned in the table's transaction; format and why
  a BLOB: ``server/cobusy_store.py``).
- ``harvestable``: the harvestable set (``meta.harvestable_mode`` = ``all`` or ``list``).
- ``meta``: small key/values (log segment bookkeeping, last re-clustering time).
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from placement_service import HarvestError
from placement_service.server.reports import NodeReport
from placement_service.sqlite_wal import open_db

CLASS_TABLES_KEPT = 30
"""Class tables kept in ``state.sqlite`` (the newest is the one in use; the others, a month of daily
re-clusterings, are there to compare with by hand)."""


class StaleInstanceError(HarvestError):
    """A writer from a previous service incarnation (e.g. an orphaned re-clustering child)."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    node TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    last_seq INTEGER NOT NULL,
    last_timestamp REAL NOT NULL,
    last_report TEXT NOT NULL,
    busy INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS node_class (
    node TEXT PRIMARY KEY,
    class_id TEXT NOT NULL,
    label TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS class_tables (
    version INTEGER PRIMARY KEY AUTOINCREMENT,
    created_s REAL NOT NULL,
    doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS cobusy_estimates (
    version INTEGER PRIMARY KEY,
    created_s REAL NOT NULL,
    data BLOB NOT NULL
);
CREATE TABLE IF NOT EXISTS harvestable (node TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS reimages (
    node TEXT NOT NULL,
    timestamp REAL NOT NULL,
    tenant TEXT NOT NULL,
    how TEXT NOT NULL,
    PRIMARY KEY (node, timestamp)
);
"""


class StateStore:
    """A single SQLite connection guarded by a lock (writes are rare and batched)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._db = open_db(path, _SCHEMA)  # a damaged file: DamagedStateError naming it

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- nodes -----------------------------------------------------------------------------------
    def load_nodes(self) -> dict[str, NodeReport]:
        """Last stored report of every node (its ``seq`` is the node's last stored seq)."""
        with self._lock:
            rows = self._db.execute("SELECT last_report FROM nodes").fetchall()
        return {r.node: r for r in (NodeReport.from_row(json.loads(row[0])) for row in rows)}

    def upsert_nodes(self, reports: Iterable[NodeReport]) -> None:
        """Keep, per node, the report with the highest (seq, timestamp) seen so far."""
        rows = [
            (r.node, r.tenant, r.seq, r.timestamp, json.dumps(r.to_row()), int(r.busy)) for r in reports
        ]
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    """INSERT INTO nodes(node, tenant, last_seq, last_timestamp, last_report, busy)
                       VALUES (?, ?, ?, ?, ?, ?)
                       ON CONFLICT(node) DO UPDATE SET tenant=excluded.tenant, last_seq=excluded.last_seq,
                         last_timestamp=excluded.last_timestamp, last_report=excluded.last_report,
                         busy=excluded.busy
                       WHERE (excluded.last_seq, excluded.last_timestamp) >= (nodes.last_seq, nodes.last_timestamp)""",
                    rows,
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    # -- classes ---------------------------------------------------------------------------------
    def save_class_table(self, doc: Mapping[str, Any], node_labels: Mapping[str, str],
                         instance_id: str | None = None, cobusy: bytes | None = None) -> int:
        """Adopt a new class table and node -> class mapping atomically; returns its version.
        ``cobusy``: the table's co-busy estimates (``cobusy_store.encode_cobusy``), stored under its
        version in the same transaction, which also deletes every older version's estimates (at
        most one set is kept, so they never accumulate) and the tables older than the newest
        ``CLASS_TABLES_KEPT``.

        With ``instance_id``, refuse (:class:`StaleInstanceError`, nothing stored) unless the
        database still belongs to that service incarnation (checked inside the transaction)."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                if instance_id is not None:
                    row = self._db.execute("SELECT value FROM meta WHERE key = 'instance_id'").fetchone()
                    owner = "" if row is None else str(row[0])
                    if owner != instance_id:
                        raise StaleInstanceError(
                            f"class table from service incarnation {instance_id} refused: the data directory "
                            f"now belongs to incarnation {owner or '(none)'}"
                        )
                now = time.time()
                cur = self._db.execute(
                    "INSERT INTO class_tables(created_s, doc) VALUES (?, ?)", (now, json.dumps(doc))
                )
                version = int(cur.lastrowid or 0)
                self._db.execute("DELETE FROM class_tables WHERE version <= ?", (version - CLASS_TABLES_KEPT,))
                self._db.execute("DELETE FROM cobusy_estimates WHERE version < ?", (version,))
                if cobusy is not None:
                    self._db.execute("INSERT INTO cobusy_estimates(version, created_s, data) VALUES (?, ?, ?)",
                                     (version, now, sqlite3.Binary(cobusy)))
                self._db.execute("DELETE FROM node_class")
                self._db.executemany(
                    "INSERT INTO node_class(node, class_id, label) VALUES (?, ?, ?)",
                    [(n, c, c) for n, c in node_labels.items()],
                )
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return version

    def load_cobusy(self, version: int) -> bytes | None:
        """The co-busy estimates stored with class table ``version`` (None: none stored)."""
        with self._lock:
            row = self._db.execute("SELECT data FROM cobusy_estimates WHERE version = ?", (version,)).fetchone()
        return None if row is None else bytes(row[0])

    def load_class_table(self) -> tuple[int, dict[str, Any] | None]:
        with self._lock:
            row = self._db.execute("SELECT version, doc FROM class_tables ORDER BY version DESC LIMIT 1").fetchone()
        if row is None:
            return 0, None
        return int(row[0]), json.loads(row[1])

    def load_node_labels(self) -> dict[str, str]:
        with self._lock:
            return dict(self._db.execute("SELECT node, label FROM node_class").fetchall())

    # -- harvestable set -------------------------------------------------------------------------
    def save_harvestable(self, nodes: Iterable[str] | None) -> None:
        """``None``: every node is harvestable; otherwise exactly the given nodes."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.execute("DELETE FROM harvestable")
                if nodes is None:
                    self._set_meta_locked("harvestable_mode", "all")
                else:
                    self._db.executemany("INSERT INTO harvestable(node) VALUES (?)", [(n,) for n in nodes])
                    self._set_meta_locked("harvestable_mode", "list")
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise

    def load_harvestable(self) -> frozenset[str] | None:
        if self.get_meta("harvestable_mode", "all") == "all":
            return None
        with self._lock:
            return frozenset(r[0] for r in self._db.execute("SELECT node FROM harvestable"))

    # -- reimages (reported live by agents or operators) -------------------------------------------
    def add_reimages(self, events: Iterable[tuple[str, float, str, str]]) -> int:
        """Store (node, timestamp, tenant, how) events; a repeat of (node, timestamp) is ignored.
        Returns how many were new."""
        rows = list(events)
        with self._lock:
            before = self._db.total_changes
            self._db.execute("BEGIN IMMEDIATE")
            try:
                self._db.executemany(
                    "INSERT OR IGNORE INTO reimages(node, timestamp, tenant, how) VALUES (?, ?, ?, ?)", rows)
                self._db.execute("COMMIT")
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            return self._db.total_changes - before

    def load_reimages(self, since_s: float = float("-inf")) -> list[tuple[str, float, str, str]]:
        with self._lock:
            return [(str(n), float(t), str(te), str(h)) for n, t, te, h in self._db.execute(
                "SELECT node, timestamp, tenant, how FROM reimages WHERE timestamp >= ? ORDER BY timestamp",
                (since_s,))]

    # -- meta ------------------------------------------------------------------------------------
    def _set_meta_locked(self, key: str, value: str) -> None:
        self._db.execute(
            "INSERT INTO meta(key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value=excluded.value",
            (key, value),
        )

    def set_meta(self, key: str, value: str) -> None:
        with self._lock:
            self._set_meta_locked(key, value)

    def get_meta(self, key: str, default: str) -> str:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return default if row is None else str(row[0])

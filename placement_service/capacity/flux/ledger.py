"""The capacity ledger (SQLite, WAL) and the orchestrator that activates its events.

An event is a timestamped, proposed capacity change (``resize``, ``shift``, ``supply``, ``manual``)
written by some writer (Flux, an operator, another planner), with antecedents (events that must
succeed first). States: ``proposed -> active -> succeeded | failed``. Rules:
1. events are added in one transaction per batch; an antecedent must exist in the ledger or in the
   batch, otherwise nothing of the batch is written;
2. ``orchestrate`` activates a proposed event only when every antecedent succeeded and, if the
   event needs review, an operator approved it; it reports events held for review and events
   blocked by a failed antecedent (directly or through a chain), never skipping them;
3. only an active event may succeed or fail (the systems that execute them report back);
4. ``future_events`` (proposed / active / succeeded, oldest first) feed the next plan's baseline.
Several processes may write at once: every write is a ``BEGIN IMMEDIATE`` transaction, and SQLite
waits up to ``busy_timeout_s`` for the writer lock.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from placement_service.capacity.flux import FluxError

KINDS = ("resize", "shift", "supply", "manual")
STATES = ("proposed", "active", "succeeded", "failed")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    id TEXT PRIMARY KEY,
    timestamp REAL NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('resize', 'shift', 'supply', 'manual')),
    writer TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('proposed', 'active', 'succeeded', 'failed')),
    review INTEGER NOT NULL DEFAULT 0,
    approved_by TEXT,
    payload TEXT NOT NULL,
    note TEXT NOT NULL DEFAULT '',
    created_s REAL NOT NULL,
    updated_s REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS antecedents (
    event TEXT NOT NULL REFERENCES events(id),
    antecedent TEXT NOT NULL REFERENCES events(id),
    PRIMARY KEY (event, antecedent)
);
CREATE INDEX IF NOT EXISTS events_state ON events(state);
CREATE INDEX IF NOT EXISTS antecedents_antecedent ON antecedents(antecedent);
"""


@dataclass(frozen=True)
class OrchestrationReport:
    activated: tuple[str, ...]
    held_for_review: tuple[str, ...]
    blocked: tuple[tuple[str, str], ...]  # (event, the failed event that blocks it)
    failed: tuple[tuple[str, str], ...]  # (event, note)


class Ledger:
    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0) -> None:
        self.path = str(path)
        try:
            self.db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.executescript(_SCHEMA)
        except sqlite3.DatabaseError as exc:
            raise FluxError(f"{self.path}: not a usable ledger database: {exc}") from None

    def __enter__(self) -> Ledger:
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self.db.close()

    def _tx(self) -> sqlite3.Connection:
        self.db.execute("BEGIN IMMEDIATE")
        return self.db

    # ---- writers
    def add(self, events: Sequence[Mapping[str, Any]], *, writer: str, source: str = "batch") -> int:
        """Add a batch of events (dicts: id, kind, timestamp, payload, antecedents, review) atomically."""
        now = time.time()
        rows: list[tuple[Any, ...]] = []
        edges: list[tuple[str, str, int, int]] = []
        ids_in_batch: set[str] = set()
        for i, ev in enumerate(events):
            at = f"{self.path}: {source} row {i}"
            eid = ev.get("id")
            if not isinstance(eid, str) or not eid:
                raise FluxError(f"{at}: field 'id': must be a non-empty string, got {eid!r}")
            if eid in ids_in_batch:
                raise FluxError(f"{at} ({eid!r}): field 'id': repeats an earlier row of the batch")
            ids_in_batch.add(eid)
            kind = ev.get("kind")
            if kind not in KINDS:
                raise FluxError(f"{at} ({eid!r}): field 'kind': {kind!r} is not one of {list(KINDS)}")
            ts = ev.get("timestamp")
            if isinstance(ts, bool) or not isinstance(ts, int | float) or ts != ts:
                raise FluxError(f"{at} ({eid!r}): field 'timestamp': expected a number, got {ts!r}")
            payload = ev.get("payload", {})
            if not isinstance(payload, Mapping):
                raise FluxError(f"{at} ({eid!r}): field 'payload': must be an object")
            ants = ev.get("antecedents", ())
            if not isinstance(ants, list | tuple) or not all(isinstance(a, str) for a in ants):
                raise FluxError(f"{at} ({eid!r}): field 'antecedents': must be a list of event ids")
            rows.append((eid, float(ts), kind, writer, "proposed", int(bool(ev.get("review", False))),
                         json.dumps(payload, sort_keys=True), str(ev.get("note", "")), now, now))  # fmt: skip
            edges.extend((eid, a, i, k) for k, a in enumerate(ants))
        db = self._tx()
        try:
            for eid, ant, i, k in edges:
                if ant in ids_in_batch:
                    continue
                if db.execute("SELECT 1 FROM events WHERE id = ?", (ant,)).fetchone() is None:
                    raise FluxError(f"{self.path}: {source} row {i} ({eid!r}): field 'antecedents[{k}]': "
                                    f"event {ant!r} does not exist")  # fmt: skip
            ids = sorted(ids_in_batch)
            for j in range(0, len(ids), 500):
                chunk = ids[j : j + 500]
                marks = ",".join("?" * len(chunk))
                dup = [r[0] for r in db.execute(f"SELECT id FROM events WHERE id IN ({marks})", chunk)]
                if dup:
                    raise FluxError(f"{self.path}: {source}: event id(s) already in the ledger: {dup[:5]}")
            db.executemany("INSERT INTO events VALUES (?,?,?,?,?,?,NULL,?,?,?,?)", rows)
            db.executemany("INSERT INTO antecedents VALUES (?,?)", [(e, a) for e, a, _i, _k in edges])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return len(rows)

    def _transition(
        self, ids: Iterable[str], *, to: str, allowed_from: tuple[str, ...], note: str = ""
    ) -> None:
        db = self._tx()
        try:
            for eid in ids:
                row = db.execute("SELECT state FROM events WHERE id = ?", (eid,)).fetchone()
                if row is None:
                    raise FluxError(f"{self.path}: event {eid!r} does not exist")
                if row[0] not in allowed_from:
                    raise FluxError(f"{self.path}: event {eid!r} is {row[0]}; only {'/'.join(allowed_from)} "
                                    f"events can become {to}")  # fmt: skip
                db.execute(
                    "UPDATE events SET state = ?, note = ?, updated_s = ? WHERE id = ?",
                    (to, note, time.time(), eid),
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def complete(self, ids: Iterable[str], note: str = "") -> None:
        self._transition(ids, to="succeeded", allowed_from=("active",), note=note)

    def fail(self, ids: Iterable[str], note: str) -> None:
        self._transition(ids, to="failed", allowed_from=("active",), note=note)

    def approve(self, ids: Iterable[str], operator: str) -> None:
        db = self._tx()
        try:
            for eid in ids:
                row = db.execute("SELECT state, review FROM events WHERE id = ?", (eid,)).fetchone()
                if row is None:
                    raise FluxError(f"{self.path}: event {eid!r} does not exist")
                if row[0] != "proposed" or not row[1]:
                    raise FluxError(f"{self.path}: event {eid!r} is {row[0]}{'' if row[1] else ', no review needed'}; "
                                    f"only proposed events held for review can be approved")  # fmt: skip
                db.execute(
                    "UPDATE events SET approved_by = ?, updated_s = ? WHERE id = ?",
                    (operator, time.time(), eid),
                )
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    # ---- orchestrator
    def orchestrate(self) -> OrchestrationReport:
        """Activate every proposed event whose antecedents succeeded (and that is approved if needed)."""
        db = self._tx()
        try:
            state = dict(db.execute("SELECT id, state FROM events"))
            deps: dict[str, list[str]] = {}
            for e, a in db.execute("SELECT event, antecedent FROM antecedents"):
                deps.setdefault(e, []).append(a)
            review = {
                r[0]: (bool(r[1]), r[2])
                for r in db.execute("SELECT id, review, approved_by FROM events WHERE state = 'proposed'")
            }
            # events blocked by a failed event: walk the dependents of every failed event (a DAG)
            dependents: dict[str, list[str]] = {}
            for e, ants in deps.items():
                for a in ants:
                    dependents.setdefault(a, []).append(e)
            root = {e: e for e, st in state.items() if st == "failed"}
            queue = sorted(root)
            while queue:
                a = queue.pop()
                for e in dependents.get(a, ()):
                    if e not in root:
                        root[e] = root[a]
                        queue.append(e)
            activated, held, blocked = [], [], []
            now = time.time()
            for eid, (needs_review, approver) in sorted(review.items()):
                if eid in root:
                    blocked.append((eid, root[eid]))
                    continue
                if any(state.get(a) != "succeeded" for a in deps.get(eid, ())):
                    continue
                if needs_review and not approver:
                    held.append(eid)
                    continue
                activated.append(eid)
            db.executemany(
                "UPDATE events SET state = 'active', updated_s = ? WHERE id = ?",
                [(now, e) for e in activated],
            )
            failed = tuple(db.execute("SELECT id, note FROM events WHERE state = 'failed' ORDER BY id"))
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return OrchestrationReport(
            tuple(activated), tuple(held), tuple(blocked), tuple((a, b) for a, b in failed)
        )

    # ---- readers
    def events(self, state: str | None = None) -> list[dict[str, Any]]:
        q = "SELECT id, timestamp, kind, writer, state, review, approved_by, payload, note FROM events"
        args: tuple[Any, ...] = ()
        if state:
            if state not in STATES:
                raise FluxError(f"state {state!r} is not one of {list(STATES)}")
            q += " WHERE state = ?"
            args = (state,)
        out = []
        deps: dict[str, list[str]] = {}
        for e, a in self.db.execute("SELECT event, antecedent FROM antecedents"):
            deps.setdefault(e, []).append(a)
        for row in self.db.execute(q + " ORDER BY timestamp, id", args):
            out.append({"id": row[0], "timestamp": row[1], "kind": row[2], "writer": row[3], "state": row[4],
                        "review": bool(row[5]), "approved_by": row[6], "payload": json.loads(row[7]),
                        "note": row[8], "antecedents": sorted(deps.get(row[0], []))})  # fmt: skip
        return out

    def future_events(self) -> list[dict[str, Any]]:
        return [e for e in self.events() if e["state"] != "failed"]

    def counts(self) -> dict[str, int]:
        return dict(self.db.execute("SELECT state, COUNT(*) FROM events GROUP BY state"))

"""The capacity ledger (SQLite, WAL) and the orchestrator that activates its events.

An event is a timestamped, proposed capacity change (``resize``, ``shift``, ``supply``, ``manual``)
written by some writer (Flux, an operator, another planner), with antecedents (events that must
succeed first). States: ``proposed -> active -> succeeded | failed``. Rules:
1. events are added in one transaction per batch; an antecedent must exist in the ledger or in the
   batch, otherwise nothing of the batch is written; a batch whose antecedents form a cycle (an event
   waiting for itself, directly or through others) is refused naming the cycle; timestamps are epoch
   seconds in [0, 2100-01-01) and payloads finite JSON;
2. ``orchestrate`` activates a proposed event only when every antecedent succeeded and, if the
   event needs review, an operator approved it; it reports events held for review and events
   blocked by a failed antecedent (directly or through a chain), never skipping them;
3. only an active event may succeed or fail (the systems that execute them report back);
4. ``future_events`` (proposed / active / succeeded, oldest first) feed the next plan's baseline.
Several processes may write at once: every write is a ``BEGIN IMMEDIATE`` transaction, and SQLite
waits up to ``busy_timeout_s`` for the writer lock. Every SQLite failure (a damaged page, a file
that is not a database, a lock held too long) is a :class:`FluxError` naming the file.
"""

from __future__ import annotations

import functools
import json
import math
import os
import sqlite3
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from placement_service.capacity.flux import FluxError
from placement_service.csvsafe import FORMULA_PREFIXES
from placement_service.validate import MAX_EPOCH_S, MAX_JSON_FILE_BYTES, InputError, check_text

_F = TypeVar("_F", bound=Callable[..., Any])

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
    cycles: tuple[tuple[str, ...], ...] = ()  # proposed events waiting for themselves (a -> b -> a)


def load_events(path: str | Path) -> list[Any]:
    """An event file for ``ledger add``: a JSON list of events, or an object ``{"events": [...]}``."""
    from placement_service.validate import load_json_file

    try:
        doc = load_json_file(path, "event file", max_bytes=MAX_JSON_FILE_BYTES)
    except InputError as exc:
        raise FluxError(str(exc)) from None
    shape = 'expected a JSON list of events or an object {"events": [...]}'
    if isinstance(doc, dict):
        extra = sorted(k for k in doc if k != "events")
        if extra:
            raise FluxError(f"{path}: unknown key {extra[0]!r}; {shape}")
        if "events" not in doc:
            raise FluxError(f"{path}: no 'events' key; {shape}")
        doc = doc["events"]
        if not isinstance(doc, list):
            raise FluxError(f"{path}: 'events' must be a list, got {type(doc).__name__}")
    if not isinstance(doc, list):
        raise FluxError(f"{path}: {shape}, got {type(doc).__name__}")
    return doc


def _db_errors(method: _F) -> _F:
    """Turn any SQLite failure inside a ledger method into one :class:`FluxError` naming the file."""

    @functools.wraps(method)
    def wrapper(self: Ledger, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except sqlite3.DatabaseError as exc:
            raise FluxError(_db_message(self.path, exc)) from None

    return wrapper  # type: ignore[return-value]


def _db_message(path: str, exc: sqlite3.DatabaseError) -> str:
    text = str(exc)
    if isinstance(exc, sqlite3.OperationalError) and "locked" in text:
        return f"{path}: the ledger is locked by another writer ({text}); try again"
    return (f"{path}: the ledger database is damaged or not a ledger ({text}); restore it from a "
            "backup or start a new ledger file")


def find_cycle(deps: Mapping[str, Sequence[str]]) -> list[str] | None:
    """One cycle of the antecedent graph as ``[a, b, ..., a]`` (a waits for b ...), or None.

    Iterative depth-first search (white / grey / black), nodes and edges in sorted order so the
    reported cycle is the same on every run.
    """
    colour: dict[str, int] = {}
    for start in sorted(deps):
        if colour.get(start):
            continue
        path = [start]
        stack = [iter(sorted(deps.get(start, ())))]
        colour[start] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                colour[path.pop()] = 2
                stack.pop()
                continue
            c = colour.get(nxt, 0)
            if c == 1:
                return path[path.index(nxt):] + [nxt]
            if c == 0:
                colour[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(deps.get(nxt, ()))))
    return None


def _timestamp(value: Any, where: str) -> float:
    """An event time: epoch seconds, a finite number in [0, 2100-01-01) (not a boolean, not text)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FluxError(f"{where}: expected epoch seconds (a number), got {value!r}")
    try:
        ts = float(value)
    except OverflowError:
        ts = math.inf
    if not math.isfinite(ts):
        raise FluxError(f"{where}: expected a finite number of epoch seconds, got {value!r}")
    if not 0.0 <= ts < MAX_EPOCH_S:
        raise FluxError(f"{where}: expected epoch seconds in [0, {MAX_EPOCH_S:.0f}) (1970 to 2100), got {ts:g}")
    return ts


MAX_NOTE_LEN = 4096


def check_label(value: Any, field: str) -> str:
    """An event id, writer or operator: 1..253 printable characters, not starting with a spreadsheet
    formula prefix (``= + - @``, tab, CR), so it is safe in a log line, a terminal and a CSV export."""
    try:
        check_text(value, field)
    except InputError as exc:
        raise FluxError(str(exc)) from None
    if value[0] in FORMULA_PREFIXES:
        raise FluxError(f"{field}: must not start with {value[0]!r} (a spreadsheet formula prefix), got {value[:40]!r}")
    return str(value)


def check_note(value: Any, field: str) -> str:
    """Free text (a note, a failure reason): at most ``MAX_NOTE_LEN`` printable characters, may be empty."""
    if not isinstance(value, str):
        raise FluxError(f"{field}: expected text, got {type(value).__name__}")
    if value:
        try:
            check_text(value, field, max_len=MAX_NOTE_LEN)
        except InputError as exc:
            raise FluxError(str(exc)) from None
    return value


def _cycle_text(cycle: Sequence[str]) -> str:
    return " -> ".join(repr(e) for e in cycle)


def _finite_json(value: Any) -> Any:
    """A stored payload as strict JSON: non-finite numbers (written by old versions) become None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite_json(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite_json(v) for v in value]
    return value


def _create(path: Path) -> None:
    """A new, empty ledger at ``path``, whole or not at all: the tables are made in a temporary file
    beside it, which is then linked into place unless another process created the ledger first.
    So the ledger file never exists empty or half made (a ``kill -9`` leaves only the temporary)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.new")
    try:
        tmp.unlink(missing_ok=True)
        db = sqlite3.connect(tmp, isolation_level=None)
        try:
            db.execute("PRAGMA journal_mode=WAL")  # persistent: stored in the file header
            db.executescript("BEGIN IMMEDIATE;" + _SCHEMA + "COMMIT;")
        finally:
            db.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another writer created it at the same moment; use that one
    except (OSError, sqlite3.Error) as exc:
        text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise FluxError(f"{path}: cannot create the ledger: {text}") from None
    finally:
        try:
            tmp.unlink(missing_ok=True)
        except OSError:
            pass


class Ledger:
    """Open (or create, when the file is missing) a ledger.

    Nothing is written to a file that is not a ledger: a directory, an empty file, a damaged file or
    another program's SQLite database is refused before the first write; a new ledger's tables are
    created in one transaction (a kill part-way leaves no half schema)."""

    def __init__(self, path: str | Path, *, busy_timeout_s: float = 30.0) -> None:
        self.path = str(path)
        p = Path(self.path)
        if p.is_dir():
            raise FluxError(f"{self.path}: is a directory, not a ledger file")
        try:
            if p.exists() and p.stat().st_size == 0 and not Path(f"{self.path}-wal").exists():
                raise FluxError(f"{self.path}: the file is empty (0 bytes), not a ledger; remove it to start a "
                                "new ledger file")  # fmt: skip
            if p.exists():
                with p.open("rb"):  # sqlite reports an unreadable file only as "unable to open"
                    pass
        except OSError as exc:
            raise FluxError(f"{self.path}: cannot open the ledger: {exc.strerror or exc}") from None
        if not p.exists():
            _create(p)
        try:
            self.db = sqlite3.connect(self.path, timeout=busy_timeout_s, isolation_level=None)
        except sqlite3.Error as exc:
            raise FluxError(f"{self.path}: cannot open the ledger: {exc}") from None
        try:
            tables = {r[0] for r in self.db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            if not {"events", "antecedents"} <= tables:
                raise FluxError(f"{self.path}: not a ledger (an SQLite database with tables "
                                f"{sorted(tables)[:5]}); give a ledger file or a new file name")  # fmt: skip
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA foreign_keys=ON")
        except sqlite3.DatabaseError as exc:
            self.db.close()
            raise FluxError(_db_message(self.path, exc)) from None
        except FluxError:
            self.db.close()
            raise

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

    def _rollback(self) -> None:
        try:
            self.db.execute("ROLLBACK")
        except sqlite3.Error:  # a damaged file may refuse even that; the original error is reported
            pass

    # ---- writers
    @_db_errors
    def add(self, events: Sequence[Mapping[str, Any]], *, writer: str, source: str = "batch") -> int:
        """Add a batch of events (dicts: id, kind, timestamp, payload, antecedents, review) atomically."""
        now = time.time()
        rows: list[tuple[Any, ...]] = []
        edges: list[tuple[str, str, int, int]] = []
        ids_in_batch: set[str] = set()
        for i, ev in enumerate(events):
            at = f"{self.path}: {source} row {i}"
            if not isinstance(ev, Mapping):
                raise FluxError(f"{at}: expected an object {{id, kind, timestamp, payload, antecedents}}, "
                                f"got {type(ev).__name__}")  # fmt: skip
            eid = ev.get("id")
            if not isinstance(eid, str) or not eid:
                raise FluxError(f"{at}: field 'id': must be a non-empty string, got {eid!r}")
            check_label(eid, f"{at}: field 'id'")
            if eid in ids_in_batch:
                raise FluxError(f"{at} ({eid!r}): field 'id': repeats an earlier row of the batch")
            ids_in_batch.add(eid)
            kind = ev.get("kind")
            if kind not in KINDS:
                raise FluxError(f"{at} ({eid!r}): field 'kind': {kind!r} is not one of {list(KINDS)}")
            ts = _timestamp(ev.get("timestamp"), f"{at} ({eid!r}): field 'timestamp'")
            payload = ev.get("payload", {})
            if not isinstance(payload, Mapping):
                raise FluxError(f"{at} ({eid!r}): field 'payload': must be an object")
            try:
                payload_text = json.dumps(payload, sort_keys=True, allow_nan=False)
            except (TypeError, ValueError) as exc:
                raise FluxError(f"{at} ({eid!r}): field 'payload': must be finite JSON ({exc})") from None
            ants = ev.get("antecedents", ())
            if not isinstance(ants, list | tuple) or not all(isinstance(a, str) for a in ants):
                raise FluxError(f"{at} ({eid!r}): field 'antecedents': must be a list of event ids")
            for k, a in enumerate(ants):
                if a in ants[:k]:
                    raise FluxError(f"{at} ({eid!r}): field 'antecedents[{k}]': {a!r} repeats "
                                    f"antecedents[{list(ants).index(a)}]")  # fmt: skip
            review, note = ev.get("review", False), ev.get("note", "")
            if not isinstance(review, bool):
                raise FluxError(f"{at} ({eid!r}): field 'review': expected true or false, got {review!r}")
            check_note(note, f"{at} ({eid!r}): field 'note'")
            rows.append((eid, ts, kind, writer, "proposed", int(review), payload_text, note, now, now))
            edges.extend((eid, a, i, k) for k, a in enumerate(ants))
        # A cycle can only lie inside the batch: events already in the ledger never wait for new ones.
        batch_deps: dict[str, list[str]] = {}
        for e, a, _i, _k in edges:
            batch_deps.setdefault(e, []).append(a)
        cycle = find_cycle(batch_deps)
        if cycle:
            row = next(i for e, _a, i, _k in edges if e == cycle[0])
            raise FluxError(f"{self.path}: {source} row {row} ({cycle[0]!r}): field 'antecedents': cycle "
                            f"{_cycle_text(cycle)}: an event cannot wait for itself; nothing of the batch "
                            "was written")  # fmt: skip
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
            self._rollback()
            raise
        return len(rows)

    @_db_errors
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
            self._rollback()
            raise

    def complete(self, ids: Iterable[str], note: str = "") -> None:
        self._transition(ids, to="succeeded", allowed_from=("active",), note=note)

    def fail(self, ids: Iterable[str], note: str) -> None:
        self._transition(ids, to="failed", allowed_from=("active",), note=note)

    @_db_errors
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
            self._rollback()
            raise

    # ---- orchestrator
    @_db_errors
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
            # events waiting for themselves (only a ledger written by an old version can hold them)
            cycles: list[tuple[str, ...]] = []
            pending = {e: [a for a in deps.get(e, ()) if state.get(a) == "proposed"] for e in review}
            while (cycle := find_cycle(pending)) is not None:
                cycles.append(tuple(cycle))
                for e in cycle:
                    pending.pop(e, None)
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
            self._rollback()
            raise
        return OrchestrationReport(
            tuple(activated), tuple(held), tuple(blocked), tuple((a, b) for a, b in failed), tuple(cycles)
        )

    # ---- readers
    @_db_errors
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
            # Strict JSON out, whatever an old version stored (an infinite time, a NaN in a payload).
            ts = row[1] if isinstance(row[1], int | float) and math.isfinite(row[1]) else None
            try:
                payload = _finite_json(json.loads(row[7]))
            except ValueError:
                raise FluxError(f"{self.path}: event {row[0]!r}: stored payload is not JSON; the ledger "
                                "is damaged") from None  # fmt: skip
            out.append({"id": row[0], "timestamp": ts, "kind": row[2], "writer": row[3], "state": row[4],
                        "review": bool(row[5]), "approved_by": row[6], "payload": payload,
                        "note": row[8], "antecedents": sorted(deps.get(row[0], []))})  # fmt: skip
        return out

    def future_events(self) -> list[dict[str, Any]]:
        return [e for e in self.events() if e["state"] != "failed"]

    @_db_errors
    def counts(self) -> dict[str, int]:
        return dict(self.db.execute("SELECT state, COUNT(*) FROM events GROUP BY state"))

"""SQLite state files shared by the services: WAL journal, full sync, one transaction per change.

``open_db`` creates the parent directory, opens the file for use from several threads (callers
serialise with their own lock), checks it (``PRAGMA quick_check``: a damaged file is refused with
:class:`DamagedStateError` naming it, one line, never a traceback), switches to the WAL journal with
``synchronous=FULL`` (a commit is on disk when it returns) and applies the schema. ``transaction`` wraps ``BEGIN IMMEDIATE`` ...
``COMMIT`` and rolls back on any error, so a change is stored whole or not at all.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from placement_service import HarvestError


class DamagedStateError(HarvestError):
    """A state file that SQLite cannot read: the service refuses to start on it (naming it)."""


def open_db(path: Path, schema: str) -> sqlite3.Connection:
    path.parent.mkdir(parents=True, exist_ok=True)
    db = sqlite3.connect(path, check_same_thread=False, isolation_level=None, timeout=60)
    try:
        bad = [str(r[0]) for r in db.execute("PRAGMA quick_check").fetchall() if r[0] != "ok"]
        if not bad:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=FULL")
            db.executescript(schema)
    except sqlite3.DatabaseError as exc:
        bad = [str(exc)]
    if bad:
        db.close()
        raise DamagedStateError(f"{path}: damaged state file ({bad[0][:200]}); stop, move it aside (keep it for "
                                "diagnosis) and start again")
    return db


@contextmanager
def transaction(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise

"""Small local store of each job's last run (duration and tasks per vertex), for the next routing.

One JSON file, ``{"version": 1, "jobs": {name: {"last_duration_s", "vertex_tasks", "finished_at_s",
"queue", "exit_code", "killed_attempts"}}}``. Updates take an exclusive ``flock`` on ``<file>.lock`` and replace the
file atomically (temporary file + rename), so concurrent ``harvest hive`` runs never lose or tear
each other's records. A corrupt file is reported, not silently replaced.
"""

from __future__ import annotations

import fcntl
import json
import math
import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placement_service import HarvestError
from placement_service.atomic import atomic_write_text

VERSION = 1


class HistoryError(HarvestError):
    """The history file cannot be read or has an unexpected shape."""


@dataclass(frozen=True)
class RunRecord:
    last_duration_s: float | None
    vertex_tasks: Mapping[str, int] = field(default_factory=dict)
    finished_at_s: float | None = None
    queue: str = ""
    exit_code: int = 0
    killed_attempts: int = 0


def default_history_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "harvest" / "hive-history.json"


class HistoryStore:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _load(self) -> dict[str, Any]:
        from placement_service.validate import InputError, load_json_file

        if not self.path.exists():
            return {"version": VERSION, "jobs": {}}
        try:
            doc = load_json_file(self.path, "job history")
        except InputError as exc:
            raise HistoryError(f"{exc}; move it away to start afresh") from None
        if not isinstance(doc, dict) or not isinstance(doc.get("jobs"), dict):
            raise HistoryError(f"{self.path}: expected {{\"version\": 1, \"jobs\": {{...}}}}")
        return doc

    def get(self, name: str) -> RunRecord | None:
        raw = self._load()["jobs"].get(name)
        if not isinstance(raw, dict):
            return None
        where = f"{self.path}: jobs[{name!r}]"
        duration = raw.get("last_duration_s")
        if duration is not None and (not isinstance(duration, int | float) or not math.isfinite(duration)):
            raise HistoryError(f"{where}.last_duration_s: expected seconds or null, got {duration!r}")
        tasks = raw.get("vertex_tasks") or {}
        if not isinstance(tasks, dict) or not all(isinstance(v, int) and v >= 1 for v in tasks.values()):
            raise HistoryError(f"{where}.vertex_tasks: expected {{vertex: tasks >= 1}}")
        return RunRecord(
            None if duration is None else float(duration),
            dict(tasks),
            raw.get("finished_at_s"),
            str(raw.get("queue", "")),
            int(raw.get("exit_code", 0)),
            int(raw.get("killed_attempts", 0)),
        )

    @contextmanager
    def _locked(self) -> Iterator[None]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(str(self.path) + ".lock", "a+") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    def record(self, name: str, run: RunRecord) -> None:
        """Store ``run`` as the job's last run; a failed run keeps the last good duration and tasks."""
        with self._locked():
            doc = self._load()
            old = doc["jobs"].get(name) if isinstance(doc["jobs"].get(name), dict) else {}
            entry: dict[str, Any] = {
                "last_duration_s": run.last_duration_s,
                "vertex_tasks": dict(run.vertex_tasks),
                "finished_at_s": run.finished_at_s,
                "queue": run.queue,
                "exit_code": run.exit_code,
                "killed_attempts": run.killed_attempts,
            }
            if run.exit_code != 0:
                entry["last_duration_s"] = old.get("last_duration_s")
                entry["vertex_tasks"] = old.get("vertex_tasks", {})
            doc["jobs"][name] = entry
            doc["version"] = VERSION
            atomic_write_text(self.path, json.dumps(doc, indent=1, sort_keys=True) + "\n")

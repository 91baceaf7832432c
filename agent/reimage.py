"""Notice that this node was reimaged, so the placement service learns reimages live.

A reimage wipes the disks: the node boots again (a new kernel boot id) and the DataNode's data
directories come back empty. The agent keeps the last boot id it saw in its state directory and a
small marker file inside each DataNode data directory. At start-up:

    reimaged = the boot id changed AND a marker is missing from some data directory

A plain reboot keeps the markers (no reimage); a disk swapped while running is not a reimage of
the primary's server. An operator can also say so explicitly (``harvest agent report-reimage``),
for reimages the agent cannot see (no DataNode directories configured, a new agent install).
Detected or declared events wait in ``STATE_DIR/reimages.pending.jsonl`` (one JSON object a line:
``{"node", "timestamp", "how"}``) until the placement service acknowledges them, so none is lost
while the service is down. The running agent and ``report-reimage`` (another process) both rewrite
that file, so every access holds an ``flock`` on ``reimages.pending.lock`` beside it; no event is
dropped and no read fails on the file being replaced or removed. :func:`detect` is pure; the rest
is the small file adapter.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from placement_service.atomic import atomic_write

logger = logging.getLogger(__name__)

BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
MARKER_NAME = ".harvest-agent-marker"
PENDING_NAME = "reimages.pending.jsonl"
LOCK_NAME = "reimages.pending.lock"
BOOT_ID_NAME = "boot-id"


@dataclass(frozen=True)
class ReimageEvent:
    node: str
    timestamp: float  # epoch seconds (the boot time for a detected reimage)
    how: str  # "detected" | "declared"

    def as_dict(self) -> dict[str, object]:
        return {"node": self.node, "timestamp": self.timestamp, "how": self.how}


def detect(previous_boot_id: str | None, boot_id: str, markers_present: Sequence[bool]) -> bool:
    """A reimage: a new boot whose DataNode directories lost a marker (first run: never)."""
    if previous_boot_id is None or not markers_present:
        return False
    return boot_id != previous_boot_id and not all(markers_present)


def read_boot_id(path: str = BOOT_ID_PATH) -> str:
    with open(path, encoding="ascii") as f:
        return f.read().strip()


class ReimageWatch:
    """File adapter: boot id in the state dir, markers in the DataNode dirs, a pending queue."""

    def __init__(self, node: str, state_dir: str, datanode_dirs: Sequence[str], *,
                 boot_id_path: str = BOOT_ID_PATH) -> None:
        self.node = node
        self.state = Path(state_dir)
        self.datanode_dirs = [Path(d) for d in datanode_dirs]
        self.boot_id_path = boot_id_path

    @property
    def pending_path(self) -> Path:
        return self.state / PENDING_NAME

    def check_at_start(self, boot_time_s: float) -> ReimageEvent | None:
        """Compare with the last run, queue an event if reimaged, then re-arm boot id and markers."""
        boot_id = read_boot_id(self.boot_id_path)
        prev_path = self.state / BOOT_ID_NAME
        previous = prev_path.read_text().strip() if prev_path.exists() else None
        markers = [(d / MARKER_NAME).exists() for d in self.datanode_dirs]
        event = None
        if detect(previous, boot_id, markers):
            event = ReimageEvent(self.node, float(boot_time_s), "detected")
            self.queue(event)
            logger.warning("node %s looks reimaged (new boot id, DataNode directories emptied); reporting it",
                           self.node)
        for d in self.datanode_dirs:
            if d.is_dir() and not (d / MARKER_NAME).exists():
                atomic_write(str(d / MARKER_NAME), f"{self.node}\n")
        atomic_write(str(prev_path), boot_id + "\n")
        return event

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """Hold the queue's lock: an exclusive ``flock`` on a file beside it. The running agent (status
        page, sender thread) and ``harvest agent report-reimage`` (another process) each rewrite the
        queue whole, so every read-modify-write and every read runs under it. Each call opens its own
        descriptor, so the lock also orders threads of one process."""
        fd = os.open(self.state / LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _read_lines(self) -> list[str]:
        try:
            return self.pending_path.read_text().splitlines()
        except FileNotFoundError:
            return []

    def queue(self, event: ReimageEvent) -> None:
        """Append to the pending queue (rewritten atomically: the file is small)."""
        with self._locked():
            lines = self._read_lines()
            lines.append(json.dumps(event.as_dict(), sort_keys=True))
            atomic_write(str(self.pending_path), "\n".join(lines) + "\n")

    def pending(self) -> list[ReimageEvent]:
        with self._locked():
            return self._parse(self._read_lines())

    def _parse(self, lines: list[str]) -> list[ReimageEvent]:
        out = []
        for i, line in enumerate(lines, 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                out.append(ReimageEvent(str(d["node"]), float(d["timestamp"]), str(d["how"])))
            except (ValueError, KeyError, TypeError):
                logger.error("%s: line %d is not a reimage event; skipped", self.pending_path, i)
        return out

    def acknowledge(self, events: Sequence[ReimageEvent]) -> None:
        """Drop acknowledged events from the queue (events queued meanwhile stay)."""
        done = {json.dumps(e.as_dict(), sort_keys=True) for e in events}
        with self._locked():
            left = [json.dumps(e.as_dict(), sort_keys=True) for e in self._parse(self._read_lines())]
            left = [x for x in left if x not in done]
            if left:
                atomic_write(str(self.pending_path), "\n".join(left) + "\n")
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(self.pending_path)


class ReimageSender:
    """Sends pending reimages to the placement service's ``POST /v1/reimages`` (HTTP), removing them
    from the queue only once the service answered 202. Runs on its own thread every ``interval_s``."""

    def __init__(self, watch: ReimageWatch, service_http: str, token_file: str | None, *,
                 interval_s: float = 30.0, timeout_s: float = 5.0) -> None:
        self.watch = watch
        self.url = service_http.rstrip("/") + "/v1/reimages"
        self.token_file = token_file
        self.interval_s = interval_s
        self.timeout_s = timeout_s
        self.last_error = ""
        self.sent = 0
        self.last_round_s: float | None = None  # monotonic time of the last finished round
        import threading

        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="reimage-sender", daemon=True)

    def flush_once(self) -> int:
        import time
        import urllib.error
        import urllib.request

        events = self.watch.pending()
        if not events:
            self.last_round_s = time.monotonic()
            return 0
        body = json.dumps({"events": [{"node": e.node, "timestamp": e.timestamp, "how": e.how}
                                      for e in events]}).encode()
        req = urllib.request.Request(self.url, data=body, method="POST", headers={"Content-Type": "application/json"})
        if self.token_file:
            with open(self.token_file, encoding="utf-8") as f:
                req.add_header("Authorization", f"Bearer {f.read().strip()}")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                resp.read()
        except urllib.error.HTTPError as exc:
            self.last_error = f"{self.url}: HTTP {exc.code}: {exc.read()[:200]!r}"
            raise
        self.watch.acknowledge(events)
        self.sent += len(events)
        self.last_error = ""
        self.last_round_s = time.monotonic()
        return len(events)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.flush_once()
            except Exception as exc:  # kept in the queue; retried next round
                self.last_error = self.last_error or f"{self.url}: {exc}"
                logger.warning("reimage report not delivered (kept, retried in %.0f s): %s",
                               self.interval_s, self.last_error)
            self._stop.wait(self.interval_s)

    def start(self) -> ReimageSender:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=self.timeout_s + 1)

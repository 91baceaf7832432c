"""Append-only report log with group commit: nothing is acknowledged before it is on disk.

Layout: ``<dir>/seg-<id:010d>.log``, one active segment at a time. A segment is a sequence of frames::

    [u32 payload length][u32 crc32 of payload][payload]   (little endian)

One frame holds the records of one ``append`` call (one HTTP request or one gRPC message), so a
request is durable all-or-nothing: a torn frame at the end of the last segment (crash mid-write) fails
its length or CRC check and is cut off on recovery, together with everything after it.

Group commit (how many concurrent requests share one fsync):

1. ``append`` puts the encoded frame in an in-memory buffer under a lock and returns a *ticket*
   (a counter) and the id of the segment the frame will land in; it never touches the disk.
2. One writer thread takes the whole buffer, writes it with one ``write`` and one ``fdatasync``,
   then marks every ticket up to the last one taken as durable and wakes the waiters.
3. Callers wait for their ticket (``wait`` or ``future``) and only then acknowledge.

While one fsync runs, new frames pile up in the buffer and go out together in the next one, so the
number of fsyncs per second stays bounded by the disk's fsync latency whatever the request rate.
``rotate`` closes the active segment after the next write and opens a new one; closed segments are
handed to the compactor, which deletes them once their content is stored elsewhere.
"""

from __future__ import annotations

import logging
import os
import struct
import threading
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

_HEADER = struct.Struct("<II")
_SEGMENT_GLOB = "seg-*.log"


class LogError(RuntimeError):
    """The log could not be written (fatal for the service: it must not acknowledge anything more)."""


@dataclass(frozen=True)
class SegmentInfo:
    segment_id: int
    path: Path


def segment_path(directory: Path, segment_id: int) -> Path:
    return directory / f"seg-{segment_id:010d}.log"


def list_segments(directory: Path) -> list[SegmentInfo]:
    out = []
    for p in directory.glob(_SEGMENT_GLOB):
        try:
            out.append(SegmentInfo(int(p.stem.split("-", 1)[1]), p))
        except ValueError:
            logger.warning("ignoring stray file %s in the report log directory", p)
    return sorted(out, key=lambda s: s.segment_id)


def read_frames(path: Path, truncate_torn: bool = False) -> Iterator[bytes]:
    """Yield the payload of every complete frame of a segment, stopping at the first torn frame.

    With ``truncate_torn`` the file is cut at the end of the last good frame (recovery of the
    segment that was active during a crash), so that new frames never follow garbage.
    """
    data = path.read_bytes()
    pos = 0
    end = len(data)
    while pos + _HEADER.size <= end:
        length, crc = _HEADER.unpack_from(data, pos)
        start = pos + _HEADER.size
        if start + length > end or zlib.crc32(data[start:start + length]) != crc:
            break
        yield data[start:start + length]
        pos = start + length
    if pos != end:
        logger.warning("%s: dropping %d bytes of a torn frame at offset %d", path, end - pos, pos)
        if truncate_torn:
            with open(path, "r+b") as fh:
                fh.truncate(pos)
                fh.flush()
                os.fsync(fh.fileno())


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class ReportLog:
    """The group-committing append-only log (see the module docstring)."""

    def __init__(self, directory: Path, first_segment_id: int) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._cond = threading.Condition()
        self._buffer: list[bytes] = []
        self._next_ticket = 1
        self._durable_ticket = 0
        self._segment_id = first_segment_id
        self._fd = self._open_segment(first_segment_id)
        self._rotate_requested = False
        self._rotated: list[int] = []
        self._closing = False
        self._failed: BaseException | None = None
        self._waiters: list[tuple[int, Future[None]]] = []
        self._listeners: list[Callable[[int], None]] = []
        self.fsyncs = 0
        self.frames_written = 0
        self.bytes_written = 0
        self._thread = threading.Thread(target=self._run, name="report-log-writer", daemon=True)
        self._thread.start()

    # -- producers -------------------------------------------------------------------------------
    @property
    def segment_id(self) -> int:
        return self._segment_id

    def append(self, payload: bytes) -> tuple[int, int]:
        """Buffer one frame; returns ``(ticket, segment_id)``. Call under the caller's ordering lock."""
        frame = _HEADER.pack(len(payload), zlib.crc32(payload)) + payload
        with self._cond:
            if self._failed is not None:
                raise LogError(f"report log is not writable: {self._failed}")
            if self._closing:
                raise LogError("report log is closed")
            self._buffer.append(frame)
            ticket = self._next_ticket
            self._next_ticket += 1
            self._cond.notify_all()
            return ticket, self._segment_id

    def last_ticket(self) -> int:
        """The newest ticket handed out (waiting for it waits for everything appended so far)."""
        with self._cond:
            return self._next_ticket - 1

    def wait(self, ticket: int, timeout_s: float | None = None) -> None:
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self._durable_ticket >= ticket or self._failed is not None, timeout=timeout_s
            )
            if self._failed is not None:
                raise LogError(f"report log write failed: {self._failed}")
            if not ok:
                raise LogError(f"timed out waiting for ticket {ticket} to be durable")

    def future(self, ticket: int) -> Future[None]:
        """A future resolved once ``ticket`` is durable (for asyncio callers via ``wrap_future``)."""
        fut: Future[None] = Future()
        with self._cond:
            if self._failed is not None:
                fut.set_exception(LogError(f"report log write failed: {self._failed}"))
            elif self._durable_ticket >= ticket:
                fut.set_result(None)
            else:
                self._waiters.append((ticket, fut))
        return fut

    @property
    def durable_ticket(self) -> int:
        return self._durable_ticket

    def add_listener(self, fn: Callable[[int], None]) -> None:
        """``fn(durable_ticket)`` runs on the writer thread after every fsync (keep it tiny)."""
        self._listeners.append(fn)

    def rotate(self, timeout_s: float = 30.0) -> list[int]:
        """Close the active segment (after writing what is buffered); return the ids closed so far."""
        with self._cond:
            self._rotate_requested = True
            self._cond.notify_all()
            self._cond.wait_for(lambda: not self._rotate_requested or self._failed is not None, timeout_s)
            if self._failed is not None:
                raise LogError(f"report log write failed: {self._failed}")
            closed, self._rotated = self._rotated, []
            return closed

    def close(self) -> None:
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        self._thread.join(timeout=30)
        try:
            os.close(self._fd)
        except OSError:
            pass

    # -- writer thread ---------------------------------------------------------------------------
    def _open_segment(self, segment_id: int) -> int:
        path = segment_path(self.directory, segment_id)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        fsync_dir(self.directory)
        return fd

    def _run(self) -> None:
        while True:
            with self._cond:
                self._cond.wait_for(lambda: bool(self._buffer) or self._rotate_requested or self._closing)
                batch, self._buffer = self._buffer, []
                last = self._next_ticket - 1
                rotating = self._rotate_requested
                fd = self._fd
                closed_id = self._segment_id
                if rotating:
                    # Frames appended from now on belong to the next segment.
                    self._segment_id += 1
                if self._closing and not batch and not rotating:
                    return
            try:
                if batch:
                    data = b"".join(batch)
                    view = memoryview(data)
                    while view:
                        n = os.write(fd, view)
                        view = view[n:]
                    os.fdatasync(fd)
                    self.fsyncs += 1
                    self.frames_written += len(batch)
                    self.bytes_written += len(data)
                new_fd = None
                if rotating:
                    os.fsync(fd)
                    new_fd = self._open_segment(closed_id + 1)
                    os.close(fd)
            except OSError as exc:
                logger.critical("report log write failed, refusing further reports: %s", exc)
                with self._cond:
                    self._failed = exc
                    self._cond.notify_all()
                    waiters, self._waiters = self._waiters, []
                for _, fut in waiters:
                    fut.set_exception(LogError(f"report log write failed: {exc}"))
                return
            with self._cond:
                self._durable_ticket = last
                if new_fd is not None:
                    self._fd = new_fd
                    self._rotated.append(closed_id)
                    self._rotate_requested = False
                ready = [f for t, f in self._waiters if t <= last]
                if ready:
                    self._waiters = [(t, f) for t, f in self._waiters if t > last]
                self._cond.notify_all()
            for fut in ready:
                fut.set_result(None)
            for fn in self._listeners:
                fn(last)

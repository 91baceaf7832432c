"""Append-only report log with group commit: nothing is acknowledged before it is on disk.

Layout: ``<dir>/seg-<id:010d>.log``, one active segment at a time. A segment is a sequence of frames::

    [u32 payload length][u32 crc32 of payload][payload]   (little endian)

One frame holds the records of one ``append`` call (one HTTP request or one gRPC message), so a
request is durable all-or-nothing: a torn frame at the end of the last segment (crash mid-write) fails
its length or CRC check and is cut off on recovery; a damaged frame in the middle is skipped and
reading resynchronises on the next intact frame.

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

Storage errors are transient, never fatal:

4. a failed ``write`` / ``fdatasync`` (ENOSPC, EIO) refuses every frame not yet durable (their waiters
   get :class:`LogError` at once) and every later ``append`` until the writer, retrying every
   ``retry_s``, has cut the partly written frames off the segment and written, synced and deleted a
   probe file; then appends are accepted again;
5. a failed open of the next segment (EMFILE, ENOSPC) fails only that ``rotate`` call: frames keep
   going to the current segment and the compactor tries again on its next tick.
"""

from __future__ import annotations

import errno
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
    """The log cannot take a frame now (a storage error, or closed): the request is refused whole.

    Transient: the writer retries the disk every ``retry_s`` and accepts frames again once a probe
    write succeeds."""


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


def read_frames(path: Path, truncate_torn: bool = False, payload_prefix: bytes = b"",
                max_frame_bytes: int = 1 << 30) -> Iterator[bytes]:
    """Yield the payload of every intact frame of a segment.

    A damaged frame (bad length or CRC) in the middle is skipped: reading resynchronises on the next
    offset where an intact frame starts (``payload_prefix``, when given, is what every payload starts
    with, which makes the scan jump between candidates instead of trying every byte). Whatever
    follows the last intact frame is a torn tail; with ``truncate_torn`` the file is cut there
    (recovery of the segment that was active during a crash), so that new frames never follow garbage.
    """
    data = path.read_bytes()
    pos = 0
    end = len(data)
    good_end = 0
    while pos + _HEADER.size <= end:
        if _frame_at(data, pos, max_frame_bytes, payload_prefix):
            length = _HEADER.unpack_from(data, pos)[0]
            start = pos + _HEADER.size
            yield data[start:start + length]
            pos = good_end = start + length
            continue
        nxt = _resync(data, pos + 1, max_frame_bytes, payload_prefix)
        if nxt is None:
            break
        logger.warning("%s: skipped %d damaged byte(s) at offset %d; resynchronised on the frame at offset %d",
                       path, nxt - pos, pos, nxt)
        pos = nxt
    if good_end != end:
        logger.warning("%s: dropping %d bytes of a torn frame at offset %d", path, end - good_end, good_end)
        if truncate_torn:
            with open(path, "r+b") as fh:
                fh.truncate(good_end)
                fh.flush()
                os.fsync(fh.fileno())


def _frame_at(data: bytes, pos: int, max_frame_bytes: int, payload_prefix: bytes) -> bool:
    """True when an intact frame (length in bounds, CRC matching) starts at ``pos``."""
    if pos + _HEADER.size > len(data):
        return False
    length, crc = _HEADER.unpack_from(data, pos)
    start = pos + _HEADER.size
    if length > max_frame_bytes or start + length > len(data):
        return False
    if payload_prefix and not data.startswith(payload_prefix, start):
        return False
    return zlib.crc32(data[start:start + length]) == crc


def _resync(data: bytes, pos: int, max_frame_bytes: int, payload_prefix: bytes) -> int | None:
    """The first offset >= ``pos`` where an intact frame starts, or None."""
    end = len(data)
    if payload_prefix:
        at = data.find(payload_prefix, pos + _HEADER.size)
        while at != -1:
            if _frame_at(data, at - _HEADER.size, max_frame_bytes, payload_prefix):
                return at - _HEADER.size
            at = data.find(payload_prefix, at + 1)
        return None
    for p in range(pos, end - _HEADER.size + 1):
        if _frame_at(data, p, max_frame_bytes, payload_prefix):
            return p
    return None


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


DurableFn = Callable[[int, int, int], None]
FailedFn = Callable[[int, BaseException], None]


class ReportLog:
    """The group-committing append-only log (see the module docstring)."""

    def __init__(self, directory: Path, first_segment_id: int, *, on_durable: DurableFn | None = None,
                 on_failed: FailedFn | None = None, on_recovered: Callable[[], None] | None = None,
                 retry_s: float = 1.0, probe_bytes: int = 64 * 1024) -> None:
        """``on_durable(first_ticket, last_ticket, segment_id)`` runs on the writer thread after the
        frames of those tickets are on disk in that segment, *before* their waiters wake up;
        ``on_failed(last_failed_ticket, error)`` runs after a write failed (every ticket not yet
        durable up to ``last_failed_ticket`` is refused); ``on_recovered()`` once writes work again.
        Keep them short: they run on the writer thread."""
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._cond = threading.Condition()
        self._buffer: list[bytes] = []
        self._next_ticket = 1
        self._taken_ticket = 0  # the last ticket the writer took from the buffer
        self._durable_ticket = 0
        self._failed_upto = 0  # tickets in (durable, failed_upto] were refused
        self._segment_id = first_segment_id
        self._fd = self._open_segment(first_segment_id)
        self._good_size = os.fstat(self._fd).st_size  # end of the last durable frame
        self._rotate_requested = False
        self._rotate_error: BaseException | None = None
        self._rotated: list[int] = []
        self._closing = False
        self._error: BaseException | None = None  # set while writes fail (appends are refused)
        self._retry_s = retry_s
        self._probe_bytes = probe_bytes
        self._on_durable = on_durable
        self._on_failed = on_failed
        self._on_recovered = on_recovered
        self._waiters: list[tuple[int, Future[None]]] = []
        self._listeners: list[Callable[[int], None]] = []
        self.fsyncs = 0
        self.frames_written = 0
        self.bytes_written = 0
        self.failures = 0
        self._thread = threading.Thread(target=self._run, name="report-log-writer", daemon=True)
        self._thread.start()

    # -- producers -------------------------------------------------------------------------------
    @property
    def segment_id(self) -> int:
        return self._segment_id

    @property
    def error(self) -> BaseException | None:
        """The storage error refusing appends right now (None when the log is writable)."""
        return self._error

    def append(self, payload: bytes) -> int:
        """Buffer one frame; returns its ticket. Call under the caller's ordering lock.

        Raises :class:`LogError` at once (nothing buffered) while the log is failing."""
        frame = _HEADER.pack(len(payload), zlib.crc32(payload)) + payload
        with self._cond:
            if self._error is not None:
                raise LogError(f"report log is not writable: {_describe(self._error)}")
            if self._closing:
                raise LogError("report log is closed")
            self._buffer.append(frame)
            ticket = self._next_ticket
            self._next_ticket += 1
            self._cond.notify_all()
            return ticket

    def last_ticket(self) -> int:
        """The newest ticket handed out (waiting for it waits for everything appended so far)."""
        with self._cond:
            return self._next_ticket - 1

    def refused(self, ticket: int) -> bool:
        """True when ``ticket`` will never be durable (its write failed)."""
        return self._durable_ticket < ticket <= self._failed_upto

    def wait(self, ticket: int, timeout_s: float | None = None) -> None:
        with self._cond:
            ok = self._cond.wait_for(
                lambda: self._durable_ticket >= ticket or self.refused(ticket), timeout=timeout_s
            )
            if self._durable_ticket >= ticket:
                return
            if self.refused(ticket):
                raise LogError(f"report log write failed: {_describe(self._error)}")
            if not ok:
                raise LogError(f"timed out waiting for ticket {ticket} to be durable")

    def future(self, ticket: int) -> Future[None]:
        """A future resolved once ``ticket`` is durable (for asyncio callers via ``wrap_future``)."""
        fut: Future[None] = Future()
        with self._cond:
            if self._durable_ticket >= ticket:
                fut.set_result(None)
            elif self.refused(ticket):
                fut.set_exception(LogError(f"report log write failed: {_describe(self._error)}"))
            else:
                self._waiters.append((ticket, fut))
        return fut

    @property
    def durable_ticket(self) -> int:
        return self._durable_ticket

    def add_listener(self, fn: Callable[[int], None]) -> None:
        """``fn(durable_ticket)`` runs on the writer thread after every fsync and after a failure
        (check :meth:`refused`); keep it tiny."""
        self._listeners.append(fn)

    def rotate(self, timeout_s: float = 30.0) -> list[int]:
        """Close the active segment (after writing what is buffered); return the ids closed so far.

        Raises :class:`LogError` when the log is failing or the next segment cannot be opened (then
        frames keep going to the current segment and a later call tries again)."""
        with self._cond:
            if self._error is not None:
                raise LogError(f"report log is not writable: {_describe(self._error)}")
            self._rotate_requested = True
            self._rotate_error = None
            self._cond.notify_all()
            self._cond.wait_for(lambda: not self._rotate_requested or self._error is not None, timeout_s)
            if self._error is not None:
                raise LogError(f"report log write failed: {_describe(self._error)}") from self._error
            if self._rotate_error is not None:
                raise LogError(f"cannot open the next log segment: {_describe(self._rotate_error)}") \
                    from self._rotate_error
            if self._rotate_requested:
                raise LogError(f"log rotation did not finish within {timeout_s:.0f} s")
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
        try:
            fsync_dir(self.directory)
        except OSError:
            os.close(fd)
            raise
        return fd

    def _run(self) -> None:
        while True:
            with self._cond:
                if self._error is not None:
                    if self._closing:
                        return
                    self._cond.wait(timeout=self._retry_s)
                    if self._closing:
                        return
                else:
                    self._cond.wait_for(lambda: bool(self._buffer) or self._rotate_requested or self._closing)
                failing = self._error is not None
                if not failing:
                    batch, self._buffer = self._buffer, []
                    first, last = self._taken_ticket + 1, self._next_ticket - 1
                    self._taken_ticket = last
                    rotating = self._rotate_requested
                    fd, segment = self._fd, self._segment_id
                    if self._closing and not batch and not rotating:
                        return
            if failing:
                self._try_recover()
                continue
            try:
                if batch:
                    data = b"".join(batch)
                    view = memoryview(data)
                    while view:
                        n = os.write(fd, view)
                        view = view[n:]
                    os.fdatasync(fd)
                    self._good_size += len(data)
                    self.fsyncs += 1
                    self.frames_written += len(batch)
                    self.bytes_written += len(data)
            except OSError as exc:
                self._fail(exc)
                continue
            if batch and self._on_durable is not None:
                try:
                    self._on_durable(first, last, segment)
                except Exception:  # never leave waiters hanging
                    logger.exception("report log: on_durable callback failed")
            with self._cond:
                self._durable_ticket = last
                ready = [f for t, f in self._waiters if t <= last]
                if ready:
                    self._waiters = [(t, f) for t, f in self._waiters if t > last]
                self._cond.notify_all()
            for fut in ready:
                fut.set_result(None)
            self._notify_listeners(last)
            if rotating:
                self._rotate(fd, segment)

    def _rotate(self, fd: int, segment: int) -> None:
        """Open the next segment, then close the current one; an open failure (EMFILE, ENOSPC) keeps
        the current segment and tells the caller of ``rotate`` (frames keep flowing)."""
        try:
            new_fd = self._open_segment(segment + 1)
        except OSError as exc:
            logger.warning("report log: cannot open segment %d (%s); still writing segment %d",
                           segment + 1, _describe(exc), segment)
            with self._cond:
                self._rotate_error = exc
                self._rotate_requested = False
                self._cond.notify_all()
            return
        try:
            os.fsync(fd)
        except OSError as exc:
            logger.warning("report log: fsync of closed segment %d failed: %s", segment, exc)
        os.close(fd)
        with self._cond:
            self._fd = new_fd
            self._good_size = 0
            self._segment_id = segment + 1
            self._rotated.append(segment)
            self._rotate_requested = False
            self._cond.notify_all()

    def _fail(self, exc: OSError) -> None:
        """A write or fsync failed: refuse every ticket not yet durable, stop taking appends until
        :meth:`_try_recover` succeeds, and tell the owner (who forgets the refused frames)."""
        self.failures += 1
        logger.error("report log write failed, refusing reports until it works again: %s", _describe(exc))
        with self._cond:
            self._error = exc
            self._failed_upto = self._next_ticket - 1
            self._taken_ticket = self._failed_upto
            self._buffer = []
            self._rotate_requested = False
            waiters, self._waiters = self._waiters, []
            failed_upto = self._failed_upto
            self._cond.notify_all()
        for _, fut in waiters:
            fut.set_exception(LogError(f"report log write failed: {_describe(exc)}"))
        if self._on_failed is not None:
            try:
                self._on_failed(failed_upto, exc)
            except Exception:
                logger.exception("report log: on_failed callback failed")
        self._notify_listeners(self._durable_ticket)

    def _try_recover(self) -> None:
        """Cut the partly written frames off the segment, check that the disk takes a write again
        (a probe file, written, synced and deleted), then accept appends again."""
        try:
            os.ftruncate(self._fd, self._good_size)
            os.fsync(self._fd)
            probe = self.directory / ".write-probe"
            fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            try:
                os.write(fd, b"\0" * self._probe_bytes)
                os.fsync(fd)
            finally:
                os.close(fd)
                try:
                    os.unlink(probe)
                except OSError:
                    pass
        except OSError as exc:
            with self._cond:
                self._error = exc
            return
        logger.warning("report log is writable again; accepting reports")
        with self._cond:
            self._error = None
            self._cond.notify_all()
        if self._on_recovered is not None:
            try:
                self._on_recovered()
            except Exception:
                logger.exception("report log: on_recovered callback failed")

    def _notify_listeners(self, durable: int) -> None:
        for fn in self._listeners:
            fn(durable)


def _describe(exc: BaseException | None) -> str:
    """``ENOSPC: No space left on device`` (errno name first, for logs, health and metrics)."""
    if exc is None:
        return "unknown error"
    if isinstance(exc, OSError) and exc.errno is not None:
        return f"{errno_name(exc)}: {exc.strerror or exc}"
    return str(exc)


def errno_name(exc: BaseException | None) -> str:
    """``ENOSPC``, ``EMFILE``... for an ``OSError``; the exception type otherwise."""
    if isinstance(exc, OSError) and exc.errno is not None:
        return errno.errorcode.get(exc.errno, str(exc.errno))
    return type(exc).__name__ if exc is not None else ""


describe_error = _describe

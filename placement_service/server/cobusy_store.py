"""Co-busy estimates in the service (HDFS-H-cobusy): their stored form, its checks, the adopted copy.

The re-clustering child fits ``core.cobusy.fit_cobusy`` on the same tenant series as the class
table (busy threshold ``busy_profile_cpu``) and stores the estimates with the table; the service
loads them when it adopts that table and hands them to every replica placer it builds.

Storage: a BLOB in the SQLite state (``cobusy_estimates``, keyed by the class table's version),
written in the same transaction as the table. Why not a JSON field of ``classes.json``: the pair
matrix has n^2 entries (654 tenants: 428k numbers, megabytes of JSON, parsed on every start). Why
not an ``.npy`` file next to the state: the table and its estimates would then be two commits, with
a window (crash, full disk) in which table v exists without its file or a file without its table,
and old files to collect; in the same transaction there is neither, and older versions' rows are
deleted in it too, so exactly one set of estimates is stored (freed pages are reused by SQLite).

Format (``COBUSY_FORMAT`` 1): the bytes of an ``.npz`` archive (``numpy.savez``: a zip with a CRC-32
per array, so damaged bytes are detected; read without pickle) holding

- ``format``: int64 scalar, 1;
- ``tenants``: unicode [n], distinct non-empty names, the class table's tenants;
- ``m1``: float32 [n], each tenant's probability of being busy, finite, in [0, 1];
- ``m2``: float32 [n, n], the probability that both are busy in the same slot, finite, in [0, 1],
  symmetric (float32 halves the size; the placer compares estimates with a relative tolerance far
  above float32's 6e-8);
- ``busy_cpu``, ``start_s``, ``interval_s`` (float64 scalars) and ``slots`` (int64 scalar): the
  threshold and the history window they were fitted on (reported, not used);
- optional ``quiet_turnover`` (float64 scalar in [0, 1], ``CobusyModel.quiet_turnover``): how far
  that history predicted itself, which decides whether new blocks spread under a new-block risk
  target. Absent (estimates stored before it existed): 1.0, not measured, so new blocks take the
  lowest estimate, as they did.

A missing or damaged row never stops the service: :func:`load_cobusy` returns the reason, the view
falls back to HDFS-H-hours (or HDFS-H) and ``/v1/placement/quality`` says so (``placement_mode``).
"""

from __future__ import annotations

import io
import logging
import threading
import zipfile
from collections.abc import Collection
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from placement_service.core.cobusy import CobusyModel, aligned
from placement_service.core.types import PolicyError

if TYPE_CHECKING:
    from placement_service.server.state import StateStore

logger = logging.getLogger(__name__)

COBUSY_FORMAT = 1
_SYMMETRY_TOL = 1e-6


class CobusyStoreError(PolicyError):
    """Stored co-busy estimates break their contract (the message names where they are stored)."""


def _asymmetry(m: np.ndarray, block: int = 256) -> float:
    """``max |m - m.T|``, a band of rows at a time: at 5,000 tenants the whole-matrix expression
    held two 100 MB temporaries in the serving process and took 80 ms in one numpy call; the bands
    take ~45 ms and a few MB, and a duty-cycled adoption can rest between them."""
    worst = 0.0
    for i in range(0, m.shape[0], block):
        worst = max(worst, float(np.abs(m[i:i + block] - m[:, i:i + block].T).max()))
    return worst


def encode_cobusy(model: CobusyModel, busy_cpu: float, start_s: float, interval_s: float, slots: int) -> bytes:
    """The stored form of ``model`` (see the module docstring)."""
    buf = io.BytesIO()
    np.savez(
        buf, format=np.int64(COBUSY_FORMAT), tenants=np.array(model.tenants, dtype=np.str_),
        m1=np.asarray(model.m1, dtype=np.float32), m2=np.asarray(model.dense(), dtype=np.float32),
        busy_cpu=np.float64(busy_cpu), start_s=np.float64(start_s), interval_s=np.float64(interval_s),
        slots=np.int64(slots), quiet_turnover=np.float64(model.quiet_turnover),
    )
    return buf.getvalue()


@dataclass(frozen=True)
class StoredCobusy:
    """Decoded estimates and what they were fitted on."""

    model: CobusyModel  # float64, tenants in the stored order
    busy_cpu: float
    start_s: float
    interval_s: float
    slots: int


def decode_cobusy(data: bytes, source: str, tenants: Collection[str] | None = None) -> StoredCobusy:
    """Parse and check stored estimates; ``tenants``: the class table's tenants they must cover
    exactly (None: not checked). Errors (:class:`CobusyStoreError`) start with ``source``."""

    def bad(what: str) -> CobusyStoreError:
        return CobusyStoreError(f"{source}: {what}")

    try:
        loaded = np.load(io.BytesIO(data), allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise ValueError("one .npy array, not an .npz archive")
        with loaded as npz:
            arrays: dict[str, np.ndarray] = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile, KeyError) as exc:
        raise bad(f"not a readable .npz archive ({type(exc).__name__}: {exc})") from None
    missing = [k for k in ("format", "tenants", "m1", "m2", "busy_cpu", "start_s", "interval_s", "slots")
               if k not in arrays]
    if missing:
        raise bad(f"missing array(s) {', '.join(missing)}")
    fmt = arrays["format"]
    if fmt.shape != () or not np.issubdtype(fmt.dtype, np.integer) or int(fmt) != COBUSY_FORMAT:
        raise bad(f"format: expected {COBUSY_FORMAT}, got {fmt!r:.40}")
    names = arrays["tenants"]
    if names.ndim != 1 or names.dtype.kind != "U":
        raise bad(f"tenants: must be a 1-d array of names, got dtype {names.dtype} shape {names.shape}")
    order = tuple(str(t) for t in names.tolist())
    if any(not t for t in order) or len(set(order)) != len(order):
        raise bad("tenants: names must be non-empty and distinct")
    n = len(order)
    m1, m2 = arrays["m1"], arrays["m2"]
    for key, arr, shape in (("m1", m1, (n,)), ("m2", m2, (n, n))):
        if not np.issubdtype(arr.dtype, np.floating):
            raise bad(f"{key}: must be floating point, got dtype {arr.dtype}")
        if arr.shape != shape:
            raise bad(f"{key}: shape {arr.shape}, expected {shape} for {n} tenants")
        finite = np.isfinite(arr)
        if not finite.all():
            at = tuple(int(i) for i in np.argwhere(~finite)[0])
            raise bad(f"{key}{list(at)}: not finite ({arr[at]})")
        if n and (arr.min() < 0.0 or arr.max() > 1.0):
            raise bad(f"{key}: probabilities must be in [0, 1], got [{arr.min()}, {arr.max()}]")
    if n and _asymmetry(m2) > _SYMMETRY_TOL:
        raise bad("m2: must be symmetric (P(a and b busy) = P(b and a busy))")
    if tenants is not None:
        expected = set(tenants)
        extra, absent = sorted(set(order) - expected), sorted(expected - set(order))
        if extra or absent:
            raise bad(f"tenants do not match the class table's: {len(extra)} unknown to it (e.g. "
                      f"{extra[:3]}), {len(absent)} of its tenants missing (e.g. {absent[:3]})")
    scalars: dict[str, float] = {}
    for key in ("busy_cpu", "start_s", "interval_s", "slots"):
        arr = arrays[key]
        if arr.shape != () or not np.issubdtype(arr.dtype, np.number) or not np.isfinite(arr):
            raise bad(f"{key}: must be a finite number, got {arr!r:.40}")
        scalars[key] = float(arr)
    turnover = 1.0
    if "quiet_turnover" in arrays:
        arr = arrays["quiet_turnover"]
        if arr.shape != () or not np.issubdtype(arr.dtype, np.floating) or not 0.0 <= float(arr) <= 1.0:
            raise bad(f"quiet_turnover: must be a number in [0, 1], got {arr!r:.40}")
        turnover = float(arr)
    model = CobusyModel(order, m1.astype(np.float64), m2.astype(np.float64), quiet_turnover=turnover)
    return StoredCobusy(model, scalars["busy_cpu"], scalars["start_s"], scalars["interval_s"], int(scalars["slots"]))


class CobusyEstimates:
    """The adopted estimates of one class table version. Aligning them to a placer's tenant order
    indexes the n x n matrix's rows (no copy; the positivity and mean passes over it cost ~37 ms at
    5,000 tenants): :meth:`aligned_to` does it once per order and keeps the result, so the many
    placers built from one table (every compaction tick, every block size bucket) take it as is
    (``core.cobusy.aligned`` returns an aligned model as is)."""

    def __init__(self, version: int, stored: StoredCobusy) -> None:
        self.version = version
        self.stored = stored
        self._lock = threading.Lock()
        self._last: CobusyModel | None = None

    def aligned_to(self, tenants: tuple[str, ...]) -> CobusyModel:
        with self._lock:
            last = self._last
        if last is not None and last.tenants == tenants:
            return last
        model = aligned(self.stored.model, tenants)
        with self._lock:
            self._last = model
        return model

    def describe(self) -> dict[str, Any]:
        s = self.stored
        return {"version": self.version, "tenants": len(s.model.tenants), "busy_cpu": s.busy_cpu,
                "history_start_s": s.start_s, "history_slots": s.slots, "interval_s": s.interval_s,
                "quiet_turnover": s.model.quiet_turnover}


@dataclass(frozen=True)
class CobusyState:
    """What the service has for HDFS-H-cobusy: the estimates, or why there are none (``note``)."""

    estimates: CobusyEstimates | None = None
    note: str = ""
    pending: bool = False  # none fitted yet (not damaged): the next re-clustering fits and stores them


def load_cobusy(store: StateStore, version: int, tenants: Collection[str] | None) -> CobusyState:
    """The estimates stored with class table ``version``; a missing or damaged row is logged and
    returned as the reason (never raised: the placement falls back, the service keeps serving)."""
    source = f"{store.path} (table cobusy_estimates, class table v{version})"
    try:
        data = store.load_cobusy(version)
    except Exception as exc:  # an unreadable database page: same fallback as a damaged row
        note = f"{source}: cannot be read ({type(exc).__name__}: {exc})"
        logger.error("co-busy estimates unusable, placement falls back: %s", note)
        return CobusyState(None, note)
    if data is None:
        note = f"{source}: no co-busy estimates stored (re-clustering with placement_cobusy on stores them)"
        logger.warning("%s; placement falls back", note)
        return CobusyState(None, note, pending=True)
    try:
        stored = decode_cobusy(data, source, tenants)
    except CobusyStoreError as exc:
        logger.error("co-busy estimates unusable, placement falls back: %s", exc)
        return CobusyState(None, str(exc))
    logger.info("co-busy estimates of class table v%d loaded: %d tenants", version, len(stored.model.tenants))
    return CobusyState(CobusyEstimates(version, stored))

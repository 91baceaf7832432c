"""Per-tenant history: reports aggregated per time slot, stored as Parquet partitioned by day.

Stored row (one per tenant and slot and source file)::

    tenant: string, slot_start_s: int64, n_reports: int64, cpu_frac_sum: float64, memory_frac_sum: float64

A tenant's average-server CPU in a slot is ``sum(cpu_frac_sum) / sum(n_reports)`` over every file
holding that slot, where ``cpu_frac = primary_cpu_cores / capacity_cores`` of one report: sums and
counts add up across files, so a slot split over several log segments aggregates exactly.

Files: ``<root>/day=YYYY-MM-DD/seg-<first>-<last>.parquet`` holds the reports of log segments
``first..last`` whose slot starts on that (UTC) day. Crash safety:

1. every file is written to ``*.tmp``, fsync'd, renamed, and the directory fsync'd, so a reader
   never sees a half-written Parquet file (stray ``*.tmp`` files are deleted at start-up);
2. writing segment ``n`` always produces ``seg-n-n.parquet`` with the same content, so redoing an
   interrupted compaction simply replaces the file;
3. merging files ``a..b`` writes ``seg-a-b.parquet`` before deleting its inputs; a reader ignores (and
   start-up deletes) every file whose segment range lies inside another file's range in the same day,
   so a crash between the rename and the deletes never counts a report twice.

Each file also carries, in its Parquet key/value metadata (``harvest.node_seq``), the highest report
``seq`` of every node whose reports it holds: the de-duplication state can be rebuilt from the
history alone when SQLite lost recent transactions (e.g. ``state.sqlite-wal`` deleted after a crash).

Damage: the owner verifies every visible file at start-up (footer, schema, the ``tenant`` column) and
every file it reads; a file that fails is moved to ``<root>/quarantine/`` with a ``.reason`` file
beside it, logged and listed in :attr:`HistoryStore.quarantined`; the rest keeps being served.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from placement_service.server.reports import NodeReport
from placement_service.server.wal import fsync_dir

logger = logging.getLogger(__name__)

SCHEMA = pa.schema(
    [
        ("tenant", pa.string()),
        ("slot_start_s", pa.int64()),
        ("n_reports", pa.int64()),
        ("cpu_frac_sum", pa.float64()),
        ("memory_frac_sum", pa.float64()),
    ]
)
_FILE_RE = re.compile(r"^seg-(\d+)-(\d+)\.parquet$")
NODE_SEQ_KEY = b"harvest.node_seq"
QUARANTINE_DIR = "quarantine"
SlotKey = tuple[str, int]
# [n_reports, cpu_frac_sum, memory_frac_sum]
Aggregate = dict[SlotKey, list[float]]


@dataclass(frozen=True)
class SlotSample:
    slot_start_s: int
    n_reports: int
    cpu_frac_sum: float
    memory_frac_sum: float

    def to_json(self) -> dict[str, float | int]:
        n = max(self.n_reports, 1)
        return {
            "slot_start_s": self.slot_start_s,
            "reports": self.n_reports,
            "cpu_frac": self.cpu_frac_sum / n,
            "memory_frac": self.memory_frac_sum / n,
            "cpu_frac_sum": self.cpu_frac_sum,
            "memory_frac_sum": self.memory_frac_sum,
        }


def add_reports(agg: Aggregate, reports: Iterable[NodeReport], slot_s: int) -> None:
    """Add reports to a per-(tenant, slot) aggregate in place."""
    for r in reports:
        key = (r.tenant, int(r.timestamp // slot_s) * slot_s)
        cell = agg.get(key)
        if cell is None:
            agg[key] = [1.0, r.cpu_frac, r.memory_frac]
        else:
            cell[0] += 1.0
            cell[1] += r.cpu_frac
            cell[2] += r.memory_frac


def day_of(slot_start_s: int) -> str:
    return dt.datetime.fromtimestamp(slot_start_s, tz=dt.UTC).strftime("%Y-%m-%d")


def _table_from_aggregate(agg: Mapping[SlotKey, list[float]], node_seq: Mapping[str, int] | None = None) -> pa.Table:
    keys = sorted(agg)
    schema = SCHEMA
    if node_seq:
        schema = SCHEMA.with_metadata({NODE_SEQ_KEY: json.dumps(dict(node_seq), separators=(",", ":")).encode()})
    return pa.table(
        {
            "tenant": [k[0] for k in keys],
            "slot_start_s": [k[1] for k in keys],
            "n_reports": [int(agg[k][0]) for k in keys],
            "cpu_frac_sum": [agg[k][1] for k in keys],
            "memory_frac_sum": [agg[k][2] for k in keys],
        },
        schema=schema,
    )


def node_seq_of(metadata: Mapping[bytes, bytes] | None) -> dict[str, int]:
    """The ``harvest.node_seq`` map of a file's key/value metadata (empty when absent)."""
    raw = (metadata or {}).get(NODE_SEQ_KEY)
    if not raw:
        return {}
    doc = json.loads(raw)
    return {str(k): int(v) for k, v in doc.items()}


def merge_node_seq(into: dict[str, int], other: Mapping[str, int]) -> None:
    for node, seq in other.items():
        if seq > into.get(node, 0):
            into[node] = seq


def write_parquet_atomic(table: pa.Table, path: Path) -> None:
    """Write ``table`` to ``path`` so that ``path`` is either absent or complete."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as fh:
        pq.write_table(table, fh, row_group_size=65536, compression="zstd")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def visible_files(day_dir: Path) -> list[tuple[int, int, Path]]:
    """The files of one day that count: those not covered by another file's segment range."""
    ranges = []
    for p in day_dir.iterdir():
        m = _FILE_RE.match(p.name)
        if m:
            ranges.append((int(m.group(1)), int(m.group(2)), p))
    out = []
    for a, b, p in ranges:
        covered = any((a2 <= a and b <= b2) and (a2, b2) != (a, b) for a2, b2, _ in ranges)
        if not covered:
            out.append((a, b, p))
    return sorted(out)


class HistoryStore:
    """Reads and writes the Parquet history under ``root`` (thread-safe)."""

    def __init__(self, root: Path, slot_s: int, merge_threshold: int = 16, cleanup: bool = True) -> None:
        """``cleanup`` (the owning process only) verifies the files, quarantines damaged ones and
        deletes half-written and superseded ones; other readers only skip what they cannot read."""
        self.root = root
        self.slot_s = slot_s
        self.merge_threshold = merge_threshold
        self.owner = cleanup
        root.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self.quarantined: list[dict[str, str]] = []
        self.known_tenants: set[str] = set()
        self.node_seq: dict[str, int] = {}  # highest stored seq per node, from the files' metadata
        self.max_segment_id = 0
        if cleanup:
            self._verify()
            self._cleanup()

    def _verify(self) -> None:
        """Start-up check of every visible file (footer, schema, tenant column): see the module
        docstring. Also collects the known tenants, node seqs and the highest segment id."""
        for day_dir in self._day_dirs():
            for _a, b, p in visible_files(day_dir):
                try:
                    meta = pq.read_metadata(p)
                    schema = pq.read_schema(p)
                    if not schema.remove_metadata().equals(SCHEMA):
                        raise ValueError(f"schema {schema.remove_metadata()} is not the history schema")
                    tenants = pq.read_table(p, columns=["tenant"])["tenant"].unique().to_pylist()
                    seqs = node_seq_of(schema.metadata)
                    del meta
                except (pa.ArrowException, OSError, ValueError) as exc:
                    self._quarantine(p, f"unreadable at start-up: {exc}")
                    continue
                self.known_tenants.update(str(t) for t in tenants)
                merge_node_seq(self.node_seq, seqs)
                self.max_segment_id = max(self.max_segment_id, b)

    def _quarantine(self, path: Path, reason: str) -> None:
        """Move a damaged file out of the history (owner only); keep why beside it."""
        reason = reason.replace("\n", " ")[:500]
        dest_dir = self.root / QUARANTINE_DIR / path.parent.name
        dest_dir.mkdir(parents=True, exist_ok=True)
        dest = dest_dir / f"{path.name}.{int(time.time())}"
        try:
            os.replace(path, dest)
            (dest_dir / f"{dest.name}.reason").write_text(reason + "\n")
            fsync_dir(path.parent)
        except OSError as exc:
            logger.error("history: cannot quarantine damaged %s (%s): %s", path, reason, exc)
            return
        logger.error("history: quarantined damaged %s -> %s: %s; its samples are no longer served",
                     path, dest, reason)
        self.quarantined.append({"file": str(path.relative_to(self.root)), "moved_to": str(dest), "reason": reason})

    def _cleanup(self) -> None:
        for day_dir in self._day_dirs():
            keep = {p for _, _, p in visible_files(day_dir)}
            for p in day_dir.iterdir():
                if p.name.endswith(".tmp") or (_FILE_RE.match(p.name) and p not in keep):
                    logger.info("removing %s (half-written or superseded)", p)
                    p.unlink()

    def _day_dirs(self) -> list[Path]:
        return sorted(p for p in self.root.glob("day=*") if p.is_dir())

    # -- writing ---------------------------------------------------------------------------------
    def write_segment(self, segment_id: int, agg: Mapping[SlotKey, list[float]],
                      node_seq: Mapping[str, int] | None = None) -> list[Path]:
        """Store one log segment's aggregate (one file per day it touches); idempotent. ``node_seq``
        (highest seq per node in the segment) goes into every file's metadata."""
        by_day: dict[str, dict[SlotKey, list[float]]] = {}
        for key, cell in agg.items():
            by_day.setdefault(day_of(key[1]), {})[key] = cell
        written = []
        for day, part in sorted(by_day.items()):
            day_dir = self.root / f"day={day}"
            if not day_dir.exists():
                day_dir.mkdir(parents=True, exist_ok=True)
                fsync_dir(self.root)
            path = day_dir / f"seg-{segment_id}-{segment_id}.parquet"
            with self._lock:
                write_parquet_atomic(_table_from_aggregate(part, node_seq), path)
            written.append(path)
            self.known_tenants.update(k[0] for k in part)
            self.max_segment_id = max(self.max_segment_id, segment_id)
            if node_seq:
                merge_node_seq(self.node_seq, node_seq)
            if len(visible_files(day_dir)) > self.merge_threshold:
                self.merge_day(day_dir)
        return written

    def merge_day(self, day_dir: Path) -> Path | None:
        """Merge every visible file of one day into one (see the module docstring, point 3)."""
        with self._lock:
            files = visible_files(day_dir)
            if len(files) < 2:
                return None
            tables = [pq.read_table(p) for _, _, p in files]
            seqs: dict[str, int] = {}
            for t in tables:
                merge_node_seq(seqs, node_seq_of(t.schema.metadata))
            table = pa.concat_tables([t.cast(SCHEMA) for t in tables])
            grouped = table.group_by(["tenant", "slot_start_s"]).aggregate(
                [("n_reports", "sum"), ("cpu_frac_sum", "sum"), ("memory_frac_sum", "sum")]
            )
            grouped = grouped.rename_columns(
                [{"n_reports_sum": "n_reports", "cpu_frac_sum_sum": "cpu_frac_sum",
                  "memory_frac_sum_sum": "memory_frac_sum"}.get(n, n) for n in grouped.column_names]
            ).select(SCHEMA.names).sort_by([("tenant", "ascending"), ("slot_start_s", "ascending")])
            first, last = min(a for a, _, _ in files), max(b for _, b, _ in files)
            out = day_dir / f"seg-{first}-{last}.parquet"
            merged_schema = SCHEMA.with_metadata({NODE_SEQ_KEY: json.dumps(seqs, separators=(",", ":")).encode()})
            write_parquet_atomic(grouped.cast(merged_schema), out)
            for _, _, p in files:
                if p != out:
                    p.unlink()
            fsync_dir(day_dir)
            return out

    # -- reading ---------------------------------------------------------------------------------
    def _files_between(self, since_s: float, until_s: float) -> list[Path]:
        lo, hi = day_of(int(max(since_s, 0))), day_of(int(min(until_s, 253402214399)))
        out: list[Path] = []
        for day_dir in self._day_dirs():
            day = day_dir.name[4:]
            if lo <= day <= hi:
                out.extend(p for _, _, p in visible_files(day_dir))
        return out

    def read_table(self, since_s: float, until_s: float, tenant: str | None = None) -> pa.Table:
        """Rows with ``since_s <= slot_start_s < until_s`` (optionally one tenant), not yet summed."""
        filters: list[tuple[str, str, object]] = [
            ("slot_start_s", ">=", int(np.floor(since_s))), ("slot_start_s", "<", int(np.ceil(until_s)))
        ]
        if tenant is not None:
            filters.append(("tenant", "=", tenant))
        tables: list[pa.Table] = []
        self._read_consistent(since_s, until_s, filters, None, tables.append, tables.clear)
        if not tables:
            return SCHEMA.empty_table()
        return pa.concat_tables(tables)

    def _read_consistent(self, since_s: float, until_s: float, filters: list[tuple[str, str, object]],
                         columns: list[str] | None, add: Callable[[pa.Table], None],
                         restart: Callable[[], None]) -> None:
        """``add`` each non-empty file's rows in the window. Another process (re-clustering) reads
        while the owner may merge a day: a file deleted between listing and reading makes it
        ``restart`` and list again (merges keep every report in exactly one visible file)."""
        for attempt in range(5):
            with self._lock:
                try:
                    for p in self._files_between(since_s, until_s):
                        table = self._read_file(p, filters, columns)
                        if table is not None and table.num_rows:
                            add(table)
                    return
                except FileNotFoundError:
                    if attempt == 4:
                        raise
                    restart()

    def _read_file(self, path: Path, filters: list[tuple[str, str, object]],
                   columns: list[str] | None = None) -> pa.Table | None:
        """One file's rows, or None when it is damaged (quarantined by the owner, skipped by others)."""
        try:
            return pq.read_table(path, schema=SCHEMA, filters=filters, columns=columns)
        except FileNotFoundError:
            raise
        except (pa.ArrowException, OSError, ValueError) as exc:
            if self.owner:
                self._quarantine(path, f"unreadable: {exc}")
            else:
                logger.warning("history: skipping unreadable %s: %s", path, exc)
            return None

    def samples(self, tenant: str, since_s: float, until_s: float,
                pending: Iterable[Mapping[SlotKey, list[float]]] = ()) -> list[SlotSample]:
        """One tenant's slots in ``[since_s, until_s)``, stored plus not-yet-compacted aggregates."""
        acc: dict[int, list[float]] = {}
        table = self.read_table(since_s, until_s, tenant)
        for slot, n, c, m in zip(
            table["slot_start_s"].to_pylist(), table["n_reports"].to_pylist(),
            table["cpu_frac_sum"].to_pylist(), table["memory_frac_sum"].to_pylist(), strict=True,
        ):
            cell = acc.setdefault(slot, [0.0, 0.0, 0.0])
            cell[0] += n
            cell[1] += c
            cell[2] += m
        for agg in pending:
            for (t, slot), (n, c, m) in agg.items():
                if t == tenant and since_s <= slot < until_s:
                    cell = acc.setdefault(slot, [0.0, 0.0, 0.0])
                    cell[0] += n
                    cell[1] += c
                    cell[2] += m
        return [SlotSample(s, int(v[0]), v[1], v[2]) for s, v in sorted(acc.items())]

    def tenant_matrix(self, since_s: float, until_s: float) -> tuple[list[str], int, np.ndarray]:
        """Every tenant's average CPU per slot: ``(tenants, first_slot_s, cpu[n_tenants, n_slots])``.

        Slots without reports are NaN; the slots run from the first to the last one with a report
        (slot starts are multiples of ``slot_s``). Used by re-clustering (which fills short gaps
        itself). Files are summed one at a time into two slot x tenant accumulators, so the peak
        memory is about three result-sized arrays plus one file (14 days of 5,000 tenants: ~0.5 GB,
        against ~2.7 GB for reading every row at once), and every page the re-clustering touches
        is one it needs: fresh memory is what slows the serving process beside it.
        """
        lo, hi = int(np.floor(since_s)), int(np.ceil(until_s))
        sums = _SlotSums(lo - lo % self.slot_s, hi, self.slot_s)
        self._read_consistent(since_s, until_s, [("slot_start_s", ">=", lo), ("slot_start_s", "<", hi)],
                              ["tenant", "slot_start_s", "n_reports", "cpu_frac_sum"], sums.add, sums.reset)
        return sums.mean_cpu()


class _SlotSums:
    """Reports and CPU summed per (slot, tenant) over slots ``[base_s, until_s)``, one file's rows
    at a time (``tenant_matrix``)."""

    def __init__(self, base_s: int, until_s: int, slot_s: int) -> None:
        self.base_s, self.slot_s = base_s, slot_s
        self.n_slots = max(1, -(-(until_s - base_s) // slot_s))
        self.reset()

    def reset(self) -> None:
        self.ids: dict[str, int] = {}
        self.n = np.zeros((self.n_slots, 0))
        self.c = np.zeros((self.n_slots, 0))

    def add(self, table: pa.Table) -> None:
        enc = pc.dictionary_encode(table["tenant"]).combine_chunks()
        local = np.array([self.ids.setdefault(str(x), len(self.ids)) for x in enc.dictionary.to_pylist()],
                         dtype=np.int64)
        cap = self.n.shape[1]
        if len(self.ids) > cap:  # new tenants: widen the accumulators (rare after the first file)
            cap = max(len(self.ids), 2 * cap)
            wider = np.zeros((self.n_slots, cap - self.n.shape[1]))
            self.n, self.c = np.concatenate([self.n, wider], axis=1), np.concatenate([self.c, wider], axis=1)
        t = local[enc.indices.to_numpy(zero_copy_only=False)]
        s = (table["slot_start_s"].to_numpy() - self.base_s) // self.slot_s
        s_lo, s_hi = int(s.min()), int(s.max())
        key, size = (s - s_lo) * cap + t, (s_hi - s_lo + 1) * cap
        for acc, col in ((self.n, "n_reports"), (self.c, "cpu_frac_sum")):
            weights = table[col].to_numpy().astype(np.float64)
            acc[s_lo:s_hi + 1] += np.bincount(key, weights=weights, minlength=size).reshape(-1, cap)

    def mean_cpu(self) -> tuple[list[str], int, np.ndarray]:
        """``(tenants by name, first slot with a report, cpu[tenant, slot])``, NaN where none."""
        used = len(self.ids)
        n, c = self.n[:, :used], self.c[:, :used]
        seen = np.flatnonzero((n > 0).any(axis=1))
        if seen.size == 0:
            return [], 0, np.zeros((0, 0))
        first, last = int(seen[0]), int(seen[-1])
        n, c = n[first:last + 1], c[first:last + 1]
        np.divide(c, n, out=c, where=n > 0)
        c[n <= 0] = np.nan
        names = list(self.ids)
        order = np.argsort(names, kind="stable")
        cpu = np.ascontiguousarray(c.T[order])  # one copy: tenants as rows, by name
        return [names[i] for i in order], self.base_s + first * self.slot_s, cpu

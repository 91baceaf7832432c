"""Result records: ``results.json`` (+ ``results.csv``) of one experiment, written atomically.

``results.json`` = ``{"experiment": ..., "datacenter": ..., "settings": {...}, "records": [...],
"summary": [...]}``. A record is one (system, level or replicas, run); schedule records carry
``avg_job_time_s``, ``killed_tasks`` and ``utilization``; durability records ``lost_blocks`` and ``one_left``;
availability records ``failed_access_pct``, ``expected_failed_per_million``, ``utilization``, ``unplaced_blocks``
(blocks that found no space), ``moved_replicas`` and ``moves_per_day`` (HDFS-H-cobusy-mover; 0 otherwise). ``summary`` has, per (system,
level or replicas), the min / mean / max of those figures over the runs.
"""

from __future__ import annotations

import io
import json
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from placement_service import csvsafe
from placement_service.atomic import atomic_write_text

Record = dict[str, Any]

METRICS = (
    "avg_job_time_s",
    "killed_tasks",
    "utilization",
    "total_utilization",
    "lost_blocks",
    "lost_pct",
    "failed_access_pct",
    "expected_failed_per_million",
    "moved_replicas",
    "moves_per_day",
    "one_left",
    "unplaced_blocks",
)
GROUP_KEYS = ("datacenter", "system", "scaling", "level", "replicas")


def summarize(records: Iterable[Mapping[str, Any]]) -> list[Record]:
    """Min / mean / max of every metric per (datacenter, system, scaling, level, replicas)."""
    groups: dict[tuple[Any, ...], list[Mapping[str, Any]]] = {}
    for r in records:
        groups.setdefault(tuple(r.get(k) for k in GROUP_KEYS), []).append(r)
    out: list[Record] = []
    for key, rows in groups.items():
        s: Record = {k: v for k, v in zip(GROUP_KEYS, key, strict=True) if v is not None}
        s["runs"] = len(rows)
        for m in METRICS:
            vals = [float(r[m]) for r in rows if r.get(m) is not None and math.isfinite(float(r[m]))]
            if vals:
                s[m] = {"min": min(vals), "mean": sum(vals) / len(vals), "max": max(vals)}
        out.append(s)
    return out


def write_results(
    out_dir: str | Path, experiment: str, datacenter: str, settings: Mapping[str, Any], records: Sequence[Record]
) -> dict[str, Any]:
    """Write ``results.json`` and ``results.csv`` into ``out_dir``; returns the JSON document."""
    doc: dict[str, Any] = {
        "experiment": experiment,
        "datacenter": datacenter,
        "settings": dict(settings),
        "records": list(records),
        "summary": summarize(records),
    }
    out = Path(out_dir)
    atomic_write_text(out / "results.json", json.dumps(doc, indent=1, sort_keys=False, default=str) + "\n")
    columns: list[str] = []
    for r in records:
        for k in r:
            if k not in columns:
                columns.append(k)
    buf = io.StringIO()
    writer = csvsafe.DictWriter(buf, fieldnames=columns, lineterminator="\n")  # formula prefixes escaped
    writer.writeheader()
    for r in records:
        writer.writerow(r)
    atomic_write_text(out / "results.csv", buf.getvalue())
    return doc


def read_results(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if p.is_dir():
        p = p / "results.json"
    doc: dict[str, Any] = json.loads(p.read_text(encoding="utf-8"))
    return doc

"""``harvest ras revocations``: the capacity service's revocation log as reimage events.

A revoked elastic server loses everything the harvesting side put on it, like a reimage. Written in
the reimage data contract (``timestamp, server``; extra columns ``cluster, pool, state, reason``),
the log is what ``harvest sim durability --reimages`` and the placement service's
``--reimages-file`` read: revocations per elastic pool are the elastic servers' reimage history for
the 3x3 grid rows. ``pool`` is the elastic entity the server was in before it was taken back
(``elastic:shared-buffer:<hw>`` or ``elastic:unassigned``), read from the plan version before the
one that revoked it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from placement_service.capacity.ras.domain import elastic_pool


def add_parser(sub: Any) -> None:
    p = sub.add_parser("revocations", help="write the capacity service's revocation log as reimage events",
                       description="Read DATA_DIR/capacity.sqlite of harvest ras serve and write every "
                                   "revocation as a reimage event (timestamp, server, cluster, pool, state, "
                                   "reason) for harvest sim durability --reimages.")  # fmt: skip
    p.add_argument("--data-dir", required=True, help="the --data-dir of harvest ras serve")
    p.add_argument("--out", required=True, help="events file (.csv or .parquet)")
    p.add_argument("--cluster", help="only this cluster's revocations")
    p.set_defaults(func=run)


def revocation_events(data_dir: Path, cluster: str | None = None) -> dict[str, list[Any]]:
    from placement_service.capacity.ras.store import CapacityStore

    path = data_dir / "capacity.sqlite"
    if not path.exists():
        raise FileNotFoundError(f"{path}: no capacity service state here (expected harvest ras serve --data-dir)")
    store = CapacityStore(path)
    try:
        cols: dict[str, list[Any]] = {k: [] for k in ("timestamp", "server", "cluster", "pool", "state", "reason")}
        before: dict[int, dict[str, Any]] = {}
        for r in store.revocations(cluster=cluster):
            v = int(r["plan_version"]) - 1
            if v not in before:
                before[v] = (store.plan(v) or {}).get("assignment", {})
            cols["timestamp"].append(float(r["created_s"]))
            cols["server"].append(r["server"])
            cols["cluster"].append(r["cluster"])
            cols["pool"].append(elastic_pool(before[v].get(r['server'])))
            cols["state"].append(r["state"])
            cols["reason"].append(r["reason"])
        return cols
    finally:
        store.close()


def run(args: argparse.Namespace) -> int:
    from placement_service.capacity.ras import io

    try:
        cols = revocation_events(Path(args.data_dir), args.cluster)
    except FileNotFoundError as exc:
        print(f"harvest ras revocations: {exc}", file=sys.stderr)
        return 2
    io.write_table(args.out, cols)
    print(f"{len(cols['server'])} revocation(s) written to {args.out}")
    return 0

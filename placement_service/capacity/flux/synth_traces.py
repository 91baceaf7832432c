"""Synthetic RPC traces and pod CPU for a generated instance, in the Nezha layout ``flux model`` reads.

The instance's first service plays the gateway (``flux model --gateway <services[0]>``). For
``windows`` one-minute windows: product p sends Poisson(``traces_per_window * share_p``) sampled
traces (share_p = p's part of the total demand); each trace is a gateway root span ``/*``, a span of
p's first front-end service whose operation is the product name (the route), and below it one span
per call the product makes to every other service (``round(calls[p, s])``, at least one where
calls > 0), so the gateway -> route -> service depth is 3. A service's CPU in a window is
``sum_p alpha[s, p] * n_p / mean(n_p) * (1 + 3% noise)`` in the instance's units (reported as
millicores), plus a 1-unit idle floor for services no product calls.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np

from placement_service import csvsafe
from placement_service.capacity.flux.domain import Instance

START_S = 1_674_981_600  # a fixed epoch (2023-01-29 08:40 UTC), so runs are reproducible


def _pod(service: str, k: int) -> str:
    return f"{service}-{k:010x}-a{k % 10000:04d}"


def write_traces(directory: Path, inst: Instance, calls: np.ndarray, *, seed: int = 0, windows: int = 12,
                 traces_per_window: int = 60) -> None:  # fmt: skip
    rng = np.random.default_rng(seed + 7)
    S, R, H, P, T = inst.shape
    (directory / "trace").mkdir(parents=True, exist_ok=True)
    (directory / "metric").mkdir(parents=True, exist_ok=True)
    weight = inst.alpha.sum(axis=0)
    share = weight / weight.sum() if weight.sum() > 0 else np.full(P, 1.0 / P)
    counts = rng.poisson(traces_per_window * share[:, None] + 1.0, (P, windows))
    gw = inst.services[0]
    callable_ = [np.flatnonzero(calls[p, 1:] > 0) + 1 for p in range(P)]
    front = [int(c[0]) if len(c) else min(1, S - 1) for c in callable_]
    span_id = 0
    for w in range(windows):
        t0 = (START_S + 60 * w + 10) * 10**9
        rows = []
        for p in range(P):
            for k in range(int(counts[p, w])):
                tid = f"{w:04x}{p:04x}{k:06x}".ljust(32, "0")
                start = t0 + int(rng.integers(0, 55 * 10**9))
                root = f"{span_id:016x}"
                span_id += 1
                rows.append((tid, root, "root", _pod(gw, 1), "/*", start, start + 5_000_000, 5000))
                fs = front[p]
                fid = f"{span_id:016x}"
                span_id += 1
                rows.append((tid, fid, root, _pod(inst.services[fs], fs + 1), inst.products[p], start + 1000,
                             start + 4_000_000, 3999))  # fmt: skip
                for s in (int(v) for v in callable_[p]):
                    if s == fs:
                        continue
                    for _ in range(max(1, int(round(calls[p, s])))):
                        sid = f"{span_id:016x}"
                        span_id += 1
                        dur = int(1000 + 50_000 * inst.alpha[s, p] / max(1e-9, calls[p, s]))
                        rows.append((tid, sid, fid, _pod(inst.services[s], s + 1), f"/api/{inst.services[s]}",
                                     start + 2000, start + 2000 + dur, dur // 1000))  # fmt: skip
        name = f"{(8 + (40 + w + 1) // 60):02d}_{(40 + w + 1) % 60:02d}_trace.csv.gz"
        with gzip.open(directory / "trace" / name, "wt", newline="") as fh:
            wr = csvsafe.writer(fh)
            wr.writerow(["TraceID", "SpanID", "ParentID", "PodName", "OperationName", "StartTimeUnixNano",
                         "EndTimeUnixNano", "Duration"])  # fmt: skip
            wr.writerows(rows)
    rho = counts / counts.mean(axis=1, keepdims=True)
    cpu = inst.alpha @ rho * (1.0 + 0.03 * rng.standard_normal((S, windows)))
    cpu = np.maximum(cpu, 0.0) + np.where(inst.alpha.sum(axis=1) > 0, 0.0, 1.0)[:, None]
    for s, name in enumerate(inst.services):
        pod = _pod(name, s + 1)
        series = cpu[s]
        with gzip.open(directory / "metric" / f"{pod}_metric.csv.gz", "wt", newline="") as fh:
            wr = csvsafe.writer(fh)
            wr.writerow(["Time", "TimeStamp", "PodName", "CpuUsage(m)"])
            for w in range(windows):
                ts = START_S + 60 * (w + 1) + 9
                wr.writerow([f"t{w}", ts, pod, float(series[w])])
    (directory / "faults.json").write_text(json.dumps({}))

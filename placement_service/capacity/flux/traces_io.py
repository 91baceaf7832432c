"""Adapter: a trace directory (Nezha layout) -> ``Observations`` -> fitted model documents.

Layout: ``trace/*_trace.csv[.gz]`` (TraceID, SpanID, ParentID, PodName, OperationName,
StartTimeUnixNano, EndTimeUnixNano, Duration), ``metric/<pod>_metric.csv[.gz]`` (TimeStamp epoch s,
``CpuUsage(m)``, ...), optional ``faults.json`` (``{hour: [{"inject_time": "YYYY-mm-dd HH:MM:SS"}]}``,
UTC, matching the traces' clock). A pod's service is its name without the two Kubernetes suffixes
(``ts-auth-service-7f8d7d756d-k7b9j`` -> ``ts-auth-service``).

The unit of observation is a trace file: one sampled window of about a minute (the files do not
align with calendar minutes: ``08_44`` holds spans from 08:43:10 to 08:44:08). A trace belongs to the
first file it appears in (consecutive files overlap; a span exported twice counts once). A window's
CPU is each service's first CPU sample taken at or after the window's end (samples every 60 s; at
most 70 s later). Windows overlapping ``[inject_time, inject_time + fault_minutes)`` of any injected
fault are left out, as are windows without CPU samples.
"""

from __future__ import annotations

import json
import logging
import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv

from placement_service.capacity.flux import FluxError
from placement_service.capacity.flux.service_model import (
    METRICS,
    Observations,
    ServiceModel,
    Span,
    attribute,
    self_time_ns,
)

logger = logging.getLogger(__name__)

TRACE_COLUMNS = (
    "TraceID",
    "SpanID",
    "ParentID",
    "PodName",
    "OperationName",
    "StartTimeUnixNano",
    "EndTimeUnixNano",
)
_POD_SUFFIX = re.compile(r"^(?P<svc>.+?)-[0-9a-f]{8,10}-[0-9a-z]{5}$")


def service_of(pod: str) -> str:
    m = _POD_SUFFIX.match(pod)
    return m.group("svc") if m else pod


def _read_csv(path: Path) -> pa.Table:
    try:
        return pacsv.read_csv(path, convert_options=pacsv.ConvertOptions(strings_can_be_null=False))
    except (pa.ArrowInvalid, OSError) as exc:
        raise FluxError(f"{path}: cannot read as CSV: {exc}") from None


def read_cpu(directory: Path) -> dict[str, dict[int, float]]:
    """service -> {sample epoch s (rounded to the minute's sample): CPU millicores} (pods summed)."""
    files = sorted(directory.glob("*_metric.csv*"))
    if not files:
        raise FluxError(f"{directory}: no *_metric.csv[.gz] files")
    out: dict[str, dict[int, float]] = {}
    for f in files:
        t = _read_csv(f)
        for col in ("TimeStamp", "CpuUsage(m)"):
            if col not in t.column_names:
                raise FluxError(f"{f}: missing column {col!r}")
        pod = f.name.split("_metric.csv")[0]
        per = out.setdefault(service_of(pod), {})
        for i, (ts, cpu) in enumerate(
            zip(t.column("TimeStamp").to_pylist(), t.column("CpuUsage(m)").to_pylist(), strict=True)
        ):
            if (
                not isinstance(ts, int | float)
                or not isinstance(cpu, int | float)
                or math.isnan(cpu)
                or cpu < 0
            ):
                raise FluxError(f"{f}: row {i + 2}: field 'CpuUsage(m)' / 'TimeStamp': expected a non-negative number, "
                                f"got {cpu!r} / {ts!r}")  # fmt: skip
            per[int(ts)] = per.get(int(ts), 0.0) + float(cpu)
    return out


def read_faults(path: Path, fault_minutes: int) -> list[tuple[float, float]]:
    """[start, end) epoch s of every injected fault."""
    if not path.exists():
        return []
    try:
        doc = json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise FluxError(f"{path}: not valid JSON: {exc}") from None
    out: list[tuple[float, float]] = []
    items = [f for v in doc.values() for f in v] if isinstance(doc, dict) else list(doc)
    for i, f in enumerate(items):
        try:
            ts = datetime.strptime(str(f["inject_time"]), "%Y-%m-%d %H:%M:%S").replace(tzinfo=UTC).timestamp()
        except (KeyError, TypeError, ValueError):
            raise FluxError(
                f"{path}: fault {i}: field 'inject_time': expected 'YYYY-mm-dd HH:MM:SS'"
            ) from None
        out.append((ts, ts + 60.0 * fault_minutes))
    return out


def read_spans(directory: Path, known_services: set[str]) -> list[Span]:
    files = sorted(directory.glob("*_trace.csv*"))
    if not files:
        raise FluxError(f"{directory}: no *_trace.csv[.gz] files")
    spans: list[Span] = []
    first: dict[tuple[str, str], int] = {}
    duplicates = 0
    for unit, f in enumerate(files):
        t = _read_csv(f)
        missing = [c for c in TRACE_COLUMNS if c not in t.column_names]
        if missing:
            raise FluxError(f"{f}: missing column(s) {missing}")
        cols = {c: t.column(c).to_pylist() for c in TRACE_COLUMNS}
        for i in range(t.num_rows):
            where = f"{f}: row {i + 2}"
            pod = cols["PodName"][i]
            if not pod:
                raise FluxError(f"{where}: field 'PodName': empty (an unknown span)")
            svc = service_of(str(pod))
            if svc not in known_services:
                raise FluxError(f"{where}: field 'PodName': unknown span: service {svc!r} (pod {pod!r}) has no CPU "
                                f"metrics")  # fmt: skip
            start, end = cols["StartTimeUnixNano"][i], cols["EndTimeUnixNano"][i]
            if not isinstance(start, int) or not isinstance(end, int) or end < start:
                raise FluxError(f"{where}: field 'EndTimeUnixNano': expected an integer >= StartTimeUnixNano, "
                                f"got {end!r} (start {start!r})")  # fmt: skip
            for c in ("TraceID", "SpanID"):
                if not cols[c][i]:
                    raise FluxError(f"{where}: field {c!r}: empty")
            sp = Span(
                str(cols["TraceID"][i]),
                str(cols["SpanID"][i]),
                str(cols["ParentID"][i]),
                svc,
                str(cols["OperationName"][i]),
                int(start),
                int(end - start),
                where,
                unit,
            )
            key = (sp.trace, sp.span)
            if key in first:
                # consecutive files overlap: the same span exported twice is one span; different ones clash
                old = spans[first[key]]
                if (old.parent, old.service, old.operation, old.start_ns) != (
                    sp.parent,
                    sp.service,
                    sp.operation,
                    sp.start_ns,
                ):
                    raise FluxError(f"{where}: field 'SpanID': span {sp.span!r} of trace {sp.trace!r} repeats "
                                    f"{old.where} with different fields")  # fmt: skip
                duplicates += 1
                continue
            first[key] = len(spans)
            spans.append(sp)
    if duplicates:
        logger.info("%s: %d spans exported twice (overlapping files) counted once", directory, duplicates)
    return spans


def observations(spans: list[Span], products: list[str], cpu: dict[str, dict[int, float]],
                 faults: list[tuple[float, float]]) -> tuple[Observations, dict[str, int]]:  # fmt: skip
    """Aggregate per trace file (window); returns the observations and counts of what was left out."""
    trace_unit: dict[str, int] = {}
    lo: dict[int, int] = {}
    hi: dict[int, int] = {}
    for sp in spans:
        trace_unit.setdefault(sp.trace, sp.unit)
        trace_unit[sp.trace] = min(trace_unit[sp.trace], sp.unit)
        lo[sp.unit] = min(lo.get(sp.unit, sp.start_ns), sp.start_ns)
        hi[sp.unit] = max(hi.get(sp.unit, sp.start_ns), sp.start_ns)
    services = sorted(cpu)  # every service with CPU; one no trace reaches is all residual
    samples = {s: np.array(sorted(cpu[s])) for s in services}
    units, ends, cpu_cols = [], [], []
    dropped = {"fault_windows": 0, "windows_without_cpu": 0}
    for u in sorted(lo):
        a_s, b_s = lo[u] / 1e9, hi[u] / 1e9
        if any(a_s < f_end and f_start < b_s for f_start, f_end in faults):
            dropped["fault_windows"] += 1
            continue
        col = []
        for s in services:
            ts = samples[s]
            k = int(np.searchsorted(ts, b_s))
            if k >= len(ts) or ts[k] - b_s > 70:
                break
            col.append(cpu[s][int(ts[k])])
        if len(col) < len(services):
            dropped["windows_without_cpu"] += 1
            continue
        units.append(u)
        ends.append(int(b_s))
        cpu_cols.append(col)
    prods = sorted(set(products))
    s_of = {s: i for i, s in enumerate(services)}
    p_of = {p: i for i, p in enumerate(prods)}
    u_of = {u: i for i, u in enumerate(units)}
    S, P, M = len(services), len(prods), len(units)
    calls = np.zeros((S, P, M))
    stime = np.zeros((S, P, M))
    traces = np.zeros((P, M))
    own = self_time_ns(spans)
    seen: set[tuple[str, int]] = set()
    for i, sp in enumerate(spans):
        mi = u_of.get(trace_unit[sp.trace])
        if mi is None:
            continue
        si, pi = s_of[sp.service], p_of[products[i]]
        calls[si, pi, mi] += 1
        stime[si, pi, mi] += own[i]
        if sp.parent in ("root", "", "0") and (sp.trace, pi) not in seen:
            seen.add((sp.trace, pi))
            traces[pi, mi] += 1
    cpu_m = np.array(cpu_cols, dtype=float).T if M else np.zeros((S, 0))
    obs = Observations(
        tuple(services), tuple(prods), tuple(ends), {"calls": calls, "span_time": stime}, traces, cpu_m
    )
    return obs, dropped


@dataclass
class FitResult:
    obs: Observations
    model: ServiceModel
    dropped: dict[str, int]
    source: str

    def model_doc(self) -> dict[str, Any]:
        o, m = self.obs, self.model
        return {
            "products": list(o.products),
            "services": [
                {"name": o.services[s], "metric": m.metric_[s], "capacity_mcores": float(m.capacity_[s]),
                 "alpha": {o.products[p]: float(m.alpha_[s, p]) for p in range(len(o.products)) if m.alpha_[s, p] > 0}}
                for s in range(len(o.services))
            ],
            "units": "millicores of CPU for all of a product's peak-window traffic",
            "source": self.source,
        } | prediction_fields(o, m)  # fmt: skip

    def report_doc(self) -> dict[str, Any]:
        o, m = self.obs, self.model
        return {"minutes": len(o.minutes), "train_minutes": int(m.train_.sum()), "heldout_minutes": int((~m.train_).sum()),
                "peak_minutes": int(m.peak_.sum()), "dropped": self.dropped, "services": m.report_}  # fmt: skip

    def summary_text(self) -> str:
        rep = self.report_doc()
        lines = [f"{len(self.obs.services)} services, {len(self.obs.products)} products, {rep['minutes']} windows "
                 f"({rep['train_minutes']} train / {rep['heldout_minutes']} held out), dropped {self.dropped}",
                 f"{'service':34s} {'metric':10s} {'resid calls':>11s} {'resid span':>10s} {'held-out':>9s} {'const':>7s} "
                 f"predictor"]  # fmt: skip
        for r in rep["services"]:

            def f(v: Any) -> str:
                return "-" if v is None else f"{v:.3f}"

            lines.append(f"{r['service']:34s} {r['metric']:10s} {f(r['residual_train']['calls']):>11s} "
                         f"{f(r['residual_train']['span_time']):>10s} {f(r['error_heldout'][r['metric']]):>9s} "
                         f"{f(r['error_heldout_constant']):>7s} {r['predictor']}")  # fmt: skip
        n_base = sum(1 for r in rep["services"] if r["predictor"] == "baseline")
        lines.append(f"predictor (flux predict): the model for {len(rep['services']) - n_base} services, the baseline "
                     f"(mean CPU over the training windows) for {n_base}; reasons in model.json 'prediction'")  # fmt: skip
        return "\n".join(lines)


def prediction_fields(o: Observations, m: ServiceModel) -> dict[str, Any]:
    """What ``flux predict`` needs besides ``alpha``: the traffic the coefficients are relative to,
    the training mean traffic, and per service its baseline, calibration and predictor (step 7)."""
    per = {o.services[s]: {"baseline_mcores": float(m.baseline_mcores_[s]), "calibration": float(m.calibration_[s]),
                           "predictor": m.predictor_[s], "predictor_reason": m.predictor_reason_[s]}
           for s in range(len(o.services))}  # fmt: skip
    return {
        "traffic_unit": "sampled traces per trace window (about 60 s)",
        "baseline_traffic": {o.products[p]: float(m.baseline_traffic_[p]) for p in range(len(o.products))},
        "mean_traffic": {o.products[p]: float(m.mean_traffic_[p]) for p in range(len(o.products))},
        "prediction": per,
    }


def fit_from_directory(directory: str | Path, *, gateway: str = "ts-gateway-service", holdout: float = 0.3,
                       peak_minutes: int = 10, fault_minutes: int = 1) -> FitResult:  # fmt: skip
    d = Path(directory)
    obs, dropped = read_observations(d, gateway=gateway, fault_minutes=fault_minutes)
    model = ServiceModel(peak_minutes=peak_minutes, holdout=holdout).fit(obs)
    logger.info("service model: %d services, %d products, metrics %s", len(obs.services), len(obs.products),
                {m: model.metric_.count(m) for m in METRICS})  # fmt: skip
    return FitResult(obs, model, dropped, str(d))


def mean_traffic(directory: str | Path, *, gateway: str = "ts-gateway-service",
                 fault_minutes: int = 1) -> dict[str, float]:  # fmt: skip
    """Mean sampled traces per window of each product over a trace directory's clean windows (the
    counts ``flux predict --traces`` predicts from)."""
    obs = read_observations(directory, gateway=gateway, fault_minutes=fault_minutes)[0]
    if not obs.minutes:
        raise FluxError(f"{directory}: no window with traces and CPU outside the injected faults")
    return {p: float(obs.traces[i].mean()) for i, p in enumerate(obs.products)}


def read_observations(directory: str | Path, *, gateway: str = "ts-gateway-service",
                      fault_minutes: int = 1) -> tuple[Observations, dict[str, int]]:  # fmt: skip
    """A trace directory's per-window observations (attribution, demand, traffic, CPU)."""
    d = Path(directory)
    if not d.is_dir():
        raise FluxError(f"{d}: not a directory")
    cpu = read_cpu(d / "metric")
    faults = read_faults(d / "faults.json", fault_minutes)
    spans = read_spans(d / "trace", set(cpu))
    return observations(spans, attribute(spans, gateway), cpu, faults)

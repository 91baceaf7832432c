"""Service model: gateway attribution, bad traces named by file/row/field, fit on synthetic and real traces."""

from __future__ import annotations

import csv
import gzip
from pathlib import Path

import numpy as np
import pytest

from placement_service.capacity.flux import FluxError
from placement_service.capacity.flux.service_model import Span, attribute, self_time_ns
from placement_service.capacity.flux.traces_io import fit_from_directory, service_of

REAL = (
    Path(__file__).resolve().parents[3]
    / ".."
    / "shared"
    / "data"
    / "flux"
    / "nezha_trainticket"
    / "2023-01-29"
)


def S(span, parent, svc, op="op", trace="t", start=0, dur=10):
    return Span(trace, span, parent, svc, op, start, dur, f"f.csv: row {span}")


def test_nearest_upstream_gateway_names_the_product():
    spans = [
        S("1", "root", "gw", "/*"),
        S("2", "1", "front", "/route/a", start=1),
        S("3", "2", "db", "query", start=2),
        S("4", "3", "gw", "/*", start=3),  # the call re-enters the gateway: a new product below it
        S("5", "4", "search", "/route/b", start=4),
        S("6", "root", "batch", "/job", trace="u"),  # no gateway: attributed directly
    ]
    assert attribute(spans, "gw") == [
        "/route/a",
        "/route/a",
        "/route/a",
        "/route/b",
        "/route/b",
        "direct:batch/job",
    ]


def test_self_time_excludes_children():
    spans = [
        S("1", "root", "gw", dur=100),
        S("2", "1", "a", dur=60),
        S("3", "1", "b", dur=30),
        S("4", "2", "c", dur=70),
    ]
    assert list(self_time_ns(spans)) == [10.0, 0.0, 30.0, 70.0]


def test_missing_parent_and_cycle_name_file_row_and_field():
    with pytest.raises(FluxError, match=r"f.csv: row 2: field 'ParentID': parent span 'x' is not in trace"):
        attribute([S("1", "root", "gw"), S("2", "x", "a")], "gw")
    with pytest.raises(FluxError, match=r"field 'ParentID': the parent chain .* is a cycle"):
        attribute([S("1", "root", "gw"), S("2", "3", "a"), S("3", "2", "b")], "gw")


def test_pod_name_to_service():
    assert service_of("ts-auth-service-7f8d7d756d-k7b9j") == "ts-auth-service"
    assert service_of("ts-food-service-f5756978c-k8vqf") == "ts-food-service"
    assert service_of("plain") == "plain"


def _trace_dir(tmp_path: Path, rows: list[list[object]]) -> Path:
    d = tmp_path / "tr"
    (d / "trace").mkdir(parents=True)
    (d / "metric").mkdir()
    with gzip.open(d / "trace" / "08_44_trace.csv.gz", "wt", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["TraceID", "SpanID", "ParentID", "PodName", "OperationName", "StartTimeUnixNano", "EndTimeUnixNano",
                    "Duration"])  # fmt: skip
        w.writerows(rows)
    for pod in ("gw-0123456789-abcde", "a-0123456789-abcde"):
        with open(d / "metric" / f"{pod}_metric.csv", "w") as fh:
            fh.write("TimeStamp,CpuUsage(m)\n1674981849,5.0\n")
    return d


def test_unknown_span_is_named(tmp_path):
    d = _trace_dir(tmp_path, [["t", "1", "root", "gw-0123456789-abcde", "/*", 1674981790 * 10**9, 1674981790 * 10**9 + 5, 5],
                              ["t", "2", "1", "zz-0123456789-abcde", "/x", 1674981790 * 10**9, 1674981790 * 10**9 + 5, 5]])  # fmt: skip
    with pytest.raises(
        FluxError, match=r"08_44_trace.csv.gz: row 3: field 'PodName': unknown span: service 'zz'"
    ):
        fit_from_directory(d, gateway="gw")


def test_nan_cpu_is_named(tmp_path):
    d = _trace_dir(
        tmp_path,
        [["t", "1", "root", "gw-0123456789-abcde", "/*", 1674981790 * 10**9, 1674981790 * 10**9 + 5, 5]],
    )
    (d / "metric" / "a-0123456789-abcde_metric.csv").write_text("TimeStamp,CpuUsage(m)\n1674981849,nan\n")
    with pytest.raises(FluxError, match=r"a-0123456789-abcde_metric.csv: row 2: field 'CpuUsage\(m\)'"):
        fit_from_directory(d, gateway="gw")


def test_fit_recovers_alpha_on_synthetic_traces(tmp_path):
    from placement_service.capacity.flux.generate import generate
    from placement_service.capacity.flux.synth_traces import write_traces

    inst, calls = generate(n_regions=3, n_services=12, n_products=4, n_hardware=2, n_timesteps=2, seed=4)
    write_traces(tmp_path / "tr", inst, calls, seed=4, windows=16)
    res = fit_from_directory(tmp_path / "tr", gateway=inst.services[0], holdout=0.25, peak_minutes=12)
    doc = res.model_doc()
    assert {s["name"] for s in doc["services"]} == set(inst.services)
    assert set(doc["products"]) == set(inst.products)
    # every traced service's model error on held-out windows is small and beats the constant predictor
    rep = {r["service"]: r for r in res.report_doc()["services"]}
    traced = [s for s in inst.services[1:] if inst.alpha[inst.services.index(s)].sum() > 0]
    errs = np.array([rep[s]["error_heldout"][rep[s]["metric"]] for s in traced])
    consts = np.array([rep[s]["error_heldout_constant"] for s in traced])
    assert np.median(errs) < 0.1 and np.median(errs) < np.median(consts)


@pytest.mark.slow
@pytest.mark.skipif(not REAL.exists(), reason="shared TrainTicket data not present")
def test_trainticket_day_fits_every_service_with_a_named_metric():
    res = fit_from_directory(REAL)
    rep = res.report_doc()
    assert rep["dropped"]["fault_windows"] >= 28  # every injected fault removes at least its own window
    assert rep["heldout_minutes"] >= 5
    assert len(rep["services"]) >= 25
    assert {r["metric"] for r in rep["services"]} <= {"calls", "span_time"}
    assert "ts-gateway-service" in {r["service"] for r in rep["services"]}
    routes = res.model_doc()["products"]
    assert any(p.startswith("/api/v1/") for p in routes)

"""``flux predict``: per-service CPU from product counts; a service without attribution data gets its
stated baseline (never 0), a service that follows its traffic is predicted from the counts."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from placement_service.capacity.flux import FluxError
from placement_service.capacity.flux.predict import load_predictor, predict
from placement_service.capacity.flux.service_model import Observations, ServiceModel
from placement_service.capacity.flux.traces_io import FitResult
from placement_service.cli import main


def fixture_observations(n_windows: int = 40, seed: int = 3) -> Observations:
    """Three services, two products over ``n_windows`` windows:
    ``front`` serves both products (CPU 2 m per trace of p0, 1 m per trace of p1, + noise);
    ``batch`` serves p1 only (CPU 3 m per trace); ``idle`` is reached by no trace (CPU ~50 m, flat)."""
    rng = np.random.default_rng(seed)
    traces = np.vstack([rng.integers(20, 80, n_windows), rng.integers(10, 60, n_windows)]).astype(float)
    calls = np.zeros((3, 2, n_windows))
    calls[0] = traces
    calls[1, 1] = traces[1]
    cpu = np.vstack([2 * traces[0] + traces[1] + rng.normal(0, 2, n_windows), 3 * traces[1] + rng.normal(0, 2, n_windows),
                     50 + rng.normal(0, 1, n_windows)])  # fmt: skip
    return Observations(("front", "batch", "idle"), ("p0", "p1"), tuple(range(0, 60 * n_windows, 60)),
                        {"calls": calls, "span_time": calls * 1e6}, traces, np.maximum(cpu, 0))  # fmt: skip


@pytest.fixture(scope="module")
def model_doc() -> dict:  # type: ignore[type-arg]
    obs = fixture_observations()
    return FitResult(obs, ServiceModel(peak_minutes=5).fit(obs), {}, "fixture").model_doc()


def test_a_service_without_attribution_gets_its_baseline_not_zero(model_doc: dict) -> None:  # type: ignore[type-arg]
    model = load_predictor(model_doc)
    out = {p.service: p for p in predict(model, {"p0": 50.0, "p1": 35.0}).services}
    assert out["idle"].predictor == "baseline" and "no attributed traffic" in out["idle"].reason
    assert out["idle"].cpu_mcores == pytest.approx(50.0, abs=1.0)
    assert model_doc["prediction"]["idle"]["baseline_mcores"] == pytest.approx(50.0, abs=1.0)


def test_services_that_follow_their_traffic_are_predicted_from_the_counts(model_doc: dict) -> None:  # type: ignore[type-arg]
    model = load_predictor(model_doc)
    assert model_doc["baseline_traffic"].keys() == {"p0", "p1"}
    low = {p.service: p for p in predict(model, {"p0": 30.0, "p1": 20.0}).services}
    high = {p.service: p for p in predict(model, {"p0": 60.0, "p1": 40.0}).services}
    for s, truth_low in (("front", 2 * 30 + 20), ("batch", 3 * 20)):
        assert low[s].predictor == "model"
        assert low[s].cpu_mcores == pytest.approx(truth_low, rel=0.15)
        assert high[s].cpu_mcores == pytest.approx(2 * low[s].cpu_mcores, rel=1e-6)
    # products left out are taken at their training mean, and said so
    part = predict(model, {"p0": 30.0})
    assert part.products_at_mean == ("p1",)


def test_an_old_model_without_the_baseline_traffic_is_a_clear_error(model_doc: dict) -> None:  # type: ignore[type-arg]
    old = {k: v for k, v in model_doc.items() if k != "baseline_traffic"}
    with pytest.raises(FluxError, match="missing field 'baseline_traffic'.*fit it again"):
        load_predictor(old, "m.json")


def test_cli_predict_writes_every_service_and_names_bad_counts(model_doc: dict, tmp_path: Path,  # type: ignore[type-arg]
                                                               capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    (tmp_path / "model.json").write_text(json.dumps(model_doc))
    (tmp_path / "counts.json").write_text(json.dumps({"p0": 40, "p1": 30, "p9": 5}))
    rc = main(["flux", "predict", "--model", str(tmp_path / "model.json"), "--counts", str(tmp_path / "counts.json"),
               "--out", str(tmp_path / "pred.json")])  # fmt: skip
    out = capsys.readouterr()
    assert rc == 0 and "1 by\ntheir baseline" not in out.out and "2 by the model, 1 by their baseline" in out.out
    doc = json.loads((tmp_path / "pred.json").read_text())
    assert [s["service"] for s in doc["services"]] == ["front", "batch", "idle"]
    assert all(s["cpu_mcores"] > 0 for s in doc["services"]) and doc["ignored_products"] == ["p9"]
    (tmp_path / "bad.json").write_text(json.dumps({"p0": -1}))
    rc = main(["flux", "predict", "--model", str(tmp_path / "model.json"), "--counts", str(tmp_path / "bad.json")])
    err = capsys.readouterr().err
    assert rc == 2 and "product 'p0'" in err and "non-negative" in err and "Traceback" not in err


def test_a_service_whose_model_loses_to_its_baseline_on_held_out_windows_uses_the_baseline_and_says_so() -> None:
    """``flat`` is called by every p0 trace but its CPU does not follow the traffic (30 m +/- noise)."""
    base = fixture_observations()
    rng = np.random.default_rng(9)
    m = len(base.minutes)
    calls = np.concatenate([base.demand["calls"], base.demand["calls"][:1]])  # flat: called like front
    cpu = np.vstack([base.cpu, 30 + rng.normal(0, 0.5, m)])
    obs = Observations((*base.services, "flat"), base.products, base.minutes,
                       {"calls": calls, "span_time": calls * 1e6}, base.traces, cpu)  # fmt: skip
    doc = FitResult(obs, ServiceModel(peak_minutes=5).fit(obs), {}, "fixture").model_doc()
    flat = doc["prediction"]["flat"]
    assert flat["predictor"] == "baseline" and "held-out error" in flat["predictor_reason"]
    out = {p.service: p for p in predict(load_predictor(doc), {"p0": 80.0, "p1": 60.0}).services}
    assert out["flat"].cpu_mcores == pytest.approx(30.0, abs=1.0) and out["front"].predictor == "model"

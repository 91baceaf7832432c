"""Bad Flux inputs: each a clear error naming file, entry and field; nothing written."""

from __future__ import annotations

import json

import pytest

from placement_service.capacity.flux import FluxError
from placement_service.capacity.flux.generate import generate
from placement_service.capacity.flux.io import MODEL_FILE, read_instance, write_inputs
from placement_service.cli import main


@pytest.fixture
def inputs(tmp_path):
    inst, _ = generate(n_regions=3, n_services=6, n_products=2, n_hardware=2, n_timesteps=2, seed=1)
    write_inputs(tmp_path, inst)
    return tmp_path


def _edit(path, fn):
    doc = json.loads(path.read_text())
    fn(doc)
    path.write_text(json.dumps(doc))


def _read(d):
    return read_instance(d / "model.json", d / "demand.json", d / "supply.json")


def test_round_trip(inputs):
    inst = _read(inputs)
    assert len(inst.services) == 6 and inst.supply.shape == (3, 2, 2)


def test_model_for_a_service_the_demand_does_not_know(inputs):
    _edit(inputs / MODEL_FILE, lambda d: d["services"].append({"name": "ghost", "alpha": {}}))
    with pytest.raises(
        FluxError, match=r"model.json: services\[6\] \('ghost'\): a model for a service the demand"
    ):
        _read(inputs)


def test_negative_supply_and_nan_alpha(inputs):
    _edit(inputs / "supply.json", lambda d: d["supply"][4].update(available=-1))
    with pytest.raises(FluxError, match=r"supply.json: supply\[4\]: field 'available': -1.0 is negative"):
        _read(inputs)


def test_nan_is_rejected(inputs):
    text = (inputs / MODEL_FILE).read_text()
    doc = json.loads(text)
    p = next(iter(doc["services"][1]["alpha"]))
    doc["services"][1]["alpha"][p] = float("nan")
    (inputs / MODEL_FILE).write_text(json.dumps(doc))  # json writes NaN
    with pytest.raises(
        FluxError, match=r"services\[1\] \('svc1'\): field 'alpha\['.*'\]': nan is not a finite number"
    ):
        _read(inputs)


def test_bad_input_writes_no_plan(inputs, capsys):
    _edit(inputs / "demand.json", lambda d: d["products"][0]["baseline"].update({"region0": -0.5}))
    out = inputs / "plan.json"
    assert main(["flux", "plan", "--inputs", str(inputs), "--out", str(out)]) == 2
    assert "field 'baseline['region0']'" in capsys.readouterr().err
    assert not out.exists()

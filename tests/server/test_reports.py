"""Report validation: every bad field is named; good reports parse exactly."""

from __future__ import annotations

import math
from typing import Any

import pytest

from placement_service.server.reports import (
    NodeReport,
    RequestError,
    decode_frame,
    encode_frame,
    parse_report,
    parse_report_batch,
)

NOW = 1_800_000_000.0


def good(**over: Any) -> dict[str, Any]:
    doc: dict[str, Any] = {
        "node": "n1", "tenant": "t1", "timestamp": NOW - 5, "primary_cpu_cores": 2, "primary_memory_mb": 10.0,
        "capacity_cores": 8, "capacity_memory_mb": 100.0, "busy": False, "free_storage_gb": 3.5,
    }
    doc.update(over)
    return doc


@pytest.mark.parametrize(
    ("over", "field"),
    [
        ({"node": 3}, "r.node"),
        ({"node": ""}, "r.node"),
        ({"tenant": "a b"}, "r.tenant"),
        ({"timestamp": "now"}, "r.timestamp"),
        ({"timestamp": NOW + 3600}, "r.timestamp"),
        ({"timestamp": 1_700_000_000_000.0}, "r.timestamp"),  # milliseconds: far in the future
        ({"timestamp": 12.0}, "r.timestamp"),
        ({"primary_cpu_cores": math.nan}, "r.primary_cpu_cores"),
        ({"primary_memory_mb": math.inf}, "r.primary_memory_mb"),
        ({"primary_memory_mb": -1}, "r.primary_memory_mb"),
        ({"capacity_cores": 0}, "r.capacity_cores"),
        ({"capacity_memory_mb": True}, "r.capacity_memory_mb"),
        ({"busy": 1}, "r.busy"),
        ({"free_storage_gb": None}, "r.free_storage_gb"),
        ({"seq": -1}, "r.seq"),
        ({"seq": 1.5}, "r.seq"),
        ({"extra": 1}, "r.extra"),
    ],
)
def test_bad_field_is_named(over: dict[str, Any], field: str) -> None:
    with pytest.raises(RequestError) as err:
        parse_report(good(**over), "r", NOW, 300.0)
    assert err.value.field == field
    assert field in str(err.value)


def test_missing_field_is_named() -> None:
    doc = good()
    del doc["capacity_cores"]
    with pytest.raises(RequestError, match=r"r\.capacity_cores: missing"):
        parse_report(doc, "r", NOW, 300.0)


def test_good_report_round_trips_through_the_log_encoding() -> None:
    r = parse_report(good(seq=7, busy=True), "r", NOW, 300.0)
    assert r == NodeReport("n1", "t1", NOW - 5, 2.0, 10.0, 8.0, 100.0, True, 3.5, 7)
    assert r.cpu_frac == 0.25
    assert decode_frame(encode_frame([r, r])) == [r, r]


def test_batch_errors_name_the_index_and_limits_apply() -> None:
    with pytest.raises(RequestError) as err:
        parse_report_batch({"reports": [good(), good(busy="no")]}, NOW, 300.0, 10)
    assert err.value.field == "reports[1].busy"
    with pytest.raises(RequestError) as err:
        parse_report_batch({"reports": [good()] * 11}, NOW, 300.0, 10)
    assert err.value.status == 413
    for body, field in (([], "body"), ({"reports": {}}, "reports"), ({"reports": []}, "reports"),
                        ({"reports": [good()], "x": 1}, "x")):
        with pytest.raises(RequestError) as err:
            parse_report_batch(body, NOW, 300.0, 10)
        assert err.value.field == field


def test_openapi_report_schema_matches_the_validator() -> None:
    import json
    from pathlib import Path

    import placement_service
    from placement_service.server.reports import OPTIONAL_FIELDS, REQUIRED_FIELDS

    spec = json.loads((Path(placement_service.__file__).parent / "openapi.json").read_text())
    schema = spec["components"]["schemas"]["NodeReport"]
    assert set(schema["required"]) == set(REQUIRED_FIELDS)
    assert set(schema["properties"]) == set(REQUIRED_FIELDS) | set(OPTIONAL_FIELDS)
    assert schema["additionalProperties"] is False


@pytest.mark.parametrize("key", ["", "x" * 100_000, "a\nb"])
def test_an_unknown_key_is_named_short_and_never_empty(key: str) -> None:
    """Hypothesis (2026-11-29): a body with the key "" answered field "" (a 4xx naming nothing); a
    100 KB key was echoed whole. Every unknown-field error names the key, non-empty and short."""
    from placement_service.server.http_api import parse_place_request
    from placement_service.server.reports import RequestError, parse_report_batch

    for parse in (lambda: parse_place_request({key: 1}), lambda: parse_report_batch({key: 1}, 0.0, 60.0, 10)):
        with pytest.raises(RequestError) as err:
            parse()
        assert err.value.field and len(err.value.field) <= 80 and "unknown field" in str(err.value), err.value.field

"""``placement_service/validate.py``: the one validation of names, numbers, JSON and paths."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import pytest

from placement_service import validate as v
from placement_service.validate import InputError


@pytest.mark.parametrize("name", ["n1", "host-1.example.com", "a:b@c/d+e_f", "x" * 253])
def test_names_accepted(name: str) -> None:
    assert v.check_name(name, "node") == name and v.is_name(name)


@pytest.mark.parametrize("name", ["", "n1\n", "\nn1", "a b", "é", "x" * 254, "tab\t", 5, None, b"n1"])
def test_names_refused_naming_the_field(name: object) -> None:
    with pytest.raises(InputError) as err:
        v.check_name(name, "reports[2].node")
    assert err.value.field == "reports[2].node" and str(err.value).startswith("reports[2].node: ")
    assert not v.is_name(name)


@pytest.mark.parametrize(("value", "ok"), [("constant-0", True), ("A_b-9", True), ("../../x", False),
                                           ("-x", False), ("a\n", False), ("", False), (3, False)])
def test_class_ids_follow_the_yarn_label_rule(value: object, ok: bool) -> None:
    if ok:
        assert v.check_class_id(value, "id") == value
    else:
        with pytest.raises(InputError, match="id: a class id"):
            v.check_class_id(value, "id")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 10**400, True, "1", None, [1]])
def test_check_finite_refuses(value: object) -> None:
    with pytest.raises(InputError) as err:
        v.check_finite(value, "cpu")
    assert err.value.field == "cpu" and len(str(err.value)) < 120


def test_check_finite_bounds() -> None:
    assert v.check_finite(3, "x", minimum=0, maximum=3) == 3.0
    for kwargs in ({"minimum": 4.0}, {"maximum": 2.0}, {"positive": True}):
        with pytest.raises(InputError, match="x: must be"):
            v.check_finite(0 if "positive" in kwargs else 3, "x", **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(("text", "expected"), [("1.5", 1.5), (" 2 ", 2.0), (7, 7.0)])
def test_parse_float_accepts(text: object, expected: float) -> None:
    assert v.parse_float(text, "interval_s") == expected


@pytest.mark.parametrize("text", ["nan", "NaN", "inf", "-inf", "1e400", "abc", "", True, None])
def test_parse_float_refuses(text: object) -> None:
    with pytest.raises(InputError, match="^interval_s: "):
        v.parse_float(text, "interval_s")


@pytest.mark.parametrize(("text", "ok"), [("8", True), (" 8 ", True), ("8.0", False), ("1" * 50, False),
                                          (8, True), (8.0, False), (True, False), ("0x10", False)])
def test_parse_int(text: object, ok: bool) -> None:
    if ok:
        assert v.parse_int(text, "port", minimum=0, maximum=65535) == 8
    else:
        with pytest.raises(InputError, match="^port: "):
            v.parse_int(text, "port", minimum=0, maximum=65535)


@pytest.mark.parametrize(("value", "expected"), [(True, True), ("yes", True), ("0", False), ("off", False)])
def test_parse_bool_accepts(value: object, expected: bool) -> None:
    assert v.parse_bool(value, "rm_centralized") is expected


@pytest.mark.parametrize("value", ["maybe", "", 2, 1.0, None])
def test_parse_bool_refuses(value: object) -> None:
    with pytest.raises(InputError, match="rm_centralized: must be true or false"):
        v.parse_bool(value, "rm_centralized")


def test_epoch_bounds() -> None:
    assert v.parse_epoch_s("1700000000", "since") == 1.7e9
    for text in ("1e17", "-1", "nan"):
        with pytest.raises(InputError, match="^since: "):
            v.parse_epoch_s(text, "since")


def test_loads_json_depth_and_errors() -> None:
    assert v.loads_json(b'{"a": [[1]]}', "body") == {"a": [[1]]}
    assert v.loads_json("[" * 64 + "]" * 64, "body") is not None
    for raw in ("[" * 65 + "]" * 65, "[" * 100_000 + "]" * 100_000, '{"a":' * 100_000 + "1" + "}" * 100_000):
        with pytest.raises(InputError, match="body: JSON nested more than 64 levels"):
            v.loads_json(raw, "body")
    for raw, needle in ((b"\xff", "not UTF-8"), (b"{x", "not valid JSON: line 1 column 2"),
                        (b"1" * 5000, "not valid JSON")):
        with pytest.raises(InputError, match=needle):
            v.loads_json(raw, "body")


def test_load_json_file_names_the_file(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot read the job"):
        v.load_json_file(tmp_path, "job")
    p = tmp_path / "j.json"
    p.write_text("[" * 100)
    with pytest.raises(InputError) as err:
        v.load_json_file(p, "job")
    assert str(p) in str(err.value) and "(job)" in str(err.value)


def test_output_file_refuses_a_directory(tmp_path: Path) -> None:
    assert v.output_file(str(tmp_path / "x.json")) == tmp_path / "x.json"
    assert v.output_file("-") == Path("-")
    with pytest.raises(argparse.ArgumentTypeError, match="is a directory"):
        v.output_file(str(tmp_path))


def test_check_text_refuses_control_characters() -> None:
    assert v.check_text("web frontend", "tenant") == "web frontend"
    for bad in ("a\nb", "", "\x00", 3):
        with pytest.raises(InputError, match="^tenant: "):
            v.check_text(bad, "tenant")

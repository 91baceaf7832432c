"""Hostile and unlucky input to the capacity ledger through ``harvest flux ledger`` (issue 37, finding 7):
the documented event-file shapes, a damaged database page, cyclic antecedents, absurd timestamps."""

from __future__ import annotations

import json
import math
import sqlite3

import pytest

from placement_service.capacity.flux import FluxError
from placement_service.capacity.flux.ledger import Ledger
from placement_service.cli import main


def ev(eid, ants=(), ts=1_700_000_000.0, **extra):
    return {"id": eid, "kind": "resize", "timestamp": ts, "payload": {"service": "s", "amount": 1.0},
            "antecedents": list(ants), **extra}  # fmt: skip


def _strict_json(line: str):
    def refuse(c):
        raise AssertionError(f"non-JSON constant {c} in output: {line}")

    return json.loads(line, parse_constant=refuse)


@pytest.mark.parametrize("shape", ["list", "object"])
def test_add_accepts_a_list_and_an_events_object(tmp_path, capsys, shape):
    events = [ev("a"), ev("b", ants=["a"])]
    f = tmp_path / "e.json"
    f.write_text(json.dumps(events if shape == "list" else {"events": events}))
    led = tmp_path / "l.sqlite"
    assert main(["flux", "ledger", "add", "--ledger", str(led), "--events", str(f)]) == 0
    assert "added 2 events" in capsys.readouterr().out
    assert main(["flux", "ledger", "list", "--ledger", str(led)]) == 0
    listed = [_strict_json(x) for x in capsys.readouterr().out.splitlines()]
    assert [e["id"] for e in listed] == ["a", "b"] and listed[1]["antecedents"] == ["a"]


@pytest.mark.parametrize(
    ("doc", "needle"),
    [
        ({"evts": []}, "expected a JSON list of events or an object {\"events\": [...]}"),
        ({"events": [], "extra": 1}, "unknown key 'extra'"),
        ({"events": {"a": 1}}, "'events' must be a list"),
        (7, "expected a JSON list of events"),
        ([1], "row 0: expected an object"),
    ],
)
def test_add_names_a_wrong_file_shape(tmp_path, capsys, doc, needle):
    f = tmp_path / "e.json"
    f.write_text(json.dumps(doc))
    assert main(["flux", "ledger", "add", "--ledger", str(tmp_path / "l.sqlite"), "--events", str(f)]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err


def _damaged_ledger(tmp_path):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as led:
        led.add([ev(f"e{i:04d}", ants=[f"e{i - 1:04d}"] if i else [], note="x" * 200) for i in range(400)],
                writer="w")  # fmt: skip
    page = sqlite3.connect(path).execute("PRAGMA page_size").fetchone()[0]
    raw = bytearray(path.read_bytes())
    assert len(raw) > 8 * page  # the events span many pages
    for p in range(2, len(raw) // page):  # every page but the first (the schema) is overwritten
        raw[p * page:(p + 1) * page] = bytes([0xA5]) * page
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize(
    "argv",
    [
        ["list"], ["list", "--state", "proposed"], ["orchestrate"], ["run"], ["approve", "e0001"],
        ["complete", "e0000"], ["fail", "e0000", "--reason", "r"], ["add", "--events", "EVENTS"],
    ],
)
def test_a_damaged_page_is_a_clear_error_from_every_ledger_command(tmp_path, capsys, argv):
    path = _damaged_ledger(tmp_path)
    events = tmp_path / "e.json"
    events.write_text(json.dumps([ev("new", ants=["e0000"])]))
    argv = [str(events) if a == "EVENTS" else a for a in argv]
    capsys.readouterr()
    assert main(["flux", "ledger", argv[0], "--ledger", str(path), *argv[1:]]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "damaged" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("content", [b"not a database at all\n" * 100, b"SQLite format 3\x00" + b"\xff" * 4080])
def test_a_file_that_is_not_a_ledger_is_one_line(tmp_path, capsys, content):
    path = tmp_path / "l.sqlite"
    path.write_bytes(content)
    assert main(["flux", "ledger", "list", "--ledger", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and "not a ledger" in err and len(err.strip().splitlines()) == 1


def test_a_damaged_page_is_a_clear_error_for_plan_baseline_too(tmp_path):
    path = _damaged_ledger(tmp_path)
    with Ledger(path) as led, pytest.raises(FluxError, match="damaged"):
        led.future_events()


@pytest.mark.parametrize(
    ("events", "cycle"),
    [
        ([ev("a", ants=["a"])], "'a' -> 'a'"),
        ([ev("a", ants=["c"]), ev("b", ants=["a"]), ev("c", ants=["b"])], "'a' -> 'c' -> 'b' -> 'a'"),
        ([ev("x"), ev("a", ants=["x", "b"]), ev("b", ants=["a"])], "'a' -> 'b' -> 'a'"),
    ],
)
def test_self_and_cyclic_antecedents_are_refused_naming_the_cycle(tmp_path, events, cycle):
    with Ledger(tmp_path / "l.sqlite") as led:
        with pytest.raises(FluxError, match="cycle") as exc:
            led.add(events, writer="w")
        assert cycle in str(exc.value)
        assert led.events() == []  # nothing of the batch is written


def test_a_repeated_antecedent_is_refused_not_an_integrity_error(tmp_path):
    with Ledger(tmp_path / "l.sqlite") as led:
        led.add([ev("a")], writer="w")
        with pytest.raises(FluxError, match=r"antecedents\[1\].*repeats antecedents\[0\]"):
            led.add([ev("b", ants=["a", "a"])], writer="w")


def test_a_cycle_already_in_an_old_ledger_is_reported_not_silent(tmp_path, capsys):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as led:
        led.add([ev("a"), ev("b", ants=["a"])], writer="w")
    db = sqlite3.connect(path)  # an old version accepted cycles: write one by hand
    db.execute("INSERT INTO antecedents VALUES ('a', 'b')")
    db.commit()
    db.close()
    assert main(["flux", "ledger", "orchestrate", "--ledger", str(path)]) == 1
    out = capsys.readouterr().out
    assert "cycle: 'a' -> 'b' -> 'a'" in out


@pytest.mark.parametrize("ts", ["1e309", "-1e309", "NaN", "Infinity", "-5", "1e15", "4102444801", "true", "\"0\""])
def test_absurd_timestamps_are_refused(tmp_path, capsys, ts):
    f = tmp_path / "e.json"
    f.write_text('[{"id": "a", "kind": "resize", "timestamp": ' + ts + ', "payload": {}}]')
    led = tmp_path / "l.sqlite"
    assert main(["flux", "ledger", "add", "--ledger", str(led), "--events", str(f)]) == 2
    err = capsys.readouterr().err
    assert "field 'timestamp'" in err and "Traceback" not in err
    with Ledger(led) as ledger:
        assert ledger.events() == []


@pytest.mark.parametrize(("field", "value"), [("review", "false"), ("review", 1), ("note", {"a": 1})])
def test_review_and_note_must_have_their_types(tmp_path, field, value):
    with Ledger(tmp_path / "l.sqlite") as led, pytest.raises(FluxError, match=f"field '{field}'"):
        led.add([ev("a", **{field: value})], writer="w")


def test_non_finite_payload_is_refused_and_list_prints_only_json(tmp_path, capsys):
    path = tmp_path / "l.sqlite"
    with Ledger(path) as led:
        with pytest.raises(FluxError, match="field 'payload'"):
            led.add([ev("a", payload={"amount": math.inf})], writer="w")
        led.add([ev("a"), ev("b")], writer="w")
    db = sqlite3.connect(path)  # what an old version stored: an infinite time, a NaN in a payload
    db.execute("UPDATE events SET timestamp = ? WHERE id = 'a'", (math.inf,))
    db.execute("UPDATE events SET payload = '{\"amount\": NaN}' WHERE id = 'b'")
    db.commit()
    db.close()
    capsys.readouterr()
    rc = main(["flux", "ledger", "list", "--ledger", str(path)])
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    for line in out.splitlines():
        _strict_json(line)
    assert rc == 0
    listed = {e["id"]: e for e in map(_strict_json, out.splitlines())}
    assert listed["a"]["timestamp"] is None and listed["b"]["payload"] == {"amount": None}

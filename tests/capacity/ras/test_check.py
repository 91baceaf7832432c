"""The independent checker catches each kind of violation (plans corrupted on purpose)."""

from __future__ import annotations

import copy

import pytest

from tests.capacity.ras.helpers import violations


@pytest.fixture()
def doc(small_plan):  # type: ignore[no-untyped-def]
    return copy.deepcopy(small_plan.to_json())


def _some_member(doc, rid=None):  # type: ignore[no-untyped-def]
    for r, fig in doc["reservations"].items():
        if fig["servers"] and (rid is None or r == rid):
            return r, fig["servers"][0]
    raise AssertionError("no member")


def test_valid_plan_passes(small_problem, doc):
    assert violations(small_problem, doc) == []


def test_server_in_two_places(small_problem, doc):
    rids = [r for r, f in doc["reservations"].items() if f["servers"]]
    s = doc["reservations"][rids[0]]["servers"][0]
    doc["reservations"][rids[1]]["servers"].append(s)
    assert any("listed in both" in v for v in violations(small_problem, doc))


def test_unavailable_server_holds_nothing(small_problem, doc):
    region = small_problem.region
    down = next(s for i, s in enumerate(region.server) if not region.available[i])
    doc["assignment"][down] = next(iter(doc["reservations"]))
    assert any("unavailable server" in v for v in violations(small_problem, doc))


def test_capacity_after_msb_loss(small_problem, doc):
    rid, _ = _some_member(doc)
    for s in doc["reservations"][rid]["servers"]:
        doc["assignment"][s] = None
    doc["reservations"][rid]["servers"] = []
    found = violations(small_problem, doc)
    assert any(f"reservation {rid}" in v and "after losing" in v for v in found)


def test_shared_buffer_share(small_problem, doc):
    for s, e in doc["assignment"].items():
        if e == "shared-buffer:hw00":
            doc["assignment"][s] = None
    assert any("shared-buffer:hw00 holds 0" in v for v in violations(small_problem, doc))


def test_ineligible_hardware(small_problem, doc):
    region = small_problem.region
    idx = region.index()
    rid = next(r.id for r in small_problem.requests if "hw00" not in r.rru)
    s = next(s for s, e in doc["assignment"].items() if e is None and region.hardware[idx[s]] == 0
             and region.available[idx[s]])  # fmt: skip
    doc["assignment"][s] = rid
    assert any("cannot serve" in v for v in violations(small_problem, doc))


def test_reported_figures_must_match(small_problem, doc):
    rid, _ = _some_member(doc)
    doc["reservations"][rid]["capacity_after_worst_msb_loss_rru"] += 5
    assert any("reports capacity_after_worst_msb_loss_rru" in v for v in violations(small_problem, doc))


def test_checker_does_not_import_the_solver():
    import ast
    import pathlib

    import placement_service.capacity.ras.check as check

    tree = ast.parse(pathlib.Path(check.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not any(m.startswith("placement_service") or m in ("numpy", "highspy") for m in imported)

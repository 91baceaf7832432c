"""Stored co-busy estimates (``server/cobusy_store.py``): fitted by the re-clustering on the real
history, their contract checked with errors naming where they are stored, at most one set kept in
the state, aligned once for all the placers of a table, and the ``placement_cobusy`` setting."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from placement_service.core.cobusy import CobusyModel
from placement_service.server.cobusy_store import CobusyState, decode_cobusy, encode_cobusy, load_cobusy
from placement_service.server.config import build_config
from placement_service.server.policy import build_policy_view
from placement_service.server.recluster import compute_policy_inputs
from placement_service.server.state import CLASS_TABLES_KEPT, StateStore
from tests.server.test_busy_hours import DAYS, SLOT_S, _nodes, recluster_input


def _fit(tmp_path: Path, cobusy_cpu: float | None) -> tuple[dict[str, Any], bytes | None]:
    """The re-clustering child's work over three days of history (tenants t0-t5 busy every night,
    t6-t8 every afternoon)."""
    return compute_policy_inputs(recluster_input(tmp_path, 2.0 / 3.0, cobusy_cpu))


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], bytes]:
    doc, blob = _fit(tmp_path_factory.mktemp("cobusy-fit"), 2.0 / 3.0)
    assert blob is not None
    return doc, blob


def test_reclustering_fits_the_estimates_on_the_tables_tenants(fitted: tuple[dict[str, Any], bytes],
                                                                tmp_path: Path) -> None:
    doc, blob = fitted
    stored = decode_cobusy(blob, "test", doc["tenants"])
    m = stored.model
    assert sorted(m.tenants) == sorted(doc["tenants"]) and stored.busy_cpu == pytest.approx(2.0 / 3.0)
    assert stored.interval_s == SLOT_S and stored.slots == DAYS * 86400 // SLOT_S
    i = m.index()
    # night tenants are busy in the same slots; a night and an afternoon tenant never are
    assert m.m2[i["t0"], i["t1"]] > 5 * m.m2[i["t0"], i["t6"]]
    assert np.allclose(m.m2, m.m2.T) and m.m1.dtype == np.float64
    assert len(blob) < 9 * 9 * 4 + 4096  # float32, no JSON
    assert _fit(tmp_path, None)[1] is None  # setting off: nothing fitted, nothing stored


def test_how_far_the_history_predicted_itself_is_stored_and_absent_means_not_measured() -> None:
    """The placer spreads new blocks only on estimates whose history predicted itself: the measure
    survives the round trip, and estimates stored before it existed read as not measured (1.0: new
    blocks take the lowest estimate, as they did then)."""
    m1 = np.array([0.1, 0.2])
    model = CobusyModel(("a", "b"), m1, np.outer(m1, m1), quiet_turnover=0.04)
    back = decode_cobusy(encode_cobusy(model, 2 / 3, 0.0, 300.0, 12), "test", None).model
    assert back.quiet_turnover == pytest.approx(0.04)
    assert decode_cobusy(_archive(), "test", None).model.quiet_turnover == 1.0


def _archive(**over: Any) -> bytes:
    """A valid archive for tenants a, b, c with some arrays replaced (``None``: left out)."""
    arrays: dict[str, Any] = {
        "format": np.int64(1), "tenants": np.array(["a", "b", "c"]), "m1": np.array([0.1, 0.2, 0.3], np.float32),
        "m2": np.array([[0.1, 0.01, 0.02], [0.01, 0.2, 0.03], [0.02, 0.03, 0.3]], np.float32),
        "busy_cpu": np.float64(2 / 3), "start_s": np.float64(0), "interval_s": np.float64(300), "slots": np.int64(12),
    }
    arrays.update(over)
    buf = io.BytesIO()
    np.savez(buf, **{k: v for k, v in arrays.items() if v is not None})
    return buf.getvalue()


@pytest.mark.parametrize("data, expected", [
    (_archive(m2=np.full((3, 2), 0.1, np.float32)), "m2: shape (3, 2), expected (3, 3) for 3 tenants"),
    (_archive(m1=np.array([0.1, 0.2], np.float32)), "m1: shape (2,), expected (3,) for 3 tenants"),
    (_archive(m1=np.array([0.1, np.nan, 0.3], np.float32)), "m1[1]: not finite (nan)"),
    (_archive(m2=np.array([[0.1, 0.01, 0.02], [0.01, np.inf, 0.03], [0.02, 0.03, 0.3]])), "m2[1, 1]: not finite"),
    (_archive(m1=np.array([0.1, 1.5, 0.3], np.float32)), "m1: probabilities must be in [0, 1]"),
    (_archive(m2=np.array([[0.1, 0.5, 0.02], [0.01, 0.2, 0.03], [0.02, 0.03, 0.3]], np.float32)),
     "m2: must be symmetric"),
    (_archive(tenants=np.array(["a", "b", "x"])), "tenants do not match the class table's: 1 unknown to it"),
    (_archive(tenants=np.array(["a", "a", "b"])), "tenants: names must be non-empty and distinct"),
    (_archive(m2=None), "missing array(s) m2"),
    (_archive(format=np.int64(7)), "format: expected 1"),
    (_archive(quiet_turnover=np.float64(1.5)), "quiet_turnover: must be a number in [0, 1]"),
    (_archive(quiet_turnover=np.array([0.1, 0.2])), "quiet_turnover: must be a number in [0, 1]"),
    (b"PK\x03\x04 not really a zip", "not a readable .npz archive"),
    (b"", "not a readable .npz archive"),
])
def test_stored_estimates_that_break_the_contract_are_named(tmp_path: Path, data: bytes, expected: str) -> None:
    store = StateStore(tmp_path / "state.sqlite")
    try:
        doc = {"classes": [], "tenants": {t: {} for t in "abc"}}
        version = store.save_class_table(doc, {}, cobusy=data)
        state = load_cobusy(store, version, ["a", "b", "c"])  # logged, never raised
    finally:
        store.close()
    assert state.estimates is None
    assert state.note.startswith(f"{tmp_path / 'state.sqlite'} (table cobusy_estimates, class table v{version}): ")
    assert expected in state.note, state.note


def test_a_valid_archive_loads(tmp_path: Path) -> None:
    store = StateStore(tmp_path / "state.sqlite")
    try:
        version = store.save_class_table({"classes": [], "tenants": {}}, {}, cobusy=_archive())
        state = load_cobusy(store, version, ["a", "b", "c"])
        missing = load_cobusy(store, version + 1, None)
    finally:
        store.close()
    assert state.estimates is not None and state.estimates.stored.model.tenants == ("a", "b", "c")
    assert missing.estimates is None and "no co-busy estimates stored" in missing.note


def test_the_state_keeps_only_the_newest_tables_estimates(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite"
    store = StateStore(path)
    blob_bytes = 2 << 20  # ~650 tenants in float32 (1.7 MB)
    rng = np.random.default_rng(0)
    sizes = []
    try:
        for k in range(8):
            blob = rng.bytes(blob_bytes)
            version = store.save_class_table({"classes": [], "tenants": {}}, {}, cobusy=blob)
            assert store.load_cobusy(version) == blob and store.load_cobusy(version - 1) is None
            sizes.append(sum(os.path.getsize(p) for p in (path, path.with_name(path.name + "-wal")) if p.exists()))
            assert k > 0 or version == 1
        # a table without estimates (setting turned off) drops the older ones too
        version = store.save_class_table({"classes": [], "tenants": {}}, {})
        assert store.load_cobusy(version) is None and store.load_cobusy(version - 1) is None
    finally:
        store.close()
    # freed pages are reused: the database and its log stop growing after the first tables
    assert max(sizes) < 4 * blob_bytes, sizes
    assert sizes[-1] <= max(sizes[:3]) * 1.05, sizes


def test_the_state_keeps_a_bounded_number_of_class_tables(tmp_path: Path) -> None:
    # Every re-clustering adopts a table; before, all of them stayed in state.sqlite forever.
    store = StateStore(tmp_path / "state.sqlite")
    try:
        for k in range(CLASS_TABLES_KEPT + 5):
            version = store.save_class_table({"classes": [], "tenants": {}, "k": k}, {})
        rows = store._db.execute("SELECT MIN(version), MAX(version), COUNT(*) FROM class_tables").fetchone()
        newest = store.load_class_table()
    finally:
        store.close()
    assert rows == (version - CLASS_TABLES_KEPT + 1, version, CLASS_TABLES_KEPT)
    assert newest == (version, {"classes": [], "tenants": {}, "k": CLASS_TABLES_KEPT + 4})


def _stored(tmp_path: Path, doc: dict[str, Any], blob: bytes) -> tuple[int, CobusyState]:
    """Store ``doc`` with its estimates as a re-clustering does, then load them as the service does."""
    store = StateStore(tmp_path / "state.sqlite")
    try:
        version = store.save_class_table(doc, {}, cobusy=blob)
        return version, load_cobusy(store, version, doc["tenants"])
    finally:
        store.close()


def test_placers_of_one_table_share_one_alignment(fitted: tuple[dict[str, Any], bytes], tmp_path: Path) -> None:
    doc, blob = fitted
    version, state = _stored(tmp_path, doc, blob)
    cfg = build_config(None, {}, {"placement_cobusy": True})
    nodes = _nodes(time.time())
    views = [build_policy_view(cfg, version, doc, nodes, None, cobusy=state) for _ in range(2)]
    first = views[0].placer
    assert first is not None and first.cobusy is not None and views[0].mode.mode == "HDFS-H-cobusy"
    assert views[1].placer is not None and views[1].placer.cobusy is first.cobusy  # aligned once, no copy
    views[0].place("t0-0", 3, (), 1 << 30)  # another block-size bucket: a new placer, same estimates
    assert all(p.cobusy is first.cobusy for p in views[0]._placers.values()) and len(views[0]._placers) == 2
    # the setting off, or no estimates: busy-hour masks, and the mode says why
    off = build_policy_view(build_config(None, {}, {"placement_cobusy": False}), version, doc, nodes, None,
                            cobusy=state)
    assert off.placer is not None and off.placer.cobusy is None and off.mode.mode == "HDFS-H-hours"
    none = build_policy_view(cfg, version, doc, nodes, None, cobusy=CobusyState(None, "why not"))
    assert none.mode.to_json() == {"mode": "HDFS-H-hours", "configured": "HDFS-H-cobusy", "fallback": True,
                                   "reason": "no usable co-busy estimates: why not", "cobusy_estimates": None,
                                   "waiting_for_estimates": False}  # damaged: not waiting, a health problem
    waiting = build_policy_view(cfg, version, doc, nodes, None, cobusy=CobusyState(None, "none yet", pending=True))
    assert waiting.mode.mode == "HDFS-H-hours" and waiting.mode.to_json()["waiting_for_estimates"] is True
    assert none.placer is not None and none.placer.cobusy is None and none.placer.uses_busy_hours
    hdfs_h = build_policy_view(build_config(None, {}, {"placement_cobusy": True, "placement_busy_hours": False}),
                               version, doc, nodes, None, cobusy=CobusyState(None, "why not"))
    assert hdfs_h.mode.mode == "HDFS-H" and hdfs_h.placer is not None and not hdfs_h.placer.uses_busy_hours


def test_placement_cobusy_setting_from_env_and_flag_and_help() -> None:
    assert build_config(None, {}, {}).placement_cobusy is True  # the default (core.service_defaults)
    assert build_config(None, {"HARVEST_PLACEMENT_COBUSY": "off"}, {}).placement_cobusy is False
    assert build_config(None, {"HARVEST_PLACEMENT_COBUSY": "on"}, {}).placement_cobusy is True
    assert build_config(None, {"HARVEST_PLACEMENT_COBUSY": "on"}, {"placement_cobusy": False}).placement_cobusy is False
    out = subprocess.run([sys.executable, "-m", "placement_service.cli", "serve", "--help"], capture_output=True,
                         text=True, check=True, env={**os.environ, "COLUMNS": "200"}).stdout
    assert "--placement-cobusy" in out and "HDFS-H-cobusy" in out and "/v1/placement/quality" in out


def test_decode_keeps_the_stored_order_and_widens_to_float64() -> None:
    model = CobusyModel(("b", "a"), np.array([0.2, 0.1]), np.array([[0.2, 0.05], [0.05, 0.1]]))
    stored = decode_cobusy(encode_cobusy(model, 0.5, 0.0, 300.0, 2), "test", None)
    assert stored.model.tenants == ("b", "a") and stored.model.m2.dtype == np.float64
    assert np.allclose(stored.model.m2, model.m2, rtol=1e-6)


def test_re_replications_use_the_configured_risk_target(fitted: tuple[dict[str, Any], bytes], tmp_path: Path) -> None:
    # placement_cobusy_risk_target reaches the placers: 0 sends every re-replication of a block held
    # on t0-0 to the one allowed tenant least likely busy with t0 (the first version, whose repairs
    # converged onto the quietest tenants); a loose target spreads them over the allowed tenants.
    doc, blob = fitted
    version, state = _stored(tmp_path, doc, blob)
    nodes = _nodes(time.time())
    tenant_of = {n: r.tenant for n, r in nodes.items()}
    spread = {}
    for target in (0.0, 0.9):
        cfg = build_config(None, {}, {"placement_cobusy": True, "placement_cobusy_risk_target": target,
                                      "placement_cobusy_spread": 0.0})
        view = build_policy_view(cfg, version, doc, nodes, None, cobusy=state)
        got = [view.place("", 1, (), 128 << 20, chosen=["t0-0"]).targets for _ in range(60)]
        assert all(len(t) == 1 and tenant_of[t[0]] != "t0" for t in got)
        spread[target] = {tenant_of[t[0]] for t in got}
    assert len(spread[0.0]) == 1 and len(spread[0.9]) >= 3, spread
    with pytest.raises(Exception, match="placement_cobusy_risk_target: must be in \\[0, 1\\)"):
        build_config(None, {"HARVEST_PLACEMENT_COBUSY_RISK_TARGET": "1.5"}, {})


def test_the_spread_bound_reaches_the_placers(fitted: tuple[dict[str, Any], bytes], tmp_path: Path) -> None:
    # placement_cobusy_spread (default 0: off) is the factor of every co-busy placer of the
    # view (what it does: tests/core/test_cobusy.py; here each cell holds one tenant, so the bound,
    # relative to the cell's choices, never passes one over).
    doc, blob = fitted
    version, state = _stored(tmp_path, doc, blob)
    nodes = _nodes(time.time())
    for bound in (0.0, 2.0, 3.5):
        cfg = build_config(None, {}, {"placement_cobusy": True, "placement_cobusy_spread": bound})
        view = build_policy_view(cfg, version, doc, nodes, None, cobusy=state)
        assert view.placer is not None and view.placer.cobusy_spread == bound
        view.place("", 1, (), 64 << 20, chosen=["t0-0"])  # another bucket's placer, built on use
        assert all(p.cobusy_spread == bound for p in view._placers.values())
    assert build_config(None, {}, {}).placement_cobusy_spread == 0.0
    for bad in ("0.5", "nan", "inf"):
        with pytest.raises(Exception, match="placement_cobusy_spread: must be"):
            build_config(None, {"HARVEST_PLACEMENT_COBUSY_SPREAD": bad}, {})


def test_the_symmetry_check_sees_every_band() -> None:
    # Checked a band of rows at a time (no n x n temporaries): an asymmetric entry in any band counts.
    from placement_service.server.cobusy_store import _asymmetry

    m = np.full((600, 600), 0.1, dtype=np.float32)
    assert _asymmetry(m) == 0.0
    m[550, 10] = 0.3
    assert _asymmetry(m) == pytest.approx(0.2) and _asymmetry(m, block=7) == pytest.approx(0.2)


def test_new_blocks_use_the_configured_target_where_the_history_predicted_itself(
        fitted: tuple[dict[str, Any], bytes], tmp_path: Path) -> None:
    # The re-clustering measures how far its history predicted itself and stores it (every tenant
    # of the fixture is busy every night or every afternoon, or never: 0); the view's placers take
    # placement_cobusy_new_target while it is at most placement_cobusy_new_max_turnover, else the
    # lowest estimate (0). The same estimates stored as measured on a history where 30% of the
    # quiet tenants turned busy keep new blocks on the lowest estimate unless the setting allows it.
    doc, blob = fitted
    stored = decode_cobusy(blob, "test", None)
    assert stored.model.quiet_turnover == 0.0
    version, state = _stored(tmp_path, doc, blob)
    assert state.estimates is not None and state.estimates.describe()["quiet_turnover"] == 0.0
    unsure = encode_cobusy(replace(stored.model, quiet_turnover=0.3), stored.busy_cpu, stored.start_s,
                           stored.interval_s, stored.slots)
    version_u, state_u = _stored(tmp_path / "unsure", doc, unsure)
    nodes = _nodes(time.time())
    for st, ver, over, want in (
        (state, version, {}, 1e-6), (state, version, {"placement_cobusy_new_target": 3e-7}, 3e-7),
        (state, version, {"placement_cobusy_new_target": 0.0}, 0.0),
        (state_u, version_u, {}, 0.0), (state_u, version_u, {"placement_cobusy_new_max_turnover": 0.5}, 1e-6),
    ):
        view = build_policy_view(build_config(None, {}, {"placement_cobusy": True, **over}), ver, doc, nodes,
                                 None, cobusy=st)
        assert view.placer is not None and view.placer.new_block_target == want, (over, want)
    for key, bad in (("NEW_TARGET", "1"), ("NEW_MAX_TURNOVER", "1.5"), ("NEW_MAX_TURNOVER", "nan")):
        with pytest.raises(Exception, match=f"placement_cobusy_{key.lower()}: must be"):
            build_config(None, {f"HARVEST_PLACEMENT_COBUSY_{key}": bad}, {})

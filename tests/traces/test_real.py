"""Real-trace loaders (Azure wide format, PlanetLab VM-days) on small excerpts of the public traces."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest

from placement_service.traces import io
from placement_service.traces.generate import write_datacenter
from placement_service.traces.io import TraceError
from placement_service.traces.real import group_vms, load_azure_wide, load_planetlab, real_datacenter
from placement_service.traces.series import tenant_series

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
AZURE = FIXTURES / "azure_v1_avg_excerpt.csv.gz"
PLANETLAB = FIXTURES / "planetlab_excerpt.csv"


def test_azure_wide_format_becomes_one_server_per_vm_in_fractions():
    s = load_azure_wide(AZURE, start_s=1000.0)
    names, codes = s.factorize("server")
    assert names.tolist() == ["az-1633748", "az-1948107", "az-1962655", "az-223811"]
    assert len(s) == 4 * 864
    assert s.cpu.min() >= 0 and s.cpu.max() <= 1
    # first VM's first two samples in the file: 44.459 and 47.935 percent
    first = s.cpu[(s.server == "az-1633748")][:2]
    np.testing.assert_allclose(first, [0.44459, 0.47935])
    assert s.timestamp_s.min() == 1000.0 and np.all(np.diff(np.unique(s.timestamp_s)) == 300.0)
    series = tenant_series(s)
    assert series.interval_s == 300.0 and series.cpu.shape == (4, 864) and not np.isnan(series.cpu).any()


def test_azure_max_vms_and_duplicate_vm_columns(tmp_path):
    assert len(load_azure_wide(AZURE, max_vms=2).factorize("server")[0]) == 2
    same = tmp_path / "dup.csv"
    same.write_text("t_offset_s,7 24,7 8,9\n0,1.5,1.5,3\n300,2.5,2.5,4\n")
    assert load_azure_wide(same).factorize("server")[0].tolist() == ["az-7", "az-9"]
    differ = tmp_path / "differ.csv"
    differ.write_text("t_offset_s,7 24,7 8\n0,1.5,1.6\n300,2.5,2.5\n")
    with pytest.raises(TraceError, match="'7 8'"):
        load_azure_wide(differ)


@pytest.mark.parametrize(
    "body,row,column",
    [
        ("t_offset_s,a,b\n0,1,2\n300,1,140\n", 2, "b"),
        ("t_offset_s,a\n0,1\n300,\n", 2, "a"),
        ("t_offset_s,a\n0,1\n0,2\n", 2, "t_offset_s"),
        ("time,a\n0,1\n", None, None),
    ],
)
def test_azure_errors_name_row_and_column(tmp_path, body, row, column):
    path = tmp_path / "bad.csv"
    path.write_text(body)
    with pytest.raises(TraceError) as info:
        load_azure_wide(path)
    assert (info.value.row, info.value.column) == (row, column)


def test_planetlab_compact_and_calendar_timelines():
    compact = load_planetlab(PLANETLAB)
    names, _ = compact.factorize("server")
    assert len(names) == 3 and all(n.startswith("pl-") for n in names)
    assert len(compact) == 3 * 4 * 288
    assert compact.cpu.max() <= 1.0
    day0 = 1299110400.0  # 2011-03-03T00:00:00Z
    span = compact.timestamp_s.max() - compact.timestamp_s.min()
    assert compact.timestamp_s.min() == day0 and span == 4 * 86400 - 300
    calendar = load_planetlab(PLANETLAB, timeline="calendar")
    assert calendar.timestamp_s.max() == 1300752000.0 + 86400 - 300  # 2011-03-22, last slot
    s = tenant_series(calendar)
    assert s.long_gaps and all(n >= 288 for _, _, n in s.long_gaps)  # the calendar gaps between days
    assert not tenant_series(compact).long_gaps


def test_planetlab_min_days_filter_and_errors(tmp_path):
    lines = PLANETLAB.read_text().splitlines()
    path = tmp_path / "pl.csv.gz"
    with gzip.open(path, "wt") as fh:
        keep = [ln for ln in lines if "_root" not in ln or ln.startswith("20110303")]  # root: 1 day only
        fh.write("\n".join(keep) + "\n")
    assert len(load_planetlab(path, min_days=1).factorize("server")[0]) == 3
    assert load_planetlab(path, min_days=2).factorize("server")[0].tolist() == [
        "pl-kupl1_ittc_ku_edu_nyu_d",
        "pl-miranda_planetlab_cs_umd_edu_tsinghua_xyz",
    ]
    bad = tmp_path / "bad.csv"
    bad.write_text(lines[0] + "\n" + lines[1].replace("20110303", "2011-3-3", 1) + "\n")
    with pytest.raises(TraceError, match="row 1, column 'date'"):
        load_planetlab(bad)


@pytest.mark.parametrize("grouping", ["vm", "hash", "correlation"])
def test_grouping_is_deterministic_and_covers_every_vm(grouping):
    s = load_azure_wide(AZURE)
    a = group_vms(s, grouping=grouping, vms_per_tenant=2)
    assert a == group_vms(s, grouping=grouping, vms_per_tenant=2)
    assert set(a) == set(s.factorize("server")[0].tolist())
    if grouping == "vm":
        assert len(set(a.values())) == 4
    if grouping == "correlation":
        assert max(list(a.values()).count(t) for t in set(a.values())) <= 2


def test_correlation_grouping_joins_correlated_vms(tmp_path):
    t = np.arange(0, 3 * 86400, 300)
    day = np.sin(2 * np.pi * t / 86400)
    rng = np.random.default_rng(0)
    cols = {"a": 40 + 20 * day, "b": 41 + 19 * day, "c": 30 + 10 * rng.standard_normal(len(t)).cumsum() / 30}
    cols["c"] = np.clip(cols["c"], 0, 100)
    path = tmp_path / "w.csv"
    path.write_text(
        "t_offset_s,a,b,c\n" + "\n".join(f"{x},{cols['a'][i]:.3f},{cols['b'][i]:.3f},{cols['c'][i]:.3f}"
                                         for i, x in enumerate(t)) + "\n"
    )
    g = group_vms(load_azure_wide(path), grouping="correlation", vms_per_tenant=3)
    assert g["az-a"] == g["az-b"] != g["az-c"]


@pytest.mark.parametrize("trace", [AZURE, PLANETLAB])
def test_real_datacenter_is_consistent_and_loads_back(tmp_path, trace):
    dc = real_datacenter(trace, servers_per_vm=3, min_days=1, seed=1)
    inv = dc.inventory
    n_vms = 4 if trace == AZURE else 3
    assert len(inv) == 3 * n_vms and len(set(inv.tenant)) == n_vms
    assert dc.tenant_pattern == {}
    assert len(dc.utilization) == (4 * 864 if trace == AZURE else 3 * 4 * 288)
    paths = write_datacenter(dc, tmp_path)
    inv2 = io.load_inventory(paths["inventory"])
    u = io.load_utilization(paths["utilization"], known_servers=inv2.server)
    io.load_reimages(paths["reimages"], known_servers=inv2.server)
    # each sampled server's tenant agrees with the inventory
    tenant_of = dict(zip(inv2.server, inv2.tenant, strict=True))
    assert all(tenant_of[s] == t for s, t in zip(u.server[::50], u.tenant[::50], strict=True))
    again = real_datacenter(trace, servers_per_vm=3, min_days=1, seed=1)
    assert again.inventory.tenant == inv.tenant and np.array_equal(again.inventory.storage_gb, inv.storage_gb)
    assert again.reimages.server == dc.reimages.server


def test_source_is_guessed_from_the_header(tmp_path):
    assert len(real_datacenter(AZURE).inventory) == 16
    other = tmp_path / "x.csv"
    other.write_text("a,b\n1,2\n")
    with pytest.raises(TraceError, match="unknown trace format"):
        real_datacenter(other)

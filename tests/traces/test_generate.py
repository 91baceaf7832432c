"""The synthetic datacenter: deterministic, internally consistent, calibrated to the paper's Section 3."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from placement_service.core.types import Pattern
from placement_service.traces import io
from placement_service.traces.fleet import correlated_reimage_events
from placement_service.traces.generate import (
    GeneratorConfig,
    generate_datacenter,
    summarize,
    write_datacenter,
)
from placement_service.traces.series import (
    reimage_rates,
    server_reimage_rates,
    tenant_environment,
    tenant_series,
)
from placement_service.traces.synth import DAY_S

MONTH_S = 30 * DAY_S


@pytest.fixture(scope="module")
def dcs():
    """Three 2,000-server months (hourly slots keep it fast; calibration does not depend on them)."""
    return [generate_datacenter(2000, seed=s, days=30, interval_s=3600) for s in range(3)]


def server_share(dc, pattern: Pattern) -> float:
    return float(np.mean([dc.tenant_pattern[t] is pattern for t in dc.inventory.tenant]))


def test_same_seed_gives_byte_identical_files(tmp_path):
    for out in ("a", "b"):
        write_datacenter(generate_datacenter(300, seed=11, days=3, interval_s=600), tmp_path / out)
    write_datacenter(generate_datacenter(300, seed=12, days=3, interval_s=600), tmp_path / "c")
    for name in ("utilization.parquet", "reimages.parquet", "inventory.parquet"):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    assert (tmp_path / "a" / "utilization.parquet").read_bytes() != (tmp_path / "c" / "utilization.parquet").read_bytes()


def test_about_40_percent_of_servers_are_periodic_and_most_tenants_constant(dcs):
    for dc in dcs:
        assert server_share(dc, Pattern.PERIODIC) == pytest.approx(0.40, abs=0.02)
        assert server_share(dc, Pattern.UNPREDICTABLE) == pytest.approx(0.25, abs=0.02)
        # periodic + constant (history predicts them) ~ 75% of servers
        assert 1 - server_share(dc, Pattern.UNPREDICTABLE) == pytest.approx(0.75, abs=0.02)
        patterns = list(dc.tenant_pattern.values())
        share = {p: patterns.count(p) / len(patterns) for p in Pattern}
        assert share[Pattern.CONSTANT] > 0.5  # most tenants are roughly constant
        assert share[Pattern.PERIODIC] < 0.25  # periodic tenants are a minority, but big ones


def test_tenant_sizes_are_heavy_tailed(dcs):
    for dc in dcs:
        _, sizes = np.unique(np.asarray(dc.inventory.tenant), return_counts=True)
        sizes = np.sort(sizes)[::-1]
        assert sizes[0] >= 20 * np.median(sizes)
        assert sizes[: len(sizes) // 10].sum() >= 0.35 * sizes.sum()  # top 10% of tenants hold >= 35%
        assert sizes[0] <= GeneratorConfig().tenant_size_max_frac * 2000


def test_at_least_90_percent_of_servers_see_at_most_one_reimage_per_month(dcs):
    for dc in dcs:
        rates = server_reimage_rates(dc.reimages, dc.inventory, span_s=dc.days * DAY_S)
        assert np.mean(rates <= 1.0) >= 0.90
        assert np.mean(rates >= 3.0) > 0.005  # ... and a frequent tail
        tenant = np.array(list(reimage_rates(dc.reimages, dc.inventory, span_s=MONTH_S).values()))
        assert np.mean(tenant <= 1.0) >= 0.80  # paper: >= 80% of tenants <= 1 per server per month


def test_correlated_reimages_hit_many_servers_of_one_environment_at_once(dcs):
    for dc in dcs:
        bursts = correlated_reimage_events(dc.reimages, dc.inventory, window_s=4 * 3600.0, min_servers=10)
        assert bursts, "expected at least one burst of >= 10 servers of one environment within 4 h"
    # The independent per-server process alone almost never makes such bursts.
    quiet = replace(GeneratorConfig(), correlated_events_per_month=(0.0, 0.0, 0.0))
    dc = generate_datacenter(2000, seed=0, days=30, interval_s=3600, config=quiet)
    assert not correlated_reimage_events(dc.reimages, dc.inventory, window_s=4 * 3600.0, min_servers=10)


def test_inventory_is_complete_and_consistent(dcs):
    dc = dcs[0]
    inv = dc.inventory
    n = len(inv)
    assert n == 2000 and len(set(inv.server)) == n
    for f in ("tenant", "environment", "rack", "hardware", "datacenter", "msb"):
        assert len(getattr(inv, f)) == n and all(getattr(inv, f))
    assert len(set(inv.hardware)) >= 3 and len(set(inv.rack)) == n // GeneratorConfig().rack_size
    assert (inv.cores > 0).all() and (inv.memory_mb > 0).all() and (inv.storage_gb >= 0).all()
    assert np.mean(inv.storage_gb > 0) > 0.9
    # a tenant lives in one environment; environments group several tenants
    env = tenant_environment(inv)
    assert len(env) == len(dc.tenant_pattern)
    assert len(set(env.values())) < len(env)
    # rack -> msb is a function
    rack_msb = {}
    for r, m in zip(inv.rack, inv.msb, strict=True):
        assert rack_msb.setdefault(r, m) == m


def test_samples_cover_at_most_k_servers_per_tenant_and_only_inventory_servers(dcs):
    dc = dcs[0]
    u = dc.utilization
    inv_tenant = dict(zip(dc.inventory.server, dc.inventory.tenant, strict=True))
    servers, codes = u.factorize("server")
    assert set(servers.tolist()) <= set(inv_tenant)
    per_tenant: dict[str, set[str]] = {}
    for s in servers:
        per_tenant.setdefault(inv_tenant[s], set()).add(s)
    assert set(per_tenant) == set(dc.tenant_pattern)
    assert max(len(v) for v in per_tenant.values()) == GeneratorConfig().sampled_servers_per_tenant
    assert (u.cpu >= 0).all() and (u.cpu <= 1).all() and (u.memory >= 0).all()
    # every sample's tenant matches the inventory
    names, t_codes = u.factorize("tenant")
    assert all(inv_tenant[s] == names[t] for s, t in zip(u.server[::997], t_codes[::997], strict=True))


def test_files_load_back_through_the_validating_readers(tmp_path):
    dc = generate_datacenter(400, seed=2, days=4, interval_s=300)
    paths = write_datacenter(dc, tmp_path, fmt="csv")
    inv = io.load_inventory(paths["inventory"])
    u = io.load_utilization(paths["utilization"], known_servers=inv.server)
    ev = io.load_reimages(paths["reimages"], known_servers=inv.server)
    assert len(u) == len(dc.utilization) and ev.server == dc.reimages.server
    np.testing.assert_allclose(np.sort(u.cpu), np.sort(dc.utilization.cpu))
    series = tenant_series(u)
    assert series.interval_s == 300.0 and series.n_slots == 4 * 288
    assert set(series.tenants) == set(dc.tenant_pattern)


def test_tenant_series_of_the_samples_follows_each_pattern(dcs):
    # Daily energy of the reconstructed average-server series: periodic >> others.
    dc = generate_datacenter(600, seed=5, days=14, interval_s=600)
    s = tenant_series(dc.utilization)
    x = np.nan_to_num(s.cpu - np.nanmean(s.cpu, axis=1, keepdims=True))
    p = np.abs(np.fft.rfft(x, axis=1)) ** 2
    daily = p[:, [13, 14, 15, 27, 28, 29]].sum(axis=1) / p[:, 1:].sum(axis=1)
    truth = np.array([dc.tenant_pattern[t] for t in s.tenants], dtype=object)
    assert np.median(daily[truth == Pattern.PERIODIC]) > 0.5
    assert np.median(daily[truth == Pattern.CONSTANT]) < 0.2
    assert np.median(daily[truth == Pattern.UNPREDICTABLE]) < 0.2


def test_reimaged_servers_go_quiet_for_the_downtime():
    cfg = replace(GeneratorConfig(), sampled_servers_per_tenant=0, missing_sample_frac=0.0)
    dc = generate_datacenter(200, seed=4, days=10, interval_s=300, config=cfg)
    assert len(dc.reimages.server) > 0
    t, s = dc.reimages.timestamp_s[0], dc.reimages.server[0]
    mine = dc.utilization.timestamp_s[dc.utilization.server == s]
    assert not ((mine >= t) & (mine < t + 1500)).any()
    assert ((mine >= t + 1800) & (mine < t + 3600)).any() or t + 1800 >= mine.max()


def test_summary_reports_the_calibration(dcs):
    s = summarize(dcs[0])
    assert s["servers"] == 2000
    assert s["patterns"]["periodic"]["servers"] == pytest.approx(800, abs=40)
    assert s["reimages"]["servers_at_most_1_per_month"] >= 0.9
    assert s["storage_tb"]["total"] > 0


def test_small_and_invalid_sizes():
    dc = generate_datacenter(1, seed=0, days=1, interval_s=3600)
    assert len(dc.inventory) == 1 and len(dc.tenant_pattern) == 1
    with pytest.raises(ValueError):
        generate_datacenter(0, seed=0)
    with pytest.raises(ValueError):
        generate_datacenter(10, seed=0, days=0)


def test_periodic_tenants_peak_in_the_afternoon_and_weekly_ones_dip_on_weekends():
    dc = generate_datacenter(1500, seed=3, days=14, interval_s=600)
    s = tenant_series(dc.utilization)
    rows = [i for i, t in enumerate(s.tenants) if dc.tenant_pattern[t] is Pattern.PERIODIC]
    x = s.cpu[rows].reshape(len(rows), 14, -1)  # [tenant, day, slot of day]; start is a midnight
    weekday = (np.floor((s.start_s + np.arange(14) * DAY_S) / DAY_S) + 3) % 7  # Monday = 0
    peak_hour = np.argmax(x[:, weekday < 5].mean(axis=1), axis=1) * s.interval_s / 3600
    near = np.abs(peak_hour - GeneratorConfig().peak_hour_utc) <= 5
    assert 0.6 <= near.mean() < 1.0  # most around 15:00 UTC, some anywhere
    dip = x[:, weekday < 5].mean(axis=(1, 2)) - x[:, weekday >= 5].mean(axis=(1, 2))
    assert 0.1 < np.mean(dip > 0.01) < 0.5  # the weekly share (30%) dips on Saturday and Sunday
    assert np.mean(dip < -0.01) < 0.05


def test_config_from_a_mapping_overrides_defaults_and_rejects_mistakes():
    from placement_service.traces.generate import ConfigError, HardwareType

    cfg = GeneratorConfig.from_mapping(
        {
            "periodic_server_share": 0.5,
            "rack_size": 20,
            "correlated_events_per_month": [0, 0.5, 1],
            "environment_kind_probs": [[1, 0, 0], [0.5, 0.5, 0], [0, 0, 1]],
            "hardware": [{"name": "x", "cores": 8, "memory_mb": 1024, "disk_gb": 100, "share": 1}],
        }
    )
    assert cfg.periodic_server_share == 0.5 and cfg.rack_size == 20
    assert cfg.correlated_events_per_month == (0.0, 0.5, 1.0)
    assert cfg.environment_kind_probs[1] == (0.5, 0.5, 0.0)
    assert cfg.hardware == (HardwareType("x", 8, 1024, 100, 1.0),)
    dc = generate_datacenter(200, seed=0, days=1, interval_s=3600, config=cfg)
    assert set(dc.inventory.hardware) == {"x"} and len(set(dc.inventory.rack)) == 10
    for bad, word in [
        ({"periodic_share": 0.5}, "unknown generator setting 'periodic_share'"),
        ({"rack_size": 2.5}, "expected an integer"),
        ({"series_noise": "high"}, "expected a number"),
        ({"memory_level": [0.1]}, "expected a list of 2 values"),
    ]:
        with pytest.raises(ConfigError, match=word):
            GeneratorConfig.from_mapping(bad, source="gen.json")


def test_a_year_of_reimages_next_to_a_month_of_utilization():
    from placement_service.traces.fleet import generate_reimages

    dc = generate_datacenter(1500, seed=6, days=2, interval_s=3600, reimage_days=360)
    assert dc.utilization.timestamp_s.max() < dc.utilization.timestamp_s.min() + 2 * DAY_S
    span = dc.reimages.timestamp_s.max() - dc.reimages.timestamp_s.min()
    assert span > 300 * DAY_S
    rates = server_reimage_rates(dc.reimages, dc.inventory, span_s=360 * DAY_S)
    assert np.mean(rates <= 1.0) >= 0.9  # on average over the year, as the paper counts
    assert summarize(dc)["reimages"]["days"] == 360
    # a tenant's monthly rate drifts: the same tenants, different months, different counts
    month = ((dc.reimages.timestamp_s - GeneratorConfig().start_s) // (30 * DAY_S)).astype(int)
    assert len(set(month.tolist())) == 12
    # the same model on any inventory, e.g. one loaded from a file
    ev = generate_reimages(dc.inventory, days=30, seed=1)
    assert len(ev.server) > 0 and set(ev.server) <= set(dc.inventory.server)
    assert np.all(np.diff(ev.timestamp_s) >= 0)

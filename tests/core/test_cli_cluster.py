"""``harvest cluster`` end to end on real files (placement_service/core/cli_cluster.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from placement_service.cli import main
from placement_service.core.types import ClassTable, Inventory, Pattern, ReimageEvents
from placement_service.traces import io
from placement_service.traces.real import load_azure_wide
from placement_service.traces.synth import labelled_tenant_series

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "clustering"
SERVERS_PER_TENANT = 3  # in the inventory; the first two have samples


def _write_datacenter(
    directory: Path, *, n_tenants: int = 30, seed: int = 5, percent: bool = False, suffix: str = "parquet"
) -> tuple[dict[str, Path], dict[str, Pattern]]:
    directory.mkdir(parents=True, exist_ok=True)
    series, truth = labelled_tenant_series(n_tenants, seed=seed, days=7, interval_s=300.0, noise=0.01)
    n_slots = series.n_slots
    ts, servers, tenants, cpu = [], [], [], []
    for i, tenant in enumerate(series.tenants):
        for j, offset in enumerate((0.01, -0.01)):  # two sampled servers around the average server
            ts.append(series.start_s + np.arange(n_slots) * series.interval_s)
            servers.append(np.full(n_slots, f"{tenant}-s{j}", dtype=object))
            tenants.append(np.full(n_slots, tenant, dtype=object))
            cpu.append(np.clip(series.cpu[i] + offset, 0.0, 1.0))
    scale = 100.0 if percent else 1.0
    samples = io.UtilizationSamples(
        timestamp_s=np.concatenate(ts),
        server=np.concatenate(servers),
        tenant=np.concatenate(tenants),
        cpu=np.concatenate(cpu) * scale,
    )
    rng = np.random.default_rng(seed)
    inv_servers = [f"{t}-s{j}" for t in series.tenants for j in range(SERVERS_PER_TENANT)]
    inv_tenants = [t for t in series.tenants for _ in range(SERVERS_PER_TENANT)]
    n = len(inv_servers)
    inventory = Inventory(
        server=tuple(inv_servers),
        tenant=tuple(inv_tenants),
        environment=tuple(f"env-{k // (2 * SERVERS_PER_TENANT)}" for k in range(n)),
        rack=tuple(f"rack-{k % 5}" for k in range(n)),
        cores=np.full(n, 32.0),
        memory_mb=np.full(n, 131072.0),
        storage_gb=rng.uniform(500.0, 4000.0, n).round(1),
    )
    n_events = n // 2  # distinct servers, so no duplicate (server, time) rows
    events = ReimageEvents(
        timestamp_s=np.sort(series.start_s + rng.uniform(0, 7 * 86400.0, n_events)).round(),
        server=tuple(rng.choice(inv_servers, n_events, replace=False).tolist()),
    )
    paths = {
        "utilization": directory / f"utilization.{suffix}",
        "inventory": directory / f"inventory.{suffix}",
        "reimages": directory / f"reimages.{suffix}",
    }
    io.write_utilization(samples, paths["utilization"])
    io.write_inventory(inventory, paths["inventory"])
    io.write_reimages(events, paths["reimages"])
    return paths, truth


@pytest.fixture(scope="module")
def datacenter(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Path], dict[str, Pattern]]:
    return _write_datacenter(tmp_path_factory.mktemp("dc"))


def test_cluster_with_grid_writes_the_contract(
    datacenter: tuple[dict[str, Path], dict[str, Pattern]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths, truth = datacenter
    out = tmp_path / "classes.json"
    argv = ["cluster", "--out", str(out), "--seed", "3"]
    argv += [f"--{k}={v}" for k, v in paths.items()]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "periodic" in printed and "grid:" in printed and f"wrote {out}" in printed
    doc = json.loads(out.read_text())
    assert set(doc) == {"classes", "tenants", "grid", "busy_hours"}
    for c in doc["classes"]:
        assert {"id", "pattern", "avg_cpu", "peak_cpu", "current_cpu", "servers", "cores", "tenants"} <= set(
            c
        )
        assert c["id"].startswith(c["pattern"] + "-")
        assert c["avg_cpu"] <= c["peak_cpu"]
        assert c["servers"] == SERVERS_PER_TENANT * len(c["tenants"])
        assert c["cores"] == pytest.approx(32.0 * c["servers"])
    members = sorted(t for c in doc["classes"] for t in c["tenants"])
    assert members == sorted(truth) == sorted(doc["tenants"]) == sorted(doc["grid"])
    for entry in doc["tenants"].values():
        assert entry["class"].startswith(entry["pattern"] + "-")
    accuracy = np.mean([doc["tenants"][t]["pattern"] == truth[t].value for t in truth])
    assert accuracy >= 0.9
    cells = {(g["reimage_row"], g["peak_column"]) for g in doc["grid"].values()}
    assert cells <= {(r, c) for r in range(3) for c in range(3)} and len(cells) >= 7
    table = ClassTable.from_json(doc)  # the consumers' parser accepts it
    assert table.grid is not None and len(table.grid) == len(truth)
    # Busy-hour profiles: the same masks as the core function gives on the tenants' series at 2/3.
    from placement_service.core.busy_hours import busy_hour_masks
    from placement_service.traces.series import tenant_series

    series = tenant_series(io.load_utilization(paths["utilization"]))
    expect = busy_hour_masks(series.cpu, series.start_s, series.interval_s, 2.0 / 3.0)
    assert table.busy_hours == {t: int(m) for t, m in zip(series.tenants, expect.tolist(), strict=True)}
    assert any(table.busy_hours.values()) and not all(table.busy_hours.values())
    # --busy-cpu 0: no profiles; out of range: named
    assert main([*argv[:2], str(tmp_path / "no-hours.json"), *argv[3:], "--busy-cpu", "0"]) == 0
    assert "busy_hours" not in json.loads((tmp_path / "no-hours.json").read_text())
    capsys.readouterr()
    assert main([*argv, "--busy-cpu", "1.5"]) == 2
    assert "--busy-cpu" in capsys.readouterr().err


def test_same_seed_same_file(datacenter: tuple[dict[str, Path], dict[str, Pattern]], tmp_path: Path) -> None:
    paths, _ = datacenter
    outs = []
    for k in range(2):
        out = tmp_path / f"c{k}.json"
        assert main(["cluster", "--utilization", str(paths["utilization"]), "--out", str(out)]) == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    doc = json.loads(outs[0])
    assert "grid" not in doc
    assert all(c["servers"] == 0 for c in doc["classes"])  # no inventory: sizes unknown


def test_json_summary(
    datacenter: tuple[dict[str, Path], dict[str, Pattern]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths, truth = datacenter
    argv = ["cluster", "--utilization", str(paths["utilization"]), "--inventory", str(paths["inventory"])]
    assert main([*argv, "--out", str(tmp_path / "c.json"), "--json", "--k-rule", "fixed"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["tenants"] == len(truth)
    assert sum(d["tenants"] for d in summary["patterns"].values()) == len(truth)
    assert all(d["classes"] <= 4 for d in summary["patterns"].values())  # --classes-per-pattern default
    assert summary["interval_s"] == 300.0


def test_reimages_need_an_inventory(
    datacenter: tuple[dict[str, Path], dict[str, Pattern]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths, _ = datacenter
    argv = ["cluster", "--utilization", str(paths["utilization"]), "--reimages", str(paths["reimages"])]
    assert main([*argv, "--out", str(tmp_path / "c.json")]) == 2
    assert "--reimages needs --inventory" in capsys.readouterr().err
    assert not (tmp_path / "c.json").exists()


def test_bad_input_leaves_the_previous_file_alone(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    good, _ = _write_datacenter(tmp_path / "good", n_tenants=6)
    other, _ = _write_datacenter(tmp_path / "other", n_tenants=3, seed=9)  # knows half of the servers
    out = tmp_path / "classes.json"
    out.write_text('{"previous": true}')
    # Servers of the utilization file that the inventory does not know.
    argv = ["cluster", "--utilization", str(good["utilization"]), "--inventory", str(other["inventory"])]
    assert main([*argv, "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "utilization.parquet" in err and "unknown server" in err
    assert out.read_text() == '{"previous": true}'
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".classes")] == []


def test_tenant_mismatch_with_the_inventory_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    paths, _ = _write_datacenter(tmp_path, n_tenants=6, suffix="csv")
    inv = io.load_inventory(paths["inventory"])
    moved = list(inv.tenant)
    moved[0] = moved[-1]  # the first server now belongs to another tenant in the inventory
    io.write_inventory(Inventory(**{**inv.__dict__, "tenant": tuple(moved)}), paths["inventory"])
    argv = ["cluster", "--utilization", str(paths["utilization"]), "--inventory", str(paths["inventory"])]
    assert main([*argv, "--out", str(tmp_path / "c.json")]) == 2
    err = capsys.readouterr().err
    assert f"server {inv.server[0]!r}" in err and "in the inventory" in err


def test_cpu_percent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths, truth = _write_datacenter(tmp_path, n_tenants=6, percent=True)
    argv = ["cluster", "--utilization", str(paths["utilization"]), "--out", str(tmp_path / "c.json")]
    assert main(argv) == 2
    assert "cpu" in capsys.readouterr().err
    assert main([*argv, "--cpu-percent"]) == 0
    doc = json.loads((tmp_path / "c.json").read_text())
    assert sorted(doc["tenants"]) == sorted(truth)
    assert all(0.0 <= c["avg_cpu"] <= c["peak_cpu"] <= 1.0 for c in doc["classes"])


def test_missing_output_directory(
    datacenter: tuple[dict[str, Path], dict[str, Pattern]], tmp_path: Path
) -> None:
    paths, _ = datacenter
    argv = ["cluster", "--utilization", str(paths["utilization"]), "--out", str(tmp_path / "no" / "c.json")]
    assert main(argv) == 2


def test_real_azure_excerpt(tmp_path: Path) -> None:
    """Five Azure VMs, 10 days (tests/fixtures/clustering/README.md), each VM its own tenant."""
    samples = load_azure_wide(FIXTURES / "azure_v1_avg_5vms_10days.csv.gz")
    util = tmp_path / "utilization.csv"
    io.write_utilization(samples, util)
    out = tmp_path / "classes.json"
    assert main(["cluster", "--utilization", str(util), "--interval-s", "300", "--out", str(out)]) == 0
    patterns = {t: v["pattern"] for t, v in json.loads(out.read_text())["tenants"].items()}
    assert patterns == {
        "az-942980": "periodic",
        "az-633346": "constant",
        "az-1041019": "constant",
        "az-1663289": "unpredictable",
        "az-1948107": "unpredictable",
    }


def test_help_explains_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["cluster", "--help"])
    assert exc.value.code == 0
    text = capsys.readouterr().out
    assert "--reimages" in text and "classes.json" in text


def test_servers_sampling_every_minute_or_so_are_read_per_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Sixteen servers (a tenant each, a daily cycle each) sample every 60-70 s on a 10 s lattice and
    # about one time in three report again 10 s later (tests/fixtures/clustering/servers.py): read as one
    # 10 s series, they were all gaps and none was periodic.
    from tests.fixtures.clustering.servers import resending_servers

    path = tmp_path / "utilization.parquet"
    io.write_utilization(resending_servers(), path)
    out = tmp_path / "classes.json"
    assert main(["cluster", "--utilization", str(path), "--out", str(out), "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert 60.0 <= summary["interval_s"] <= 70.0 and summary["long_gaps"] == 0
    assert summary["patterns"]["periodic"]["tenants"] == 16
    assert all(60.0 <= v <= 70.0 for v, _ in summary["sampling"]["server_intervals_s"])
    assert any("irregular sampling within servers" in n for n in summary["sampling"]["notes"])
    assert main(["cluster", "--utilization", str(path), "--out", str(out), "--interval-s", "120"]) == 0
    assert "16 tenants: 7201 slots of 120 s" in capsys.readouterr().out

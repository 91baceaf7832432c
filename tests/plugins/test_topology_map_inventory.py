"""``harvest topology-map`` takes the columns its --help names: server, rack[, datacenter][, ip]."""

from __future__ import annotations

from pathlib import Path

from placement_service.cli import main


def test_an_inventory_without_tenant_makes_a_map(tmp_path: Path) -> None:
    inv = tmp_path / "inv.csv"
    inv.write_text("server,rack,datacenter,ip\nn1,r1,dc1,10.0.0.1\nn2,r2,dc1,10.0.0.2\n")
    out = tmp_path / "topology.map"
    assert main(["topology-map", "--inventory", str(inv), "--no-resolve", "--out", str(out)]) == 0
    lines = [line for line in out.read_text().splitlines() if not line.startswith("#")]
    assert "10.0.0.1 /dc1/r1" in lines and "n2 /dc1/r2" in lines


def test_the_help_names_the_columns_the_command_needs(capsys: object) -> None:
    import pytest

    with pytest.raises(SystemExit):
        main(["topology-map", "--help"])
    text = capsys.readouterr().out  # type: ignore[attr-defined]
    assert "server, rack[, datacenter][, ip]" in " ".join(text.split())

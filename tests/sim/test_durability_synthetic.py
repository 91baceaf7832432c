"""``harvest sim durability`` on an operator's own inventory without a reimage log: synthetic reimages
from the generator's model, said in the output and in the results (it used to stop)."""

from __future__ import annotations

import json

from placement_service.cli import main


def test_durability_without_a_reimage_log_uses_synthetic_reimages_and_says_so(tmp_path, capsys):
    dc = tmp_path / "dc"
    assert main(["generate", "--servers", "60", "--days", "9", "--seed", "2", "--out", str(dc)]) == 0
    out = tmp_path / "dur"
    capsys.readouterr()
    assert main(["sim", "durability", "--utilization", str(dc / "utilization.parquet"), "--inventory",
                 str(dc / "inventory.parquet"), "--blocks", "2000", "--days", "60", "--runs", "1",
                 "--replicas", "3", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "synthetic reimages drawn from the generator's model over 60 days" in printed
    doc = json.loads((out / "results.json").read_text())
    assert "synthetic" in doc["settings"]["reimage_note"]
    assert all(r["reimages"] > 0 for r in doc["records"])

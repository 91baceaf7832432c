"""Atomic writes shared by every part (placement_service/atomic.py)."""

from __future__ import annotations

import json
import stat

import pytest

from placement_service.atomic import atomic_open, atomic_path, atomic_write, atomic_write_json


def test_write_replaces_whole_file_and_leaves_no_temporaries(tmp_path):
    target = tmp_path / "sub" / "state.json"
    atomic_write_json(target, {"a": 1})
    atomic_write_json(target, {"b": [1, 2]})
    assert json.loads(target.read_text()) == {"b": [1, 2]}
    assert [p.name for p in target.parent.iterdir()] == ["state.json"]
    assert stat.S_IMODE(target.stat().st_mode) == 0o644


def test_failure_keeps_the_old_content_and_removes_the_temporary(tmp_path):
    target = tmp_path / "label"
    atomic_write(target, "old\n")
    with pytest.raises(RuntimeError), atomic_open(target, "w") as fh:
        fh.write("half of the new content")
        raise RuntimeError("writer died")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["label"]


def test_atomic_path_keeps_the_suffix_for_format_sniffing_writers(tmp_path):
    with atomic_path(tmp_path / "fig.png", suffix=".png") as tmp:
        assert tmp.endswith(".png")
        with open(tmp, "wb") as fh:
            fh.write(b"\x89PNG")
    assert (tmp_path / "fig.png").read_bytes() == b"\x89PNG"


def test_bytes_and_text_and_bad_mode(tmp_path):
    atomic_write(tmp_path / "b", b"\x00\x01")
    assert (tmp_path / "b").read_bytes() == b"\x00\x01"
    with pytest.raises(ValueError, match="mode"), atomic_open(tmp_path / "c", "a"):
        pass

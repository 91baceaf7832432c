"""A cgroup v2 directory as the node (issue 12 item 8): a fake cgroup tree with real processes in it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from agent import ConfigError
from agent.attribute import attribute
from agent.cgroup import cgroup_capacity, cgroup_memory_mb, cgroup_pids
from agent.config import load_config
from agent.sampler import PsutilSampler
from tests.agent.procs import Node

MB = 1024 * 1024


def fake_cgroup(root: Path, pids: list[int], child_pids: list[int], *, cpu_max: str = "200000 100000",
                memory_max: str = str(4096 * MB)) -> Path:
    """A slice with one child cgroup, as systemd or a container runtime lays it out."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "cpu.max").write_text(cpu_max + "\n")
    (root / "memory.max").write_text(memory_max + "\n")
    (root / "cpu.stat").write_text("usage_usec 0\nuser_usec 0\nsystem_usec 0\n")
    (root / "memory.current").write_text(f"{1024 * MB}\n")
    (root / "memory.stat").write_text(f"anon {700 * MB}\nfile {324 * MB}\ninactive_file {224 * MB}\n")
    (root / "cgroup.procs").write_text("".join(f"{p}\n" for p in pids))
    (root / "worker").mkdir(exist_ok=True)
    (root / "worker" / "cgroup.procs").write_text("".join(f"{p}\n" for p in child_pids))
    return root


def test_capacity_usage_and_members_come_from_the_cgroup_files(tmp_path: Path) -> None:
    cg = fake_cgroup(tmp_path / "slice", [11, 12], [13])
    assert cgroup_capacity(str(cg)) == (2.0, 4096)
    assert cgroup_memory_mb(str(cg)) == 800.0  # 1024 MB current - 224 MB inactive page cache
    assert cgroup_pids(str(cg)) == {11, 12, 13}
    (cg / "cpu.max").write_text("max 100000\n")
    (cg / "memory.max").write_text("max\n")
    cores, memory_mb = cgroup_capacity(str(cg))
    assert cores >= 1 and memory_mb > 0  # unlimited: the host's
    cfg = load_config({}, {}, {"state_dir": str(tmp_path / "s"), "cgroup": str(fake_cgroup(tmp_path / "c2", [], []))})
    assert (cfg.capacity_cores, cfg.capacity_memory_mb) == (2.0, 4096)


def test_missing_or_malformed_cgroup_is_a_clear_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cgroup.*cpu.max"):
        load_config({}, {}, {"state_dir": str(tmp_path / "s"), "cgroup": str(tmp_path / "nope")})
    cg = fake_cgroup(tmp_path / "bad", [], [], memory_max="lots")
    with pytest.raises(ConfigError, match=r"memory.max should be bytes"):
        load_config({}, {}, {"state_dir": str(tmp_path / "s"), "cgroup": str(cg)})


def test_sampler_measures_only_the_cgroup(node: Node, tmp_path: Path) -> None:
    inside = node.container("container_1_0001_01_000002", memory_mb=5)
    outside = node.container("container_1_0001_01_000003", memory_mb=5)  # another container on the host
    cg = fake_cgroup(tmp_path / "worker-1", [node.pid], [inside.pid])
    sampler = PsutilSampler(cgroup=str(cg))
    time.sleep(0.5)
    (cg / "cpu.stat").write_text("usage_usec 750000\n")  # 0.75 CPU-seconds over ~0.5 s
    sample = sampler.sample()
    assert 0.9 < sample.node_cpu_cores < 1.8, sample.window_s
    assert sample.node_memory_mb == 800.0  # the cgroup's figure, not the host's
    ids = {p.container_id for p in sample.processes if p.container_id}
    assert ids == {"container_1_0001_01_000002"}, ids  # the other container is not this node's
    view = attribute(sample)
    assert [c.container_id for c in view.containers] == ["container_1_0001_01_000002"]
    assert outside.alive()

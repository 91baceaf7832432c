"""Attribution: grouping by container, primary = node - secondary rounded up, NM allocations, age order."""

from __future__ import annotations

import pytest

from agent.attribute import Allocation, attribute, container_order
from agent.sampler import NodeSample, ProcessUsage


def proc(pid, cid=None, cpu=0.0, mb=0.0, start=100.0, datanode=False) -> ProcessUsage:
    return ProcessUsage(pid, pid, start, cpu, mb, cid, datanode)


def sample(node_cpu, node_mb, procs) -> NodeSample:
    return NodeSample(1000.0, 1.0, node_cpu, node_mb, tuple(procs))


def test_groups_by_container_and_subtracts_secondary_and_datanode():
    view = attribute(sample(3.5, 5000.0, [
        proc(10, "c_a", 0.5, 300, start=50), proc(11, "c_a", 0.25, 200, start=60),
        proc(20, "c_b", 1.0, 1000, start=70), proc(30, None, 0.5, 400, datanode=True)]))
    by_id = {c.container_id: c for c in view.containers}
    assert by_id["c_a"].cpu_cores == 0.75 and by_id["c_a"].memory_mb == 500 and by_id["c_a"].start_time == 50
    assert [p for p, _ in by_id["c_a"].processes] == [10, 11]
    assert view.secondary_cpu_cores == 1.75 and view.datanode_cpu_cores == 0.5
    assert view.primary_cpu_raw == pytest.approx(1.25)
    assert view.primary_cpu_cores == 2  # ceil(1.25 - 0.1)
    assert view.primary_memory_mb == 5000 - 1500 - 400


@pytest.mark.parametrize("raw,noise,expected", [
    (0.0, 0.1, 0), (0.05, 0.1, 0), (0.11, 0.1, 1), (1.0, 0.1, 1), (1.08, 0.1, 1), (1.2, 0.1, 2),
    (0.05, 0.0, 1),  # without the noise allowance, the paper's plain round-up
])
def test_primary_cores_round_up_to_whole_cores_with_noise_allowance(raw, noise, expected):
    view = attribute(sample(raw, 100.0, []), primary_cpu_noise_cores=noise)
    assert view.primary_cpu_cores == expected


def test_nm_allocations_join_local_processes_and_skip_finished_containers():
    allocations = {"c_a": Allocation(2, 2048), "c_new": Allocation(1, 1024, "LOCALIZING"),
                   "c_done": Allocation(4, 4096, "DONE")}
    view = attribute(sample(4.0, 8000.0, [proc(10, "c_a", 3.0, 1000)]), allocations)
    by_id = {c.container_id: c for c in view.containers}
    assert set(by_id) == {"c_a", "c_new"}
    assert by_id["c_a"].footprint_cores == 2 and by_id["c_a"].footprint_memory_mb == 2048
    assert by_id["c_new"].processes == () and by_id["c_new"].footprint_memory_mb == 1024
    # no local process yet: being launched, so the youngest
    assert max(view.containers, key=lambda c: c.age_key()).container_id == "c_new"


def test_local_mode_container_cores_setting_is_the_allocation():
    view = attribute(sample(2.0, 1000.0, [proc(10, "c_a", 1.7, 100)]), container_cores=0.5)
    assert view.containers[0].footprint_cores == 0.5


def test_container_id_order_follows_yarn_numbering():
    ids = ["container_1410901177871_0001_01_000005", "container_e17_1410901177871_0001_01_000010",
           "container_1410901177871_0002_01_000001", "container_1410901177871_0001_02_000001", "not-a-container"]
    assert sorted(ids, key=container_order) == [
        "not-a-container", "container_1410901177871_0001_01_000005", "container_e17_1410901177871_0001_01_000010",
        "container_1410901177871_0001_02_000001", "container_1410901177871_0002_01_000001"]

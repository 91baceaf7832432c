"""Drain of a revoked elastic node (agent/drain.py): decisions while draining, acknowledgement, state."""

from __future__ import annotations

from pathlib import Path

from agent.attribute import ContainerView, NodeView
from agent.decide import DecideState, Policy, decide
from agent.drain import Drainer

POLICY = Policy(capacity_cores=8, capacity_memory_mb=8192, reserve_cores=1, reserve_memory_mb=512)


def _view(*containers: ContainerView) -> NodeView:
    return NodeView(timestamp=100.0, window_s=1.0, node_cpu_cores=8, node_memory_mb=8192, primary_cpu_raw=0.1,
                    primary_cpu_cores=1, primary_memory_mb=100, secondary_cpu_cores=2, secondary_memory_mb=600,
                    datanode_cpu_cores=0, datanode_memory_mb=0, containers=containers)  # fmt: skip


def _c(cid: str, start: float, live: bool = True) -> ContainerView:
    return ContainerView(cid, 1.0, 300.0, start, ((1000 + int(start), start),) if live else (), (1000 + int(start),))


def test_a_revoked_node_advertises_nothing_kills_youngest_first_and_is_busy(tmp_path: Path) -> None:
    view = _view(_c("container_1_01", 10.0), _c("container_1_02", 20.0), _c("container_1_03", 15.0))
    d = Drainer(str(tmp_path / "revocations.json"))
    normal = decide(view, 100.0, POLICY, DecideState())
    assert d.apply(normal, view, ()) is normal and normal.kills == ()  # not revoked: unchanged
    d.on_reply([7], "elastic")
    out = d.apply(normal, view, frozenset({"container_1_03"}))
    assert [k.container_id for k in out.kills] == ["container_1_02", "container_1_01"]  # youngest first, not dying
    assert (out.advertise_cores, out.advertise_memory_mb, out.busy) == (0, 0, True)
    assert d.drained(view) == ()  # containers still have processes
    assert d.drained(_view(_c("container_1_02", 20.0, live=False))) == (7,)  # only a listed, processless one left
    assert d.acknowledged


def test_drain_state_survives_a_restart_and_ends_when_lent_again(tmp_path: Path) -> None:
    path = str(tmp_path / "revocations.json")
    d = Drainer(path)
    d.on_reply([3, 4], "")
    d.on_reply([4], "")  # listed again: nothing new
    again = Drainer(path)
    assert again.ids == (3, 4) and again.draining
    again.on_reply([], "elastic")
    assert again.draining  # not acknowledged yet: stays drained
    assert again.drained(_view()) == (3, 4)
    again.on_reply([], "web")  # no longer elastic: stays drained (the server belongs to a reservation)
    assert again.draining
    again.on_reply([], "elastic")  # lent again
    assert not again.draining and not Drainer(path).draining

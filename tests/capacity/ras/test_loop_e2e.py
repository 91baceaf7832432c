"""End to end on 127.0.0.1 with real processes: ``harvest ras serve``, two ``harvest serve`` and agents.

Agents run on the elastic servers outside MSB msb0, each on a fake node with one real
``CONTAINER_ID`` process (region in ``loop_procs``). MSB msb0 fails: the Online Mover must take every
elastic server left (2 per surviving MSB), so each agent is revoked, drains its node (kills the
container), acknowledges, and the reservation is whole again (checker on the plan, every new server
handed over by acknowledgement).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.agent.procs import wait_until
from tests.capacity.ras.loop_procs import LoopRegion, call, cluster_of, try_call

pytestmark = pytest.mark.slow


def test_failure_signal_to_whole_reservation_through_revocation_and_drain(tmp_path: Path) -> None:
    region = LoopRegion(tmp_path)
    cap = region.cap_url
    try:
        # 1. solve -> elastic set published to both placement services
        assert wait_until(lambda: (try_call(f"{cap}/v1/plan") or {}).get("version", 0) >= 1, 90, 0.2), \
            (tmp_path / "cap.log").read_text()[-2000:]
        plan = call(f"{cap}/v1/plan")
        assert plan["check"]["ok"]
        held = plan["reservations"]["web"]["servers"]
        assert len(held) == 6 and sorted(int(s[1:]) // 4 for s in held) == [0, 0, 1, 1, 2, 2]
        elastic = sorted(s for s, e in plan["assignment"].items() if e is None or e.startswith("shared-buffer:"))
        survivors = [s for s in elastic if int(s[1:]) // 4 != 0]
        assert len(survivors) == 4
        for c, (http, _) in region.ports.items():
            assert wait_until(lambda h=http: (try_call(f"http://127.0.0.1:{h}/v1/elastic") or {}).get("version")
                              == plan["version"], 30, 0.1)  # fmt: skip
            mine = call(f"http://127.0.0.1:{http}/v1/elastic")["nodes"]
            assert sorted(mine) == [s for s in elastic if cluster_of(s) == c]
        # 2. agents on the surviving elastic servers, each running one container
        placed = [region.agent(s) for s in survivors]
        for (agent, _), s in zip(placed, survivors, strict=True):
            url = f"{region.placement(s)}/v1/nodes/{s}"
            assert wait_until(lambda u=url: (try_call(u) or {}).get("class_id") == "elastic", 30, 0.1)
            info = call(url)
            assert info["harvestable"] and info["elastic"]
            assert wait_until(lambda a=agent: len(a.explain().get("containers", [])) == 1, 30, 0.1)
            assert agent.executor.label == "elastic"
        # 3. MSB msb0 fails (operator signal) -> mover -> revocations -> drain -> acknowledgement
        t0 = time.monotonic()
        failed = [f"n{i:02d}" for i in range(4)]
        moved = call(f"{cap}/v1/failures", "POST", {"servers": failed, "reason": "MSB msb0 lost power",
                                                    "source": "operator"})  # fmt: skip
        assert sorted(moved["revoked"]) == survivors
        status = call(f"{cap}/v1/reservations/web")
        assert status["check_ok"] and not status["whole"] and sorted(status["pending_handover"]) == survivors
        assert wait_until(lambda: call(f"{cap}/v1/reservations/web")["whole"], 60, 0.1), \
            call(f"{cap}/v1/revocations")
        whole_s = time.monotonic() - t0
        revs = call(f"{cap}/v1/revocations")["revocations"]
        assert sorted(r["server"] for r in revs) == survivors
        assert all(r["state"] == "acked" and "MSB msb0 lost power" in r["reason"] for r in revs)
        for agent, node in placed:
            assert agent.explain()["drain"]["acknowledged"]
            assert not node.children[0].alive(), "the container was killed by the drain"
            decision = agent.explain()["decision"]
            assert decision["advertised"] == {"cores": 0, "memory_mb": 0} and decision["busy"]
        for s in survivors:
            assert not call(f"{region.placement(s)}/v1/nodes/{s}")["harvestable"]
        final = call(f"{cap}/v1/plan")
        assert final["check"]["ok"] and final["reservations"]["web"]["capacity_after_worst_msb_loss_rru"] >= 4
        assert whole_s < 30
    finally:
        region.stop()


def test_a_placement_service_that_is_down_gets_the_set_when_it_is_back(tmp_path: Path) -> None:
    region = LoopRegion(tmp_path)
    cap = region.cap_url
    c2 = region.procs[1]
    try:
        c2.stop()  # down before the first plan: pushes to c2 fail and are retried
        assert wait_until(lambda: (try_call(f"{cap}/v1/plan") or {}).get("version", 0) >= 1, 90, 0.2)
        assert wait_until(lambda: call(f"{cap}/v1/status")["clusters"]["c2"]["attempts"] >= 2, 30, 0.1)
        assert call(f"{cap}/v1/status")["clusters"]["c2"]["last_error"]
        version = call(f"{cap}/v1/plan")["version"]
        region.procs[1] = c2.restart()
        assert wait_until(lambda: (try_call(f"{region.placement('n01')}/v1/elastic") or {}).get("version")
                          == version, 60, 0.2)  # fmt: skip
        assert call(f"{cap}/v1/status")["clusters"]["c2"]["accepted_version"] == version
    finally:
        region.stop()

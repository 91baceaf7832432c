"""Busy DataNodes as HDFS maintenance: the planner's hysteresis, rate limit, cap and expiry, the
combined hosts file it writes and the refresh command, and the wiring in ``harvest serve``.

``hdfs`` here is a stand-in script that records its arguments and the hosts file as the NameNode
would read it at that moment (a real NameNode re-reads ``dfs.hosts`` on ``-refreshNodes``)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from placement_service.server.maintenance import (
    MaintenanceController,
    MaintenanceError,
    MaintenancePlanner,
    MaintenanceSettings,
    NodeObservation,
    render_hosts,
)
from tests.server.conftest import report, start_server

T0 = 1_700_000_000.0

FAKE_HDFS = """\
import json, pathlib, sys
log, hosts, fail = sys.argv[1], sys.argv[2], sys.argv[3]
doc = json.loads(pathlib.Path(hosts).read_text())
with open(log, "a") as fh:
    fh.write(json.dumps({"argv": sys.argv[4:], "hosts": doc}) + "\\n")
if pathlib.Path(fail).exists():
    sys.stderr.write("refreshNodes: Call From nn to nn:8020 failed on connection exception\\n")
    sys.exit(255)
"""


def obs(busy: dict[str, bool], now: float, silent: tuple[str, ...] = ()) -> dict[str, NodeObservation]:
    return {n: NodeObservation(b, now - (600.0 if n in silent else 1.0)) for n, b in busy.items()}


def cluster(n: int, busy: tuple[str, ...] = ()) -> dict[str, bool]:
    return {f"dn{i}": f"dn{i}" in busy for i in range(1, n + 1)}


def settings(**over: float) -> MaintenanceSettings:
    base: dict[str, float] = {"enter_after_s": 30, "leave_after_s": 120, "max_enter_per_min": 2,
                              "max_fraction": 0.5, "expiry_s": 600, "stale_after_s": 60}
    base.update(over)
    return MaintenanceSettings(**base)  # type: ignore[arg-type]


def test_hysteresis_enter_after_busy_leave_after_idle() -> None:
    p = MaintenancePlanner(settings())
    assert p.step(T0, obs(cluster(4, ("dn1",)), T0)).entered == ()
    assert p.step(T0 + 29, obs(cluster(4, ("dn1",)), T0 + 29)).entered == ()
    plan = p.step(T0 + 30, obs(cluster(4, ("dn1",)), T0 + 30))
    assert plan.entered == ("dn1",) and plan.changed
    assert plan.in_maintenance == {"dn1": T0 + 30 + 600}
    # Idle 119 s: stays; a busy blip restarts the idle clock; idle 120 s: leaves.
    assert p.step(T0 + 149, obs(cluster(4), T0 + 149)).left == ()
    p.step(T0 + 150, obs(cluster(4, ("dn1",)), T0 + 150))
    assert p.step(T0 + 269, obs(cluster(4), T0 + 269)).left == ()
    plan = p.step(T0 + 151 + 269, obs(cluster(4), T0 + 151 + 269))
    assert plan.left == ("dn1",) and plan.in_maintenance == {}


def test_a_flapping_node_never_enters() -> None:
    p = MaintenancePlanner(settings())
    for k in range(40):
        plan = p.step(T0 + 10 * k, obs(cluster(4, ("dn2",) if k % 3 else ()), T0 + 10 * k))
        assert plan.entered == ()


def test_rate_limit_longest_busy_first() -> None:
    p = MaintenancePlanner(settings(max_fraction=1.0))
    p.step(T0, obs(cluster(10, ("dn3",)), T0))
    p.step(T0 + 1, obs(cluster(10, ("dn3", "dn1", "dn2")), T0 + 1))
    plan = p.step(T0 + 40, obs(cluster(10, ("dn3", "dn1", "dn2")), T0 + 40))
    assert plan.entered == ("dn3", "dn1")
    assert "rate limit" in plan.held["dn2"]
    assert p.step(T0 + 99, obs(cluster(10, ("dn3", "dn1", "dn2")), T0 + 99)).entered == ()
    assert p.step(T0 + 100, obs(cluster(10, ("dn3", "dn1", "dn2")), T0 + 100)).entered == ("dn2",)


def test_cap_counts_silent_nodes_and_silent_busy_nodes_are_held() -> None:
    p = MaintenancePlanner(settings(max_fraction=0.2, max_enter_per_min=10))
    busy = cluster(10, ("dn1", "dn2", "dn3"))
    p.step(T0, obs(busy, T0))
    plan = p.step(T0 + 30, obs(busy, T0 + 30, silent=("dn9",)))
    # 20% of 10 = 2 unavailable at most: dn9 (silent, maybe down with replicas) + dn1.
    assert plan.entered == ("dn1",)
    assert plan.held["dn2"].startswith("cap: 1 in maintenance + 1 silent of 10 nodes, at most 2")
    plan = p.step(T0 + 31, obs(busy, T0 + 31, silent=("dn2",)))
    assert plan.held["dn2"] == "no recent report" and plan.entered == ()


@pytest.mark.parametrize("n", [2, 3, 5, 9, 10, 19])
def test_default_cap_allows_one_node_on_a_cluster_under_ten_datanodes(n: int) -> None:
    # 10% of fewer than 10 nodes rounds down to 0: maintenance never happened on small clusters (issue 36 D5).
    p = MaintenancePlanner(settings(max_fraction=MaintenanceSettings().max_fraction, max_enter_per_min=10))
    busy = cluster(n, ("dn1", "dn2"))
    p.step(T0, obs(busy, T0))
    plan = p.step(T0 + 30, obs(busy, T0 + 30))
    assert plan.entered == ("dn1",)
    assert plan.held["dn2"].startswith(f"cap: 1 in maintenance + 0 silent of {n} nodes, at most 1")


def test_the_one_node_floor_still_counts_silent_nodes_and_zero_turns_maintenance_off() -> None:
    p = MaintenancePlanner(settings(max_fraction=0.1))
    busy = cluster(5, ("dn1",))
    p.step(T0, obs(busy, T0))
    plan = p.step(T0 + 30, obs(busy, T0 + 30, silent=("dn4",)))
    assert plan.entered == () and plan.held["dn1"].startswith("cap: 0 in maintenance + 1 silent of 5 nodes, at most 1")
    off = MaintenancePlanner(settings(max_fraction=0.0))
    off.step(T0, obs(busy, T0))
    assert off.step(T0 + 30, obs(busy, T0 + 30)).held["dn1"].startswith("cap: 0 in maintenance + 0 silent of 5 nodes, at most 0")


def test_expiry_is_renewed_while_busy_and_left_to_run_out_when_silent() -> None:
    p = MaintenancePlanner(settings())
    p.step(T0, obs(cluster(4, ("dn1",)), T0))
    p.step(T0 + 30, obs(cluster(4, ("dn1",)), T0 + 30))  # expiry T0 + 630
    plan = p.step(T0 + 300, obs(cluster(4, ("dn1",)), T0 + 300))
    assert not plan.changed
    plan = p.step(T0 + 331, obs(cluster(4, ("dn1",)), T0 + 331))
    assert plan.changed and plan.in_maintenance == {"dn1": T0 + 331 + 600}
    plan = p.step(T0 + 700, obs(cluster(4, ("dn1",)), T0 + 700, silent=("dn1",)))
    assert not plan.changed  # silent: not renewed
    plan = p.step(T0 + 931, obs(cluster(4, ("dn1",)), T0 + 931, silent=("dn1",)))
    assert plan.left == ("dn1",)  # the NameNode has returned it by now


def test_settings_are_validated() -> None:
    with pytest.raises(MaintenanceError, match="max_fraction"):
        MaintenanceSettings(max_fraction=1.5)
    with pytest.raises(MaintenanceError, match="expiry_s"):
        MaintenanceSettings(expiry_s=5)


def test_hosts_file_keeps_base_entries_and_the_operators_states() -> None:
    base = [{"hostName": "dn1", "upgradeDomain": "reimage-row-0"},
            {"hostName": "dn2", "adminState": "DECOMMISSIONED"},
            {"hostName": "dn3", "upgradeDomain": "reimage-row-1"}]
    doc = json.loads(render_hosts(base, {"dn1": T0, "dn2": T0, "dn4": T0 + 1}))
    assert doc == [
        {"hostName": "dn1", "upgradeDomain": "reimage-row-0", "adminState": "IN_MAINTENANCE",
         "maintenanceExpireTimeInMS": int(T0 * 1000)},
        {"hostName": "dn2", "adminState": "DECOMMISSIONED"},
        {"hostName": "dn3", "upgradeDomain": "reimage-row-1"},
    ]
    # Several DataNodes on one host: told apart by port, as the NameNode does.
    same_host = [{"hostName": "10.0.0.7", "port": 9866}, {"hostName": "10.0.0.7", "port": 9876}]
    doc = json.loads(render_hosts(same_host, {"10.0.0.7:9876": T0}))
    assert doc == [same_host[0], {**same_host[1], "adminState": "IN_MAINTENANCE",
                                  "maintenanceExpireTimeInMS": int(T0 * 1000)}]


def test_an_empty_or_missing_hosts_file_is_refused(tmp_path: Path) -> None:
    """An empty dfs.hosts admits every DataNode: one maintenance entry would shut out all the others."""
    hosts = tmp_path / "dfs.hosts.json"
    with pytest.raises(MaintenanceError, match="missing"):
        MaintenanceController(hosts, "", settings(), dict)
    hosts.write_text("[]")
    with pytest.raises(MaintenanceError, match="lists no DataNode"):
        MaintenanceController(hosts, "", settings(), dict)
    hosts.write_text('[{"hostName": "dn1"}, {"port": 9866}]')
    with pytest.raises(MaintenanceError, match="entry 1: expected an object with a 'hostName'"):
        MaintenanceController(hosts, "", settings(), dict)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> float:
        return self.now


def _fake(tmp_path: Path) -> tuple[Path, Path, Path, str]:
    script = tmp_path / "fake_hdfs.py"
    script.write_text(FAKE_HDFS)
    log, hosts, fail = tmp_path / "hdfs.log", tmp_path / "dfs.hosts.json", tmp_path / "fail"
    return log, hosts, fail, f"{sys.executable} {script} {log} {hosts} {fail} dfsadmin -refreshNodes"


def _calls(log: Path) -> list[dict[str, object]]:
    return [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []


def test_controller_writes_refreshes_retries_and_adopts_after_restart(tmp_path: Path) -> None:
    log, hosts, fail, command = _fake(tmp_path)
    base = [{"hostName": f"dn{i}", "upgradeDomain": f"d{i % 3}"} for i in range(1, 7)]
    hosts.write_text(json.dumps(base))  # the NameNode's dfs.hosts as the operator generated it
    clock = Clock()
    state = {"busy": {**cluster(6), "stranger": True}}  # a node not in dfs.hosts is never added

    def observe() -> dict[str, NodeObservation]:
        return obs(state["busy"], clock.now)

    ctl = MaintenanceController(hosts, command, settings(), observe, clock=clock)
    ctl.tick()
    assert _calls(log) == [{"argv": ["dfsadmin", "-refreshNodes"], "hosts": base}]
    state["busy"] = cluster(6, ("dn4",))
    for dt in (10, 20, 40):
        clock.now = T0 + dt
        ctl.tick()
    calls = _calls(log)
    assert len(calls) == 2  # the start-up write, then dn4 entering; nothing in between
    assert calls[1]["hosts"] == [  # busy since T0 + 10, entered at T0 + 40
        {**e, "adminState": "IN_MAINTENANCE", "maintenanceExpireTimeInMS": int((T0 + 640) * 1000)}
        if e["hostName"] == "dn4" else e for e in base
    ]
    assert ctl.status["in_maintenance"] == ["dn4"] and ctl.status["refreshes"] == 2
    # The NameNode is unreachable: the file is written, the refresh retried every tick until it works.
    fail.touch()
    state["busy"] = cluster(6)
    for dt in (45, 165, 170):
        clock.now = T0 + dt
        ctl.tick()
    # dn4 left at T0 + 165 (idle since T0 + 45); that refresh and the retry at T0 + 170 failed.
    assert len(_calls(log)) == 4 and "refreshNodes: Call From" in str(ctl.status["last_error"])
    fail.unlink()
    clock.now += 5
    ctl.tick()
    clock.now += 5
    ctl.tick()
    assert len(_calls(log)) == 5 and ctl.status["last_error"] == ""
    assert _calls(log)[-1]["hosts"] == base
    # dn2 enters; after a restart the service adopts it (and does not take the new base for its own).
    state["busy"] = cluster(6, ("dn2",))
    for _ in range(8):
        clock.now += 5
        ctl.tick()
    assert ctl.status["in_maintenance"] == ["dn2"]
    again = MaintenanceController(hosts, command, settings(), observe, clock=clock)
    assert set(again.planner.expiry) == {"dn2"}
    state["busy"] = cluster(6)
    for _ in range(30):
        clock.now += 5
        again.tick()
    assert json.loads(hosts.read_text()) == base


def test_serve_puts_a_busy_node_in_maintenance(tmp_path: Path) -> None:
    """Wiring: ``harvest serve --dfs-hosts-file ... --refresh-nodes-command ...`` with real reports."""
    log, hosts, _, command = _fake(tmp_path)
    hosts.write_text(json.dumps([{"hostName": f"dn{i}"} for i in range(1, 5)]))
    server = start_server(tmp_path / "data", "--dfs-hosts-file", str(hosts), "--refresh-nodes-command", command,
                          "--maintenance-enter-after-s", "0", "--maintenance-max-fraction", "0.5",
                          env={"HARVEST_MAINTENANCE_TICK_S": "0.2"})
    try:
        now = time.time()
        batch = [report(f"dn{i}", "search", now, seq=1, busy=(i == 2)) for i in range(1, 5)]
        assert server.call("POST", "/v1/reports", {"reports": batch})[0] == 202
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            calls = _calls(log)
            if calls and any(e.get("adminState") == "IN_MAINTENANCE" for e in calls[-1]["hosts"]):  # type: ignore
                break
            time.sleep(0.1)
        doc = json.loads(hosts.read_text())
        assert sorted(e["hostName"] for e in doc) == ["dn1", "dn2", "dn3", "dn4"]
        assert [e["hostName"] for e in doc if e.get("adminState") == "IN_MAINTENANCE"] == ["dn2"]
        status, text = server.call("GET", "/metrics")
        assert status == 200 and "harvest_maintenance_nodes 1" in str(text), text
    finally:
        server.stop()

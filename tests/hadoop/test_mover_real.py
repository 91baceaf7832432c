"""The service's mover (server/mover.py) on a real NameNode and real DataNodes.

One block (2 replicas: the grid of the test cluster allows two distinct rows and columns, search
plus ads or mail) whose replicas' tenants turn busy together but for one: the watch moves the busy
replica to a quiet tenant (raise the file's replication, the shim places the new replica where the
service says, lower it, the shim drops the busy one). The NameNode's own block locations are read
before, during (the block never under its factor) and after. Then the service is killed with
SIGKILL mid-move and restarted: the factor is set back, the block keeps its replicas, the data
reads back whole.
"""

from __future__ import annotations

import os
import threading
import time
import urllib.request

import pytest

from tests.hadoop.conftest import FIGURES, WORKERS, HadoopCluster, report_nodes
from tests.hadoop.conftest import wait_for as _wait

pytestmark = [pytest.mark.hadoop, pytest.mark.timeout(900)]
BLOCK = 1024 * 1024
WATCH_S = 2.0


def _payload(seed: int) -> bytes:
    return bytes((seed * 7 + i) % 253 for i in range(256)) * (BLOCK // 256)


def _replication(c: HadoopCluster, path: str) -> int:
    import json

    with urllib.request.urlopen(c.nn_url(f"/webhdfs/v1{path}?op=GETFILESTATUS&user.name=root"), timeout=30) as r:
        return int(json.loads(r.read())["FileStatus"]["replication"])


def _read(c: HadoopCluster, path: str) -> bytes:
    with urllib.request.urlopen(c.nn_url(f"/webhdfs/v1{path}?op=OPEN&user.name=root"), timeout=60) as resp:
        return bytes(resp.read())


class _Watch:
    """Samples the NameNode's replica count of a file's first block every 0.3 s (the fewest seen)."""

    def __init__(self, c: HadoopCluster, path: str) -> None:
        self.c, self.path, self.fewest, self.samples = c, path, 99, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                hosts = self.c.block_hosts(self.path)[0]
                self.fewest = min(self.fewest, len(hosts))
                self.samples += 1
            except (OSError, IndexError):
                pass
            self._stop.wait(0.3)

    def stop(self) -> int:
        self._stop.set()
        self._thread.join(timeout=30)
        return self.fewest


def _risky(c: HadoopCluster, hosts: list[str]) -> tuple[str, set[str]]:
    """The block's replica not on ``search`` and every worker of that replica's tenant."""
    tenant_of = {c.ip_of(w): t for w, (t, _rack) in WORKERS.items()}
    assert len(hosts) == 2 and {tenant_of[h] for h in hosts} == {"search", "mail"}, (hosts, tenant_of)
    risky = next(h for h in hosts if tenant_of[h] != "search")
    return risky, {w for w, (t, _rack) in WORKERS.items() if t == tenant_of[risky]}


def _write_on_search_and_mail(c: HadoopCluster, path: str, seed: int) -> list[str]:
    """The test's setup: a block on search and mail, as the service places it while ads is busy.

    In the full tier, right after the maintenance test, the NameNode once placed this block the
    stock way (on ads) although the service had answered search + mail (2026-11-29, cause not found:
    docs/hadoop.md). The setup is retried past the shim's cool-down; the mover is what is under test.
    """
    tenant_of = {c.ip_of(w): t for w, (t, _rack) in WORKERS.items()}
    hosts: list[str] = []
    for _ in range(5):
        c.webhdfs_put(path, _payload(seed), replication=2)
        hosts = c.block_hosts(path)[0]
        if {tenant_of[h] for h in hosts} == {"search", "mail"}:
            break
        time.sleep(3.5)  # past harvest.placement.cooldown-ms (3000)
    return hosts


def _mover(c: HadoopCluster) -> dict:  # type: ignore[type-arg]
    status, doc = c.service.call("GET", "/v1/mover")
    assert status == 200, doc
    return doc  # type: ignore[no-any-return]


@pytest.mark.feature("mover: a replica off busy tenants within one watch; service killed mid-move loses nothing")
def test_mover_moves_a_replica_off_busy_tenants_and_survives_a_kill(hadoop_cluster: HadoopCluster) -> None:
    c = hadoop_cluster
    base_args = list(c.service.args)
    nn = f"http://{c.info['namenode']['http']}"
    c.service.stop()
    # HDFS-H placement (the service's default is HDFS-H-cobusy since issue 38, point 3): the block's
    # tenants and the move's target below are those of the 3x3 grid.
    c.service.args = [*base_args, "--no-placement-cobusy", "--mover", "on", "--mover-namenode-url", nn, "--mover-hdfs-user", "root",
                      "--mover-paths", "/mover", "--mover-watch-every-s", str(WATCH_S),
                      "--mover-move-timeout-s", "30"]
    c.service.start()
    try:
        report_nodes(c)
        assert _mover(c)["mode"] == "on"
        # 1. One block at risk moves within one watch period, never under its factor.
        # Written while ads is busy: the block lands on search and mail. Moving its mail replica to
        # ads keeps the durability exposure (grid row 1 <= 2); the other way round the core refuses.
        report_nodes(c, busy={"worker3"})
        before = _write_on_search_and_mail(c, "/mover/a.bin", 1)
        risky, busy = _risky(c, before)
        keep = next(h for h in before if h != risky)
        watch = _Watch(c, "/mover/a.bin")
        turned_busy = time.time()
        report_nodes(c, busy=busy)
        _wait("the mover's move of /mover/a.bin", lambda: _mover(c)["moves_total"] >= 1, 180, 0.5)
        _wait("the block back at 2 replicas", lambda: len(c.block_hosts("/mover/a.bin")[0]) == 2, 60)
        fewest = watch.stop()
        after = c.block_hosts("/mover/a.bin")[0]
        busy_ips = {c.ip_of(w) for w in busy}
        assert keep in after and risky not in after and not busy_ips & set(after), (before, after, busy_ips)
        assert fewest >= 2, f"the block fell to {fewest} replica(s) during the move"
        assert _replication(c, "/mover/a.bin") == 2
        status, explained = c.service.call("GET", "/v1/explain/moves")
        entries = [m for m in explained["moves"] if m["path"] == "/mover/a.bin"]
        entry = entries[-1]
        assert entry["outcome"] == "moved" and entry["from"]["node"] == risky, entries
        # Planned by the first pass after the tenant turned busy (a pass may have been running then).
        planned_after_s = entries[0]["at"] - entries[0]["seconds"] - turned_busy
        assert planned_after_s <= 2 * WATCH_S + _mover(c)["last_pass"]["seconds"] + 1.0, entry
        FIGURES[("mover: busy report to planned move / move done (1 MB block)", c.version)] = (
            f"{planned_after_s:.1f} s / {entry['seconds']:.1f} s (load {os.getloadavg()[0]:.0f})")

        # 2. The service killed with SIGKILL mid-move: nothing lost, the factor set back on restart.
        report_nodes(c, busy={"worker3"})
        hosts_b = _write_on_search_and_mail(c, "/mover/b.bin", 2)
        data = _read(c, "/mover/b.bin")
        risky_b, busy_b = _risky(c, hosts_b)
        watch = _Watch(c, "/mover/b.bin")
        report_nodes(c, busy=busy_b)
        journal = c.service.tmp / "data" / "mover-journal.json"
        _wait("a move in the journal", lambda: journal.exists() and '"path"' in journal.read_text(), 120, 0.02)
        assert c.service.proc is not None
        c.service.proc.kill()
        c.service.proc.wait()
        c.service.proc = None
        raised = _replication(c, "/mover/b.bin")
        c.service.start()
        report_nodes(c)  # the tenant quiet again: the restart only finishes what was in flight
        _wait("the journal finished", lambda: not _mover(c)["in_flight"], 180, 0.5)
        _wait("the factor back to 2 and 2 replicas",
              lambda: _replication(c, "/mover/b.bin") == 2 and len(c.block_hosts("/mover/b.bin")[0]) == 2, 120)
        fewest = watch.stop()
        assert raised in (2, 3), raised
        assert fewest >= 2, f"the block fell to {fewest} replica(s) around the kill"
        assert _read(c, "/mover/b.bin") == data
        status, explained = c.service.call("GET", "/v1/explain/moves")
        assert any(m["path"] == "/mover/b.bin" and m["outcome"].startswith("recovered") for m in explained["moves"]), \
            explained
    finally:
        report_nodes(c)
        c.service.stop()
        c.service.args = base_args
        c.service.start()
        report_nodes(c)

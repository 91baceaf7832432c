"""The shim-to-service round trip on a real NameNode: per-block write time and blocks/s, against stock.

The tier's cluster (``tests/hadoop/conftest.py``'s ``_prepare``: 4 DataNodes in their own network
namespaces, the shim built against the version's jars, ``harvest serve`` with the tier's classes and
agent-style reports). Each phase writes ``--warmup`` files untimed, then ``--files`` one-block files (``--file-kb`` each, replication
3) through WebHDFS, one at a time, then the same number with ``--threads`` writers at once:

    per block = WebHDFS CREATE at the NameNode (which calls ``chooseTarget``: with the shim, one HTTP
                round trip to the service) + the DataNode pipeline write, as a client sees it
    blocks/s  = files written / wall time, for the sequential and the concurrent part

Phases run in the order shim, stock, shim on the same cluster and DataNodes; between them the NameNode
restarts with ``dfs.block.replicator.classname`` set or removed (stock = HDFS's default policy). The
two shim phases bracket the stock one, so drift in the machine's load shows as a difference between
them. With the shim, the service's own count of block decisions is read before and after each phase:
every block must have been decided by the service (no fallback to the stock choice), else the phase
is reported as such.

    nice -n 10 .venv/bin/python benchmarks/bench_shim_real.py [--version 3.4.2] [--files 1000]

Needs root (network namespaces), java, mvn and ``.cache/hadoop-<version>`` (``make hadoop``; or
``HARVEST_HADOOP_CACHE``). Prints one JSON object and writes it to ``benchmarks/out/shim_real.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from scheduler_plugin.testbed import cluster as testbed  # noqa: E402
from scheduler_plugin.testbed.versions import VERSIONS  # noqa: E402
from tests.hadoop.conftest import HadoopCluster, _prepare, report_nodes  # noqa: E402

POLICY_KEY = "dfs.block.replicator.classname"
SHIM_CLASS = "org.harvest.hdfs.HarvestBlockPlacementPolicy"


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _set_policy(cluster: HadoopCluster, shim: bool) -> None:
    """Rewrite the NameNode's hdfs-site.xml with the shim or HDFS's default policy; restart it."""
    site = cluster.dir / "conf" / "master" / "hdfs-site.xml"
    text = site.read_text()
    pattern = re.compile(rf"<property>\s*<name>{re.escape(POLICY_KEY)}</name>\s*<value>[^<]*</value>\s*</property>\s*")
    text = pattern.sub("", text)
    if shim:
        text = text.replace("</configuration>", f"<property><name>{POLICY_KEY}</name><value>{SHIM_CLASS}</value>"
                                                "</property>\n</configuration>")
    site.write_text(text)
    cluster.stop("master", "namenode")
    cluster.start("master", "namenode")
    cluster.wait_healthy(240)
    deadline = time.monotonic() + 120  # out of safe mode and every DataNode back
    while time.monotonic() < deadline:
        bean = cluster.nn_jmx("Hadoop:service=NameNode,name=NameNodeInfo")
        if not bean.get("Safemode") and len(json.loads(bean["LiveNodes"])) == 4:
            return
        time.sleep(1)
    raise RuntimeError("the NameNode did not leave safe mode with 4 live DataNodes")


def _decisions(cluster: HadoopCluster) -> float:
    """The service's count of answered block-placement requests (``/v1/blocks/place`` 200s in /metrics)."""
    with urllib.request.urlopen(cluster.service.http + "/metrics", timeout=30) as resp:
        text = resp.read().decode()
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("harvest_http_requests_total{") and 'route="/v1/blocks/place"' in line
               and 'status="200"' in line)


def _nn_log_lines(cluster: HadoopCluster) -> list[str]:
    log = Path(cluster.info["master"]["logs"]) / "namenode.log"
    return log.read_text(errors="replace").splitlines() if log.exists() else []


class _Writer:
    """WebHDFS writes, each retried twice on an HTTP error (the error kept, the file counted once)."""

    def __init__(self, cluster: HadoopCluster, payload: bytes) -> None:
        self.cluster, self.payload = cluster, payload
        self.errors: list[str] = []
        self.failed = 0
        self.lock = threading.Lock()

    def put(self, path: str) -> float:
        t0 = time.monotonic()
        for attempt in range(3):
            try:
                self.cluster.webhdfs_put(path, self.payload, replication=3, settle=False)
                return time.monotonic() - t0
            except (urllib.error.HTTPError, AssertionError) as exc:
                body = exc.read()[:300].decode(errors="replace") if isinstance(exc, urllib.error.HTTPError) else ""
                with self.lock:
                    self.errors.append(f"{path} attempt {attempt + 1}: {exc} {body}")
                time.sleep(0.5)
        with self.lock:
            self.failed += 1
        return time.monotonic() - t0


def _phase(cluster: HadoopCluster, name: str, files: int, kb: int, threads: int, warmup: int) -> dict[str, Any]:
    writer = _Writer(cluster, os.urandom(kb * 1024))
    for i in range(warmup):  # the first writes after a NameNode start pay for class loading and JIT
        writer.put(f"/bench/{name}/warm-{i:05d}")
    log_from = len(_nn_log_lines(cluster))
    seq: list[float] = []
    before = _decisions(cluster)
    began = time.monotonic()
    for i in range(files):
        seq.append(writer.put(f"/bench/{name}/seq-{i:05d}"))
    seq_wall = time.monotonic() - began

    def one(i: int) -> float:
        return writer.put(f"/bench/{name}/par-{i:05d}")

    began = time.monotonic()
    with ThreadPoolExecutor(threads) as pool:
        par = list(pool.map(one, range(files)))
    par_wall = time.monotonic() - began
    decided = _decisions(cluster) - before
    fallbacks = [ln for ln in _nn_log_lines(cluster)[log_from:] if "stock placement" in ln or "service targets" in ln]
    return {
        "phase": name, "files": files, "load_before": round(os.getloadavg()[0], 1),
        "seq_p50_ms": round(1000 * statistics.median(seq), 1), "seq_p99_ms": round(1000 * _pct(seq, 0.99), 1),
        "seq_blocks_per_s": round(files / seq_wall, 1),
        f"par{threads}_p50_ms": round(1000 * statistics.median(par), 1),
        f"par{threads}_p99_ms": round(1000 * _pct(par, 0.99), 1),
        f"par{threads}_blocks_per_s": round(files / par_wall, 1),
        "service_decisions": decided, "failed_writes": writer.failed, "write_errors": writer.errors[:3],
        "shim_fallback_log_lines": len(fallbacks), "last_fallback": fallbacks[-1][-300:] if fallbacks else "",
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", default=VERSIONS[-1], choices=VERSIONS, help="Hadoop version (default: %(default)s)")
    parser.add_argument("--files", type=int, default=1000, help="one-block files per part of a phase (default: %(default)s)")
    parser.add_argument("--file-kb", type=int, default=64, help="size of each file in KiB (default: %(default)s)")
    parser.add_argument("--warmup", type=int, default=50, help="files written and not timed first in each phase (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=4, help="writers in the concurrent part (default: %(default)s)")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out" / "shim_real.json")
    args = parser.parse_args(argv)
    if os.geteuid() != 0:
        parser.error("needs root: the DataNodes run in network namespaces")
    tmp = Path(tempfile.mkdtemp(prefix="bench-shim-"))
    _overrides, shim_jar, service, inventory, plan = _prepare(tmp, args.version)
    started = keep = False
    try:
        info = testbed.up(plan, timeout_s=300)
        started = True
        service.start()
        cluster = HadoopCluster(args.version, info, plan.dir, service, inventory, shim_jar)
        report_nodes(cluster)
        stop = threading.Event()

        def keep_reporting() -> None:  # as the agents would: the service's view of the nodes stays fresh
            while not stop.wait(5.0):
                try:
                    report_nodes(cluster)
                except (OSError, AssertionError) as exc:
                    print(f"report failed: {exc}", file=sys.stderr)

        reporter = threading.Thread(target=keep_reporting, daemon=True)
        reporter.start()
        phases = []
        for name, shim in (("shim-1", True), ("stock", False), ("shim-2", True)):
            if name != "shim-1":
                _set_policy(cluster, shim)
                report_nodes(cluster)
            phase = _phase(cluster, name, args.files, args.file_kb, args.threads, args.warmup)
            phase["policy"] = "shim" if shim else "stock"
            if shim and phase["service_decisions"] < 2 * args.files:
                phase["note"] = "some blocks fell back to the stock choice (service too slow or refused)"
            print(json.dumps(phase), flush=True)
            phases.append(phase)
        stop.set()
        result = {"version": args.version, "file_kb": args.file_kb, "threads": args.threads, "phases": phases,
                  "load_after": round(os.getloadavg()[0], 1), "cores": os.cpu_count()}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=2) + "\n")
        print(json.dumps(result))
        return 0
    except BaseException:
        print(f"kept for a look: {tmp} (service.log, cluster/hosts/*/logs)", file=sys.stderr)
        keep = True
        raise
    finally:
        service.stop()
        if started:
            testbed.down(plan.dir, quiet=True)
        if not keep:
            shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())

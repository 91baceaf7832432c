"""The real-Hadoop tier: real daemons from Maven Central, one cluster per version per session.

Marker ``hadoop`` (registered here). The tier runs inside ``make test`` when java, javac and mvn exist;
without them it skips, except under ``CI=true``, where a missing tool or a cluster that fails to
start is a failure. Logs stay after the run in ``.cache/hadoop-runs/<version>/`` (``cluster/hosts/<host>/logs``,
``service.log``; ``$HARVEST_HADOOP_RUNS`` moves it) until the next run of that version.

Fixtures (import nothing from here; ask for them by name):

* ``hadoop_cluster`` (session scope, parametrized over ``VERSIONS``, one cluster up at a time):
  a :class:`HadoopCluster`: ``.info`` is the JSON object ``harvest hadoop up`` prints (keys
  version, namenode.rpc/http, resourcemanager.http, hosts[{name, ip, datanode, nodemanager, logs,
  netns, conf}], dir, bin, lib, ...), ``.service`` the ``harvest serve`` the NameNode's shim and the
  RM's labels use (:class:`ServiceProcess`, restartable on its port), ``.inventory`` the worker
  inventory, and helpers: ``.hdfs/.yarn/.hadoop(*args)`` run the client commands,
  ``.webhdfs_put``, ``.block_hosts``, ``.rm_get``, ``.nn_jmx``, ``.stop/.start(host, role)``.
* ``hadoop_version``: the version string of the current parameter.

The cluster: ``DATANODES`` DataNodes on worker1..4, ``NODEMANAGERS`` NodeManagers on worker1..3,
each worker its own network namespace and IP address (as root), the shim built with ``build.sh``
against the version's real jars and loaded by the NameNode (``dfs.block.replicator.classname``),
the topology script with the inventory's racks, the NodeManagers' node-label script provider
reading ``<dir>/hosts/<host>/agent/node-label``, and the service with ``--rm-url``,
``--capacity-scheduler-file`` and ``--refresh-queues-command``. Extra properties for tests added
later: extend ``EXTRA_OVERRIDES`` (``{(file, key): value}``) before the session starts.

At the end of a run that executed ``hadoop`` tests, ``docs/hadoop-verified.md`` is rewritten with
the outcome per feature (the test's ``feature`` marker, else its name) and version.
"""

from __future__ import annotations

import contextlib
import csv
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from scheduler_plugin.testbed import cluster as testbed
from scheduler_plugin.testbed.testbed import harvest_overrides
from scheduler_plugin.testbed.versions import VERSIONS, assemble, tools_missing

REPO = Path(__file__).resolve().parents[2]
IN_CI = os.environ.get("CI", "").lower() == "true"
DATANODES = 4
NODEMANAGERS = 3
#: worker -> (tenant, rack); tenants map to classes in CLASSES below.
WORKERS = {"worker1": ("search", "/dc1/r1"), "worker2": ("search", "/dc1/r1"), "worker3": ("ads", "/dc1/r2"),
           "worker4": ("mail", "/dc1/r2")}
CLASSES = {
    "classes": [
        {"id": "constant-0", "pattern": "constant", "avg_cpu": 0.30, "peak_cpu": 0.45, "current_cpu": 0.32,
         "servers": 2, "cores": 8, "tenants": ["search"]},
        {"id": "periodic-0", "pattern": "periodic", "avg_cpu": 0.40, "peak_cpu": 0.80, "current_cpu": 0.20,
         "servers": 1, "cores": 4, "tenants": ["ads"]},
        {"id": "unpredictable-0", "pattern": "unpredictable", "avg_cpu": 0.25, "peak_cpu": 0.90, "current_cpu": 0.60,
         "servers": 1, "cores": 4, "tenants": ["mail"]},
    ],
    "tenants": {"search": {"class": "constant-0", "pattern": "constant"},
                "ads": {"class": "periodic-0", "pattern": "periodic"},
                "mail": {"class": "unpredictable-0", "pattern": "unpredictable"}},
    "grid": {"search": {"reimage_row": 0, "peak_column": 1}, "ads": {"reimage_row": 1, "peak_column": 2},
             "mail": {"reimage_row": 2, "peak_column": 2}},
}
EXTRA_OVERRIDES: dict[tuple[str, str], str] = {}
#: Where each version's cluster, service and logs live (kept after the run; cleared by the next).
RUNS = Path(os.environ.get("HARVEST_HADOOP_RUNS", REPO / ".cache" / "hadoop-runs"))
TOKEN = "hadoop-tier-token"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "hadoop: runs against real Hadoop daemons (tests/hadoop)")
    config.addinivalue_line("markers", "feature(name): the row of docs/hadoop-verified.md this test fills")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/hadoop/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.hadoop)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """Under pytest-xdist (``make hadoop-tier``: ``-n 2``) one version's tests go to one worker, so the
    versions' clusters run side by side, one per worker, each started once."""
    from xdist.scheduler import LoadScopeScheduling

    class ByHadoopVersion(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return next((v for v in VERSIONS if nodeid.endswith(f"[{v}]")), nodeid)

    return ByHadoopVersion(config, log)


def require_tools() -> None:
    """Skip without java/javac/mvn; under CI that is a failure."""
    missing = tools_missing()
    if missing:
        message = f"the real-Hadoop tier needs {', '.join(missing)} on PATH"
        if IN_CI:
            pytest.fail(message + " (CI=true: a missing tool is a failure)", pytrace=False)
        pytest.skip(message)


# ---------------------------------------------------------------- the placement service


class ServiceProcess:
    """``harvest serve`` on a fixed 127.0.0.1 port, so the NameNode's shim finds it after a restart."""

    def __init__(self, tmp: Path, args: list[str]) -> None:
        self.tmp = tmp
        self.port = _free_port()
        self.http = f"http://127.0.0.1:{self.port}"
        self.token_file = tmp / "token"
        self.token_file.write_text(TOKEN + "\n")
        self.args = args
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        cmd = [sys.executable, "-m", "placement_service.cli", "serve", "--data-dir", str(self.tmp / "data"),
               "--http-port", str(self.port), "--grpc-port", "0", "--token-file", str(self.token_file), *self.args]
        log = open(self.tmp / "service.log", "ab")  # noqa: SIM115 (the child keeps it)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, cwd=REPO,
                                     env={**os.environ, "PYTHONPATH": str(REPO)})
        log.close()
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"harvest serve exited: {(self.tmp / 'service.log').read_text()[-2000:]}")
            try:
                self.call("GET", "/healthz")
                return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"harvest serve did not answer: {(self.tmp / 'service.log').read_text()[-2000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        req = urllib.request.Request(self.http + path, method=method,
                                     data=None if body is None else json.dumps(body).encode())
        req.add_header("Content-Type", "application/json")
        req.add_header("Authorization", f"Bearer {TOKEN}")
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw.strip() else None
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode(errors="replace")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---------------------------------------------------------------- the cluster


@dataclass
class HadoopCluster:
    version: str
    info: dict[str, Any]
    dir: Path
    service: ServiceProcess
    inventory: list[dict[str, str]]
    shim_jar: Path
    #: The NameNode's JSON hosts file (``CombinedHostFileManager``, every DataNode in service at the
    #: start), so a test can put a DataNode in maintenance with ``-refreshNodes`` and no restart.
    dfs_hosts: Path = Path()

    # --- names
    def host(self, name: str) -> dict[str, Any]:
        return next(h for h in self.info["hosts"] if h["name"] == name)

    def ip_of(self, name: str) -> str:
        return str(self.host(name)["ip"])

    def name_of_ip(self, ip: str) -> str:
        return next(h["name"] for h in self.info["hosts"] if h["ip"] == ip)

    # --- client commands (a JVM start each: use sparingly)
    def run(self, command: str, *args: str, timeout_s: float = 240, check: bool = True) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([str(Path(self.info["bin"]) / command), *args], capture_output=True, text=True,
                              timeout=timeout_s, check=False)
        if check and done.returncode != 0:
            raise AssertionError(f"{command} {' '.join(args)}: exit {done.returncode}\n{done.stdout[-3000:]}\n"
                                 f"{done.stderr[-3000:]}")
        return done

    # --- REST
    def nn_url(self, path: str) -> str:
        return f"http://{self.info['namenode']['http']}{path}"

    def rm_get(self, path: str) -> Any:
        with urllib.request.urlopen(f"http://{self.info['resourcemanager']['http']}{path}", timeout=30) as resp:
            return json.loads(resp.read())

    def nn_jmx(self, name: str) -> dict[str, Any]:
        with urllib.request.urlopen(self.nn_url(f"/jmx?qry={name}"), timeout=30) as resp:
            return dict(json.loads(resp.read())["beans"][0])

    def webhdfs_put(self, path: str, data: bytes, *, block_size: int = 1024 * 1024, replication: int = 3,
                    settle: bool = True) -> None:
        """WebHDFS CREATE: the NameNode redirects to a DataNode, which writes the block pipeline;
        with ``settle``, then wait until the NameNode knows every replica of every block."""
        query = urllib.parse.urlencode({"op": "CREATE", "user.name": "root", "overwrite": "true",
                                        "blocksize": block_size, "replication": replication})
        req = urllib.request.Request(self.nn_url(f"/webhdfs/v1{path}?{query}"), method="PUT")
        opener = urllib.request.build_opener(_NoRedirect())
        try:
            opener.open(req, timeout=60)
            raise AssertionError("WebHDFS CREATE did not redirect to a DataNode")
        except urllib.error.HTTPError as exc:
            if exc.code != 307:
                raise AssertionError(f"WebHDFS CREATE: {exc.code} {exc.read()[:500]!r}") from None
            location = exc.headers["Location"]
        put = urllib.request.Request(location, data=data, method="PUT")
        put.add_header("Content-Type", "application/octet-stream")
        with urllib.request.urlopen(put, timeout=300) as resp:
            assert resp.status == 201, resp.status
        if not settle:
            return
        # The NameNode closes a file once each block has its minimum replication (1); the other
        # replicas of the last block show up as their DataNodes report them. A test reading the
        # locations at once saw 1 of 3 (3.3.6, 2026-11-29). Written means every replica is known.
        deadline = time.monotonic() + 60
        while True:
            blocks = self.block_hosts(path)
            if all(len(hosts) >= replication for hosts in blocks):
                return
            if time.monotonic() > deadline:
                raise AssertionError(f"{path}: not every block has {replication} replicas 60 s after the write: {blocks}")
            time.sleep(0.2)

    def block_hosts(self, path: str) -> list[list[str]]:
        """The NameNode's own block locations for ``path``: per block, the DataNodes' IP addresses."""
        query = urllib.parse.urlencode({"op": "GET_BLOCK_LOCATIONS", "user.name": "root", "offset": 0,
                                        "length": 1 << 40})
        with urllib.request.urlopen(self.nn_url(f"/webhdfs/v1{path}?{query}"), timeout=30) as resp:
            doc = json.loads(resp.read())
        return [[loc["ipAddr"] for loc in block["locations"]] for block in doc["LocatedBlocks"]["locatedBlocks"]]

    # --- daemons
    def stop(self, host: str, role: str, *, crash: bool = False) -> None:
        testbed.stop_daemon(self.dir, host, role, sig=signal.SIGKILL if crash else signal.SIGTERM)

    def start(self, host: str, role: str) -> None:
        testbed.start_daemon(self.dir, host, role)

    def wait_healthy(self, timeout_s: float = 180) -> None:
        deadline = time.monotonic() + timeout_s
        report: dict[str, Any] = {}
        while time.monotonic() < deadline:
            report = testbed.status(self.dir)
            if report["healthy"]:
                return
            time.sleep(1)
        raise AssertionError(f"cluster not healthy after {timeout_s} s: {json.dumps(report)[:2000]}")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def _inventory(net_ips: dict[str, str]) -> list[dict[str, str]]:
    return [{"server": name, "tenant": tenant, "environment": "prod", "rack": rack.rsplit("/", 1)[1],
             "datacenter": rack.split("/")[1], "cores": "4", "memory_mb": "8192", "storage_gb": "100",
             "ip": net_ips[name]} for name, (tenant, rack) in WORKERS.items()]


def _prepare(tmp: Path, version: str) -> tuple[dict[tuple[str, str], str], Path, ServiceProcess, list[dict[str, str]],
                                                testbed.Plan]:
    """Build the shim against the real jars, write the scripts and the topology map, plan the cluster."""
    lay = assemble(version)
    shim_out = tmp / "shim"
    build = subprocess.run(["bash", str(REPO / "scheduler_plugin" / "java" / "build.sh"), "--classpath",
                            f"{lay.lib}/*", "--out", str(shim_out)], capture_output=True, text=True, timeout=300,
                           check=False)
    assert build.returncode == 0, f"the shim does not compile against Hadoop {version}'s jars:\n{build.stderr}"
    shim_jar = shim_out / "harvest-hdfs-shim.jar"
    scripts = tmp / "scripts"
    subprocess.run([sys.executable, "-m", "placement_service.cli", "install-scripts", str(scripts), "--python",
                    sys.executable], check=True, capture_output=True, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    cluster_dir = tmp / "cluster"
    service = ServiceProcess(tmp, [])
    overrides = {
        **harvest_overrides(scripts, service.http, service.token_file),
        # The JSON hosts file from the start (every DataNode in service): test_maintenance.py then
        # needs a -refreshNodes, not two NameNode restarts.
        ("hdfs-site", "dfs.namenode.hosts.provider.classname"):
            "org.apache.hadoop.hdfs.server.blockmanagement.CombinedHostFileManager",
        ("hdfs-site", "dfs.hosts"): str(tmp / "dfs.hosts.json"),
        **EXTRA_OVERRIDES,
    }
    plan = testbed.make_plan(version, datanodes=DATANODES, nodemanagers=NODEMANAGERS, directory=cluster_dir,
                             overrides=overrides, classpath=[str(shim_jar)])
    inventory = _inventory({h.name: h.ip for h in plan.workers})
    (tmp / "dfs.hosts.json").write_text(json.dumps([{"hostName": h.ip} for h in plan.workers if h.datanode]))
    inv_path = tmp / "inventory.csv"
    with inv_path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(inventory[0]))
        writer.writeheader()
        writer.writerows(inventory)
    subprocess.run([sys.executable, "-m", "placement_service.cli", "topology-map", "--no-resolve", "--inventory", str(inv_path),
                    "--out", str(scripts / "topology.map")], check=True, capture_output=True, cwd=REPO,
                   env={**os.environ, "PYTHONPATH": str(REPO)})
    classes = tmp / "classes.json"
    classes.write_text(json.dumps(CLASSES))
    master = plan.dir / "conf" / "master"
    service.args = ["--classes-file", str(classes), "--rm-url", f"http://{plan.master.ip}:{plan.master_ports['rm_http']}",
                    "--capacity-scheduler-file", str(master / "capacity-scheduler.xml"),
                    "--refresh-queues-command", f"{plan.dir / 'bin' / 'yarn'} rmadmin -refreshQueues"]
    return overrides, shim_jar, service, inventory, plan


def wait_for(what: str, check: object, timeout_s: float, interval_s: float = 1.0) -> None:
    """Poll ``check()`` until it is true; an AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():  # type: ignore[operator]
            return
        time.sleep(interval_s)
    raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")


def report_nodes(cluster: HadoopCluster, busy: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """Agent-style reports for every worker (node = its DataNode host name, the IP address)."""
    now = time.time()
    reports = [{"node": cluster.ip_of(row["server"]), "tenant": row["tenant"], "timestamp": now,
                "primary_cpu_cores": 1.0, "primary_memory_mb": 1024.0, "capacity_cores": 4.0,
                "capacity_memory_mb": 8192.0, "busy": row["server"] in busy, "free_storage_gb": 100.0}
               for row in cluster.inventory]
    status, answer = cluster.service.call("POST", "/v1/reports", {"reports": reports})
    assert status == 202, answer


@pytest.fixture(scope="session", params=VERSIONS)
def hadoop_version(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def hadoop_cluster(hadoop_version: str, request: pytest.FixtureRequest) -> Iterator[HadoopCluster]:
    require_tools()
    # Not under pytest's base temp: other pytest runs on the machine prune it, and a failed run's logs
    # must stay. The next run of the same version clears it.
    tmp = RUNS / hadoop_version
    if (tmp / "cluster" / testbed.STATE_FILE).exists():
        try:
            testbed.down(tmp / "cluster", quiet=True)
        except Exception:  # noqa: BLE001 (best effort: a stale cluster from a killed run)
            pass
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    started = False
    # One start at a time (xdist workers start their versions together): the launcher picks the
    # first free subnet when it plans and takes it when it starts, and two JVM storms at once
    # only slow both down.
    with _start_lock():
        _overrides, shim_jar, service, inventory, plan = _prepare(tmp, hadoop_version)
        try:
            info = testbed.up(plan, timeout_s=240)
            started = True
        except Exception as exc:  # a cluster that does not start: skip locally, fail under CI
            if (plan.dir / testbed.STATE_FILE).exists():  # what did start stops again
                _down(plan.dir)
            message = f"Hadoop {hadoop_version} did not start: {exc} (logs: {plan.dir / 'hosts'})"
            if IN_CI:
                pytest.fail(message, pytrace=False)
            pytest.skip(message)
    try:
        service.start()
        cluster = HadoopCluster(hadoop_version, info, plan.dir, service, inventory, shim_jar, tmp / "dfs.hosts.json")
        report_nodes(cluster)
        sys.stderr.write(f"\nHadoop {hadoop_version}: healthy after {info['startup_s']} s in {plan.dir}\n")
        FIGURES[("start to healthy (4 DataNodes, 3 NodeManagers)", hadoop_version)] = (
            f"{info['startup_s']:.0f} s (load {os.getloadavg()[0]:.0f})")
        began = time.monotonic()
        yield cluster
        took = time.monotonic() - began
        if not (request.config.option.keyword or request.config.option.markexpr):  # the whole tier only
            FIGURES[("tests after start-up", hadoop_version)] = f"{took:.0f} s (load {os.getloadavg()[0]:.0f})"
        sys.stderr.write(f"\nHadoop {hadoop_version}: the tier's tests took {took:.0f} s after start-up\n")
    finally:
        service.stop()
        if started or (plan.dir / testbed.STATE_FILE).exists():
            _down(plan.dir)
        if not os.environ.get("HARVEST_KEEP_HADOOP_DATA"):
            shutil.rmtree(plan.dir / "hosts" / "master" / "data", ignore_errors=True)
            for host in plan.workers:
                shutil.rmtree(plan.dir / "hosts" / host.name / "data", ignore_errors=True)


# ---------------------------------------------------------------- the verified-on table

_RESULTS: dict[tuple[str, str], str] = {}
#: Figures of the last run, (name, version) -> text, e.g. start-up time, ms per block in the fallback.
FIGURES: dict[tuple[str, str], str] = {}
VERIFIED_DOC = REPO / "docs" / "hadoop-verified.md"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if "hadoop" not in report.keywords:
        return
    feature = getattr(report, "harvest_feature", None)
    version = getattr(report, "harvest_version", None)
    if feature is None or version is None:
        return
    key = (feature, version)
    if report.when == "call":
        if hasattr(report, "wasxfail"):  # an expected failure: a known product bug (the xfail's reason)
            outcome = "FAIL (known bug)" if report.skipped else "FAIL"
        else:
            outcome = "pass" if report.passed else ("skip" if report.skipped else "FAIL")
        _RESULTS[key] = outcome if _RESULTS.get(key) in (None, "pass") or outcome == "FAIL" else _RESULTS[key]
    elif report.failed:
        _RESULTS[key] = "FAIL"
    elif report.skipped and key not in _RESULTS:
        _RESULTS[key] = "skip"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    marker = item.get_closest_marker("feature")
    callspec = getattr(item, "callspec", None)
    if marker is not None and callspec is not None and "hadoop_version" in callspec.params:
        report.harvest_feature = str(marker.args[0])
        report.harvest_version = str(callspec.params["hadoop_version"])


def _down(directory: Path) -> None:
    try:
        testbed.down(directory, quiet=True)
    except Exception as exc:  # noqa: BLE001 (reported, never hides the test's own result)
        sys.stderr.write(f"harvest hadoop down {directory}: {exc}\n")


@contextlib.contextmanager
def _start_lock() -> Iterator[None]:
    RUNS.mkdir(parents=True, exist_ok=True)
    with open(RUNS / ".start.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput"):  # an xdist worker: its figures to the controller
        for version in {v for _n, v in FIGURES}:
            (RUNS / version / "figures.json").write_text(json.dumps(
                {name: value for (name, v), value in FIGURES.items() if v == version}))
        return
    if not _RESULTS or all(v == "skip" for v in _RESULTS.values()):
        return
    for version in {v for _f, v in _RESULTS}:
        dumped = RUNS / version / "figures.json"
        if dumped.is_file():
            for name, value in json.loads(dumped.read_text()).items():
                FIGURES.setdefault((name, version), value)
    write_verified_table(_RESULTS)


def write_verified_table(results: dict[tuple[str, str], str]) -> None:
    """Merge this run's outcomes into docs/hadoop-verified.md (rows of features not run are kept)."""
    versions = list(VERSIONS)
    text = VERIFIED_DOC.read_text() if VERIFIED_DOC.exists() else ""
    table = _read_table(text.split("Figures of the last run", 1)[0])
    figures = _read_table(text.split("Figures of the last run", 1)[1]) if "Figures of the last run" in text else {}
    for (feature, version), outcome in results.items():
        table.setdefault(feature, {})[version] = outcome
    for (name, version), value in FIGURES.items():  # a partial run keeps the other figures
        figures.setdefault(name, {})[version] = value
    when = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    out = ["# Verified on real Hadoop", "",
           "Written by the real-Hadoop tier (`tests/hadoop/`, `make test`) at the end of its last run; do not",
           "edit by hand. One row per feature (the tests' `feature` marker), one column per version the",
           "suite runs (`scheduler_plugin/testbed/versions.py`): `pass`, `FAIL`, `FAIL (known bug)` (an",
           "expected failure; the test names the bug), `skip`, or `-` (not run).",
           "Jars from Maven Central, daemons on JDK "
           f"{_java_version()}, each worker host in its own network namespace when run as root. Last update: {when}.",
           "",
           "| feature | " + " | ".join(versions) + " |", "|---|" + "---|" * len(versions)]
    for feature in sorted(table):
        out.append(f"| {feature} | " + " | ".join(table[feature].get(v, "-") for v in versions) + " |")
    if figures:
        out += ["", "Figures of the last run (2-core machine shared with other work; load average in brackets):", "",
                "| figure | " + " | ".join(versions) + " |", "|---|" + "---|" * len(versions)]
        for name in sorted(figures):
            out.append(f"| {name} | " + " | ".join(figures[name].get(v, "-") for v in versions) + " |")
    VERIFIED_DOC.write_text("\n".join(out) + "\n")


def _read_table(text: str) -> dict[str, dict[str, str]]:
    """The first markdown table in ``text``: first column -> {column head: cell}."""
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    if len(lines) < 2:
        return {}
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    rows = ([c.strip() for c in ln.strip("|").split("|")] for ln in lines[2:])
    return {cells[0]: dict(zip(head[1:], cells[1:], strict=False)) for cells in rows}


def _java_version() -> str:
    try:
        done = subprocess.run(["java", "-version"], capture_output=True, text=True, timeout=30, check=False)
        first = (done.stderr or done.stdout).splitlines()[0]
        return first.split('"')[1] if '"' in first else first
    except (OSError, IndexError, subprocess.TimeoutExpired):
        return "?"

"""The optional Hive role of a test cluster: HiveServer2 with an embedded Derby metastore, Tez on YARN.

``cluster.up(plan, hive=True)`` (``harvest hadoop up --hive``) calls :func:`start` once the cluster is
healthy:

1. assemble Hive's and Tez's jars once (``hive-pom.xml``, ``tez-pom.xml``; versions in ``versions.py``)
   into ``.cache/hive-<version>/lib`` (HiveServer2 and beeline) and ``tez-lib`` (what Tez needs
   beyond Hadoop's jars); Hadoop's own jars come from the cluster's ``.cache/hadoop-<version>/lib``;
2. upload ``tez-lib`` to HDFS ``/apps/tez-<version>/`` (``tez.lib.uris``) and make Hive's folders;
3. write ``D/conf/hiveserver2/`` (the client's site files, ``hive-site.xml``, ``tez-site.xml``,
   ``hive-log4j2.properties``) and ``D/bin/beeline``;
4. start HiveServer2 on the master's address (its PID goes into ``cluster.json`` with the daemons,
   so ``down`` stops it) and wait until its Thrift port answers.

The metastore is embedded (Derby under ``D/hosts/master/data/metastore_db``, schema created on first
use); each Hive session starts its own Tez AM on YARN in the queue of its ``tez.queue.name``.
``up`` adds ``"hiveserver2": {"jdbc": URL, "thrift": "IP:PORT", "log": FILE, "startup_s": S}`` to
its JSON object.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from placement_service import HarvestError
from placement_service.atomic import atomic_write_json, atomic_write_text
from scheduler_plugin.testbed import procs, siteconf
from scheduler_plugin.testbed.versions import (
    DERBY_VERSION,
    HIVE_VERSION,
    TEZ_VERSION,
    cache_root,
    java_home,
    jvm_open_flags,
)

if TYPE_CHECKING:
    from scheduler_plugin.testbed.cluster import Plan

HIVE_POM = Path(__file__).with_name("hive-pom.xml")
HIVE_SERVICE_POM = Path(__file__).with_name("hive-service-pom.xml")
BEELINE_SOURCE = Path(__file__).with_name("java") / "HarvestBeeline.java"
TEZ_POM = Path(__file__).with_name("tez-pom.xml")
MAIN_CLASS = "org.apache.hive.service.server.HiveServer2"
BEELINE_CLASS = "HarvestBeeline"
ROLE = "hiveserver2"
HEAP_MB = 1024
#: Tez AM and task JVMs (MB): containers of 512 MB on NodeManagers of 2048 MB.
TEZ_AM_MB, TEZ_TASK_MB = 512, 512
#: JDK 17 needs, beyond Hadoop's --add-opens, these for Hive (Kryo serialises plans through
#: java.util.regex, java.net.URI and the like; Derby and DataNucleus reflect on java.sql).
HIVE_ADD_OPENS: tuple[str, ...] = ("java.base/java.util.regex", "java.base/java.lang.invoke", "java.base/java.time",
                                   "java.base/java.util.stream", "java.base/java.lang.ref", "java.sql/java.sql")


class HiveError(HarvestError):
    """Hive or Tez could not be assembled or HiveServer2 did not start; the message names the log."""


def hive_open_flags() -> list[str]:
    return [*jvm_open_flags(), *(f"--add-opens={t}=ALL-UNNAMED" for t in HIVE_ADD_OPENS)]


@dataclass(frozen=True)
class HiveLayout:
    """Paths of the assembled Hive/Tez cache folder."""

    root: Path

    @property
    def lib(self) -> Path:
        return self.root / "lib"

    @property
    def tez_lib(self) -> Path:
        return self.root / "tez-lib"

    @property
    def jdbc_jar(self) -> Path:
        return self.root / "jdbc" / f"hive-jdbc-{HIVE_VERSION}-standalone.jar"

    @property
    def beeline_classes(self) -> Path:
        return self.root / "beeline-classes"

    def is_assembled(self) -> bool:
        return (self.root / "assembled.json").is_file()


def hive_layout() -> HiveLayout:
    return HiveLayout(cache_root() / f"hive-{HIVE_VERSION}")


def _mvn(pom: Path, out: Path, what: str, goal: str = "dependency:copy-dependencies") -> None:
    """``mvn dependency:copy-dependencies`` (or ``package``) into ``out`` (offline first: Maven's local
    repository)."""
    tmp = out.with_name(out.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    cmd = ["mvn", "-q", "-B", "-Dstyle.color=never", "-f", str(pom), f"-Dhive.version={HIVE_VERSION}",
           f"-Dtez.version={TEZ_VERSION}", f"-Dderby.version={DERBY_VERSION}", f"-DoutputDirectory={tmp}",
           f"-Dout={tmp}", goal]
    rc = subprocess.run(["mvn", "-o", *cmd[1:]], check=False, capture_output=True).returncode
    if rc != 0:
        print(f"harvest hadoop: resolving {what} ({' '.join(cmd)})", file=sys.stderr, flush=True)
        rc = subprocess.run(cmd, check=False).returncode
    if rc != 0:
        raise HiveError(f"mvn could not resolve {what} (exit {rc}): see its output above")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)


def assemble_hive() -> HiveLayout:
    """Resolve Hive's and Tez's jars into ``.cache/hive-<version>/`` once (step 1)."""
    lay = hive_layout()
    if lay.is_assembled():
        return lay
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        raise HiveError(f"cannot assemble Hive {HIVE_VERSION}: {' and '.join(missing)} not on PATH")
    lay.root.mkdir(parents=True, exist_ok=True)
    _mvn(HIVE_POM, lay.lib, f"Hive {HIVE_VERSION} and Tez {TEZ_VERSION}")
    # The JDBC driver's standalone jar (the client's) bundles copies of Hive's and Hadoop's classes: not
    # on HiveServer2's class path.
    lay.jdbc_jar.parent.mkdir(parents=True, exist_ok=True)
    (lay.lib / lay.jdbc_jar.name).replace(lay.jdbc_jar)
    # HiveServer2 itself: hive-service's classes out of that jar, relocations undone (hive-service-pom.xml).
    build = lay.root / "hive-service-build"
    _mvn(HIVE_SERVICE_POM, build, f"hive-service {HIVE_VERSION} (from the JDBC standalone jar)", "package")
    (build / f"hive-service-{HIVE_VERSION}-harvest.jar").replace(lay.lib / f"hive-service-{HIVE_VERSION}-harvest.jar")
    _mvn(TEZ_POM, lay.tez_lib, f"Tez {TEZ_VERSION}")
    compile_beeline(lay)
    atomic_write_json(lay.root / "assembled.json", {"hive": HIVE_VERSION, "tez": TEZ_VERSION, "derby": DERBY_VERSION,
                                                    "lib": str(lay.lib), "tez_lib": str(lay.tez_lib)})
    return lay


def compile_beeline(lay: HiveLayout) -> None:
    """``java/HarvestBeeline.java`` against the JDBC driver (hive-beeline 4.1.0 is not served here)."""
    if shutil.which("javac") is None:
        raise HiveError("cannot compile HarvestBeeline: javac not on PATH (install a JDK)")
    shutil.rmtree(lay.beeline_classes, ignore_errors=True)
    lay.beeline_classes.mkdir(parents=True)
    proc = subprocess.run(["javac", "-nowarn", "-d", str(lay.beeline_classes), "-cp", str(lay.jdbc_jar),
                           str(BEELINE_SOURCE)], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise HiveError(f"javac {BEELINE_SOURCE.name} failed: {proc.stderr.strip()[-800:]}")


# ---------------------------------------------------------------- configuration


def tez_lib_dir() -> str:
    return f"/apps/tez-{TEZ_VERSION}"


def _java_opts(heap_mb: int) -> str:
    return " ".join([f"-Xmx{heap_mb}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                     "-Djava.net.preferIPv4Stack=true", *hive_open_flags()])


def hive_site(plan: Plan, thrift_port: int) -> dict[str, str]:
    data = plan.dir / "hosts" / "master" / "data"
    return {
        "hive.server2.thrift.bind.host": plan.master.ip,
        "hive.server2.thrift.port": str(thrift_port),
        "hive.server2.transport.mode": "binary",
        "hive.async.log.enabled": "false",  # async logging needs LMAX Disruptor, not among the jars
        "hive.server2.webui.port": "0",  # 0: no web UI
        "hive.server2.enable.doAs": "false",
        "hive.server2.tez.initialize.default.sessions": "false",
        "hive.server2.materializedviews.registry.impl": "DUMMY",
        "hive.server2.in.place.progress": "true",
        "hive.metastore.uris": "",  # embedded metastore
        "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={data / 'metastore_db'};create=true",
        "javax.jdo.option.ConnectionDriverName": "org.apache.derby.jdbc.EmbeddedDriver",
        "datanucleus.schema.autoCreateAll": "true",
        "hive.metastore.schema.verification": "false",
        "hive.metastore.warehouse.dir": "/user/hive/warehouse",
        "hive.metastore.event.db.notification.api.auth": "false",
        "hive.exec.scratchdir": "/tmp/hive",
        "hive.exec.local.scratchdir": str(data / "hive-local"),
        "hive.downloaded.resources.dir": str(data / "hive-resources"),
        "hive.user.install.directory": "/user",
        "hive.execution.engine": "tez",
        "hive.tez.container.size": str(TEZ_TASK_MB),
        "hive.tez.java.opts": _java_opts(TEZ_TASK_MB * 3 // 4),
        "hive.tez.exec.print.summary": "true",
        "hive.query.results.cache.enabled": "false",
        "hive.stats.autogather": "true",
        "hive.txn.manager": "org.apache.hadoop.hive.ql.lockmgr.DummyTxnManager",
        "hive.support.concurrency": "false",
        "hive.strict.managed.tables": "false",
        "hive.create.as.insert.only": "false",
        "metastore.create.as.acid": "false",
    }


def tez_site(plan: Plan) -> dict[str, str]:
    nn = f"{plan.master.ip}:{plan.master_ports['namenode']}"
    return {
        "tez.lib.uris": f"hdfs://{nn}{tez_lib_dir()}",
        "tez.use.cluster.hadoop-libs": "true",
        "tez.am.resource.memory.mb": str(TEZ_AM_MB),
        "tez.am.launch.cmd-opts": _java_opts(TEZ_AM_MB * 3 // 4),
        "tez.task.resource.memory.mb": str(TEZ_TASK_MB),
        "tez.task.launch.cmd-opts": _java_opts(TEZ_TASK_MB * 3 // 4),
        "tez.am.launch.env": f"JAVA_HOME={java_home()}",
        "tez.task.launch.env": f"JAVA_HOME={java_home()}",
        "tez.runtime.io.sort.mb": "64",
        "tez.staging-dir": "/tmp/tez-staging",
        "tez.session.am.dag.submit.timeout.secs": "120",
        "tez.am.container.idle.release-timeout-min.millis": "2000",
        "tez.am.container.idle.release-timeout-max.millis": "5000",
        "tez.history.logging.service.class": "org.apache.tez.dag.history.logging.impl.SimpleHistoryLoggingService",
    }


LOG4J2 = """\
# Written by harvest hadoop up --hive: HiveServer2 logs to its stdout (hosts/master/logs/hiveserver2.log).
status = WARN
name = HiveLog4j2
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{ISO8601} %p %c{2}: %m%n
rootLogger.level = INFO
rootLogger.appenderRefs = console
rootLogger.appenderRef.console.ref = console
loggers = DataNucleus, Datastore, JPOX, Tez
logger.DataNucleus.name = DataNucleus
logger.DataNucleus.level = WARN
logger.Datastore.name = Datastore
logger.Datastore.level = WARN
logger.JPOX.name = JPOX
logger.JPOX.level = WARN
logger.Tez.name = org.apache.tez
logger.Tez.level = INFO
"""


def conf_dir(directory: Path) -> Path:
    return directory / "conf" / ROLE


def _write_conf(plan: Plan, thrift_port: int) -> Path:
    """Step 3: HiveServer2's conf folder (the client's Hadoop site files + Hive's and Tez's)."""
    conf = conf_dir(plan.dir)
    conf.mkdir(parents=True, exist_ok=True)
    client = plan.dir / "conf" / "client"
    for name in siteconf.SITE_FILES:
        if (client / f"{name}.xml").is_file():
            shutil.copyfile(client / f"{name}.xml", conf / f"{name}.xml")
    atomic_write_text(conf / "hive-site.xml", siteconf.render(hive_site(plan, thrift_port)))
    atomic_write_text(conf / "tez-site.xml", siteconf.render(tez_site(plan)))
    for name in ("hive-log4j2.properties", "beeline-log4j2.properties"):
        atomic_write_text(conf / name, LOG4J2 if name.startswith("hive") else LOG4J2.replace("= INFO", "= WARN"))
    shutil.copyfile(client / "log4j.properties", conf / "log4j.properties")
    return conf


def classpath(plan: Plan, lay: HiveLayout) -> str:
    """HiveServer2's: conf, Hive's and Tez's jars (with hive-service), then Hadoop's."""
    return ":".join([str(conf_dir(plan.dir)), f"{lay.lib}/*", f"{plan.layout.lib}/*"])


def beeline_classpath(plan: Plan, lay: HiveLayout) -> str:
    """The client: HarvestBeeline, the JDBC driver (it bundles what it needs), then Hadoop's jars
    (slf4j, for the driver's logging)."""
    return ":".join([str(conf_dir(plan.dir)), str(lay.beeline_classes), str(lay.jdbc_jar), f"{plan.layout.lib}/*"])


def beeline_script(plan: Plan, lay: HiveLayout) -> str:
    conf = conf_dir(plan.dir)
    opts = " ".join(["-Xmx384m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true",
                     f"-Dlog4j.configurationFile={conf / 'beeline-log4j2.properties'}", *hive_open_flags()])
    return f"""#!/bin/sh
# beeline (Hive {HIVE_VERSION}) for the cluster in {plan.dir}, written by harvest hadoop up --hive.
export HADOOP_CONF_DIR={shlex.quote(str(conf))} HIVE_CONF_DIR={shlex.quote(str(conf))} JAVA_HOME={shlex.quote(java_home())}
exec java {opts} -cp {shlex.quote(beeline_classpath(plan, lay))} {BEELINE_CLASS} "$@"
"""


# ---------------------------------------------------------------- start


def _free_port(ip: str) -> int:
    with socket.socket() as sock:
        sock.bind((ip, 0))
        return int(sock.getsockname()[1])


def _port_open(ip: str, port: int) -> bool:
    try:
        with socket.create_connection((ip, port), timeout=1.0):
            return True
    except OSError:
        return False


def _hdfs(plan: Plan, *args: str, timeout_s: float = 120.0) -> None:
    cmd = [str(plan.dir / "bin" / "hdfs"), "dfs", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=timeout_s)
    if proc.returncode != 0:
        raise HiveError(f"{' '.join(cmd[1:])} failed (exit {proc.returncode}): {proc.stderr.strip()[-400:]}")


_VERSION_RE = re.compile(r"-\d[\w.\-]*\.jar$")


def tez_jars(lay: HiveLayout, hadoop_lib: Path) -> list[Path]:
    """Tez's jars minus every artifact the cluster's Hadoop already has (in any version): the AM and
    the tasks put Hadoop's jars on their class path too (``tez.use.cluster.hadoop-libs``)."""
    have = {_VERSION_RE.sub("", p.name) for p in hadoop_lib.glob("*.jar")}
    return sorted(p for p in lay.tez_lib.glob("*.jar") if _VERSION_RE.sub("", p.name) not in have)


def upload_tez(plan: Plan, lay: HiveLayout) -> None:
    """Step 2: Tez's jars to HDFS (``tez.lib.uris``) and Hive's folders (world-writable: no doAs here)."""
    _hdfs(plan, "-mkdir", "-p", tez_lib_dir(), "/tmp/hive", "/tmp/tez-staging", "/user/hive/warehouse")
    _hdfs(plan, "-D", "dfs.blocksize=134217728", "-put", "-f", *(str(p) for p in tez_jars(lay, plan.layout.lib)),
          tez_lib_dir())
    _hdfs(plan, "-chmod", "-R", "777", "/tmp", "/user")


def java_cmd(plan: Plan, lay: HiveLayout) -> list[str]:
    conf = conf_dir(plan.dir)
    logs = plan.dir / "hosts" / "master" / "logs"
    return ["java", f"-Xmx{HEAP_MB}m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true",
            f"-Dhive.log.dir={logs}", f"-Dlog4j.configurationFile={conf / 'hive-log4j2.properties'}",
            f"-Dlog4j.configuration=file:{conf / 'log4j.properties'}", f"-Dhadoop.home.dir={plan.layout.root}",
            f"-Dderby.system.home={plan.dir / 'hosts' / 'master' / 'data'}", *hive_open_flags(),
            "-cp", classpath(plan, lay), MAIN_CLASS]


def start(plan: Plan, register: Callable[[dict[str, Any]], None], *, timeout_s: float = 240.0,
          say: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Steps 1-4; returns the ``"hiveserver2"`` entry of ``up``'s JSON. ``register`` gets the process
    record (for ``cluster.json``) as soon as HiveServer2 is started, so that ``down`` stops it whatever
    happens next. Raises HiveError naming the log when HiveServer2 dies or does not answer."""
    started = time.monotonic()
    lay = assemble_hive()
    if say:
        say(f"Hive {HIVE_VERSION} / Tez {TEZ_VERSION}: uploading Tez's jars to HDFS {tez_lib_dir()}")
    upload_tez(plan, lay)
    port = _free_port(plan.master.ip)
    conf = _write_conf(plan, port)
    beeline = plan.dir / "bin" / "beeline"
    atomic_write_text(beeline, beeline_script(plan, lay))
    beeline.chmod(0o755)
    for sub in ("hive-local", "hive-resources"):
        (plan.dir / "hosts" / "master" / "data" / sub).mkdir(parents=True, exist_ok=True)
    log_path = str(plan.dir / "hosts" / "master" / "logs" / f"{ROLE}.log")
    cmd = java_cmd(plan, lay)
    env = {"JAVA_HOME": java_home(), "HADOOP_CONF_DIR": str(conf), "HIVE_CONF_DIR": str(conf),
           "HADOOP_HOME": str(plan.layout.root), "HADOOP_USER_NAME": os.environ.get("USER", "root")}
    cwd = str(plan.dir / "hosts" / "master")
    pid = procs.spawn(cmd, env, cwd, log_path)
    record = {"role": ROLE, "host": "master", "pid": pid, "start_time": procs.start_time(pid), "log": log_path,
              "cmd": cmd, "env": env, "cwd": cwd}
    register(record)
    if say:
        say(f"HiveServer2 started (pid {pid}); waiting for {plan.master.ip}:{port}")
    deadline = time.monotonic() + timeout_s
    while not _port_open(plan.master.ip, port):
        if not procs.alive(record):
            raise HiveError(f"HiveServer2 exited during start-up; {log_path}:\n{procs.tail(log_path, 25)}")
        if time.monotonic() > deadline:
            raise HiveError(f"HiveServer2 did not answer on {plan.master.ip}:{port} within {timeout_s:.0f} s; "
                            f"{log_path}:\n{procs.tail(log_path, 25)}")
        time.sleep(1.0)
    info = {"jdbc": f"jdbc:hive2://{plan.master.ip}:{port}/default", "thrift": f"{plan.master.ip}:{port}",
            "log": log_path, "conf": str(conf), "beeline": str(beeline), "hive_version": HIVE_VERSION,
            "tez_version": TEZ_VERSION, "startup_s": round(time.monotonic() - started, 1)}
    return info

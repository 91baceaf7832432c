"""The Hadoop versions the test cluster runs and where their jars live (``make hadoop``).

``.cache/hadoop-<version>/`` (outside git, next to the repository's ``pyproject.toml``):

* ``lib/``: every runtime jar of the server artifacts named in ``pom.xml`` (Maven Central);
* ``conf/``: a configuration template (``log4j.properties`` only: each cluster writes its own
  ``*-site.xml`` per host);
* ``start.json``: the main classes, the JVM flags and the jars of the sleep job and the examples.

``assemble(version)`` runs ``mvn dependency:copy-dependencies`` once (``-o`` when Maven's local
repository already holds the artifacts) and writes the rest.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from placement_service import HarvestError
from placement_service.atomic import atomic_write_json, atomic_write_text

#: Versions the suite runs, oldest first; ``latest`` is the last one.
# 3.4.3 is the newest 3.4.x on Maven Central, but its hadoop-mapreduce-examples is not published there.
VERSIONS: tuple[str, ...] = ("3.3.6", "3.4.2")
#: The optional Hive role (``harvest hadoop up --hive``, ``hiveserver.py``): Hive 4.1.0 is the first Hive that
#: runs on JDK 17 (HIVE-26473; 4.0.x needs JDK 8, 4.2 is built for Java 21); Tez and Derby are the versions
#: Hive 4.1.0's own POM names. hive-pom.xml and tez-pom.xml default to these, docker/ reads them
#: (docker/versions.env), and tests/plugins/test_hive_versions.py checks that all agree.
HIVE_VERSION = "4.1.0"
TEZ_VERSION = "0.10.5"
DERBY_VERSION = "10.14.2.0"
#: The Hadoop the Hive role runs on (Hive 4.1.0 builds on 3.4.1; 3.4.2 is the 3.4.x the suite runs).
HIVE_HADOOP_VERSION = "3.4.2"
REPO_ROOT = Path(__file__).resolve().parents[2]
POM = Path(__file__).with_name("pom.xml")

#: Web app folders HttpServer2 looks up on the class path (JMX, WebHDFS and the REST APIs are servlets).
WEBAPPS = ("hdfs", "datanode", "secondary", "journal")

MAIN_CLASSES = {
    "namenode": "org.apache.hadoop.hdfs.server.namenode.NameNode",
    "datanode": "org.apache.hadoop.hdfs.server.datanode.DataNode",
    "resourcemanager": "org.apache.hadoop.yarn.server.resourcemanager.ResourceManager",
    "nodemanager": "org.apache.hadoop.yarn.server.nodemanager.NodeManager",
}

#: JDK 17: every daemon and every MapReduce JVM needs these (java.base internals Hadoop reflects on).
ADD_OPENS: tuple[str, ...] = (
    "java.base/java.lang", "java.base/java.lang.reflect", "java.base/java.util", "java.base/java.util.concurrent",
    "java.base/java.util.concurrent.atomic", "java.base/java.net", "java.base/java.nio", "java.base/sun.nio.ch",
    "java.base/java.io", "java.base/java.security", "java.base/sun.security.util", "java.base/java.text",
    "java.base/java.math", "java.base/sun.net.util", "java.base/jdk.internal.misc",
    "java.security.jgss/sun.security.krb5", "jdk.security.auth/com.sun.security.auth",
)
# javax.security.auth lives in java.base.
ADD_OPENS = ADD_OPENS + ("java.base/javax.security.auth",)


def jvm_open_flags() -> list[str]:
    return [f"--add-opens={target}=ALL-UNNAMED" for target in ADD_OPENS]


LOG4J = """\
# Written by harvest hadoop (scheduler_plugin/testbed): every daemon logs to its stdout, which the
# launcher sends to <dir>/hosts/<host>/logs/<daemon>.log.
log4j.rootLogger=INFO,console
log4j.appender.console=org.apache.log4j.ConsoleAppender
log4j.appender.console.target=System.err
log4j.appender.console.layout=org.apache.log4j.PatternLayout
log4j.appender.console.layout.ConversionPattern=%d{ISO8601} %p %c{2}: %m%n
log4j.logger.org.apache.hadoop.util.NativeCodeLoader=ERROR
log4j.logger.org.apache.hadoop.metrics2=WARN
log4j.logger.org.eclipse.jetty=WARN
log4j.logger.org.apache.hadoop.hdfs.StateChange=WARN
log4j.logger.BlockStateChange=WARN
log4j.logger.org.apache.hadoop.yarn.server.resourcemanager.RMAuditLogger=INFO
"""


def resolve(version: str) -> str:
    """``latest`` -> the newest supported version; any other name must be one of VERSIONS."""
    if version == "latest":
        return VERSIONS[-1]
    if version not in VERSIONS:
        raise HarvestError(f"--version {version!r}: not one of {', '.join(VERSIONS)} or latest")
    return version


@dataclass(frozen=True)
class Layout:
    """Paths of one version's assembled cache folder."""

    version: str
    root: Path

    @property
    def lib(self) -> Path:
        return self.root / "lib"

    @property
    def webapps(self) -> Path:
        """A class path entry holding ``webapps/<name>/``: Maven's hadoop-hdfs jar has no web app folders
        (the distribution keeps them in share/), and the NameNode and DataNode refuse to start without one."""
        return self.root / "webapps-root"

    @property
    def conf_template(self) -> Path:
        return self.root / "conf"

    @property
    def sleep_jar(self) -> Path:
        return self.lib / f"hadoop-mapreduce-client-jobclient-{self.version}-tests.jar"

    @property
    def examples_jar(self) -> Path:
        return self.lib / f"hadoop-mapreduce-examples-{self.version}.jar"

    def is_assembled(self) -> bool:
        return (self.root / "start.json").is_file() and (self.webapps / "webapps" / "hdfs").is_dir() and (self.lib / f"hadoop-hdfs-{self.version}.jar").is_file()


def cache_root() -> Path:
    return Path(os.environ.get("HARVEST_HADOOP_CACHE", REPO_ROOT / ".cache"))


def layout(version: str) -> Layout:
    version = resolve(version)
    return Layout(version, cache_root() / f"hadoop-{version}")


def tools_missing() -> list[str]:
    """Names of the tools the real cluster needs and this machine lacks (java, javac, mvn)."""
    return [tool for tool in ("java", "javac", "mvn") if shutil.which(tool) is None]


def java_home() -> str:
    """JAVA_HOME for the NodeManagers' containers: $JAVA_HOME, else the directory above ``bin/java``."""
    if os.environ.get("JAVA_HOME"):
        return os.environ["JAVA_HOME"]
    java = shutil.which("java")
    if java is None:
        raise HarvestError("no java on PATH: install a JDK (17) to run Hadoop")
    return str(Path(java).resolve().parents[1])


def _m2_has(version: str) -> bool:
    repo = Path(os.environ.get("HOME", "/root")) / ".m2" / "repository" / "org" / "apache" / "hadoop"
    return (repo / "hadoop-mapreduce-examples" / version).is_dir()


def assemble(version: str, *, offline: bool | None = None, quiet: bool = True) -> Layout:
    """Resolve ``version``'s jars into ``.cache/hadoop-<version>/lib`` and write conf/ and start.json.

    ``offline`` None: offline (``mvn -o``) when Maven's local repository already has this version.
    """
    lay = layout(version)
    if lay.is_assembled():
        return lay
    missing = [tool for tool in ("java", "mvn") if shutil.which(tool) is None]
    if missing:
        raise HarvestError(f"cannot assemble Hadoop {lay.version}: {' and '.join(missing)} not on PATH")
    if offline is None:
        offline = _m2_has(lay.version)
    lib_tmp = lay.root / "lib.tmp"
    shutil.rmtree(lib_tmp, ignore_errors=True)
    cmd = ["mvn", "-B", "-Dstyle.color=never", "-f", str(POM), f"-Dhadoop.version={lay.version}", f"-DoutputDirectory={lib_tmp}",
           "dependency:copy-dependencies"]
    if quiet:
        cmd.insert(1, "-q")
    returncode = 1
    if offline:
        print(f"harvest hadoop: Hadoop {lay.version} from Maven's local repository (mvn -o)", file=sys.stderr)
        returncode = subprocess.run([cmd[0], "-o", *cmd[1:]], check=False, capture_output=True).returncode
    if returncode != 0:  # not (all) there yet: resolve from the registry
        print(f"harvest hadoop: resolving Hadoop {lay.version} ({' '.join(cmd)})", file=sys.stderr)
        returncode = subprocess.run(cmd, check=False).returncode
    if returncode != 0:
        raise HarvestError(f"mvn could not resolve Hadoop {lay.version} (exit {returncode}): see its output above")
    shutil.rmtree(lay.lib, ignore_errors=True)
    lib_tmp.rename(lay.lib)
    for app in WEBAPPS:
        (lay.webapps / "webapps" / app).mkdir(parents=True, exist_ok=True)
    lay.conf_template.mkdir(parents=True, exist_ok=True)
    atomic_write_text(lay.conf_template / "log4j.properties", LOG4J)
    start = {
        "version": lay.version,
        "lib": str(lay.lib),
        "classpath": f"<conf dir>:{lay.lib}/*",
        "main_classes": MAIN_CLASSES,
        "jvm_flags": jvm_open_flags(),
        "sleep_job": {"jar": str(lay.sleep_jar), "args": ["sleep", "-m", "2", "-r", "0", "-mt", "1000"]},
        "examples_jar": str(lay.examples_jar),
        "start": "harvest hadoop up --version " + lay.version + " --datanodes N --nodemanagers M --dir D",
    }
    atomic_write_json(lay.root / "start.json", start)
    return lay


def main(argv: list[str] | None = None) -> int:
    """``python -m scheduler_plugin.testbed.versions [VERSION...]``: assemble (``make hadoop``)."""
    names = list(argv if argv is not None else sys.argv[1:]) or list(VERSIONS)
    try:
        for name in names:
            lay = assemble(name)
            count = len(list(lay.lib.glob("*.jar")))
            print(f"{lay.root}: {count} jars", file=sys.stderr)
    except HarvestError as exc:
        print(f"make hadoop: error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())


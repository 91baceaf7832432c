"""The Hadoop stubs the shim is compiled and tested against keep the real classes' visibility and
signatures, so that code which compiles against the stubs compiles against a real Hadoop.

The real shapes are recorded in ``tests/fixtures/plugins/hadoop_stub_api.txt`` (``javap -protected``
of the class files of Apache Hadoop 3.2.1 and 3.3.6). A stub may add test-only knobs (listed below
with the reason) but never widen or change a real declaration: the old stubs declared the
package-private ``Host2NodesMap`` public, which let the shim name it and hid that the documented
build failed against a real NameNode's jars.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.plugins.conftest import FIXTURES, REPO

STUBS = REPO / "scheduler_plugin" / "java" / "src" / "test" / "java" / "org" / "apache" / "hadoop"

pytestmark = pytest.mark.skipif(shutil.which("javac") is None or shutil.which("javap") is None,
                                reason="needs a JDK (javac, javap)")

# Members only the stubs have, each with why: test constructors and knobs the stock-policy stand-in reads.
STUB_ONLY: dict[str, set[str]] = {
    "org.apache.hadoop.hdfs.protocol.BlockStoragePolicy": {
        "public org.apache.hadoop.hdfs.protocol.BlockStoragePolicy(java.lang.String);",  # test constructor
    },
    "org.apache.hadoop.hdfs.protocol.DatanodeInfo": {
        "public boolean decommissioned;",  # stands for the admin state the NameNode tracks
        "public boolean inMaintenance;",
    },
    "org.apache.hadoop.hdfs.server.blockmanagement.DatanodeDescriptor": {"public boolean full;"},
    "org.apache.hadoop.hdfs.server.blockmanagement.DatanodeStorageInfo": {
        "public org.apache.hadoop.hdfs.server.blockmanagement.DatanodeStorageInfo("
        "org.apache.hadoop.hdfs.server.blockmanagement.DatanodeDescriptor);",  # test constructor
    },
    "org.apache.hadoop.hdfs.server.blockmanagement.BlockPlacementPolicyDefault": {"public static int stockCalls;"},
    "org.apache.hadoop.net.NetworkTopology": {"public int getLeavesCalls;"},
}


def real_api() -> dict[str, tuple[str, list[str]]]:
    """class -> (declaration, members) from the recorded javap output."""
    api: dict[str, tuple[str, list[str]]] = {}
    block: list[str] = []
    for line in [*(FIXTURES / "hadoop_stub_api.txt").read_text().splitlines(), ""]:
        if line.startswith("#"):
            continue
        if line.strip():
            block.append(line.strip())
        elif block:
            assert block[0].startswith("== "), block
            api[block[0][3:]] = (block[1], block[2:])
            block = []
    return api


def declaration_head(decl: str, cls: str) -> str:
    """Modifiers, kind and name: what decides who may name the class (supertypes may be fewer)."""
    return decl[: decl.index(cls) + len(cls)]


def javap(classes: Path, cls: str) -> tuple[str, list[str]]:
    out = subprocess.run(["javap", "-protected", "-cp", str(classes), cls], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    lines = [ln.strip() for ln in out.splitlines() if ln.strip() and not ln.startswith("Compiled") and ln != "}"]
    return lines[0].rstrip(" {"), lines[1:]


def stub_classes() -> list[str]:
    return sorted("org.apache.hadoop." + ".".join(p.relative_to(STUBS).with_suffix("").parts)
                  for p in STUBS.rglob("*.java"))


def test_every_stub_has_a_recorded_real_shape() -> None:
    assert stub_classes() == sorted(real_api())


def test_stubs_keep_the_real_visibility_and_signatures(shim_classes: Path) -> None:
    problems = []
    for cls, (real_decl, real_members) in sorted(real_api().items()):
        decl, members = javap(shim_classes, cls)
        if declaration_head(decl, cls) != declaration_head(real_decl, cls):
            problems.append(f"{cls}: stub declares '{declaration_head(decl, cls)}', Hadoop "
                            f"'{declaration_head(real_decl, cls)}'")
        allowed = set(real_members) | STUB_ONLY.get(cls, set())
        problems += [f"{cls}: stub member not in Hadoop: {m}" for m in members if m not in allowed]
        problems += [f"{cls}: recorded member missing from the stub: {m}" for m in real_members if m not in members]
    assert not problems, "\n".join(problems)


def test_code_outside_the_package_cannot_name_host2nodesmap(tmp_path: Path, shim_classes: Path) -> None:
    """What broke the documented build on a real NameNode: the shim named Host2NodesMap."""
    probe = tmp_path / "org" / "harvest" / "probe" / "Probe.java"
    probe.parent.mkdir(parents=True)
    probe.write_text(
        "package org.harvest.probe;\n"
        "import org.apache.hadoop.hdfs.server.blockmanagement.Host2NodesMap;\n"
        "public class Probe { Host2NodesMap map; }\n"
    )
    proc = subprocess.run(["javac", "--release", "8", "-cp", str(shim_classes), "-d", str(tmp_path / "out"),
                           str(probe)], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert "Host2NodesMap is not public in org.apache.hadoop.hdfs.server.blockmanagement" in proc.stderr


def test_shim_sources_name_no_package_private_hadoop_class() -> None:
    main = REPO / "scheduler_plugin" / "java" / "src" / "main" / "java"
    package_private = [cls.rsplit(".", 1)[1] for cls, (decl, _) in real_api().items() if not decl.startswith("public")]
    assert package_private == ["Host2NodesMap"]
    for src in main.rglob("*.java"):
        code = "\n".join(ln for ln in src.read_text().splitlines() if not ln.lstrip().startswith(("*", "/*", "//")))
        for name in package_private:
            assert name not in code, f"{src.name} names package-private {name}"

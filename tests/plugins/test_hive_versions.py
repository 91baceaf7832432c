"""One source of the Hive/Tez versions: scheduler_plugin/testbed/versions.py. The Maven build files of
the process testbed and the docker/ testbed must name the same versions (and docker the same JVM flags)."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from scheduler_plugin.testbed import versions
from scheduler_plugin.testbed.hiveserver import hive_open_flags
from tests.plugins.conftest import REPO

TESTBED = REPO / "scheduler_plugin" / "testbed"
NS = {"m": "http://maven.apache.org/POM/4.0.0"}
WANTED = {"hive.version": versions.HIVE_VERSION, "tez.version": versions.TEZ_VERSION,
          "derby.version": versions.DERBY_VERSION}


def pom_properties(path: Path) -> dict[str, str]:
    root = ET.parse(path).getroot()
    props = root.find("m:properties", NS)
    assert props is not None, path
    return {child.tag.split("}", 1)[1]: (child.text or "") for child in props}


@pytest.mark.parametrize("pom", ["hive-pom.xml", "tez-pom.xml", "hive-service-pom.xml"])
def test_every_build_file_defaults_to_the_pinned_versions(pom: str) -> None:
    props = pom_properties(TESTBED / pom)
    named = {k: v for k, v in props.items() if k in WANTED}
    assert named, f"{pom} names none of {sorted(WANTED)}"
    assert named == {k: WANTED[k] for k in named}


def test_the_docker_image_builds_the_pinned_versions() -> None:
    text = (REPO / "docker" / "Dockerfile").read_text()
    args = dict(re.findall(r"^ARG (\w+_VERSION)=(\S+)", text, flags=re.M))
    assert args == {"HADOOP_VERSION": versions.HIVE_HADOOP_VERSION, "HIVE_VERSION": versions.HIVE_VERSION,
                    "TEZ_VERSION": versions.TEZ_VERSION}
    assert versions.HIVE_HADOOP_VERSION in versions.VERSIONS  # a Hadoop the real tier runs


def test_the_docker_image_runs_java_17_with_the_same_jvm_flags() -> None:
    text = (REPO / "docker" / "Dockerfile").read_text()
    runtime = re.search(r"COPY --from=eclipse-temurin:(\S+) /opt/java/openjdk", text)
    assert runtime and runtime.group(1).startswith("17."), runtime
    opts = re.search(r'^ENV HADOOP_OPTS="([^"]*)"', text, flags=re.M)
    assert opts and opts.group(1).split() == hive_open_flags()

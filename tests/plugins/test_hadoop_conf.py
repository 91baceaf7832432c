"""The hadoop-conf/ fragments parse, and the committed capacity-scheduler.xml is what the generator makes."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from placement_service.cli import main
from tests.plugins.conftest import REPO

CONF = REPO / "hadoop-conf"


@pytest.mark.parametrize("name", ["yarn-site.xml", "core-site.xml", "hdfs-site.xml", "hive-site.xml", "mapred-site.xml",
                                  "capacity-scheduler.xml"])
def test_fragment_parses_and_documents_every_key(name: str) -> None:
    root = ET.parse(CONF / name).getroot()
    assert root.tag == "configuration"
    props = root.findall("property")
    assert props
    for p in props:
        assert (p.findtext("name") or "").strip(), f"{name}: property without a name"
        assert p.find("value") is not None, f"{name}: {p.findtext('name')} has no value"
        assert (p.findtext("description") or "").strip(), f"{name}: {p.findtext('name')} has no description"


def test_committed_capacity_scheduler_matches_the_generator(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out = tmp_path / "cs.xml"
    monkeypatch.chdir(REPO)  # the header names the source path as given
    assert main(["capacity-scheduler", "--classes", "hadoop-conf/classes.example.json", "--weight", "cores",
                 "--out", str(out)]) == 0
    assert out.read_text() == (CONF / "capacity-scheduler.xml").read_text()


def test_shim_class_named_in_hdfs_site_exists() -> None:
    text = (CONF / "hdfs-site.xml").read_text()
    assert "<value>org.harvest.hdfs.HarvestBlockPlacementPolicy</value>" in text
    assert (REPO / "scheduler_plugin/java/src/main/java/org/harvest/hdfs/HarvestBlockPlacementPolicy.java").exists()


def test_committed_capacity_scheduler_sums_up() -> None:
    from tests.plugins.test_capacity_scheduler import check_tree, parse

    props = parse((CONF / "capacity-scheduler.xml").read_text())
    check_tree(props, ["constant-0", "periodic-0", "unpredictable-0"])


@pytest.mark.parametrize("path", ["hadoop-conf/capacity-scheduler.xml", "docker/conf/capacity-scheduler.xml"])
def test_shipped_capacity_scheduler_uses_the_dominant_calculator(path: str) -> None:
    props = {p.findtext("name"): p.findtext("value") for p in ET.parse(REPO / path).getroot().findall("property")}
    assert props["yarn.scheduler.capacity.resource-calculator"] == \
        "org.apache.hadoop.yarn.util.resource.DominantResourceCalculator"


def test_mapred_site_raises_the_attempt_limits_that_local_kills_burn() -> None:
    props = {p.findtext("name"): p.findtext("value")
             for p in ET.parse(CONF / "mapred-site.xml").getroot().findall("property")}
    for key in ("mapreduce.map.maxattempts", "mapreduce.reduce.maxattempts"):
        assert int(props[key] or 0) > 4, key  # the default 4 fails a job after four harvesting kills of a task

"""Which agent release runs where: ``agent_version`` in reports, ``GET /v1/agents``, ``harvest_agents``."""

from __future__ import annotations

import time

import pytest

from placement_service.server.agent_versions import UNKNOWN, AgentVersions
from placement_service.server.reports import RequestError, parse_report
from tests.server.conftest import ServerProc, report


def test_the_table_counts_each_node_once_and_stays_bounded() -> None:
    table = AgentVersions(max_nodes=3)
    table.note("a", "0.2.0", 1.0)
    table.note("b", "", 2.0)
    table.note("a", "0.2.1", 3.0)  # upgraded: counted under its new release only
    assert table.counts() == {"0.2.1": 1, UNKNOWN: 1}
    for i, node in enumerate(("c", "d", "e")):
        table.note(node, "0.2.0", 4.0 + i)
    assert sum(table.counts().values()) == 3  # the least recently reporting nodes gave way
    assert table.of("a") is None and table.of("b") is None and table.of("e") == "0.2.0"
    snap = table.snapshot(limit=2)
    assert list(snap["nodes"]) == ["e", "d"] and snap["truncated"] is True


@pytest.mark.parametrize("bad", ["x" * 65, "1.0 beta", "<script>", 3, ["0.2.0"]])
def test_a_bad_agent_version_is_refused_by_name(bad: object) -> None:
    doc = report("n1", "t1", time.time(), agent_version=bad)
    with pytest.raises(RequestError) as err:
        parse_report(doc, "reports[0]", time.time(), 300.0)
    assert err.value.field == "reports[0].agent_version"


def test_reports_say_which_release_runs_where(server: ServerProc) -> None:
    now = time.time()
    body = {"reports": [report("av-1", "av-t", now, agent_version="0.2.0"),
                        report("av-2", "av-t", now, agent_version="0.2.0"),
                        report("av-3", "av-t", now)]}
    status, answer = server.call("POST", "/v1/reports", body)
    assert status == 202 and answer["accepted"] == 3, answer
    status, agents = server.call("GET", "/v1/agents?version=0.2.0", token=None)
    assert status == 200, agents
    assert agents["versions"]["0.2.0"] >= 2 and agents["versions"][UNKNOWN] >= 1
    assert {"av-1", "av-2"} <= set(agents["nodes"]) and "av-3" not in agents["nodes"]
    status, node = server.call("GET", "/v1/nodes/av-1", token=None)
    assert status == 200 and node["agent_version"] == "0.2.0"
    status, text = server.call("GET", "/metrics", token=None)
    assert 'harvest_agents{version="0.2.0"}' in text and "harvest_build_info{version=" in text
    status, err = server.call("GET", "/v1/agents?limit=-1", token=None)
    assert status == 400 and "limit" in str(err)

"""The placement service's elastic set and revocations (server/elastic.py): versions, idempotence, durability."""

from __future__ import annotations

from pathlib import Path

import pytest

from placement_service.server.elastic import ElasticState, parse_elastic_set
from placement_service.server.reports import RequestError


def test_versions_only_go_forward_and_repeats_are_no_ops(tmp_path: Path) -> None:
    st = ElasticState(tmp_path / "e.sqlite")
    assert st.apply(2, ["n1", "n2"], [])
    assert not st.apply(1, ["old"], [(9, "n1", "x")])  # older: not applied
    assert not st.apply(2, ["n1", "n2"], [])  # the same push again
    assert st.version == 2 and st.nodes == {"n1", "n2"} and st.pending == {}
    assert st.apply(3, ["n2"], [(5, "n1", "replaces a of r (MSB down)")])
    assert st.pending == {"n1": (5,)} and st.revoked() == {"n1"}
    st.close()
    again = ElasticState(tmp_path / "e.sqlite")  # durable
    assert again.version == 3 and again.nodes == {"n2"} and again.pending == {"n1": (5,)}


def test_drained_acknowledgements_are_forwarded_once(tmp_path: Path) -> None:
    st = ElasticState(tmp_path / "e.sqlite")
    st.apply(1, [], [(5, "n1", "r"), (6, "n2", "r")])
    assert st.drained("n2", [5]) == []  # not n2's revocation
    assert st.drained("n1", [5, 77]) == [5]
    assert st.drained("n1", [5]) == []  # already drained
    assert st.to_forward() == [(5, "n1")] and st.revoked() == {"n1", "n2"}
    st.forwarded(5)
    assert st.to_forward() == [] and st.revoked() == {"n1", "n2"}  # handed over: not harvestable here
    assert st.apply(3, ["n1"], []) and st.revoked() == {"n2"}  # lent again
    assert st.apply(4, [], [(5, "n1", "r")]) and st.to_forward() == []  # a re-sent revocation is not reopened


def test_pools_name_the_tenant_of_lent_nodes_only(tmp_path: Path) -> None:
    st = ElasticState(tmp_path / "e.sqlite")
    assert st.apply(1, ["n1", "n2"], [], {"n1": "elastic:unassigned", "n2": "elastic:shared-buffer:hw00"})
    assert st.history_tenant == {"n1": "elastic:unassigned", "n2": "elastic:shared-buffer:hw00"}
    assert st.apply(2, ["n2"], [(5, "n1", "MSB down")], {"n2": "elastic:shared-buffer:hw00"})
    assert st.history_tenant == {"n2": "elastic:shared-buffer:hw00"}  # n1 revoked: its own tenant again
    st.close()
    again = ElasticState(tmp_path / "e.sqlite")  # durable
    assert again.history_tenant == {"n2": "elastic:shared-buffer:hw00"}
    assert again.to_json()["pools"] == {"n2": "elastic:shared-buffer:hw00"}


@pytest.mark.parametrize(("doc", "field"), [
    ({"version": 0, "nodes": []}, "version"),
    ({"version": True, "nodes": []}, "version"),
    ({"version": 1, "nodes": "n1"}, "nodes"),
    ({"version": 1, "nodes": ["bad name!"]}, "nodes[0]"),
    ({"version": 1, "nodes": [], "revocations": [{"id": "x", "node": "n"}]}, "revocations[0].id"),
    ({"version": 1, "nodes": [], "revocations": [{"id": 1}]}, "revocations[0].node"),
    ({"version": 1, "nodes": ["n1"], "pools": ["n1"]}, "pools"),
    ({"version": 1, "nodes": ["n1"], "pools": {"n2": "elastic:unassigned"}}, "pools['n2']"),
    ({"version": 1, "nodes": ["n1"], "pools": {"n1": "bad pool!"}}, "pools['n1']"),
])  # fmt: skip
def test_bad_elastic_sets_name_the_field(doc: dict[str, object], field: str) -> None:
    with pytest.raises(RequestError) as err:
        parse_elastic_set(doc)
    assert err.value.field == field


def test_elastic_servers_are_a_class_for_jobs_and_a_yarn_queue(tmp_path: Path) -> None:
    """Issue 15: lent elastic servers are their own class for class selection (even before any
    class table) and get the ``elastic`` label and queue in capacity-scheduler.xml; revoked, they go."""
    import time

    from tests.server.conftest import report, start_server

    xml = tmp_path / "capacity-scheduler.xml"
    srv = start_server(tmp_path / "data", "--compact-interval-s", "1", "--recluster-interval-s", "0",
                       "--capacity-scheduler-file", str(xml))
    job = {"name": "q", "last_duration_s": 7200.0, "vertices": {"Map 1": {"tasks": 20}}}
    try:
        now = time.time()
        reps = [report(f"e{i}", "ras-buffer", now, seq=1, cpu=0.1) for i in range(4)]
        assert srv.call("POST", "/v1/reports", {"reports": reps})[0] == 202
        assert srv.call("POST", "/v1/jobs/select", job, token=None)[0] == 409  # no class, nothing lent
        status, doc = srv.call("PUT", "/v1/harvestable", {"version": 1, "nodes": ["e0", "e1", "e2", "e3"]})
        assert status == 200 and doc["applied"]
        status, sel = srv.call("POST", "/v1/jobs/select?explain=1", job, token=None)
        assert status == 200 and sel["classes"] == ["elastic"] and sel["node_label"] == "elastic"
        (cand,) = sel["explain"]["candidates"]
        assert cand["cores"] == 32.0 and cand["current_cpu"] < 0.05  # 4 idle 8-core servers
        text = xml.read_text()
        assert "elastic" in text and "DominantResourceCalculator" in text
        assert srv.call("GET", "/v1/nodes/e0")[1]["label"] == "elastic"
        # Everything revoked: no class for jobs any more; the queue stays (YARN will not drop a
        # running queue on a refresh) and no node carries the label.
        revs = [{"id": i + 1, "node": f"e{i}", "reason": "MSB down"} for i in range(4)]
        assert srv.call("PUT", "/v1/harvestable", {"version": 2, "nodes": [], "revocations": revs})[1]["applied"]
        assert srv.call("POST", "/v1/jobs/select", job, token=None)[0] == 409
        assert "elastic" in xml.read_text()
        assert srv.call("GET", "/v1/nodes/e0")[1]["harvestable"] is False
    finally:
        srv.stop()


def test_a_lent_nodes_reports_are_its_pools_history(tmp_path: Path) -> None:
    """Issue 15: while lent out, an elastic node's (idle) utilisation is the history of its pool
    tenant (``elastic:<entity>``), which re-clustering then clusters like any tenant; revoked, its
    reports count for its own tenant again."""
    import time

    from tests.server.conftest import report, start_server

    srv = start_server(tmp_path / "data", "--compact-interval-s", "1", "--recluster-interval-s", "0")
    try:
        now = time.time()
        before, lent, after = now - 7200, now - 3600, now
        reps = [report(f"e{i}", "web", before, seq=1, cpu=4.0) for i in range(2)]
        assert srv.call("POST", "/v1/reports", {"reports": reps})[0] == 202
        pools = {"e0": "elastic:unassigned", "e1": "elastic:unassigned"}
        body = {"version": 1, "nodes": ["e0", "e1"], "pools": pools}
        assert srv.call("PUT", "/v1/harvestable", body)[1]["applied"]
        reps = [report(f"e{i}", "web", lent, seq=2, cpu=0.16) for i in range(2)]  # idle: 2% of 8 cores
        assert srv.call("POST", "/v1/reports", {"reports": reps})[0] == 202
        assert srv.call("GET", "/v1/elastic")[1]["pools"] == body["pools"]
        revoke = {"version": 2, "nodes": ["e1"], "pools": {"e1": "elastic:unassigned"},
                  "revocations": [{"id": 1, "node": "e0", "reason": "MSB down"}]}  # fmt: skip
        assert srv.call("PUT", "/v1/harvestable", revoke)[1]["applied"]
        reps = [report(f"e{i}", "web", after, seq=3, cpu=0.16) for i in range(2)]
        assert srv.call("POST", "/v1/reports", {"reports": reps})[0] == 202

        def samples(tenant: str) -> dict[float, tuple[int, float]]:
            status, doc = srv.call("GET", f"/v1/tenants/{tenant}/samples?since={before - 600}")
            assert status == 200, doc
            return {s["slot_start_s"]: (s["reports"], s["cpu_frac"]) for s in doc["samples"]}

        pool, web = samples("elastic:unassigned"), samples("web")
        assert sorted(n for n, _ in pool.values()) == [1, 2]  # both nodes while lent, then only e1
        assert all(cpu == pytest.approx(0.02) for _, cpu in pool.values())
        assert sorted(n for n, _ in web.values()) == [1, 2]  # both before lending, then the revoked e0
        assert min(web) < min(pool) and max(web) > min(pool)
    finally:
        srv.stop()

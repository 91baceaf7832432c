"""Property-based fuzzing of the HTTP API (hypothesis) against a real server.

Properties: no input makes the server answer 5xx; every rejection is JSON naming a field; a report
is accepted exactly when it satisfies the documented contract (an independent oracle below), and a
rejected request leaves no trace (its node stays unknown).
"""

from __future__ import annotations

import itertools
import json
import math
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.server.conftest import ServerProc, report, start_server

FIELDS = ["node", "tenant", "timestamp", "primary_cpu_cores", "primary_memory_mb", "capacity_cores",
          "capacity_memory_mb", "busy", "free_storage_gb", "seq"]
_NAME = re.compile(r"[A-Za-z0-9._:@/+-]{1,253}")  # the whole string (fullmatch): no trailing newline
_counter = itertools.count()

json_scalars = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=20),
)
json_values = st.recursive(json_scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=10)


@pytest.fixture(scope="module")
def fuzz_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProc]:
    srv = start_server(tmp_path_factory.mktemp("fuzz") / "data")
    try:
        yield srv
    finally:
        srv.stop()


def contract_valid(doc: dict[str, Any], now: float) -> bool:
    """The report contract of docs/contracts.md and openapi.json, written independently of the server."""
    allowed = set(FIELDS)
    if set(doc) - allowed or not set(FIELDS[:-1]) <= set(doc):
        return False

    def num(v: Any) -> bool:
        return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) and v >= 0

    if not all(isinstance(doc[k], str) and _NAME.fullmatch(doc[k]) for k in ("node", "tenant")):
        return False
    if not all(num(doc[k]) for k in FIELDS[2:9] if k != "busy"):
        return False
    if doc["capacity_cores"] <= 0 or doc["capacity_memory_mb"] <= 0:
        return False
    # The server accepts [now - 30 days, now + 300 s]; keep a margin at both ends.
    if not max(946_684_800, now - 30 * 86400 + 60) <= doc["timestamp"] <= now + 250:
        return False
    if not isinstance(doc["busy"], bool):
        return False
    seq = doc.get("seq", 0)
    return seq is None or (isinstance(seq, int) and not isinstance(seq, bool) and 0 <= seq < 2**63)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from([*FIELDS, "extra", None]), value=json_values, drop=st.booleans())
def test_report_accepted_iff_contract_holds(fuzz_server: ServerProc, field: str | None, value: Any,
                                            drop: bool) -> None:
    now = time.time()
    node = f"fz-{next(_counter)}"
    doc = report(node, "fuzz-t", now - 1, seq=1)
    if field is not None:
        if drop and field in doc:
            del doc[field]
        else:
            doc[field] = value
    if isinstance(doc.get("timestamp"), int | float) and 250 < doc["timestamp"] - now <= 350:
        doc["timestamp"] = now + 1000  # stay clear of the server's clock margin
    if isinstance(doc.get("timestamp"), int | float) and abs(doc["timestamp"] - (now - 30 * 86400)) <= 120:
        doc["timestamp"] = now - 40 * 86400  # and clear of its age limit
    status, body = fuzz_server.call("POST", "/v1/reports", raw=json.dumps({"reports": [doc]}).encode())
    assert status < 500, body
    valid = contract_valid(doc, time.time())
    assert (status == 202) == valid, (doc, status, body)
    target = doc.get("node") if isinstance(doc.get("node"), str) and _NAME.fullmatch(doc.get("node", "")) else node
    if status == 202:
        _, info = fuzz_server.call("GET", f"/v1/nodes/{target}")
        assert info["last_report"]["timestamp"] == float(doc["timestamp"])
    else:
        assert isinstance(body["error"]["field"], str) and body["error"]["field"]
        if target.startswith("fz-"):
            assert fuzz_server.call("GET", f"/v1/nodes/{target}")[0] == 404


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.sampled_from(["/v1/reports", "/v1/jobs/select", "/v1/blocks/place", "/v1/harvestable"]),
       body=st.one_of(json_values, st.binary(max_size=64)))
def test_arbitrary_bodies_never_crash(fuzz_server: ServerProc, path: str, body: Any) -> None:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    method = "PUT" if path == "/v1/harvestable" else "POST"
    if path == "/v1/harvestable" and isinstance(body, dict) and "nodes" in body:
        return  # a valid harvestable set would change the state other examples rely on
    status, doc = fuzz_server.call(method, path, raw=raw)
    assert status < 500, doc
    if status >= 400:
        assert isinstance(doc, dict) and "message" in doc["error"] and "field" in doc["error"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.text(min_size=1, max_size=40), since=st.one_of(st.none(), st.text(max_size=10), st.floats()))
def test_queries_with_arbitrary_names_answer_4xx_not_5xx(fuzz_server: ServerProc, name: str, since: Any) -> None:
    from urllib.parse import quote

    q = quote(name, safe="")
    status, _ = fuzz_server.call("GET", f"/v1/nodes/{q}")
    assert status in (400, 404) or (status == 200 and name.startswith("fz-"))
    extra = "" if since is None else f"?since={quote(str(since), safe='')}"
    status, _ = fuzz_server.call("GET", f"/v1/tenants/{q}/samples{extra}")
    assert status < 500


def test_oracle_accepts_the_contract_example_and_rejects_a_bad_one() -> None:
    now = time.time()
    assert contract_valid(report("a", "b", now), now)
    assert not contract_valid(report("a", "b", now, busy=0), now)
    assert not contract_valid(report("a", "b", now + 3600), now)

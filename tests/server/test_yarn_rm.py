"""ResourceManager label push against the fake RM, which answers as a real 3.3.6 does (issue 12 item 3)."""

from __future__ import annotations

import json
import urllib.request

import pytest

from placement_service.server.yarn_rm import ResourceManagerClient, ResourceManagerError
from tests.server.fake_rm import FakeResourceManager


@pytest.mark.parametrize("wrapped", [True, False])
def test_only_missing_labels_are_added_whatever_the_response_form(wrapped: bool) -> None:
    with FakeResourceManager(labels={"constant-0": False}, wrapped=wrapped) as rm:
        client = ResourceManagerClient(rm.url)
        assert client.cluster_labels() == {"constant-0"}  # a single label comes back without its list
        result = client.push(["constant-0", "periodic-1"], {"n1": "constant-0"})
        assert result.added == ("periodic-1",) and result.existing == ("constant-0",)
        assert result.mapped_nodes == 0 and rm.node_labels == {}  # distributed mode: no central mapping
        assert rm.labels == {"constant-0": False, "periodic-1": False}


def test_label_push_sends_the_unwrapped_body_with_the_admin_user() -> None:
    with FakeResourceManager(admin_users=frozenset({"hadoop"})) as rm:
        ResourceManagerClient(rm.url, admin_user="hadoop").push(["constant-0"], {})
        (post,) = rm.posts("/ws/v1/cluster/add-node-labels")
        assert post["path"] == "/ws/v1/cluster/add-node-labels?user.name=hadoop"
        assert post["body"] == {"nodeLabelInfo": [{"name": "constant-0", "exclusivity": False}]}
        assert rm.labels == {"constant-0": False}


def test_fake_rm_answers_401_without_an_admin_user_and_ignores_the_wrapped_body() -> None:
    # What a real 3.2.1 / 3.3.6 answered; the old client (wrapped body, no user) added nothing.
    with FakeResourceManager() as rm:
        def post(query: str, body: object) -> int:
            request = urllib.request.Request(f"{rm.url}/ws/v1/cluster/add-node-labels{query}",
                                             data=json.dumps(body).encode(), method="POST",
                                             headers={"Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(request, timeout=5) as answer:
                    return int(answer.status)
            except urllib.error.HTTPError as exc:
                return int(exc.code)

        wrapped = {"nodeLabelsInfo": {"nodeLabelInfo": [{"name": "x", "exclusivity": False}]}}
        assert post("", {"nodeLabelInfo": [{"name": "x", "exclusivity": False}]}) == 401
        assert post("?user.name=yarn", wrapped) == 200 and rm.labels == {}
        assert post("?user.name=yarn", {"nodeLabelInfo": {"name": "x", "exclusivity": False}}) == 200
        assert rm.labels == {"x": False}


def test_refused_user_is_a_clear_error_naming_the_setting() -> None:
    with FakeResourceManager(admin_users=frozenset({"yarn"})) as rm:
        with pytest.raises(ResourceManagerError, match=r"HTTP 401.*'bob'.*--rm-admin-user"):
            ResourceManagerClient(rm.url, admin_user="bob").push(["constant-0"], {})
        with pytest.raises(ResourceManagerError, match=r"HTTP 401.*dr.who"):
            ResourceManagerClient(rm.url, admin_user="").push(["constant-0"], {})
        assert rm.labels == {}


def test_a_200_that_adds_nothing_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeResourceManager() as rm:
        client = ResourceManagerClient(rm.url)
        real_call = client._call
        # an RM that takes the call but does not add (as the wrapped body did on real Hadoop)
        monkeypatch.setattr(client, "_call", lambda method, path, body=None: None
                            if method == "POST" else real_call(method, path, body))
        with pytest.raises(ResourceManagerError, match="still missing"):
            client.push(["constant-0"], {})


def test_centralized_mode_maps_nodes_with_the_unwrapped_body() -> None:
    with FakeResourceManager() as rm:
        client = ResourceManagerClient(rm.url, centralized=True, exclusive=True)
        result = client.push(["constant-0", "periodic-1"], {"n1": "constant-0", "n2": "periodic-1"})
        assert result.added == ("constant-0", "periodic-1") and result.mapped_nodes == 2
        assert rm.node_labels == {"n1": ["constant-0"], "n2": ["periodic-1"]}
        assert rm.labels == {"constant-0": True, "periodic-1": True}


def test_refusal_and_unreachable_rm_raise_with_detail() -> None:
    with FakeResourceManager() as rm:
        client = ResourceManagerClient(rm.url, centralized=True)
        with pytest.raises(ResourceManagerError, match="does not exist"):
            client._call("POST", "replace-node-to-labels", {"nodeToLabels": [{"nodeId": "n", "nodeLabels": ["x"]}]})
        url = rm.url
    with pytest.raises(ResourceManagerError, match=url):
        ResourceManagerClient(url, timeout_s=1).cluster_labels()

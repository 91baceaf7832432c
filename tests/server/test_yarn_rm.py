"""ResourceManager label push against the fake RM (documented JSON shapes, both response forms)."""

from __future__ import annotations

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


def test_centralized_mode_maps_nodes_with_the_documented_body() -> None:
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
            client._call("POST", "replace-node-to-labels",
                         {"nodeToLabelsEntryList": {"nodeToLabels": [{"nodeId": "n", "nodeLabels": ["x"]}]}})
        url = rm.url
    with pytest.raises(ResourceManagerError, match=url):
        ResourceManagerClient(url, timeout_s=1).cluster_labels()

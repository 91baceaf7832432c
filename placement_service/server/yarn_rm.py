"""Push class labels to the YARN ResourceManager over its REST API (an adapter; optional by config).

Request shapes (Hadoop 3.x ``RMWebServices``; JSON bodies keep their JAXB root element):

- ``GET  /ws/v1/cluster/get-node-labels`` ->
  ``{"nodeLabelsInfo": {"nodeLabelInfo": [{"name": "x", "exclusivity": true}, ...]}}``
  (some releases answer without the root element: ``{"nodeLabelInfo": [...]}``; both are read);
- ``POST /ws/v1/cluster/add-node-labels`` with
  ``{"nodeLabelsInfo": {"nodeLabelInfo": [{"name": "constant-0", "exclusivity": false}]}}``;
  adding a label that exists is an error in the RM, so only missing labels are sent;
- ``POST /ws/v1/cluster/replace-node-to-labels`` with
  ``{"nodeToLabelsEntryList": {"nodeToLabels": [{"nodeId": "host", "nodeLabels": ["constant-0"]}]}}``
  only in ``centralized`` mode: with distributed node labels (the default here) the NodeManager's
  label script reports each node's label and the RM refuses central mappings.
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from placement_service import HarvestError

logger = logging.getLogger(__name__)


class ResourceManagerError(HarvestError):
    """The ResourceManager refused a request or could not be reached."""


@dataclass(frozen=True)
class LabelPushResult:
    added: tuple[str, ...]
    existing: tuple[str, ...]
    mapped_nodes: int


class ResourceManagerClient:
    def __init__(self, base_url: str, timeout_s: float = 5.0, exclusive: bool = False,
                 centralized: bool = False) -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.exclusive = exclusive
        self.centralized = centralized

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        url = f"{self.base_url}/ws/v1/cluster/{path}"
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=method)
        req.add_header("Accept", "application/json")
        if data is not None:
            req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")[:300]
            raise ResourceManagerError(f"{method} {url}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ResourceManagerError(f"{method} {url}: {exc}") from None
        return json.loads(raw) if raw.strip() else None

    def cluster_labels(self) -> set[str]:
        doc = self._call("GET", "get-node-labels") or {}
        inner = doc.get("nodeLabelsInfo", doc) if isinstance(doc, dict) else {}
        items = inner.get("nodeLabelInfo", []) if isinstance(inner, dict) else []
        if isinstance(items, dict):  # a single element may come without its list
            items = [items]
        return {str(i["name"]) for i in items if isinstance(i, dict) and "name" in i}

    def push(self, labels: Sequence[str], node_labels: Mapping[str, str]) -> LabelPushResult:
        """Ensure every label exists; in centralized mode also map each node to its label."""
        existing = self.cluster_labels()
        missing = sorted(set(labels) - existing)
        if missing:
            self._call("POST", "add-node-labels", {
                "nodeLabelsInfo": {"nodeLabelInfo": [{"name": m, "exclusivity": self.exclusive} for m in missing]}
            })
            logger.info("added node labels to the ResourceManager: %s", ", ".join(missing))
        mapped = 0
        if self.centralized and node_labels:
            entries = [{"nodeId": n, "nodeLabels": [lab] if lab else []} for n, lab in sorted(node_labels.items())]
            self._call("POST", "replace-node-to-labels", {"nodeToLabelsEntryList": {"nodeToLabels": entries}})
            mapped = len(entries)
        return LabelPushResult(tuple(missing), tuple(sorted(existing & set(labels))), mapped)

"""Push class labels to the YARN ResourceManager over its REST API (an adapter; optional by config).

Request shapes (Hadoop 3.x ``RMWebServices``, checked on real 3.2.1 and 3.3.6):

- ``GET  /ws/v1/cluster/get-node-labels`` ->
  ``{"nodeLabelsInfo": {"nodeLabelInfo": [{"name": "x", "exclusivity": true}, ...]}}``
  (some releases answer without the root element: ``{"nodeLabelInfo": [...]}``; both are read);
- ``POST /ws/v1/cluster/add-node-labels?user.name=<admin>`` with the **unwrapped** body
  ``{"nodeLabelInfo": [{"name": "constant-0", "exclusivity": false}]}``. The body wrapped in its root
  element (``{"nodeLabelsInfo": {...}}``) answers 200 and adds nothing; a call without an admin user
  answers 401 (the anonymous "dr.who"). Only missing labels are sent (3.3.6 answers 200 to a label
  that exists with the same exclusivity, and refuses another exclusivity), and the labels are read
  back afterwards: a 200 that added nothing is an error;
- ``POST /ws/v1/cluster/replace-node-to-labels?user.name=<admin>`` with the unwrapped
  ``{"nodeToLabels": [{"nodeId": "host", "nodeLabels": ["constant-0"]}]}``, only in ``centralized``
  mode: with distributed node labels (the default here) the NodeManager's label script reports each
  node's label and the RM refuses central mappings.

- ``GET /ws/v1/cluster/scheduler`` -> the queues and their states (``queue_states``), for the
  queue lifecycle of ``server/queues.py``.

Every call carries ``user.name`` (simple authentication; on a Kerberos cluster put the service's
principal in ``yarn.admin.acl`` and front the RM with SPNEGO instead).
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.parse
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
                 centralized: bool = False, admin_user: str = "yarn") -> None:
        self.base_url = base_url.rstrip("/")
        self.timeout_s = timeout_s
        self.exclusive = exclusive
        self.centralized = centralized
        self.admin_user = admin_user

    def _call(self, method: str, path: str, body: Mapping[str, Any] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode({'user.name': self.admin_user})}" if self.admin_user else ""
        url = f"{self.base_url}/ws/v1/cluster/{path}{query}"
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
            if exc.code in (401, 403):
                raise ResourceManagerError(
                    f"{method} {url}: HTTP {exc.code}: the ResourceManager refused user "
                    f"{self.admin_user or '(none: dr.who)'!r}; name a user in yarn.admin.acl with "
                    f"--rm-admin-user (rm_admin_user): {detail}") from None
            raise ResourceManagerError(f"{method} {url}: HTTP {exc.code}: {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise ResourceManagerError(f"{method} {url}: {exc}") from None
        return json.loads(raw) if raw.strip() else None

    def queue_states(self) -> dict[str, str]:
        """Every queue below root and its state in the RM (``RUNNING``, ``DRAINING``: STOPPED in the
        configuration but applications still running, ``STOPPED``), from ``GET /ws/v1/cluster/scheduler``
        (``scheduler.schedulerInfo.queues.queue[]``: ``queueName``, ``state``; nested ``queues`` for
        parent queues)."""
        doc = self._call("GET", "scheduler") or {}
        info = (doc.get("scheduler") or {}).get("schedulerInfo") if isinstance(doc, dict) else None
        if not isinstance(info, dict):
            raise ResourceManagerError(f"GET {self.base_url}/ws/v1/cluster/scheduler: no scheduler.schedulerInfo")
        out: dict[str, str] = {}

        def walk(node: Any) -> None:
            items = (node.get("queues") or {}).get("queue") if isinstance(node, dict) else None
            if isinstance(items, dict):
                items = [items]
            for item in items or []:
                if isinstance(item, dict) and "queueName" in item:
                    out[str(item["queueName"])] = str(item.get("state", "RUNNING")).upper()
                    walk(item)

        walk(info)
        return out

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
            self._call("POST", "add-node-labels",
                       {"nodeLabelInfo": [{"name": m, "exclusivity": self.exclusive} for m in missing]})
            still = sorted(set(missing) - self.cluster_labels())
            if still:  # the RM answers 200 to a body it cannot read, and adds nothing
                raise ResourceManagerError(f"POST {self.base_url}/ws/v1/cluster/add-node-labels answered OK "
                                           f"but the labels {', '.join(still)} are still missing")
            logger.info("added node labels to the ResourceManager: %s", ", ".join(missing))
        mapped = 0
        if self.centralized and node_labels:
            entries = [{"nodeId": n, "nodeLabels": [lab] if lab else []} for n, lab in sorted(node_labels.items())]
            self._call("POST", "replace-node-to-labels", {"nodeToLabels": entries})
            mapped = len(entries)
        return LabelPushResult(tuple(missing), tuple(sorted(existing & set(labels))), mapped)

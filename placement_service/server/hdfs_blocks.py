"""Where HDFS keeps each block's replicas, and the one write the mover makes: a file's replication.

The NameNode is asked through WebHDFS (its HTTP port, no Hadoop client on the service's host):

* ``LISTSTATUS`` walks the directories under the configured roots (``mover_paths``);
* ``GET_BLOCK_LOCATIONS`` gives each file's blocks with the DataNodes that hold them (the NameNode's
  own block map, the same answer ``hdfs fsck -files -blocks -locations`` prints);
* ``GETFILESTATUS`` / ``SETREPLICATION`` read and set a file's replication factor.

Why the NameNode and not what the shim reports: the shim sees every placement but not deletions,
the Balancer's moves, decommissions or a DataNode's lost disks; a map built from its reports drifts
and needs the NameNode to reconcile anyway. Reading the NameNode is always right and needs no new
code in the NameNode. Cost: one request per directory and one per file, per pass; see
docs/service.md ("The mover") for what that means at 100M blocks.

Errors are :class:`HdfsError` (with the operation and path); nothing here retries: the mover's
loop logs, skips the pass and tries again on the next one.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from placement_service import HarvestError


class HdfsError(HarvestError):
    """A WebHDFS call failed (the operation, the path and the NameNode's message)."""


@dataclass(frozen=True)
class BlockReplicas:
    path: str
    block_id: int
    size_bytes: int
    replication: int
    """The file's replication factor."""
    hosts: tuple[str, ...]
    """The DataNodes holding a replica (IP address and host name both tried against the service's
    node names; :meth:`WebHdfs.node_names` says which is used)."""


class WebHdfs:
    """The NameNode's WebHDFS at ``base_url`` (``http://namenode:9870``), as ``user``."""

    def __init__(self, base_url: str, user: str, timeout_s: float = 30.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.user = user
        self.timeout_s = timeout_s

    def _call(self, method: str, path: str, op: str, **params: Any) -> Any:
        query = urllib.parse.urlencode({"op": op, "user.name": self.user, **params})
        url = f"{self.base_url}/webhdfs/v1{urllib.parse.quote(path)}?{query}"
        req = urllib.request.Request(url, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode(errors="replace")
            raise HdfsError(f"WebHDFS {op} {path}: HTTP {exc.code}: {detail}") from None
        except (OSError, ValueError) as exc:
            raise HdfsError(f"WebHDFS {op} {path}: {exc}") from None
        try:
            return json.loads(raw) if raw.strip() else {}
        except ValueError:
            raise HdfsError(f"WebHDFS {op} {path}: answer is not JSON: {raw[:200]!r}") from None

    def files(self, roots: Sequence[str]) -> Iterator[tuple[str, int]]:
        """Every file under ``roots`` (depth first) with its replication factor."""
        stack = list(reversed(roots))
        while stack:
            path = stack.pop()
            doc = self._call("GET", path, "LISTSTATUS")
            entries = doc.get("FileStatuses", {}).get("FileStatus", [])
            for entry in entries:
                suffix = entry.get("pathSuffix", "")
                child = path if not suffix else f"{path.rstrip('/')}/{suffix}"
                if entry.get("type") == "DIRECTORY":
                    stack.append(child)
                elif entry.get("type") == "FILE" and int(entry.get("length", 0)) > 0:
                    yield child, int(entry.get("replication", 0))

    def blocks(self, path: str, replication: int | None = None) -> list[BlockReplicas]:
        """The blocks of file ``path`` with their replicas' DataNodes (the NameNode's block map)."""
        if replication is None:
            replication = self.replication(path)
        doc = self._call("GET", path, "GET_BLOCK_LOCATIONS", offset=0, length=1 << 62)
        out = []
        for b in doc.get("LocatedBlocks", {}).get("locatedBlocks", []):
            blk = b.get("block", {})
            hosts = tuple(str(loc.get("ipAddr") or loc.get("hostName")) for loc in b.get("locations", []))
            out.append(BlockReplicas(path, int(blk.get("blockId", 0)), int(blk.get("numBytes", 0)), replication,
                                     hosts))
        return out

    def scan(self, roots: Sequence[str]) -> list[BlockReplicas]:
        """Every block under ``roots``."""
        return [b for path, rep in self.files(roots) for b in self.blocks(path, rep)]

    def replication(self, path: str) -> int:
        return int(self._call("GET", path, "GETFILESTATUS")["FileStatus"]["replication"])

    def set_replication(self, path: str, replication: int) -> None:
        doc = self._call("PUT", path, "SETREPLICATION", replication=replication)
        if doc.get("boolean") is not True:
            raise HdfsError(f"WebHDFS SETREPLICATION {path} {replication}: the NameNode answered {doc}")

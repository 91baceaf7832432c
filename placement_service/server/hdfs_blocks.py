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
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from placement_service import HarvestError

MAX_WIDTH = 4
"""Replicas kept per block in a :class:`ReplicaMap`; a block with more is never moved (the mover
handles factors 2 to 4)."""


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


class ReplicaMap:
    """Every block of a scan as flat arrays (about 30 bytes a block: 10M blocks in ~300 MB, where
    one Python object per block would take gigabytes): its file (``paths``), id, size, the file's
    factor, its replica count and up to ``MAX_WIDTH`` replicas as indexes into ``nodes``."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.nodes: list[str] = []
        self._node_id: dict[str, int] = {}
        self._file = array("i")
        self._block = array("q")
        self._size = array("q")
        self._factor = array("h")
        self._count = array("h")
        self._hosts = array("i")

    def add_file(self, path: str) -> int:
        self.paths.append(path)
        return len(self.paths) - 1

    def add(self, file: int, block_id: int, size_bytes: int, factor: int, hosts: Sequence[str]) -> None:
        ids = self._node_id
        row = [-1] * MAX_WIDTH
        for j, h in enumerate(hosts[:MAX_WIDTH]):
            i = ids.get(h)
            if i is None:
                i = ids[h] = len(self.nodes)
                self.nodes.append(h)
            row[j] = i
        self._file.append(file)
        self._block.append(block_id)
        self._size.append(size_bytes)
        self._factor.append(factor)
        self._count.append(len(hosts))
        self._hosts.extend(row)

    def __len__(self) -> int:
        return len(self._block)

    def arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(file, block_id, size_bytes, factor, count, hosts [block, MAX_WIDTH]) as numpy views."""
        return (np.frombuffer(self._file, dtype=np.int32), np.frombuffer(self._block, dtype=np.int64),
                np.frombuffer(self._size, dtype=np.int64), np.frombuffer(self._factor, dtype=np.int16),
                np.frombuffer(self._count, dtype=np.int16),
                np.frombuffer(self._hosts, dtype=np.int32).reshape(-1, MAX_WIDTH))

    def block(self, i: int) -> BlockReplicas:
        file, block_id, size, factor, count, hosts = (a[i] for a in self.arrays())
        return BlockReplicas(self.paths[int(file)], int(block_id), int(size), int(factor),
                             tuple(self.nodes[int(h)] for h in hosts[: min(int(count), MAX_WIDTH)]))


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

    def scan_into(self, roots: Sequence[str], out: ReplicaMap) -> None:
        """Every block under ``roots`` into ``out`` (straight from the JSON: no object per block)."""
        for path, rep in self.files(roots):
            doc = self._call("GET", path, "GET_BLOCK_LOCATIONS", offset=0, length=1 << 62)
            file = out.add_file(path)
            for b in doc.get("LocatedBlocks", {}).get("locatedBlocks", []):
                blk = b.get("block", {})
                out.add(file, int(blk.get("blockId", 0)), int(blk.get("numBytes", 0)), rep,
                        [str(loc.get("ipAddr") or loc.get("hostName")) for loc in b.get("locations", [])])

    def replication(self, path: str) -> int:
        return int(self._call("GET", path, "GETFILESTATUS")["FileStatus"]["replication"])

    def set_replication(self, path: str, replication: int) -> None:
        doc = self._call("PUT", path, "SETREPLICATION", replication=replication)
        if doc.get("boolean") is not True:
            raise HdfsError(f"WebHDFS SETREPLICATION {path} {replication}: the NameNode answered {doc}")

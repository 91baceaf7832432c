"""Revocation of an elastic node: drain it, then acknowledge.

The capacity service takes an elastic server back (its Online Mover or a re-solve gives it to a
reservation); the placement service lists the revocation ids in this node's report replies. From the
next tick on, every decision is overridden: advertise 0 cores / 0 MB to YARN, kill every live
secondary container youngest first (through the executor's ordinary kill path: local process
groups, or the RM for containers without local processes), and report the DataNode busy so that no
new block lands here. Once no container with a live process is left, each report carries the
revocation ids in ``drained_revocations``: that acknowledgement hands the server over.

The node stays drained (state file, survives restarts) until the placement service lends it again:
a reply with the ``elastic`` label and no pending revocation.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import threading
from collections.abc import Collection, Sequence

from agent.attribute import NodeView
from agent.decide import Decision, Kill, _youngest_first
from agent.statefiles import atomic_write

logger = logging.getLogger(__name__)

ELASTIC_LABEL = "elastic"


class Drainer:
    def __init__(self, path: str) -> None:
        self.path = path
        self._lock = threading.Lock()
        self.ids: tuple[int, ...] = ()
        self.acknowledged = False
        try:
            with open(path, encoding="utf-8") as handle:
                doc = json.load(handle)
            self.ids = tuple(int(i) for i in doc.get("revocations", []))
            self.acknowledged = bool(doc.get("acknowledged", False))
        except (OSError, ValueError, TypeError, AttributeError):
            pass

    def _save(self) -> None:
        atomic_write(self.path, json.dumps({"revocations": list(self.ids), "acknowledged": self.acknowledged}))

    @property
    def draining(self) -> bool:
        return bool(self.ids)

    def on_reply(self, revocations: Sequence[int], label: str) -> None:
        """Called with every report reply (sender thread)."""
        with self._lock:
            new = [int(i) for i in revocations if int(i) not in self.ids]
            if new:
                self.ids = (*self.ids, *new)
                self.acknowledged = False
                logger.warning("revoked by the capacity service (revocations %s): draining the node", new)
                self._save()
            elif self.ids and not revocations and label == ELASTIC_LABEL and self.acknowledged:
                logger.info("lent again as an elastic node: drain %s over", list(self.ids))
                self.ids, self.acknowledged = (), False
                self._save()

    def apply(self, decision: Decision, view: NodeView | None, dying: Collection[str]) -> Decision:
        """The decision while draining: nothing advertised, every live container killed, DataNode busy."""
        if not self.draining:
            return decision
        live = [c for c in view.containers if c.container_id not in dying] if view is not None else []
        kills = tuple(
            Kill(c.container_id, c.processes, c.pgids, c.footprint_cores, c.footprint_memory_mb,
                 f"revoked by the capacity service (revocations {list(self.ids)}): drain, youngest first")
            for c in _youngest_first(live)
        )  # fmt: skip
        return dataclasses.replace(
            decision, kills=kills, advertise_cores=0, advertise_memory_mb=0, target_cores=0, target_memory_mb=0,
            busy=True, reasons=(*decision.reasons, f"draining: revocations {list(self.ids)}"),
        )  # fmt: skip

    def drained(self, view: NodeView | None) -> tuple[int, ...]:
        """Revocation ids to acknowledge now: draining, and no container with a live process left."""
        if not self.draining or view is None or any(c.processes for c in view.containers):
            return ()
        with self._lock:
            if not self.acknowledged:
                self.acknowledged = True
                self._save()
                logger.warning("node drained: acknowledging revocations %s", list(self.ids))
            return self.ids

    def state(self) -> dict[str, object]:
        return {"draining": self.draining, "revocations": list(self.ids), "acknowledged": self.acknowledged,
                "state_file": os.path.basename(self.path)}  # fmt: skip

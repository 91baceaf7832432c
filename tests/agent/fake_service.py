"""A small real gRPC placement service for agent tests (run as a process so it can be killed).

Implements ``Placement.Report`` from ``placement_service/proto/harvest.proto`` with the contract's
``seq`` rule: a report whose ``seq`` is at or below the node's last stored one is acknowledged but
not stored again. Stored reports are kept durably (atomic JSON file) before the reply, so a
SIGKILL loses nothing acknowledged. ``--token`` demands ``authorization: Bearer <token>``.

    python -m tests.agent.fake_service --port P --state FILE [--token T] [--label L]
"""

from __future__ import annotations

import argparse
import json
import os
import threading
from concurrent import futures

import grpc

from placement_service.proto_gen import harvest_pb2, harvest_pb2_grpc


class FakePlacement(harvest_pb2_grpc.PlacementServicer):
    def __init__(self, state_path: str, token: str | None, label: str) -> None:
        self.state_path = state_path
        self.token = token
        self.label = label
        self.lock = threading.Lock()
        self.state = {"stored": {}, "received": 0}
        if os.path.exists(state_path):
            with open(state_path) as handle:
                self.state = json.load(handle)

    def _save(self) -> None:
        tmp = self.state_path + ".tmp"
        with open(tmp, "w") as handle:
            json.dump(self.state, handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, self.state_path)

    def Report(self, request_iterator, context):  # noqa: N802
        if self.token is not None:
            metadata = dict(context.invocation_metadata() or ())
            if metadata.get("authorization") != f"Bearer {self.token}":
                context.abort(grpc.StatusCode.UNAUTHENTICATED, "authorization: Bearer <token> is required")
        for report in request_iterator:
            with self.lock:
                stored = self.state["stored"].setdefault(report.node, [])
                self.state["received"] += 1
                if not stored or report.seq > stored[-1]:
                    stored.append(report.seq)
                self._save()
                acked = stored[-1]
            yield harvest_pb2.ReportReply(node=report.node, acked_seq=acked, class_id=self.label, label=self.label)


def serve(port: int, state: str, token: str | None, label: str) -> grpc.Server:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    harvest_pb2_grpc.add_PlacementServicer_to_server(FakePlacement(state, token, label), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--token")
    parser.add_argument("--label", default="constant-2")
    args = parser.parse_args()
    server = serve(args.port, args.state, args.token, args.label)
    print("serving", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()

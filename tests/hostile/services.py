"""Every HTTP service of the project as a real process on 127.0.0.1, for the one hostile suite.

``SERVICES`` names each service with what the suite needs to attack it: how to start it, its
state-changing calls (each must refuse a missing, wrong or empty token), its query parameters that
take numbers, a cheap state-changing call whose acknowledgement must survive ``kill -9``, and how
to read back what it acknowledged.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from placement_service.cli import main
from tests.readiness import NotReady, ready_line
from tests.server.conftest import TOKEN, ServerProc, report, start_server


def start_capacity(data_dir: Path, *extra: str, region: Path | None = None, preexec_fn: Any = None,
                   token_text: str | bytes = TOKEN + "\n") -> ServerProc:
    """``harvest ras serve`` on a free port over a small generated region (solves on demand only)."""
    data_dir.mkdir(parents=True, exist_ok=True)
    region = region or capacity_region(data_dir.parent / f"{data_dir.name}-region")
    token_file = data_dir.parent / f"{data_dir.name}.token"
    token_file.write_bytes(token_text.encode() if isinstance(token_text, str) else token_text)
    log = data_dir.parent / f"{data_dir.name}.log"
    cmd = [sys.executable, "-m", "placement_service.cli", "ras", "serve", "--inventory",
           str(region / "inventory.csv"), "--reservations", str(region / "reservations.json"), "--data-dir",
           str(data_dir), "--http-port", "0", "--token-file", str(token_file), "--budget-s", "2",
           "--interval-s", "0", *extra]
    with open(log, "a") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=dict(os.environ),
                                preexec_fn=preexec_fn)
    try:
        line = ready_line(proc, "harvest ras serve:", 60)
    except NotReady as exc:
        proc.kill()
        proc.wait()
        raise RuntimeError(f"capacity service did not start: {exc}; log:\n{log.read_text()[-3000:]}") from None
    return ServerProc(proc=proc, http=line.split()[3], grpc="", data_dir=data_dir, log=log)


def wait_for_plan(srv: ServerProc, timeout_s: float = 60.0) -> int:
    """Wait for the first plan (the service solves once at start); returns its version."""
    deadline = time.monotonic() + timeout_s
    while True:
        status, doc = srv.call("GET", "/healthz")
        if status == 200 and doc.get("plan_version", 0) >= 1:
            return int(doc["plan_version"])
        assert time.monotonic() < deadline, f"no plan after {timeout_s} s: {doc}"
        time.sleep(0.1)


def capacity_region(out: Path, servers: int = 60) -> Path:
    if not (out / "reservations.json").exists():
        assert main(["ras", "generate", "--servers", str(servers), "--reservations", "3", "--msbs", "3",
                     "--hardware", "2", "--seed", "5", "--out-dir", str(out)]) == 0
    return out


@dataclass(frozen=True)
class Service:
    name: str
    start: Callable[..., ServerProc]
    mutating: tuple[tuple[str, str, Any], ...]  # (method, path, a valid body) of every state-changing call
    numeric_queries: tuple[tuple[str, str, str], ...]  # (method, path with {v}, field) taking a number
    health: str = "/healthz"


PLACEMENT = Service(
    name="placement",
    start=start_server,
    mutating=(
        ("POST", "/v1/reports", {"reports": [report("auth-1", "auth-t", 0.0, seq=1)]}),
        ("POST", "/v1/reimages", {"events": [{"node": "auth-1", "timestamp": 0.0}]}),
        ("PUT", "/v1/harvestable", {"nodes": ["auth-1"]}),
        ("POST", "/v1/nodes/auth-1/drained", {"revocations": [1]}),
        ("POST", "/v1/recluster", None),
        ("POST", "/v1/flush", None),
    ),
    numeric_queries=(
        ("GET", "/v1/reimages?since={v}", "since"),
        ("GET", "/v1/tenants/t/samples?since={v}", "since"),
        ("GET", "/v1/tenants/t/samples?until={v}", "until"),
        ("POST", "/v1/recluster?timeout_s={v}", "timeout_s"),
    ),
)

CAPACITY = Service(
    name="capacity",
    start=start_capacity,
    mutating=(
        ("POST", "/v1/solve", None),
        ("POST", "/v1/failures", {"servers": ["srv01"]}),
        ("POST", "/v1/recoveries", {"servers": ["srv01"]}),
        ("POST", "/v1/requests", {"request": {"id": "auth-r", "capacity_rru": 1, "rru": {"hw00": 1}}}),
        ("POST", "/v1/revocations/1/ack", None),
    ),
    numeric_queries=(
        ("GET", "/v1/plan?version={v}", "version"),
        ("POST", "/v1/solve?budget_s={v}", "budget_s"),
        ("GET", "/v1/events?limit={v}", "limit"),
    ),
)

SERVICES = {s.name: s for s in (PLACEMENT, CAPACITY)}

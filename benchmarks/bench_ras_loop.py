"""The capacity loop's figures (docs/bench/capacity.md, section "Capacity loop").

Cases:
  loop     real processes on 127.0.0.1 (``harvest ras serve``, two ``harvest serve``, four agents on
           fake nodes with one ``CONTAINER_ID`` process each; region of ``tests/capacity/ras/loop_procs``),
           fresh for every trial. An MSB failure is signalled; measured: failure signal -> reservation
           whole again (plan checked, every replacement handed over by its agent's acknowledgement),
           and per revoked node: revocation published -> its container gone (node free of secondary
           work). Baseline in the same run: the same trials with the agents not running the drain
           acknowledgement path (no agents), so each server is handed over at the acknowledgement
           timeout (the only way without the loop).
  mover    Online Mover inside the capacity service on a 20,000-server region: 1, 10 and 100 failed
           servers of one reservation -> new plan checked, stored and published (wall time).
  resolve  100,000 servers / 1,000 reservations / 36 MSBs / 12 hardware types through the capacity
           service's async solver (``CapacityLoop.solve_now``) under its budget: a first plan, 80% of
           the reservation servers in use, 1% of servers failed through the Online Mover, then the
           re-solve from the current plan; moves and in-use moves, published only if checked. Baseline
           in the same run: the same re-solve from no previous plan (cold).

    nice -n 10 .venv/bin/python benchmarks/bench_ras_loop.py --case loop --trials 20
    nice -n 10 .venv/bin/python benchmarks/bench_ras_loop.py --case resolve --budget-s 60
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from placement_service.capacity.ras import io  # noqa: E402
from placement_service.capacity.ras.generate import generate_region, generate_requests  # noqa: E402
from placement_service.capacity.ras.loop import CapacityLoop, LoopConfig  # noqa: E402
from placement_service.capacity.ras.store import CapacityStore  # noqa: E402
from tests.agent.procs import wait_until  # noqa: E402
from tests.capacity.ras.loop_procs import LoopRegion, call, try_call  # noqa: E402


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def one_trial(with_agents: bool, ack_timeout_s: float) -> dict[str, Any]:
    tmp = Path(tempfile.mkdtemp(prefix="bench-ras-loop-"))
    region = LoopRegion(tmp, ack_timeout_s=ack_timeout_s)
    cap = region.cap_url
    try:
        assert wait_until(lambda: (try_call(f"{cap}/v1/plan") or {}).get("version", 0) >= 1, 120, 0.1)
        plan = call(f"{cap}/v1/plan")
        elastic = sorted(s for s, e in plan["assignment"].items() if e is None or e.startswith("shared-buffer:"))
        survivors = [s for s in elastic if int(s[1:]) // 4 != 0]
        for http, _ in region.ports.values():
            assert wait_until(lambda h=http: (try_call(f"http://127.0.0.1:{h}/v1/elastic") or {}).get("version")
                              == plan["version"], 60, 0.05)  # fmt: skip
        placed = [region.agent(s) for s in survivors] if with_agents else []
        for agent, _ in placed:
            assert wait_until(lambda a=agent: a.executor.label == "elastic"
                              and len(a.explain().get("containers", [])) == 1, 60, 0.05)  # fmt: skip
        t0 = time.time()
        call(f"{cap}/v1/failures", "POST", {"servers": [f"n{i:02d}" for i in range(4)], "reason": "MSB msb0 down"})
        gone: dict[str, float] = {}
        whole = None
        deadline = time.monotonic() + ack_timeout_s + 60
        while time.monotonic() < deadline and whole is None:
            for (_, node), s in zip(placed, survivors[: len(placed)], strict=True):
                if s not in gone and not node.children[0].alive():
                    gone[s] = time.time()
            if call(f"{cap}/v1/reservations/web")["whole"]:
                whole = time.time()
            time.sleep(0.02)
        revs = {r["server"]: r for r in call(f"{cap}/v1/revocations")["revocations"]}
        free_s = [gone[s] - float(revs[s]["created_s"]) for s in gone if s in revs]
        return {"whole_s": None if whole is None else whole - t0, "free_s": free_s,
                "handover": sorted({r["state"] for r in revs.values()}),
                "check_ok": call(f"{cap}/v1/plan")["check"]["ok"]}
    finally:
        region.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def case_loop(trials: int, baseline_trials: int, ack_timeout_s: float) -> None:
    print(f"# loop: load at start {load()}", flush=True)
    whole: list[float] = []
    free: list[float] = []
    for i in range(trials):
        r = one_trial(True, ack_timeout_s)
        print(json.dumps({"trial": i, **r, "load": load()}), flush=True)
        if r["whole_s"] is not None:
            whole.append(r["whole_s"])
        free.extend(r["free_s"])
    base: list[float] = []
    for i in range(baseline_trials):
        r = one_trial(False, ack_timeout_s)
        print(json.dumps({"baseline_trial": i, **r, "load": load()}), flush=True)
        if r["whole_s"] is not None:
            base.append(r["whole_s"])
    print(json.dumps({
        "figure": "failure signal -> reservation whole again", "trials": len(whole),
        "p50_s": round(pct(whole, 50), 3), "p99_s": round(pct(whole, 99), 3),
        "max_s": round(max(whole), 3) if whole else None,
        "revocation_to_node_free_p50_s": round(pct(free, 50), 3), "revocation_to_node_free_p99_s": round(pct(free, 99), 3),
        "nodes": len(free), "baseline_handover_by_timeout_p50_s": round(pct(base, 50), 3),
        "baseline_trials": len(base), "ack_timeout_s": ack_timeout_s, "load": load(),
    }), flush=True)  # fmt: skip


def case_resolve(budget_s: float, first_s: float) -> None:
    print(f"# resolve: load at start {load()}", flush=True)
    region = generate_region(n_servers=100_000, n_msbs=36, n_hardware=12, seed=1)
    requests = generate_requests(region, n_reservations=1000, fill=0.8, seed=1)
    doc = io.requests_to_json(requests, {"time_limit_s": first_s})
    tmp = Path(tempfile.mkdtemp(prefix="bench-ras-resolve-"))
    try:
        loop = CapacityLoop(region, doc, CapacityStore(tmp / "c.sqlite"), LoopConfig(budget_s=first_s, interval_s=0))
        t0 = time.monotonic()
        first = loop.solve_now(first_s)
        print(json.dumps({"step": "first plan", **first, "total_s": round(time.monotonic() - t0, 1), "load": load()}),
              flush=True)  # fmt: skip
        # 80% of the reservation servers run containers now; 1% of the region fails, through the mover
        rng = np.random.default_rng(2)
        held = np.array([e is not None and not str(e).startswith("shared-buffer:")
                         for e in (loop.plan["assignment"].get(s) for s in region.server)])  # fmt: skip
        loop.region = dataclasses.replace(region, in_use=held & (rng.random(len(region)) < 0.8))
        failed = sorted(rng.choice(np.array(region.server), 1000, replace=False).tolist())
        t0 = time.monotonic()
        moved = loop.signal_failure(failed, "1% of the region failed", "bench")
        print(json.dumps({"step": "mover, 1,000 failed servers", "replacements": len(moved["replacements"]),
                          "revoked": len(moved["revoked"]), "unmet": len(moved["unmet"]),
                          "wall_s": round(time.monotonic() - t0, 2), "load": load()}), flush=True)  # fmt: skip
        t0 = time.monotonic()
        again = loop.solve_now(budget_s)
        print(json.dumps({"step": f"async re-solve from the current plan, budget {budget_s:g} s", **again,
                          "in_use_servers": int(loop.region.in_use.sum()), "total_s": round(time.monotonic() - t0, 1),
                          "check_ok": loop.plan["check"]["ok"], "unmet": loop.plan["summary"]["unmet"],
                          "load": load()}), flush=True)  # fmt: skip
        # baseline: the same re-solve with no previous plan (cold)
        previous = loop.plan
        loop.plan = {}
        t0 = time.monotonic()
        cold = loop.solve_now(budget_s)
        print(json.dumps({"step": f"baseline: cold re-solve (no previous plan), budget {budget_s:g} s", **cold,
                          "moves_vs_current": sum(1 for s, e in loop.plan["assignment"].items()
                                                  if e != previous["assignment"].get(s)),
                          "total_s": round(time.monotonic() - t0, 1), "load": load()}), flush=True)  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def case_mover(n: int) -> None:
    """Online Mover decision time inside the capacity service (plan published, checked, stored)."""
    print(f"# mover: load at start {load()}", flush=True)
    region = generate_region(n_servers=n, n_msbs=20, n_hardware=6, seed=1)
    requests = generate_requests(region, n_reservations=n // 100, fill=0.8, seed=1)
    tmp = Path(tempfile.mkdtemp(prefix="bench-ras-mover-"))
    try:
        loop = CapacityLoop(region, io.requests_to_json(requests, {"time_limit_s": 10}),
                            CapacityStore(tmp / "c.sqlite"), LoopConfig(interval_s=0))  # fmt: skip
        loop.solve_now(10)
        rid = max(loop.plan["reservations"], key=lambda r: len(loop.plan["reservations"][r]["servers"]))
        for k in (1, 10, 100):
            servers = loop.plan["reservations"][rid]["servers"][:k]
            t0 = time.monotonic()
            r = loop.signal_failure(servers, "bench", "bench")
            print(json.dumps({"case": "mover", "servers": n, "failed": k, "replacements": len(r["replacements"]),
                              "wall_s": round(time.monotonic() - t0, 3), "check_ok": loop.plan["check"]["ok"],
                              "load": load()}), flush=True)  # fmt: skip
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", nargs="+", default=["loop"], choices=["loop", "resolve", "mover"])
    ap.add_argument("--mover-servers", type=int, default=20000)
    ap.add_argument("--trials", type=int, default=20)
    ap.add_argument("--baseline-trials", type=int, default=3)
    ap.add_argument("--ack-timeout-s", type=float, default=30.0)
    ap.add_argument("--budget-s", type=float, default=60.0, help="async solver budget for the 100k re-solve")
    ap.add_argument("--first-s", type=float, default=60.0, help="time limit of the first 100k plan")
    args = ap.parse_args()
    for case in args.case:
        if case == "loop":
            case_loop(args.trials, args.baseline_trials, args.ack_timeout_s)
        elif case == "mover":
            case_mover(args.mover_servers)
        else:
            case_resolve(args.budget_s, args.first_s)


if __name__ == "__main__":
    main()

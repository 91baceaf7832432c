"""POP sub-problems on real Dask: LocalCluster, an external scheduler + workers, a killed worker, a
scheduler that goes away, a timeout, an unreachable address (each run takes seconds)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from placement_service.capacity.pop.execute import connect, run_parts
from placement_service.capacity.pop.solve import PopOptions, solve_pop
from placement_service.capacity.ras import io
from placement_service.capacity.ras.domain import Problem
from placement_service.cli import main
from tests.capacity.pop import tasks

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class External:
    """``dask-scheduler`` and two ``dask-worker`` processes started separately on 127.0.0.1."""

    def __init__(self, tmp: Path, workers: int = 2) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        sched_file = tmp / "scheduler.json"
        self.procs = [subprocess.Popen(
            [str(BIN / "dask"), "scheduler", "--host", "127.0.0.1", "--port", "0", "--dashboard-address", "127.0.0.1:0",
             "--scheduler-file", str(sched_file)], env=env, cwd=ROOT,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]  # fmt: skip
        deadline = time.monotonic() + 60
        while not sched_file.exists() and time.monotonic() < deadline:
            time.sleep(0.1)
        self.address = json.loads(sched_file.read_text())["address"]
        for _ in range(workers):
            self.procs.append(subprocess.Popen(
                [str(BIN / "dask"), "worker", self.address, "--nthreads", "1", "--nworkers", "1", "--no-dashboard",
                 "--host", "127.0.0.1", "--no-nanny"], env=env, cwd=ROOT,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
        from distributed import Client

        with Client(self.address, timeout="30s", set_as_default=False) as c:
            c.wait_for_workers(workers, timeout=60)

    def stop(self) -> None:
        if self.procs[0].poll() is not None:  # scheduler gone: the workers only wait to reconnect
            for p in self.procs[1:]:
                p.kill()
        for p in reversed(self.procs):
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:  # a worker still retrying a scheduler that is gone
                p.kill()
                p.wait(timeout=10)


@pytest.fixture()
def external(tmp_path: Path) -> Iterator[External]:
    ext = External(tmp_path)
    try:
        yield ext
    finally:
        ext.stop()


def test_local_cluster_gives_the_same_plan_as_solving_in_process(dask_problem: Problem) -> None:
    opts = PopOptions(k=4, split_threshold=0.25, seed=4, part_time_limit_s=20, inline=True)
    inline_plan, _ = solve_pop(dask_problem, opts, progress=None)
    seen: list[tuple[int, int]] = []
    local_plan, pop = solve_pop(dask_problem, PopOptions(k=4, split_threshold=0.25, seed=4, part_time_limit_s=20,
                                                        workers=2),
                                progress=lambda done, total, _v: seen.append((done, total)))  # fmt: skip
    assert local_plan.assignment == inline_plan.assignment
    assert pop["complete"] and pop["full_lp_bound"]["status"] == "Optimal"  # type: ignore[index]
    assert seen[-1] == (4, 4) and [d for d, _ in seen] == sorted(d for d, _ in seen)


def test_external_cluster_through_the_cli_gives_the_same_plan_as_the_in_process_run(
    dask_problem: Problem, external: External, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inv, res = tmp_path / "inventory.csv", tmp_path / "R.json"
    io.write_table(inv, io.region_columns(dask_problem.region))
    io.write_json(res, io.requests_to_json(dask_problem.requests, {"time_limit_s": 20}))
    common = ["ras", "solve", "--inventory", str(inv), "--reservations", str(res), "--pop-k", "3", "--pop-seed", "7",
              "--pop-part-time-limit-s", "20"]  # fmt: skip
    assert main([*common, "--dask-scheduler", external.address, "--out", str(tmp_path / "ext.json")]) == 0
    ext = io.load_json(tmp_path / "ext.json")
    # the same problem read back from the files, solved in this process with the same seed and limits
    region = io.read_inventory(inv)
    requests, settings = io.read_requests(res)
    here, _ = solve_pop(Problem(region, requests, settings),
                        PopOptions(k=3, seed=7, part_time_limit_s=20, inline=True), progress=None)  # fmt: skip
    assert ext["assignment"] == here.assignment
    assert ext["check"] == {"ok": True, "violations": []}
    solver = ext["solver"]
    assert solver["pop_k"] == 3 and solver["complete"] and len(solver["parts"]) == 3
    assert {"status", "gap", "wall_s"} <= set(solver["parts"][0])
    assert solver["lp_bound"] <= solver["objective"] and solver["full_lp_bound"]["status"] == "Optimal"


def test_a_worker_killed_mid_task_has_its_task_resubmitted() -> None:
    client, cluster = connect(None, 2)
    try:
        pids = set(client.run(os.getpid).values())
        killed: list[int] = []

        def kill_one() -> None:
            time.sleep(1.0)
            pid = sorted(pids)[0]
            os.kill(pid, signal.SIGKILL)
            killed.append(pid)

        t = threading.Thread(target=kill_one)
        t.start()
        parts, _ = run_parts(client, tasks.slow_pid, "input", [3.0, 3.0], timeout_s=60)
        t.join()
        assert [o.error for o in parts] == [None, None]
        assert all(o.value[1] == "input" for o in parts)  # the scattered input reached the retried task
        assert killed and all(o.value[0] != killed[0] for o in parts)
    finally:
        client.close()
        cluster.close()


def test_failed_and_timed_out_tasks_are_reported_by_index() -> None:
    client, cluster = connect(None, 2)
    try:
        parts, _ = run_parts(client, tasks.fail, None, ["a", "b"], timeout_s=30)
        assert [o.index for o in parts] == [0, 1]
        assert all("RuntimeError" in (o.error or "") and "cannot be solved" in (o.error or "") for o in parts)
        parts, _ = run_parts(client, tasks.slow_pid, None, [0.0, 30.0], timeout_s=3)
        assert parts[0].error is None and parts[1].error == "timed out after 3 s"
    finally:
        client.close()
        cluster.close()


def test_a_scheduler_that_goes_away_mid_run_leaves_every_unfinished_part_reported(external: External) -> None:
    client, _ = connect(external.address, None)
    try:
        threading.Timer(1.5, lambda: external.procs[0].send_signal(signal.SIGKILL)).start()
        t0 = time.monotonic()
        parts, _ = run_parts(client, tasks.slow_pid, None, [0.0, 20.0, 20.0], timeout_s=60)
        assert time.monotonic() - t0 < 45
        assert parts[0].error is None
        assert parts[1].error and parts[2].error and "timed out" not in parts[1].error
    finally:
        client.close()


def test_unreachable_scheduler_is_a_one_line_error(tmp_path: Path, dask_problem: Problem,
                                                    capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    inv, res = tmp_path / "inventory.csv", tmp_path / "R.json"
    io.write_table(inv, io.region_columns(dask_problem.region))
    io.write_json(res, io.requests_to_json(dask_problem.requests, {}))
    addr = f"tcp://127.0.0.1:{_free_port()}"
    rc = main(["ras", "solve", "--inventory", str(inv), "--reservations", str(res), "--pop-k", "2",
               "--dask-scheduler", addr, "--dask-timeout-s", "2", "--out", str(tmp_path / "A.json")])  # fmt: skip
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and not (tmp_path / "A.json").exists()
    line = [x for x in err.splitlines() if "error:" in x]
    assert line and addr in line[0] and "cannot reach the scheduler" in line[0]
    for bad, msg in ((["--pop-k", "0"], "must be >= 1"), (["--pop-k", "100000"], "available servers"),
                     (["--pop-k", "many"], "expected a whole number or 'auto'")):
        rc = main(["ras", "solve", "--inventory", str(inv), "--reservations", str(res), *bad, "--workers", "1",
                   "--out", str(tmp_path / "B.json")])  # fmt: skip
        err = capsys.readouterr().err
        assert rc == 2 and msg in err and "Traceback" not in err

"""``harvest testbed run``: TPC-DS queries through ``harvest hive`` under the modes, one record each.

1. Data (once per scale): ``tpcds_data.generate`` into ``D/tpcds``, the table files put into HDFS
   under ``/tpcds/sf<scale>/<table>/``, the DDL (external text tables) run through HiveServer2.
2. Per round: a no-secondary baseline (``baseline_s`` without queries: the primaries' own latency),
   then per mode (``testbed.set_mode``: agents started or stopped) every query once, through
   ``run_query``. A record per query and mode (see ``RECORD_FIELDS``) is appended to
   ``D/runs/records.json`` (rewritten atomically after each query).
3. The primaries' probe over a query's time: the latency windows that end within the query (or
   the first one after it, so that every query has one), over all workers: p50 = the median of
   the windows' p50, p99 = the worst window p99.

Routing per mode (``run_query``): **harvest** asks the placement service with the classes and a
history of earlier runs (``D/runs/history-harvest.json``); **pt** and **stock** route with no
service, no classes and an empty history: the default queue.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from placement_service.atomic import atomic_write_json
from scheduler_plugin.testbed import procs, testbed, tpcds_data
from scheduler_plugin.testbed.primary import percentile
from scheduler_plugin.testbed.testbed import TestbedError, read_state, say, write_state

RECORDS_FILE = "records.json"
RECORD_FIELDS = ("round", "mode", "query", "started_s", "job_time_s", "exit_code", "killed_attempts",
                 "failed_attempts", "queue", "classes", "job_type", "source", "primary_p50_ms", "primary_p99_ms",
                 "error")
DATABASE = "tpcds"

QueryFn = Callable[[dict[str, Any], Path, str], dict[str, Any]]


# ---------------------------------------------------------------- HiveServer2 (added by the Hive role)


def hiveserver2(state: dict[str, Any]) -> tuple[str, str]:
    """(JDBC URL without database, beeline executable) of the testbed's HiveServer2.

    Taken from the state's ``hiveserver2``, else the cluster's (``harvest hadoop up``'s object):
    ``"host:port"``, ``{"address": "host:port", "beeline": PATH}`` or ``{"jdbc": "jdbc:hive2://host:port[/db]"}``
    (default beeline: ``<cluster>/bin/beeline``)."""
    hs2 = state.get("hiveserver2") or (state.get("cluster") or {}).get("hiveserver2")
    if not hs2:
        raise TestbedError(f"{state.get('dir')}: this testbed has no HiveServer2 ('hiveserver2' is empty in "
                           f"{testbed.STATE_FILE}); queries cannot run")
    default_beeline = str(Path(state["cluster"]["bin"]) / "beeline")
    if isinstance(hs2, str):
        return f"jdbc:hive2://{hs2}", default_beeline
    if hs2.get("address"):
        address = str(hs2["address"])
    elif str(hs2.get("jdbc", "")).startswith("jdbc:hive2://"):
        address = str(hs2["jdbc"])[len("jdbc:hive2://"):].split("/", 1)[0]
    else:
        raise TestbedError(f"hiveserver2 {hs2!r}: expected 'host:port' or an object with 'address' or 'jdbc'")
    return f"jdbc:hive2://{address}", str(hs2.get("beeline") or default_beeline)


def run_sql_file(state: dict[str, Any], path: Path, database: str = "default") -> None:
    """Run a file of statements (the DDL) through beeline against the testbed's HiveServer2."""
    url, beeline = hiveserver2(state)
    log = Path(state["dir"]) / "logs" / f"beeline-{path.stem}.log"
    with open(log, "ab") as handle:
        done = subprocess.run([beeline, "-u", f"{url}/{database}", "-f", str(path)], stdout=handle,
                              stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=1800, check=False)
    if done.returncode != 0:
        raise TestbedError(f"beeline -f {path} failed (exit {done.returncode}); {log}:\n{procs.tail(log)}")


def routing_args(state: dict[str, Any], mode: str, runs: Path) -> list[str]:
    """``harvest hive`` routing flags of a mode (see the module doc)."""
    if mode == "harvest":
        svc = state["service"]
        return ["--service", svc["http"], "--token-file", svc["token_file"], "--classes", state["classes_file"],
                "--history", str(runs / "history-harvest.json"), "--seed", "7"]
    if mode in ("pt", "stock"):
        empty = runs / f"history-{mode}.json"
        empty.unlink(missing_ok=True)  # no history: every run is a first run
        return ["--history", str(empty)]
    raise TestbedError(f"mode {mode!r}: expected one of {', '.join(testbed.MODES)}")


def run_query(state: dict[str, Any], query_sql: Path, mode: str) -> dict[str, Any]:
    """Run one query through ``harvest hive`` in ``mode``; returns the record's query part
    (job_time_s, exit_code, killed/failed attempts, queue, classes, job_type, source, error)."""
    url, beeline = hiveserver2(state)
    runs = Path(state["dir"]) / "runs"
    runs.mkdir(exist_ok=True)
    with tempfile.NamedTemporaryFile(suffix=".json", dir=runs, delete=False) as handle:
        result_path = Path(handle.name)
    name = f"tpcds-{query_sql.stem}"
    cmd = [sys.executable, "-m", "placement_service.cli", "hive", str(query_sql), "--url", f"{url}/{DATABASE}",
           "--beeline", beeline, "--name", name, "--engine", "tez", "--result-json", str(result_path),
           *routing_args(state, mode, runs)]
    log = Path(state["dir"]) / "logs" / f"hive-{mode}-{query_sql.stem}.log"
    started = time.monotonic()
    with open(log, "ab") as out:
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, timeout=3600,
                              check=False, env={**os.environ, **testbed._env()})
    wall_s = time.monotonic() - started
    try:
        result = json.loads(result_path.read_text()) if result_path.stat().st_size else {}
    except (OSError, ValueError):
        result = {}
    result_path.unlink(missing_ok=True)
    decision = result.get("decision") or {}
    return {"job_time_s": result.get("duration_s", round(wall_s, 3)), "exit_code": result.get("exit_code", done.returncode),
            "killed_attempts": result.get("killed_attempts"), "failed_attempts": result.get("failed_attempts"),
            "queue": decision.get("queue"), "classes": " ".join(decision.get("classes") or []),
            "job_type": decision.get("job_type"), "source": decision.get("source"),
            "error": "" if done.returncode == 0 else f"exit {done.returncode}: {procs.tail(log, 3)}"}


# ---------------------------------------------------------------- the primaries' probe


def latency_rows(path: Path) -> list[dict[str, float]]:
    import csv

    try:
        with path.open(newline="") as handle:
            return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(handle)]
    except FileNotFoundError:
        return []
    except ValueError as exc:
        raise TestbedError(f"{path}: malformed latency row ({exc})") from None


def probe_stats(files: list[Path], start_s: float, end_s: float, window_s: float) -> tuple[float | None, float | None]:
    """(p50, p99) of the primaries over [start_s, end_s]: windows ending in (start_s, end_s + window_s]."""
    p50s, p99s = [], []
    for path in files:
        for row in latency_rows(path):
            if start_s < row["time"] <= end_s + window_s:
                p50s.append(row["p50_ms"])
                p99s.append(row["p99_ms"])
    if not p50s:
        return None, None
    return round(percentile(p50s, 0.5), 3), round(max(p99s), 3)


def _wait_for_window(files: list[Path], end_s: float, window_s: float) -> None:
    """Wait until every primary has written the latency window that covers ``end_s`` (at most 3 windows)."""
    deadline = time.time() + 3 * window_s + 2
    while time.time() < deadline:
        if all(any(r["time"] >= end_s for r in latency_rows(f)) for f in files):
            return
        time.sleep(0.5)


def _wait_for_primaries(files: list[Path], timeout_s: float) -> None:
    """Every primary has written a latency window (it probes), else an error naming the silent ones."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        silent = [f for f in files if not latency_rows(f)]
        if not silent:
            return
        time.sleep(0.5)
    raise TestbedError(f"no latency rows from the primaries after {timeout_s:.0f} s: {', '.join(map(str, silent))}")


# ---------------------------------------------------------------- the run


def load_data(state: dict[str, Any], scale: float, queries: list[int]) -> Path:
    """Generate the data (once per scale), put it into HDFS and create the tables (once); returns
    the directory of the query files."""
    directory = Path(state["dir"])
    gen = directory / "tpcds" / f"sf{scale:g}"
    hdfs_root = f"/tpcds/sf{scale:g}"
    say(f"TPC-DS data at scale {scale:g} (DuckDB dsdgen) in {gen}")
    tpcds_data.generate(scale, gen, hdfs_root=hdfs_root, queries=queries)
    if state.get("tables_loaded") != hdfs_root:
        hdfs = str(Path(state["cluster"]["bin"]) / "hdfs")
        log = directory / "logs" / "load.log"
        say(f"loading the tables into HDFS {hdfs_root} and Hive database {DATABASE}")
        for args in (["dfs", "-mkdir", "-p", hdfs_root], ["dfs", "-put", "-f", *map(str, sorted((gen / "data").iterdir())),
                                                           hdfs_root]):
            with open(log, "ab") as out:
                done = subprocess.run([hdfs, *args], stdout=out, stderr=subprocess.STDOUT, timeout=1800, check=False)
            if done.returncode != 0:
                raise TestbedError(f"hdfs {' '.join(args[:2])} failed (exit {done.returncode}); {log}:\n{procs.tail(log)}")
        ddl = directory / "tpcds" / f"ddl-sf{scale:g}.sql"
        ddl.write_text(f"CREATE DATABASE IF NOT EXISTS {DATABASE};\nUSE {DATABASE};\n" + (gen / "ddl.sql").read_text())
        run_sql_file(state, ddl)
        state["tables_loaded"] = hdfs_root
        write_state(directory, state)
    return gen / "queries"


def run(directory: Path, *, queries: list[int], rounds: int, modes: list[str], scale: float = 0.1,
        baseline_s: float = 30.0, query_fn: QueryFn = run_query,
        mode_fn: Callable[[Path, str], dict[str, Any]] = testbed.set_mode,
        load_fn: Callable[[dict[str, Any], float, list[int]], Path] = load_data) -> list[dict[str, Any]]:
    """The run of the module doc; returns every record (also in ``D/runs/records.json``)."""
    for mode in modes:
        if mode not in testbed.MODES:
            raise TestbedError(f"--modes: {mode!r} is not one of {', '.join(testbed.MODES)}")
    if rounds < 1:
        raise TestbedError(f"--rounds: expected >= 1, got {rounds}")
    directory = directory.resolve()
    state = read_state(directory)
    if state.get("state") != "running":
        raise TestbedError(f"{directory}: the testbed is {state.get('state')}, not running ('harvest testbed up' first)")
    query_dir = load_fn(state, scale, queries)
    files = [Path(p["latency_file"]) for p in state["processes"] if p["role"] == "primary"]
    window_s = float(state["primary"]["window_s"])
    _wait_for_primaries(files, 120.0)
    runs = directory / "runs"
    runs.mkdir(exist_ok=True)
    records: list[dict[str, Any]] = []

    def keep(record: dict[str, Any]) -> None:
        records.append({k: record.get(k) for k in RECORD_FIELDS})
        atomic_write_json(runs / RECORDS_FILE, {"scale": scale, "queries": queries, "modes": modes,
                                                "rounds": rounds, "records": records})

    for rnd in range(1, rounds + 1):
        start = time.time()
        say(f"round {rnd}/{rounds}: {baseline_s:g} s of the primaries alone (baseline)")
        time.sleep(baseline_s)
        end = time.time()
        _wait_for_window(files, end, window_s)
        p50, p99 = probe_stats(files, start, end, 0.0)
        keep({"round": rnd, "mode": "baseline", "query": None, "started_s": round(start, 3),
              "job_time_s": round(end - start, 3), "primary_p50_ms": p50, "primary_p99_ms": p99, "error": ""})
        for mode in modes:
            say(f"round {rnd}/{rounds}: mode {mode}")
            mode_fn(directory, mode)
            state = read_state(directory)
            for number in queries:
                sql = query_dir / f"query{number}.sql"
                start = time.time()
                try:
                    outcome = query_fn(state, sql, mode)
                except TestbedError as exc:
                    outcome = {"exit_code": None, "error": str(exc)}
                end = time.time()
                _wait_for_window(files, end, window_s)
                p50, p99 = probe_stats(files, start, end, window_s)
                keep({"round": rnd, "mode": mode, "query": number, "started_s": round(start, 3), **outcome,
                      "primary_p50_ms": p50, "primary_p99_ms": p99})
                say(f"  q{number} {mode}: exit {outcome.get('exit_code')}, {outcome.get('job_time_s')} s, "
                    f"queue {outcome.get('queue')}, primary p99 {p99} ms")
    return records

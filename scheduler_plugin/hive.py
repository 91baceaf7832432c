"""``harvest hive``: run a Hive query file through beeline on the class the router picks.

Steps:

1. Split the query file into statements; ``set``/``use``/``add`` statements are kept as the
   preamble, the last other statement is the query.
2. ``beeline -u URL --outputformat=tsv2 --showHeader=false --silent=true -f <preamble + EXPLAIN
   FORMATTED query>``; the first JSON object in its output is the plan.
3. Plan -> job JSON (``explain.job_document``) using the job's last run from the history store
   (duration, and the task count of each vertex when it was recorded) -> ``Router.route``.
4. ``beeline -u URL --hiveconf k=v ... -f <query file>`` with the routing settings; its stdout
   and stderr pass through, and stderr is also scanned for Tez's vertex summary table
   (``Map 1 .......... container SUCCEEDED 12 12 0 0 0 0``) to learn tasks and killed attempts.
5. Record the duration (wall clock of step 4), tasks and exit code for next time.

When class selection finds no class with room for the job now, ``--wait-s`` makes step 3 ask again
every ``--poll-s`` seconds until it does or the wait is over (then the default queue).

"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from placement_service import HarvestError
from scheduler_plugin.explain import EstimateConfig, job_document, parse_explain
from scheduler_plugin.history import HistoryStore, RunRecord
from scheduler_plugin.router import RouteDecision, Router

logger = logging.getLogger(__name__)

_PREAMBLE_RE = re.compile(r"^\s*(set|use|add|reset)\b", re.IGNORECASE)
_VERTEX_RE = re.compile(
    r"^\s*((?:Map|Reducer|Union)\s+\d+)\s+\.*\s*(\S+)\s+"
    r"(SUCCEEDED|FAILED|KILLED|RUNNING|INITED|INITIALIZING|NEW)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)"
)


class HiveRunError(HarvestError):
    """beeline could not be run or did not produce a usable plan."""


@dataclass(frozen=True)
class BeelineConfig:
    url: str
    beeline: str = "beeline"
    extra_args: tuple[str, ...] = ()  # e.g. ("-n", "hive")
    hiveconf: Mapping[str, str] = field(default_factory=dict)
    explain_timeout_s: float = 300.0


@dataclass(frozen=True)
class VertexSummary:
    tasks: Mapping[str, int]
    killed_attempts: int
    failed_attempts: int


@dataclass(frozen=True)
class HiveRunResult:
    decision: RouteDecision
    job: Mapping[str, Any]
    exit_code: int
    duration_s: float
    summary: VertexSummary


def split_statements(sql: str) -> tuple[list[str], str]:
    """(preamble statements, query statement) of a query file; raise HiveRunError when no query."""
    lines = [ln for ln in sql.splitlines() if not ln.strip().startswith("--")]
    statements = [s.strip() for s in "\n".join(lines).split(";") if s.strip()]
    preamble = [s for s in statements if _PREAMBLE_RE.match(s)]
    queries = [s for s in statements if not _PREAMBLE_RE.match(s)]
    if not queries:
        raise HiveRunError("the query file has no statement other than set/use/add")
    if len(queries) > 1:
        logger.info("query file has %d statements; routing on the last one", len(queries))
    return preamble, queries[-1]


def _first_plan(text: str) -> Any:
    decoder = json.JSONDecoder()
    pos = text.find("{")
    while pos != -1:
        try:
            doc, _ = decoder.raw_decode(text, pos)
        except ValueError:
            pos = text.find("{", pos + 1)
            continue
        if isinstance(doc, dict) and "STAGE PLANS" in doc:
            return doc
        pos = text.find("{", pos + 1)
    return None


def extract_plan(output: str, source: str) -> Any:
    """The first EXPLAIN JSON object in beeline's output (tsv2 prints the plan as one value).

    When quoting of separated values is on, beeline prints the value as ``"{""STAGE PLANS"": ...}"``;
    that form is un-quoted and read too.
    """
    doc = _first_plan(output)
    if doc is None and '""' in output:
        doc = _first_plan(output.replace('""', '"'))
    if doc is None:
        raise HiveRunError(f"{source}: no EXPLAIN FORMATTED JSON in beeline's output: {output[:300]!r}")
    return doc


def parse_vertex_summary(stderr_text: str) -> VertexSummary:
    """Last row of each vertex in Tez's summary table (TOTAL, ..., FAILED, KILLED columns)."""
    rows: dict[str, tuple[int, int, int]] = {}
    for line in stderr_text.splitlines():
        for part in line.split("\r"):
            m = _VERTEX_RE.match(part)
            if m:
                name = re.sub(r"\s+", " ", m.group(1))
                rows[name] = (int(m.group(4)), int(m.group(8)), int(m.group(9)))
    return VertexSummary(
        {v: r[0] for v, r in rows.items() if r[0] >= 1},
        sum(r[2] for r in rows.values()),
        sum(r[1] for r in rows.values()),
    )


def _beeline_cmd(cfg: BeelineConfig, settings: Mapping[str, str], sql_file: Path, quiet: bool) -> list[str]:
    cmd = [cfg.beeline, "-u", cfg.url, *cfg.extra_args]
    if quiet:
        cmd += ["--outputformat=tsv2", "--showHeader=false", "--silent=true"]
    for k, v in {**cfg.hiveconf, **settings}.items():
        cmd += ["--hiveconf", f"{k}={v}"]
    return [*cmd, "-f", str(sql_file)]


def explain(cfg: BeelineConfig, sql: str, source: str) -> Any:
    preamble, query = split_statements(sql)
    with tempfile.TemporaryDirectory(prefix="harvest-explain-") as tmp:
        path = Path(tmp) / "explain.sql"
        path.write_text("".join(f"{s};\n" for s in preamble) + f"EXPLAIN FORMATTED {query};\n", encoding="utf-8")
        try:
            proc = subprocess.run(
                _beeline_cmd(cfg, {}, path, quiet=True),
                capture_output=True,
                text=True,
                timeout=cfg.explain_timeout_s,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise HiveRunError(f"{source}: cannot run {cfg.beeline!r} for EXPLAIN: {exc}") from None
    if proc.returncode != 0:
        raise HiveRunError(f"{source}: EXPLAIN failed (exit {proc.returncode}): {proc.stderr.strip()[-500:]}")
    return extract_plan(proc.stdout, source)


def run_query(
    cfg: BeelineConfig,
    query_file: Path,
    router: Router,
    history: HistoryStore,
    name: str,
    estimate: EstimateConfig | None = None,
    dry_run: bool = False,
    clock: Any = time.monotonic,
    wall_clock: Any = time.time,
    wait_s: float = 0.0,
    poll_s: float = 30.0,
    sleep: Any = time.sleep,
) -> HiveRunResult:
    try:
        sql = query_file.read_text(encoding="utf-8")
    except OSError as exc:
        raise HiveRunError(f"{query_file}: cannot read: {exc}") from None
    plan = explain(cfg, sql, str(query_file))
    last = history.get(name)
    job = job_document(
        name,
        parse_explain(plan, f"{query_file} (EXPLAIN)"),
        estimate or EstimateConfig(),
        last.last_duration_s if last else None,
        last.vertex_tasks if last else None,
    )
    decision = route_waiting(router, job, wait_s, poll_s, clock, sleep)
    if dry_run:
        return HiveRunResult(decision, job, 0, 0.0, VertexSummary({}, 0, 0))
    cmd = _beeline_cmd(cfg, decision.settings, query_file, quiet=False)
    logger.info("running %s on queue %s: %s", name, decision.queue, " ".join(cmd))
    start = clock()
    try:
        proc = subprocess.Popen(cmd, stdout=None, stderr=subprocess.PIPE, text=True, errors="replace")
    except OSError as exc:
        raise HiveRunError(f"cannot run {cfg.beeline!r}: {exc}") from None
    captured: list[str] = []
    assert proc.stderr is not None
    for line in proc.stderr:
        sys.stderr.write(line)
        captured.append(line)
    code = proc.wait()
    duration_s = clock() - start
    summary = parse_vertex_summary("".join(captured))
    history.record(
        name,
        RunRecord(duration_s, summary.tasks, wall_clock(), decision.queue, code, summary.killed_attempts),
    )
    return HiveRunResult(decision, job, code, duration_s, summary)


def route_waiting(router: Router, job: Mapping[str, Any], wait_s: float, poll_s: float, clock: Any = time.monotonic,
                  sleep: Any = time.sleep) -> RouteDecision:
    """Route ``job``; while class selection finds nothing that fits now, ask again every ``poll_s``
    for up to ``wait_s`` seconds (the job waits for headroom), then run in what the last answer says."""
    deadline = clock() + max(0.0, wait_s)
    decision = router.route(job)
    while not decision.classes and decision.source != "default" and clock() + poll_s <= deadline:
        logger.info("job %s: no class fits now, asking again in %.0f s", decision.job_name, poll_s)
        sleep(poll_s)
        decision = router.route(job)
    return decision


def hiveconf_pairs(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in pairs:
        key, sep, value = p.partition("=")
        if not sep or not key:
            raise HiveRunError(f"--hiveconf expects key=value, got {p!r}")
        out[key] = value
    return out

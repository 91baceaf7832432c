"""``harvest testbed report``: the run's records as a Markdown page, figures and raw CSV.

Reads ``D/runs/records.json`` (``runner.py``) and writes into ``--out`` (default ``D/report``)::

    records.csv        every record, one row (columns: runner.RECORD_FIELDS)
    job_time.png       mean job time per query and mode (bars)
    kills.png          task attempts killed and failed per mode
    latency.png        the primaries' p50 / p99 per mode next to their own no-secondary baseline
    report.md          the summary table per mode and the figures

The ``docker/`` testbed writes the same page from its own results (``run-tpcds.sh``:
``python3 -m scheduler_plugin.testbed.report --hive-results /results --out /results/report``):
``records_from_hive_results`` turns its ``runs/r<round>-q<N>.json`` (``harvest hive --result-json``)
and ``primary-latency-<worker>.csv`` into records (mode ``harvest``; the windows before the first
query form the baseline).

Per mode: query runs, runs that succeeded (exit 0), mean job time, attempts killed and failed
(unknown counts as missing, not as 0), the primaries' median p50 and worst p99, and the p99 relative
to the baseline rows' worst p99.
"""

from __future__ import annotations

import argparse
import io
import json
import re
import statistics
import sys
from pathlib import Path
from typing import Any

from placement_service import csvsafe
from placement_service.atomic import atomic_write_text
from scheduler_plugin.testbed.runner import RECORD_FIELDS, probe_stats
from scheduler_plugin.testbed.testbed import TestbedError


def load_records(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise TestbedError(f"{path}: no records ('harvest testbed run' first)") from None
    except (OSError, ValueError) as exc:
        raise TestbedError(f"{path}: unreadable records ({exc})") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
        raise TestbedError(f"{path}: expected an object with a 'records' list")
    return doc


def _num(values: list[Any]) -> list[float]:
    return [float(v) for v in values if v is not None and v != ""]


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per mode (baseline first, then in order of appearance)."""
    modes = list(dict.fromkeys(r["mode"] for r in records))
    modes.sort(key=lambda m: m != "baseline")
    base_p99 = _num([r.get("primary_p99_ms") for r in records if r["mode"] == "baseline"])
    base = max(base_p99) if base_p99 else None
    rows = []
    for mode in modes:
        rs = [r for r in records if r["mode"] == mode]
        times = _num([r.get("job_time_s") for r in rs])
        killed = _num([r.get("killed_attempts") for r in rs])
        failed = _num([r.get("failed_attempts") for r in rs])
        p50 = _num([r.get("primary_p50_ms") for r in rs])
        p99 = _num([r.get("primary_p99_ms") for r in rs])
        worst = max(p99) if p99 else None
        rows.append({
            "mode": mode, "runs": len(rs),
            "succeeded": None if mode == "baseline" else sum(1 for r in rs if r.get("exit_code") == 0),
            "mean_job_time_s": None if mode == "baseline" or not times else round(statistics.fmean(times), 2),
            "killed_attempts": int(sum(killed)) if killed else None,
            "failed_attempts": int(sum(failed)) if failed else None,
            "primary_p50_ms": round(statistics.median(p50), 3) if p50 else None,
            "primary_p99_ms": worst,
            "p99_vs_baseline": round(worst / base, 3) if worst is not None and base else None,
        })
    return rows


def _one_line(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "/")


def _cell(value: Any) -> str:
    return "-" if value is None else str(value)


def _figures(records: list[dict[str, Any]], summary: list[dict[str, Any]], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = []
    modes = [r["mode"] for r in summary if r["mode"] != "baseline"]
    queries = sorted({int(r["query"]) for r in records if r.get("query") is not None})
    # 1. job time per query and mode
    fig, ax = plt.subplots(figsize=(7, 3.5))
    width = 0.8 / max(1, len(modes))
    for i, mode in enumerate(modes):
        means = []
        for q in queries:
            ts = _num([r.get("job_time_s") for r in records if r["mode"] == mode and r.get("query") == q])
            means.append(statistics.fmean(ts) if ts else 0.0)
        ax.bar([j + i * width for j in range(len(queries))], means, width, label=mode)
    ax.set_xticks([j + width * (len(modes) - 1) / 2 for j in range(len(queries))], [f"q{q}" for q in queries])
    ax.set_ylabel("job time (s, mean over rounds)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "job_time.png", dpi=100)
    plt.close(fig)
    names.append("job_time.png")
    # 2. kills and failures per mode
    rows = [r for r in summary if r["mode"] != "baseline"]
    names.append(_paired_bars(plt, out / "kills.png", rows, ("killed_attempts", "killed"),
                              ("failed_attempts", "failed"), "task attempts"))
    # 3. primary latency per mode vs the baseline
    names.append(_paired_bars(plt, out / "latency.png", summary, ("primary_p50_ms", "p50"),
                              ("primary_p99_ms", "p99"), "primary probe latency (ms)"))
    return names


def _paired_bars(plt: Any, path: Path, rows: list[dict[str, Any]], left: tuple[str, str],
                 right: tuple[str, str], ylabel: str) -> str:
    """Two bars per mode (``(key, legend)`` each, a missing value as 0) into ``path``; its name."""
    fig, ax = plt.subplots(figsize=(5, 3))
    xs = range(len(rows))
    ax.bar([x - 0.2 for x in xs], [r[left[0]] or 0 for r in rows], 0.4, label=left[1])
    ax.bar([x + 0.2 for x in xs], [r[right[0]] or 0 for r in rows], 0.4, label=right[1])
    ax.set_xticks(list(xs), [r["mode"] for r in rows])
    ax.set_ylabel(ylabel)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path.name


def write_report(records_path: Path, out: Path, *, figures: bool = True) -> Path:
    """Write the page, the figures and the CSV (see the module doc); returns the page's path."""
    doc = load_records(records_path)
    records = [dict(r) for r in doc["records"]]
    if not records:
        raise TestbedError(f"{records_path}: no records")
    for i, r in enumerate(records):
        if "mode" not in r:
            raise TestbedError(f"{records_path}: record {i} has no 'mode'")
    out.mkdir(parents=True, exist_ok=True)
    buf = io.StringIO(newline="")
    w = csvsafe.DictWriter(buf, fieldnames=list(RECORD_FIELDS), extrasaction="ignore")
    w.writeheader()
    w.writerows(records)
    atomic_write_text(out / "records.csv", buf.getvalue())
    summary = summarize(records)
    cols = ["mode", "runs", "succeeded", "mean_job_time_s", "killed_attempts", "failed_attempts",
            "primary_p50_ms", "primary_p99_ms", "p99_vs_baseline"]
    lines = ["# Testbed run", "",
             f"Queries {', '.join(map(str, doc.get('queries', [])))}, {doc.get('rounds', '?')} round(s), "
             f"modes {', '.join(doc.get('modes', []))}, TPC-DS scale {doc.get('scale', '?')}. Raw records: "
             "[records.csv](records.csv). `baseline`: the primaries alone (no query running); "
             "`p99_vs_baseline`: the mode's worst p99 over the baseline's worst p99; `-`: not measured.", "",
             "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_cell(row[c]) for c in cols) + " |" for row in summary]
    if figures:
        lines += [""] + [f"![{name[:-4]}]({name})" for name in _figures(records, summary, out)]
    failed = [r for r in records if r["mode"] != "baseline" and r.get("exit_code") != 0]
    if failed:
        lines += ["", "## Runs that did not succeed", ""]
        lines += [f"- round {r.get('round')} q{r.get('query')} {r['mode']}: {_one_line(r.get('error') or 'exit ' + str(r.get('exit_code')))}"
                  for r in failed]
    page = out / "report.md"
    atomic_write_text(page, "\n".join(lines) + "\n")
    return page


_RUN_NAME = re.compile(r"^r(\d+)-q(\d+)\.json$")


def records_from_hive_results(results: Path, *, mode: str = "harvest", window_s: float = 60.0) -> dict[str, Any]:
    """Records of the docker testbed's run: one per ``runs/r<round>-q<N>.json``, its time span
    (file time minus duration .. file time) against ``primary-latency-*.csv``; a baseline record from
    the latency windows before the first query."""
    files = sorted(results.glob("primary-latency-*.csv"))
    records: list[dict[str, Any]] = []
    for path in sorted((results / "runs").glob("r*-q*.json")):
        m = _RUN_NAME.match(path.name)
        if not m:
            continue
        try:
            run = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise TestbedError(f"{path}: unreadable run result ({exc})") from None
        end = path.stat().st_mtime
        duration = float(run.get("duration_s") or 0.0)
        decision = run.get("decision") or {}
        p50, p99 = probe_stats(files, end - duration, end, window_s)
        records.append({"round": int(m.group(1)), "mode": mode, "query": int(m.group(2)),
                        "started_s": round(end - duration, 3), "job_time_s": run.get("duration_s"),
                        "exit_code": run.get("exit_code"), "killed_attempts": run.get("killed_attempts"),
                        "failed_attempts": run.get("failed_attempts"), "queue": decision.get("queue"),
                        "classes": " ".join(decision.get("classes") or []), "job_type": decision.get("job_type"),
                        "source": decision.get("source"), "primary_p50_ms": p50, "primary_p99_ms": p99, "error": ""})
    records.sort(key=lambda r: (r["round"], r["started_s"]))
    if records:
        first = min(r["started_s"] for r in records)
        p50, p99 = probe_stats(files, 0.0, first - window_s, 0.0)
        if p50 is not None:
            records.insert(0, {"round": 1, "mode": "baseline", "query": None, "started_s": None, "job_time_s": None,
                               "primary_p50_ms": p50, "primary_p99_ms": p99, "error": ""})
    queries = sorted({r["query"] for r in records if r["query"] is not None})
    rounds = max((r["round"] for r in records), default=0)
    return {"queries": queries, "rounds": rounds, "modes": [mode], "scale": None, "records": records}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m scheduler_plugin.testbed.report",
                                 description="The testbed report from the docker testbed's results directory.")
    ap.add_argument("--hive-results", type=Path, required=True, help="directory with runs/ and primary-latency-*.csv")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--window-s", type=float, default=60.0, help="the primaries' latency window (default 60)")
    args = ap.parse_args(argv)
    try:
        doc = records_from_hive_results(args.hive_results, window_s=args.window_s)
        args.out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(args.out / "records.json", json.dumps(doc, indent=1) + "\n")
        page = write_report(args.out / "records.json", args.out)
    except TestbedError as exc:
        print(f"report: error: {exc}", file=sys.stderr)
        return 2
    ok = sum(1 for r in doc["records"] if r["mode"] != "baseline" and r.get("exit_code") == 0)
    total = sum(1 for r in doc["records"] if r["mode"] != "baseline")
    print(f"{ok}/{total} query runs succeeded; see {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

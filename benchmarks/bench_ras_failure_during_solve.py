"""Issue 37, finding 1, as reported: a failure signal right after ``harvest ras serve`` starts.

Region of ``ras generate --servers 4000 --reservations 80 --msbs 10 --hardware 4``; ``ras serve
--budget-s 20 --interval-s 300``; one ``POST /v1/failures`` as soon as the service answers (the first
solve is then running). Reported: the answer to the signal, then every published version with its
source, servers assigned to reservations, servers harvestable (lent) and unmet requests, and the
solve's event. Before the fix: version 1 from the mover with 0 assigned and 3,980 harvestable, the
solve discarded as stale.

    .venv/bin/python -m benchmarks.bench_ras_failure_during_solve        # ~1 min
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from benchmarks.bench_service_common import ROOT, TOKEN, load_average, now_utc
from tests.readiness import NotReady, ready_line


def _call(url: str, method: str = "GET", body: Any = None) -> Any:
    req = urllib.request.Request(url, method=method, data=None if body is None else json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {TOKEN}"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return json.loads(resp.read())


def main() -> None:
    print(f"# bench_ras_failure_during_solve, {now_utc()}, load {load_average()}")
    tmp = Path(tempfile.mkdtemp(prefix="bench-ras-fail-"))
    (tmp / "token").write_text(TOKEN)
    py = [sys.executable, "-m", "placement_service.cli"]
    subprocess.run([*py, "ras", "generate", "--servers", "4000", "--reservations", "80", "--msbs", "10", "--hardware",
                    "4", "--out-dir", str(tmp / "region")], check=True, capture_output=True, cwd=ROOT)  # fmt: skip
    log = open(tmp / "serve.log", "a")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([*py, "ras", "serve", "--inventory", str(tmp / "region" / "inventory.csv"),
                             "--reservations", str(tmp / "region" / "reservations.json"), "--data-dir",
                             str(tmp / "data"), "--http-port", "0", "--token-file", str(tmp / "token"),
                             "--budget-s", "20", "--interval-s", "300"],
                            stdout=subprocess.PIPE, stderr=log, text=True, cwd=ROOT)  # fmt: skip
    try:
        try:
            line = ready_line(proc, "harvest ras serve:", 120)
        except NotReady as exc:
            raise RuntimeError(f"did not start: {exc}: {(tmp / 'serve.log').read_text()[-1500:]}") from None
        url = line.split()[3]
        t0 = time.monotonic()
        answer = _call(f"{url}/v1/failures", "POST", {"servers": ["srv0000"], "reason": "bench", "source": "bench"})
        print(json.dumps({"failure_answer": answer, "after_start_s": round(time.monotonic() - t0, 2)}))
        while _call(f"{url}/healthz")["plan_version"] < 1 and time.monotonic() - t0 < 300:
            time.sleep(0.5)
        print(json.dumps({"first_plan_after_s": round(time.monotonic() - t0, 1)}))
        status = _call(f"{url}/v1/status")
        for v in range(1, int(status["version"]) + 1):
            doc = _call(f"{url}/v1/plan?version={v}")
            assigned = sum(1 for e in doc["assignment"].values() if e and not e.startswith("shared-buffer:"))
            print(json.dumps({"version": v, "assigned_to_reservations": assigned,
                              "harvestable": len(doc.get("harvestable", [])), "unmet": len(doc.get("unmet", [])),
                              "check_ok": doc.get("check", {}).get("ok"), "notes": doc.get("notes", [])[-1:]}))
        events = _call(f"{url}/v1/events")["events"]
        print(json.dumps({"events": [{k: e.get(k) for k in ("kind", "version", "folded", "reason")} for e in events]}))
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()
    print(f"# load after {load_average()}")


if __name__ == "__main__":
    main()

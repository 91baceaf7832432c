"""The HDFS shim compiles with ``javac --release 8`` against the Hadoop stubs and its Java unit tests
pass against a real local HTTP service: good, slow, wrong, garbage, erroring and down."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.plugins.conftest import REPO
from tests.plugins.fake_service import closed_port_url, fake_service

JAVA_DIR = REPO / "scheduler_plugin" / "java"
HOSTS = [f"dn{i}.example.com" for i in range(1, 7)]

pytestmark = pytest.mark.skipif(shutil.which("javac") is None or shutil.which("java") is None,
                                reason="needs a JDK (javac, java)")


def responder(path: str, body: dict[str, Any]) -> tuple[int, Any, float]:
    mode = path.strip("/").split("/", 1)[0]
    good = {"targets": ["dn5.example.com", "DN3.example.com", "dn1.example.com"], "relaxed": False, "reason": ""}
    if mode == "good":
        return 200, good, 0.0
    if mode == "good-excluding":
        free = [h for h in ["dn2.example.com", "dn4.example.com", "dn5.example.com", "dn6.example.com"]
                if h not in body.get("excluded", [])]
        return 200, {"targets": free[: body["replicas"]], "relaxed": False, "reason": ""}, 0.0
    if mode == "slow":
        return 200, good, 1.2
    if mode == "wrong":
        return 200, {"targets": ["nope.example.com", "dn2.example.com", "dn3.example.com"]}, 0.0
    if mode == "garbage":
        return 200, "<html>busy</html>", 0.0
    if mode == "short":  # the service's answer when fewer nodes than replicas are usable
        return 200, {"targets": ["dn6.example.com", "dn4.example.com"], "relaxed": False,
                     "reason": f"short: only 2 usable node(s) for {body['replicas']} replicas", "short": True}, 0.0
    if mode == "conflict":
        return 409, {"error": f"{body['replicas']} replicas asked, 4 usable nodes", "field": "replicas"}, 0.0
    if mode == "reject":
        return 404, {"error": "writer: unknown node 'dn9'", "field": "writer"}, 0.0
    if mode == "full":
        return 200, {"targets": ["dn4.example.com", "dn5.example.com", "dn6.example.com"]}, 0.0
    return 500, {"error": "boom"}, 0.0


def test_shim_java_unit_tests(tmp_path: Path, shim_classes: Path) -> None:
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    with fake_service(responder) as svc:
        proc = subprocess.run(
            ["java", "-cp", str(shim_classes), "org.harvest.hdfs.ShimTests", svc.url, str(token), closed_port_url()],
            capture_output=True, text=True, timeout=240, check=False,
        )
    lines = proc.stdout.splitlines()
    failures = [ln for ln in lines if ln.startswith("FAIL")]
    assert proc.returncode == 0 and not failures, proc.stdout + proc.stderr
    assert "ALL PASSED" in lines
    assert sum(ln.startswith("PASS") for ln in lines) >= 30
    # What the shim sent: the contract {"writer", "replicas", "excluded", "block_size"} with the token.
    shim_requests = [(p, b, h) for p, b, h in svc.requests if p.startswith("/good-excluding/")]
    assert shim_requests, svc.requests
    path, body, headers = shim_requests[0]
    assert path == "/good-excluding/v1/blocks/place"
    assert body == {"writer": "", "replicas": 3, "excluded": ["dn2.example.com"], "block_size": 128 * 2**20}
    assert headers["Authorization"] == "Bearer s3cret"
    # A re-replication names the block's holders as such (and as excluded), and the writer HDFS gave.
    repl = [b for p, b, _ in shim_requests if "chosen" in b]
    assert len(repl) == 1 and repl[0]["chosen"] == ["dn2.example.com", "dn4.example.com"], repl
    assert sorted(repl[0]["excluded"]) == repl[0]["chosen"] and repl[0]["writer"] == "dn2.example.com"
    assert repl[0]["replicas"] == 1
    # The block size is the one the NameNode asked for, not a constant.
    assert [b["block_size"] for p, b, _ in shim_requests if b["replicas"] == 2] == [64 * 2**20]
    # 30 re-replication retries of one under-replicated block: one call, then the cached 409.
    conflict = [b for p, b, _ in svc.requests if p.startswith("/conflict/")]
    assert conflict == [{"writer": "", "replicas": 9, "excluded": ["dn6.example.com"], "block_size": 128 * 2**20}]
    # Compiled for Java 8: class file major version 52.
    cls = shim_classes / "org" / "harvest" / "hdfs" / "HarvestBlockPlacementPolicy.class"
    assert cls.read_bytes()[6:8] == b"\x00\x34"


def test_real_build_needs_hadoop_jars(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(JAVA_DIR / "build.sh"), "--out", str(tmp_path)], capture_output=True,
                          text=True, timeout=60, check=False, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2
    assert "--classpath" in proc.stderr

"""TLS by configuration (HTTPS and gRPC over TLS with a self-signed certificate) and the config order."""

from __future__ import annotations

import json
import shutil
import ssl
import subprocess
import time
import urllib.request
from pathlib import Path

import grpc
import pytest

from placement_service.proto_gen import harvest_pb2, harvest_pb2_grpc
from placement_service.server.config import ConfigError, build_config
from tests.server.conftest import TOKEN, report, start_server


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")
def test_tls_serves_https_and_grpc(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True,
    )
    server = start_server(tmp_path / "data", "--tls-cert-file", str(cert), "--tls-key-file", str(key))
    try:
        assert server.http.startswith("https://")
        ctx = ssl.create_default_context(cafile=str(cert))
        req = urllib.request.Request(server.http + "/v1/reports", method="POST",
                                     data=json.dumps({"reports": [report("tls-1", "tls-t", time.time(), seq=1)]}).encode())
        req.add_header("Authorization", f"Bearer {TOKEN}")
        req.add_header("Content-Type", "application/json")
        with urllib.request.urlopen(req, context=ctx, timeout=10) as resp:
            assert resp.status == 202
        creds = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
        with grpc.secure_channel(server.grpc, creds) as ch:
            reply = harvest_pb2_grpc.PlacementStub(ch).NodeClass(harvest_pb2.NodeClassRequest(node="tls-1"), timeout=10)
            assert reply.node == "tls-1"
        with pytest.raises(OSError):  # plain HTTP is not served on the TLS port
            urllib.request.urlopen(server.http.replace("https://", "http://") + "/healthz", timeout=2)
    finally:
        server.stop()


def test_config_file_then_environment_then_flags(tmp_path: Path) -> None:
    cfg_file = tmp_path / "service.json"
    cfg_file.write_text(json.dumps({"http_port": 9001, "grpc_port": 9002, "slot_s": 120}))
    cfg = build_config(cfg_file, {"HARVEST_GRPC_PORT": "9102", "HARVEST_SLOT_S": "60"}, {"slot_s": 30})
    assert (cfg.http_port, cfg.grpc_port, cfg.slot_s) == (9001, 9102, 30)
    cfg_file.write_text(json.dumps({"http_prot": 1}))
    with pytest.raises(ConfigError, match="http_prot"):
        build_config(cfg_file, {}, {})
    with pytest.raises(ConfigError, match="HARVEST_SLOT_S"):
        build_config(None, {"HARVEST_SLOT_S": "soon"}, {})
    with pytest.raises(ConfigError, match="TLS"):
        build_config(None, {}, {"tls_cert_file": "c.pem"})

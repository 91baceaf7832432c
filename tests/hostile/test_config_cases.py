"""Issue 13, item 6, configuration half: service and agent settings, token file, agent state dir.

Each bad setting is refused when the configuration is built (exit 2, one line naming the setting and
where it came from), never accepted to misbehave later (a NaN interval spins a loop).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent import ConfigError as AgentConfigError
from agent.config import load_config
from agent.metrics import Metrics
from agent.report import Report, ReportBuffer, SeqCounter
from placement_service.cli import main
from placement_service.server.config import ConfigError, build_config

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("doc", "field"), [
    ('{"compact_interval_s": NaN}', "compact_interval_s"),
    ('{"max_future_s": NaN}', "max_future_s"),
    ('{"max_future_s": Infinity}', "max_future_s"),
    ('{"recluster_interval_s": -1}', "recluster_interval_s"),
    ('{"max_body_bytes": -1}', "max_body_bytes"),
    ('{"max_reports_per_request": 0}', "max_reports_per_request"),
    ('{"slot_s": -300}', "slot_s"),
    ('{"history_days": -1}', "history_days"),
    ('{"max_report_age_s": 0}', "max_report_age_s"),
    ('{"http_port": 70000}', "http_port"),
    ('{"rm_centralized": "maybe"}', "rm_centralized"),
    ('{"rm_exclusive": 2}', "rm_exclusive"),
    ('{"seed": 1.5}', "seed"),
    ('{"slot_s": ' + "9" * 400 + "}", "slot_s"),
    ('{"data_dir": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested"),
])
def test_service_config_file(tmp_path: Path, doc: str, field: str) -> None:
    path = tmp_path / "service.json"
    path.write_text(doc)
    with pytest.raises(ConfigError) as err:
        build_config(path, {}, {})
    assert field in str(err.value) and str(path) in str(err.value)


@pytest.mark.parametrize(("env", "field"), [
    ({"HARVEST_COMPACT_INTERVAL_S": "NaN"}, "compact_interval_s"),
    ({"HARVEST_MAX_FUTURE_S": "nan"}, "max_future_s"),
    ({"HARVEST_RM_CENTRALIZED": "maybe"}, "rm_centralized"),
    ({"HARVEST_MAX_BODY_BYTES": "-5"}, "max_body_bytes"),
    ({"HARVEST_RM_TIMEOUT_S": "inf"}, "rm_timeout_s"),
])
def test_service_config_environment(env: dict[str, str], field: str) -> None:
    with pytest.raises(ConfigError) as err:
        build_config(None, env, {})
    assert field in str(err.value) and next(iter(env)) in str(err.value)


def test_service_config_flags() -> None:
    with pytest.raises(ConfigError, match="--compact-interval-s: compact_interval_s: must be a finite number"):
        build_config(None, {}, {"compact_interval_s": float("nan")})


def _serve(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "placement_service.cli", "serve", "--data-dir",
                           str(tmp_path / "data"), "--http-port", "0", "--grpc-port", "0", *args],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)


def test_serve_refuses_a_non_utf8_token_file_in_one_line(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_bytes(b"\xff\xfe secret\n")
    done = _serve(tmp_path, "--token-file", str(token))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert str(token) in done.stderr and "ASCII" in done.stderr


def test_serve_refuses_nan_interval_flag_in_one_line(tmp_path: Path) -> None:
    done = _serve(tmp_path, "--compact-interval-s", "nan")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "compact_interval_s" in done.stderr and len(done.stderr.strip().splitlines()) == 1


# -- agent -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("flag", "value"), [
    ("--reserve-cores", "nan"), ("--capacity-cores", "inf"), ("--interval-s", "nan"), ("--interval-s", "-inf"),
    ("--report-interval-s", "NaN"), ("--cooldown-s", "1e999"), ("--capacity-memory-mb", "1" + "0" * 400),
    ("--node", "n1\n"),
])
def test_agent_flag_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, flag: str, value: str) -> None:
    rc = main(["agent", "--state-dir", str(tmp_path), "--capacity-cores", "8", "--capacity-memory-mb", "8192",
               "--service", "127.0.0.1:1", "--tenant", "t1", f"{flag}={value}"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    key = flag.removeprefix("--").replace("-", "_")
    assert f"'{key}'" in err and len(err.strip().splitlines()) == 1


def test_agent_toml_nan_is_refused(tmp_path: Path) -> None:
    with pytest.raises(AgentConfigError, match="'interval_s'.*finite"):
        load_config({"interval_s": float("nan")}, {}, {"state_dir": str(tmp_path)})


def test_agent_state_dir_that_is_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.write_text("not a directory")
    rc = main(["agent", "--state-dir", str(state), "--capacity-cores", "8", "--capacity-memory-mb", "8192"])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and "state_dir" in err and "not a directory" in err


@pytest.mark.parametrize("damage", [b"12x\n", b"", b"-4\n", b"\xff\xfe", b"9" * 30])
def test_damaged_seq_file_recovers_above_every_number_used(tmp_path: Path, damage: bytes,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    """A damaged seq file used to restart the counter at 0, so the service dropped the next reports
    as replays. The counter now continues above every number used (and says so)."""
    seq_path = tmp_path / "seq"
    counter = SeqCounter(str(seq_path))
    buffer = ReportBuffer(str(tmp_path / "report-buffer"), 100, Metrics())
    for _ in range(50):
        n = counter.next()
        buffer.append(Report("n1", "t1", 1e9 + n, 1.0, 1.0, 8.0, 8.0, False, 1.0, n))
    buffer.ack(45)  # the service has stored 1..45; 46..50 wait in the buffer
    seq_path.write_bytes(damage)
    recovered = SeqCounter(str(seq_path))
    nxt = recovered.next()
    assert nxt > 50
    assert "damaged" in caplog.text and str(seq_path) in caplog.text
    assert int(seq_path.read_text()) == nxt  # the recovered value is durable
    assert SeqCounter(str(seq_path)).next() == nxt + 1


def test_seq_path_that_is_a_directory_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "seq").mkdir()
    from agent import AgentError

    with pytest.raises(AgentError, match="sequence file .*seq"):
        SeqCounter(str(tmp_path / "seq"))


def test_service_config_accepts_its_own_defaults(tmp_path: Path) -> None:
    path = tmp_path / "service.json"
    path.write_text(json.dumps({"rm_centralized": "yes", "compact_interval_s": 2, "http_port": 0}))
    cfg = build_config(path, {"HARVEST_RM_EXCLUSIVE": "false"}, {})
    assert cfg.rm_centralized is True and cfg.rm_exclusive is False and cfg.compact_interval_s == 2.0
    assert os.fspath(cfg.data_dir) == "harvest-data"


def test_agent_explain_with_a_bad_port(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HARVEST_AGENT_METRICS_PORT", "abc")
    rc = main(["agent", "explain"])
    err = capsys.readouterr().err
    assert rc == 2 and "metrics_port" in err and "Traceback" not in err

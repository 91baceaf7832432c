"""Config: file < environment < flags, derived defaults, and malformed input naming the key."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from agent import ConfigError
from agent.config import SETTINGS, Mode, load_config, read_toml
from placement_service.cli import build_parser

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_precedence_file_then_environment_then_flags(tmp_path):
    file_values = {"state_dir": str(tmp_path), "interval_s": 5, "reserve_cores": 1.5, "tenant": "web",
                   "capacity_cores": 8, "capacity_memory_mb": 4096}
    env = {"HARVEST_AGENT_INTERVAL_S": "2", "HARVEST_AGENT_RESERVE_CORES": "2.5"}
    flags = {"reserve_cores": "3"}
    cfg = load_config(file_values, env, flags)
    assert cfg.interval_s == 2.0  # env beats file
    assert cfg.reserve_cores == 3.0  # flag beats env
    assert cfg.tenant == "web"  # file only
    assert cfg.reserve_memory_mb == 4096 // 3  # default: a third of capacity
    assert cfg.stale_after_s == 6.0  # default: three intervals
    assert cfg.busy_cpu_cores == 8 - 3.0  # default: capacity - reserve


def test_every_setting_is_a_flag_and_an_env_variable(tmp_path):
    parser = build_parser()
    args = parser.parse_args(["agent", "--state-dir", str(tmp_path), "--mode", "yarn", "--interval-s", "1",
                              "--reserve-cores", "1", "--reserve-memory-mb", "512", "--capacity-cores", "2",
                              "--capacity-memory-mb", "2048", "--service", "127.0.0.1:1", "--metrics-port", "0"])
    assert args.func.__module__ == "agent.cli"
    assert args.mode == "yarn" and args.capacity_cores == "2"
    option_strings = {opt for action in parser._subparsers._group_actions[0].choices["agent"]._actions
                      for opt in action.option_strings}
    for setting in SETTINGS:
        assert "--" + setting.key.replace("_", "-") in option_strings
        cfg = load_config({"state_dir": str(tmp_path), "capacity_cores": 4, "capacity_memory_mb": 100, "tenant": "t"},
                          {f"HARVEST_AGENT_{setting.key.upper()}": _sample_text(setting)}, {})
        assert cfg is not None


def _sample_text(setting) -> str:
    if setting.kind is Mode:
        return "yarn"
    if setting.key in ("reserve_cores",):
        return "1"
    if setting.key == "reserve_memory_mb":
        return "10"
    if setting.key == "state_dir":
        return "/tmp"
    if setting.key == "reclaim":
        return "rm"
    if setting.kind in (int, float):
        return "1"
    if setting.kind is bool:
        return "off"
    return "x"


@pytest.mark.parametrize("values,key", [
    ({"interval_s": "fast"}, "interval_s"),
    ({"mode": "kubernetes"}, "mode"),
    ({"reserve_memory_mb": 1.5}, "reserve_memory_mb"),
    ({"max_kills_per_round": 0}, "max_kills_per_round"),
    ({"secondary_cgroups": [1, 2]}, "secondary_cgroups"),
    ({"reserve_cores": 99}, "reserve_cores"),
    ({"no_such_setting": 1}, "no_such_setting"),
])
def test_malformed_values_name_the_key(tmp_path, values, key):
    with pytest.raises(ConfigError) as err:
        load_config({"state_dir": str(tmp_path), "capacity_cores": 4, "capacity_memory_mb": 1024, **values}, {}, {})
    assert repr(key) in str(err.value)


def test_malformed_environment_names_the_variable(tmp_path):
    with pytest.raises(ConfigError, match="HARVEST_AGENT_KILL_GRACE_S"):
        load_config({"state_dir": str(tmp_path)}, {"HARVEST_AGENT_KILL_GRACE_S": "soon"}, {})


def test_toml_syntax_error_and_unknown_key(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_text("interval_s = = 1\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        read_toml(str(bad))
    unknown = tmp_path / "unknown.toml"
    unknown.write_text('intervall_s = 1\n')
    with pytest.raises(ConfigError, match="'intervall_s'"):
        read_toml(str(unknown))


def test_tenant_is_required_to_report(tmp_path):
    with pytest.raises(ConfigError, match="'tenant'"):
        load_config({"state_dir": str(tmp_path), "service": "127.0.0.1:5000"}, {}, {})


def test_the_forecast_from_the_service_needs_its_address_and_tenant_and_defaults_its_file(tmp_path):
    base = {"state_dir": str(tmp_path), "capacity_cores": 4, "capacity_memory_mb": 1024}
    with pytest.raises(ConfigError, match="'forecast_from_service' needs 'service_http' and 'tenant'"):
        load_config({**base, "forecast_from_service": True, "tenant": "web"}, {}, {})
    cfg = load_config({**base, "tenant": "web", "service_http": "http://127.0.0.1:1"},
                      {"HARVEST_AGENT_FORECAST_FROM_SERVICE": "on"}, {})
    assert cfg.forecast_from_service and cfg.forecast_file == str(tmp_path / "forecast.json")
    with pytest.raises(ConfigError, match="forecast_refresh_s"):
        load_config({**base, "forecast_refresh_s": 0}, {}, {})


def test_state_dir_is_required():
    with pytest.raises(ConfigError, match="state_dir"):
        load_config({}, {}, {})


def test_shipped_example_config_loads(tmp_path):
    values = read_toml(os.path.join(ROOT, "agent", "deploy", "agent.toml"))
    cfg = load_config(values, {}, {"state_dir": str(tmp_path), "capacity_cores": "32",
                                   "capacity_memory_mb": "131072"})
    assert cfg.mode is Mode.YARN


def test_cli_reports_malformed_config_cleanly(tmp_path):
    cfg = tmp_path / "agent.toml"
    cfg.write_text(f'state_dir = "{tmp_path}"\nreserve_cores = "lots"\n')
    done = subprocess.run([sys.executable, "-m", "placement_service.cli", "agent", "--config", str(cfg)],
                          capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 2
    assert "'reserve_cores'" in done.stderr and "Traceback" not in done.stderr


def test_running_agent_resolves_file_then_environment_then_flags(tmp_path):
    from tests.agent.agent_proc import AgentProcess

    cfg = tmp_path / "agent.toml"
    cfg.write_text(f'state_dir = "{tmp_path / "state"}"\ninterval_s = 0.5\ntenant = "from-file"\n'
                   'capacity_cores = 6\ncapacity_memory_mb = 6000\nreserve_cores = 1\nkill_grace_s = 7\n')
    env = dict(os.environ, HARVEST_AGENT_RESERVE_CORES="2", HARVEST_AGENT_KILL_GRACE_S="5")
    # Scoped to an idle process of its own: an agent measuring the whole (shared, busy) machine would
    # kill every CONTAINER_ID process on it, other tests' and other users' fake containers included.
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    agent = AgentProcess(["--config", str(cfg), "--reserve-cores", "3", "--scope-root-pid", str(idle.pid)],
                         str(tmp_path / "agent.log"), env=env)
    try:
        settings = agent.explain()["settings"]
    finally:
        agent.stop()
        idle.kill()
        idle.wait(timeout=10)
    assert settings["tenant"] == "from-file" and settings["interval_s"] == 0.5  # file
    assert settings["kill_grace_s"] == 5.0  # environment over file
    assert settings["reserve_cores"] == 3.0  # flag over environment
    assert settings["reserve_memory_mb"] == 2000  # derived: a third of the capacity

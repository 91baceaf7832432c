"""Issue 13, item 6, command-line half: hostile files and paths given to the commands.

Each must exit 2 with one line on stderr naming the file and the field (no traceback), and write
nothing. The class file is read by one validation (``ClassTable.from_json``) for every command, so a
file ``select`` refuses is refused by ``place``, ``capacity-scheduler`` and ``hosts-file`` too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from placement_service.cli import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "policy"
CLASSES = FIXTURES / "classes.json"
INVENTORY = FIXTURES / "inventory.csv"
HUGE = "1" + "0" * 400


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    rc = main(list(argv))
    err = capsys.readouterr().err
    return rc, err


def assert_one_line_error(rc: int, err: str, *needles: str) -> None:
    assert rc == 2, err
    assert "Traceback" not in err
    last = err.strip().splitlines()[-1]
    assert "error" in last
    for needle in needles:
        assert needle in last, (needle, last)


def classes_with(tmp_path: Path, **over: object) -> Path:
    doc = json.loads(CLASSES.read_text())
    doc["classes"][0].update(over)
    path = tmp_path / "classes.json"
    path.write_text(json.dumps(doc))  # NaN is written as the JSON extension Python reads back
    return path


def class_commands(classes: Path, tmp_path: Path) -> list[list[str]]:
    return [
        ["select", "--classes", str(classes), "--tpcds", "3"],
        ["place", "--classes", str(classes), "--inventory", str(INVENTORY), "--blocks", "5",
         "--out", str(tmp_path / "blocks.jsonl")],
        ["capacity-scheduler", "--classes", str(classes)],
        ["hosts-file", "--classes", str(classes), "--inventory", str(INVENTORY)],
    ]


@pytest.mark.parametrize(("over", "field"), [
    ({"peak_cpu": float("nan")}, "classes[0].peak_cpu"),
    ({"avg_cpu": float("inf")}, "classes[0].avg_cpu"),
    ({"id": "../../x"}, "classes[0].id"),
    ({"id": "a\nb"}, "classes[0].id"),
    ({"servers": -3}, "classes[0].servers"),
    ({"tenants": ["t00\n"]}, "classes[0].tenants[0]"),
])
def test_every_command_refuses_the_same_bad_class_file(capsys: pytest.CaptureFixture[str], tmp_path: Path,
                                                        over: dict[str, object], field: str) -> None:
    classes = classes_with(tmp_path, **over)
    for argv in class_commands(classes, tmp_path):
        rc, err = run(capsys, *argv)
        assert_one_line_error(rc, err, str(classes), field)
    assert not (tmp_path / "blocks.jsonl").exists()


def test_job_file_with_huge_integers_or_deep_nesting(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    cases = {
        '{"name": "j", "last_duration_s": ' + HUGE + ', "vertices": {"a": {"tasks": 1}}}': "last_duration_s",
        '{"name": "j", "last_duration_s": 5, "vertices": {"a": {"tasks": ' + HUGE + "}}}": "tasks",
        '{"name": "j", "last_duration_s": 1e999, "vertices": {"a": {"tasks": 1}}}': "last_duration_s",
        '{"name": ' + "[" * 100_000 + "]" * 100_000 + "}": "nested",
        "[" * 100_000: "nested",
    }
    for text, needle in cases.items():
        job.write_text(text)
        rc, err = run(capsys, "select", "--classes", str(CLASSES), "--job", str(job))
        assert_one_line_error(rc, err, str(job), needle)


def test_output_paths_naming_a_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_dir = tmp_path / "a-directory"
    out_dir.mkdir()
    for argv in (
        ["place", "--classes", str(CLASSES), "--inventory", str(INVENTORY), "--blocks", "5", "--out", str(out_dir)],
        ["cluster", "--utilization", str(INVENTORY), "--out", str(out_dir)],
        ["capacity-scheduler", "--classes", str(CLASSES), "--out", str(out_dir)],
        ["ras", "solve", "--inventory", str(INVENTORY), "--reservations", str(CLASSES), "--out", str(out_dir)],
        ["sim", "report", str(tmp_path), "--out", str(out_dir)],
    ):
        rc, err = run(capsys, *argv)
        assert_one_line_error(rc, err, "--out", "is a directory")
    assert list(out_dir.iterdir()) == []


@pytest.fixture(scope="module")
def region(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    out = tmp_path_factory.mktemp("region")
    assert main(["ras", "generate", "--servers", "40", "--reservations", "3", "--out-dir", str(out)]) == 0
    return out / "inventory.csv", out / "reservations.json"


@pytest.mark.parametrize("sub", ["explain", "check", "export", "move", "grant"])
def test_plan_naming_a_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path, region: tuple[Path, Path],
                                 sub: str) -> None:
    inventory, reservations = (str(p) for p in region)
    common = ["--inventory", inventory, "--reservations", reservations]
    extra = {"explain": ["--id", "r1"], "check": common,
             "export": ["--inventory", inventory, "--out", str(tmp_path / "e.csv")],
             "move": [*common, "--failed", "x", "--out", str(tmp_path / "m.json")],
             "grant": [*common, "--request", '{"id": "u", "capacity_rru": 1, "rru": {"h": 1}}',
                       "--out", str(tmp_path / "g.json")]}[sub]
    plan_dir = tmp_path / "plan"
    plan_dir.mkdir()
    rc, err = run(capsys, "ras", sub, "--plan", str(plan_dir), *extra)
    assert_one_line_error(rc, err, str(plan_dir))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan"]


def test_found_by_the_suite(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Failures the hypothesis suite found: a RAS plan that is JSON null, a CSV field over the csv limit."""
    plan = tmp_path / "plan.json"
    plan.write_text("null")
    rc, err = run(capsys, "ras", "explain", "--plan", str(plan), "--id", "r1")
    assert_one_line_error(rc, err, str(plan), "JSON object")
    inventory = tmp_path / "inventory.csv"
    inventory.write_text("server,tenant\n" + "x" * 200_000 + ",t\n")
    for argv in (["hosts-file", "--classes", str(CLASSES), "--inventory", str(inventory)],
                 ["topology-map", "--inventory", str(inventory)]):
        rc, err = run(capsys, *argv)
        assert_one_line_error(rc, err, str(inventory))


@pytest.mark.parametrize("argv", [
    ["select", "--classes", str(CLASSES), "--tpcds", "3", "--last-duration-s", "nan"],
    ["select", "--classes", str(CLASSES), "--tpcds", "3", "--reserve-frac", "inf"],
    ["cluster", "--utilization", str(INVENTORY), "--out", "x.json", "--interval-s", "nan"],
    ["generate", "--servers", "3", "--out", "x", "--days", "1e999"],
    ["capacity-scheduler", "--classes", str(CLASSES), "--default-capacity", "nan"],
])
def test_number_flags_must_be_finite(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    """Every float flag of every command has the one finite-number type (NaN compares false with every
    bound, so a per-command range check would let it through)."""
    rc, err = run(capsys, *argv)
    assert_one_line_error(rc, err, "argument --", "finite")


def test_error_lines_stay_short(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Found by the suite: errors echoed a whole 200 KB header or cell, and a non-UTF-8 agent config crashed."""
    inventory = tmp_path / "inventory.csv"
    inventory.write_text("x" * 100_000 + ",other\n1,2\n")
    rc, err = run(capsys, "topology-map", "--inventory", str(inventory))
    assert_one_line_error(rc, err, str(inventory), "missing column")
    assert len(err) < 1000
    cpu = tmp_path / "cpu.csv"
    cpu.write_text("timestamp,server,cpu\n" + "x" * 200_000 + ",s1,0.5\n")
    rc, err = run(capsys, "import", "--utilization", str(cpu), "--default-cores", "8", "--default-memory-mb", "1024",
                  "--default-storage-gb", "10", "--out", str(tmp_path / "o"))
    assert_one_line_error(rc, err, str(cpu), "row 1")
    assert len(err) < 1000
    toml = tmp_path / "agent.toml"
    toml.write_bytes(b"\x80 = 1\n")
    rc, err = run(capsys, "agent", "--config", str(toml), "--state-dir", str(tmp_path))
    assert_one_line_error(rc, err, str(toml), "UTF-8")

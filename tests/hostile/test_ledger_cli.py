"""Issue 37: the hostile suite against the Flux ledger CLI (``harvest flux ledger ...`` over a SQLite file).

Every case runs the real command as a subprocess. Refused input exits 2 with one line on stderr naming
the file / row / field, no traceback, and leaves the ledger as it was (``ledger list`` before and after,
and the file's bytes). Two writers at once lose and double nothing; ``kill -9`` in the middle of a
batch leaves the batch wholly in or wholly out; a damaged ledger is one error line and is not written.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from placement_service.validate import MAX_JSON_FILE_BYTES

ROOT = Path(__file__).resolve().parents[2]
HARVEST = [sys.executable, "-c", "import sys; from placement_service.cli import main; sys.exit(main())"]
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
SEED_TS = 1_767_225_600


def harvest(*argv: str, prefix: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*prefix, *HARVEST, "flux", "ledger", *argv], env=ENV, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def start(*argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen([*HARVEST, "flux", "ledger", *argv], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip


def ev(eid: str, ants: tuple[str, ...] = (), **extra: object) -> dict[str, object]:
    return {"id": eid, "kind": "resize", "timestamp": SEED_TS, "payload": {"service": "s", "amount": 1},
            "antecedents": list(ants), **extra}  # fmt: skip


def listing(led: Path) -> list[str]:
    r = harvest("list", "--ledger", str(led))
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    return r.stdout.splitlines()


def digest(led: Path) -> str:
    return hashlib.sha256(led.read_bytes()).hexdigest()


def assert_one_line(r: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1, r.stderr
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A ledger holding two events, and its listing."""
    d = tmp_path_factory.mktemp("seed")
    f = d / "e.json"
    f.write_text(json.dumps([ev("base-1"), ev("base-2", ("base-1",))]))
    led = d / "l.sqlite"
    r = harvest("add", "--ledger", str(led), "--events", str(f))
    assert r.returncode == 0, r.stderr
    return led, listing(led)


def _huge_file(path: Path) -> None:
    with path.open("wb") as fh:
        fh.write(b'[{"id": "x", "kind": "resize", "timestamp": 1767225600, "note": "')
        fh.write(b"a" * (50 * 1024 * 1024))
        fh.write(b'"}]')


def _write(raw: str | bytes) -> object:
    def make(path: Path) -> None:
        path.write_bytes(raw.encode() if isinstance(raw, str) else raw)

    return make


def _events(doc: object) -> object:
    return _write(json.dumps(doc))


# (name, how to write the event file, what the one error line must contain)
HOSTILE = [
    ("not-json", _write("[{'id': 1}"), "not valid JSON: line 1 column 3"),
    ("nan-timestamp", _write('[{"id": "a", "kind": "resize", "timestamp": NaN}]'), "row 0 ('a'): field 'timestamp'"),
    ("infinity-payload", _write('[{"id": "a", "kind": "resize", "timestamp": 1, "payload": {"x": Infinity}}]'),
     "row 0 ('a'): field 'payload'"),
    ("deep-nesting", _write('[{"id": "a", "kind": "resize", "timestamp": 1, "payload": '
                            + '{"x": ' * 100_000 + "1" + "}" * 100_001 + "]"), "nested more than 64 levels"),
    ("huge-int-timestamp", _write('[{"id": "a", "kind": "resize", "timestamp": 1' + "0" * 400 + "}]"),
     "row 0 ('a'): field 'timestamp'"),
    ("int-beyond-parser", _write('[{"id": "a", "kind": "resize", "timestamp": 1' + "0" * 5000 + "}]"),
     "not valid JSON"),
    ("id-number", _events([ev("ok"), {**ev("x"), "id": 7}]), "row 1: field 'id'"),
    ("kind-list", _events([{**ev("a"), "kind": ["resize"]}]), "row 0 ('a'): field 'kind'"),
    ("payload-list", _events([{**ev("a"), "payload": [1]}]), "row 0 ('a'): field 'payload'"),
    ("antecedents-text", _events([{**ev("a"), "antecedents": "base-1"}]), "row 0 ('a'): field 'antecedents'"),
    ("review-text", _events([{**ev("a"), "review": "yes"}]), "row 0 ('a'): field 'review'"),
    ("note-number", _events([{**ev("a"), "note": 3}]), "row 0 ('a'): field 'note'"),
    ("millisecond-timestamp", _events([ev("a", timestamp=SEED_TS * 1000)]), "row 0 ('a'): field 'timestamp'"),
    ("non-utf8", _write(b'[{"id": "\xff\xfe", "kind": "resize", "timestamp": 1}]'), "not UTF-8"),
    ("empty-file", _write(b""), "not valid JSON"),
    ("fifty-megabytes", _huge_file, f"larger than {MAX_JSON_FILE_BYTES} bytes"),
    ("id-newline", _events([ev("ok"), ev("a\nb")]), "row 1: field 'id'"),
    ("id-escape", _events([ev("a\x1b[31m")]), "row 0: field 'id'"),
    ("id-formula", _events([ev('=HYPERLINK("http://x","y")')]), "row 0: field 'id'"),
    ("note-control", _events([ev("a", note="line\rbreak")]), "row 0 ('a'): field 'note'"),
    ("antecedent-control", _events([ev("a", ("base-1\n",))]), "row 0 ('a'): field 'antecedents[0]'"),
    ("id-already-in-ledger", _events([ev("base-1")]), "already in the ledger"),
]


@pytest.mark.parametrize(("make", "needle"), [pytest.param(m, n, id=name) for name, m, n in HOSTILE])
def test_hostile_event_file_exits_2_and_leaves_the_ledger_unchanged(tmp_path, seeded, make, needle):
    led = tmp_path / "l.sqlite"
    shutil.copy(seeded[0], led)
    before = digest(led)
    events = tmp_path / "e.json"
    make(events)
    r = harvest("add", "--ledger", str(led), "--events", str(events))
    assert_one_line(r, str(events), needle)
    assert digest(led) == before
    assert listing(led) == seeded[1]


@pytest.mark.parametrize("writer", ["a\nb", "=cmd()"])
def test_hostile_writer_name_exits_2_and_writes_nothing(tmp_path, seeded, writer):
    led = tmp_path / "l.sqlite"
    shutil.copy(seeded[0], led)
    events = tmp_path / "e.json"
    events.write_text(json.dumps([ev("new")]))
    r = harvest("add", "--ledger", str(led), "--events", str(events), "--writer", writer)
    assert_one_line(r, "--writer")
    assert listing(led) == seeded[1]


# -- two writers at once -----------------------------------------------------------------------------
def _batch(path: Path, prefix: str, n: int) -> None:
    events = [ev(f"{prefix}-0")] + [ev(f"{prefix}-{i}", (f"{prefix}-{i - 1}",)) for i in range(1, n)]
    path.write_text(json.dumps(events))


def test_two_adds_on_a_new_file_lose_and_double_nothing(tmp_path):
    """Both processes create the same new ledger and write a batch at once: each batch is in exactly
    once (a writer waits for the other's lock; no 'database is locked' traceback)."""
    led = tmp_path / "l.sqlite"
    files = []
    for w in range(4):
        f = tmp_path / f"e{w}.json"
        _batch(f, f"w{w}", 300)
        files.append(f)
    procs = [start("add", "--ledger", str(led), "--events", str(f), "--writer", f"w{w}")
             for w, f in enumerate(files)]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0 and "Traceback" not in err, err
    ids = [json.loads(line)["id"] for line in listing(led)]
    assert len(ids) == len(set(ids)) == 4 * 300
    for w in range(4):
        assert sum(1 for i in ids if i.startswith(f"w{w}-")) == 300


def test_run_and_approve_beside_an_add_lose_nothing(tmp_path, seeded):
    led = tmp_path / "l.sqlite"
    shutil.copy(seeded[0], led)
    held = tmp_path / "held.json"
    held.write_text(json.dumps([ev("held", review=True)]))
    assert harvest("add", "--ledger", str(led), "--events", str(held)).returncode == 0
    big = tmp_path / "big.json"
    big.write_text(json.dumps([ev(f"b-{i}") for i in range(2000)]))  # no chain: run takes one round
    procs = [start("add", "--ledger", str(led), "--events", str(big)),
             start("run", "--ledger", str(led)),
             start("approve", "--ledger", str(led), "held")]  # fmt: skip
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (_out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0 and "Traceback" not in err, err
    events = {e["id"]: e for e in map(json.loads, listing(led))}
    assert len(events) == 3 + 2000
    assert events["held"]["approved_by"] == "operator"
    assert events["base-2"]["state"] == "succeeded"  # run completed the seeded chain


# -- kill -9 in the middle of a batch ------------------------------------------------------------------
def _kill_when_wal_reaches(p: subprocess.Popen[str], wal: Path, wal_bytes: int) -> None:
    """``kill -9`` the writer once its write-ahead log holds ``wal_bytes`` (0: as soon as it runs,
    while it still parses the file); a writer that finishes first is not killed."""
    while p.poll() is None:
        try:
            size = wal.stat().st_size
        except FileNotFoundError:
            size = 0
        if size >= wal_bytes:
            p.send_signal(signal.SIGKILL)
            break
        time.sleep(0.001)
    p.communicate(timeout=60)


@pytest.mark.parametrize("wal_bytes", [0, 4096, 1 << 20, 3 << 20])
def test_kill_9_during_add_leaves_the_batch_wholly_in_or_out(tmp_path, seeded, wal_bytes):
    """The SQLite pages of the batch go to the WAL as the transaction commits; killing at several
    sizes of the WAL cuts the commit at several offsets."""
    led = tmp_path / "l.sqlite"
    shutil.copy(seeded[0], led)
    big = tmp_path / "big.json"
    _batch(big, "k", 20_000)
    _kill_when_wal_reaches(start("add", "--ledger", str(led), "--events", str(big)), Path(f"{led}-wal"), wal_bytes)
    ids = [json.loads(line)["id"] for line in listing(led)]
    batch = [i for i in ids if i.startswith("k-")]
    assert len(batch) in (0, 20_000)
    assert ids.count("base-1") == ids.count("base-2") == 1
    if not batch:  # the file still takes the whole batch
        r = harvest("add", "--ledger", str(led), "--events", str(big))
        assert r.returncode == 0 and "added 20000 events" in r.stdout, r.stderr


# -- a damaged ledger ----------------------------------------------------------------------------------
def _truncate(led: Path) -> None:
    size = led.stat().st_size
    with led.open("r+b") as fh:
        fh.truncate(size - size // 3)


def _flip_page_type(led: Path) -> None:
    """Flip the b-tree page-type byte of page 2 (the first table page after the schema)."""
    raw = bytearray(led.read_bytes())
    page = int.from_bytes(raw[16:18], "big")
    raw[page] ^= 0xFF
    led.write_bytes(bytes(raw))


def _flip_header(led: Path) -> None:
    raw = bytearray(led.read_bytes())
    raw[0] ^= 0x20  # "SQLite format 3" -> "sQLite ..."
    led.write_bytes(bytes(raw))


def _zero_length(led: Path) -> None:
    led.write_bytes(b"")


def _not_a_ledger(led: Path) -> None:
    import sqlite3

    led.unlink()
    with sqlite3.connect(led) as db:
        db.execute("CREATE TABLE customers (name TEXT)")
    db.close()


DAMAGE = [
    ("truncated", _truncate, "damaged or not a ledger"),
    ("flipped-page-byte", _flip_page_type, "damaged or not a ledger"),
    ("flipped-header-byte", _flip_header, "damaged or not a ledger"),
    ("zero-length", _zero_length, "empty"),
    ("another-database", _not_a_ledger, "not a ledger"),
]
COMMANDS = {"list": ["list"], "add": ["add", "--events", "{events}"], "run": ["run"],
            "approve": ["approve", "base-1"]}  # fmt: skip
# every damage through the reader and the writer; the other commands on some of them
DAMAGE_CASES = [(*d, c) for d in DAMAGE for c in ("list", "add")] + [
    (*DAMAGE[1], "run"), (*DAMAGE[4], "approve")]


@pytest.mark.parametrize(("damage", "needle", "command"),
                         [pytest.param(d, n, COMMANDS[c], id=f"{name}-{c}") for name, d, n, c in DAMAGE_CASES])
def test_damaged_ledger_is_one_line_exit_2_and_not_written(tmp_path, seeded, damage, needle, command):
    led = tmp_path / "l.sqlite"
    shutil.copy(seeded[0], led)
    damage(led)
    before = digest(led)
    events = tmp_path / "e.json"
    events.write_text(json.dumps([ev("new")]))
    argv = [a.format(events=events) for a in command]
    r = harvest(argv[0], "--ledger", str(led), *argv[1:])
    assert_one_line(r, str(led), needle)
    assert digest(led) == before
    assert not Path(f"{led}-wal").exists() or Path(f"{led}-wal").stat().st_size == 0


def test_ledger_that_is_a_directory_is_one_line(tmp_path):
    led = tmp_path / "dir.sqlite"
    led.mkdir()
    r = harvest("list", "--ledger", str(led))
    assert_one_line(r, str(led), "is a directory")
    assert list(led.iterdir()) == []


def test_ledger_without_permission_is_one_line(tmp_path, seeded):
    """A ledger the user may not read (as root: without the capabilities that bypass file modes)."""
    led = tmp_path / "l.sqlite"
    shutil.copy(seeded[0], led)
    led.chmod(0o000)
    before = digest(led)
    caps = "-dac_override,-dac_read_search"
    no_bypass = ("setpriv", f"--bounding-set={caps}", f"--inh-caps={caps}", "--") if os.geteuid() == 0 else ()
    if no_bypass and shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: file modes cannot be enforced")
    r = harvest("list", "--ledger", str(led), prefix=no_bypass)
    assert_one_line(r, str(led), "cannot open the ledger: Permission denied")
    led.chmod(0o600)
    assert digest(led) == before

"""Every command the README and docs/ show in a code block parses with the CLI as it is.

A command is a line in a fenced code block that starts with ``harvest``, ``python -m
benchmarks.<name>`` or ``python benchmarks/<name>.py`` (continued over lines ending in a backslash). Optional parts in brackets are
taken in (``[--a | --b]`` as ``--a``, a required ``(--a | --b)`` too), ``a|b`` alternatives as their first word, ``...`` dropped, and
the line is cut at a comment, a pipe or a redirect. The words are then parsed by the very parser the
command uses (``harvest``'s own, or the benchmark's argparse parser stopped before it runs), so a
doc cannot name a flag, a sub-command or a value the CLI no longer takes.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import runpy
import shlex
import sys
from pathlib import Path

import pytest

from placement_service.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
DOCS = sorted([ROOT / "README.md", ROOT / "hadoop-conf" / "README.md", ROOT / "docker" / "README.md",
               *(ROOT / "docs").rglob("*.md")])
START = re.compile(r"^\s*(?:\$ )?(?:nice -n \d+ )?(?:[A-Z_]+=\S+ )*(?:\S*/)?"
                   r"(harvest|python3? -m benchmarks\.\w+|python3? benchmarks/\w+\.py)(\s|$)")


def doc_commands() -> list[tuple[str, int, str]]:
    found: list[tuple[str, int, str]] = []
    for path in DOCS:
        if not path.exists():
            continue
        in_block, buf, first = False, "", 0
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.lstrip().startswith("```"):
                in_block, buf = not in_block, ""
                continue
            if not in_block:
                continue
            if buf:
                buf += " " + line.strip()
            elif START.match(line):
                buf, first = line.strip(), number
            else:
                continue
            if buf.endswith("\\"):
                buf = buf[:-1]
                continue
            found.append((str(path.relative_to(ROOT)), first, buf))
            buf = ""
    return found


def words(command: str) -> list[str]:
    """The command's words as the CLI receives them (see the module docstring)."""
    text = re.sub(r"\s&\s*$", " ", command)  # started in the background
    while re.search(r"\[[^\[\]]*\]", text):  # optional parts taken in, innermost first, first alternative
        text = re.sub(r"\[([^\[\]]*)\]", lambda m: " " + re.split(r"\s\|\s", m.group(1))[0] + " ", text)
    while re.search(r"\(([^()]*\s\|\s[^()]*)\)", text):  # a required choice (a | b): the first
        text = re.sub(r"\(([^()]*\s\|\s[^()]*)\)", lambda m: " " + re.split(r"\s\|\s", m.group(1))[0] + " ", text)
    text = re.split(r"\s(?:\||>|2>|&&|;)\s", text + " ")[0]
    out: list[str] = []
    for word in shlex.split(text, comments=True):
        if word in ("...", "…", "$"):
            continue
        if "|" in word and not word.startswith(("http", "{", "'")):
            word = word.split("|")[0]
        out.append(word)
    return out


class _Parsed(Exception):
    pass


def parse(argv: list[str]) -> str | None:
    """None when ``argv`` parses, else argparse's message."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            if argv[0] == "harvest":
                build_parser().parse_args(argv[1:])
            else:  # python [-m] benchmarks.NAME ...: run the module until its parser has parsed
                module = argv[2] if argv[1] == "-m" else argv[1][:-3].replace("/", ".")
                rest = argv[3:] if argv[1] == "-m" else argv[2:]
                original = argparse.ArgumentParser.parse_args

                def parse_then_stop(self: argparse.ArgumentParser, args: object = None,
                                    namespace: object = None) -> argparse.Namespace:
                    original(self, args, namespace)  # type: ignore
                    raise _Parsed

                argparse.ArgumentParser.parse_args = parse_then_stop  # type: ignore
                saved = sys.argv
                sys.argv = [module, *rest]
                script = ROOT / argv[1] if argv[1] != "-m" else None
                if script is not None:  # run as a script: its folder comes first on sys.path
                    sys.path.insert(0, str(script.parent))
                try:
                    if script is None:
                        runpy.run_module(module, run_name="__main__")
                    else:
                        runpy.run_path(str(script), run_name="__main__")
                except _Parsed:
                    pass
                finally:
                    argparse.ArgumentParser.parse_args = original  # type: ignore[method-assign]
                    sys.argv = saved
                    if script is not None:
                        sys.path.remove(str(script.parent))
        except SystemExit as exc:
            if exc.code not in (0, None):
                return err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {exc.code}"
    return None


COMMANDS = doc_commands()


def test_the_docs_show_commands() -> None:
    assert len(COMMANDS) >= 50  # the extraction itself works (the README alone shows dozens)


@pytest.mark.parametrize(("where", "line", "command"), COMMANDS, ids=[f"{w}:{n}" for w, n, _ in COMMANDS])
def test_a_documented_command_parses(where: str, line: int, command: str) -> None:
    argv = words(command)
    while argv and argv[0] in ("nice", "-n") or argv[0].isdigit() or re.match(r"^[A-Z_]+=", argv[0]):
        argv = argv[1:]
    if argv[0] != "harvest":
        argv = ["python", *argv[1:]]
    problem = parse(argv)
    assert problem is None, f"{where}:{line}: {command}\n  -> {problem}"

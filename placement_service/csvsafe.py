"""Spreadsheet-safe text cells for every CSV file the project writes (formula injection).

A spreadsheet opening a CSV runs a text cell that starts with ``=``, ``+``, ``-`` or ``@`` (and, in
some programs, a tab or a carriage return) as a formula: a server named ``=HYPERLINK("http://x",
"click")`` becomes a live link. Every CSV writer of the project escapes such text cells with a
leading apostrophe (OWASP's advice), and the project's CSV readers of names undo it, so names
survive a round trip:

- ``escape_text(s)``: ``"'" + s`` when ``s`` matches ``^'*[=+\\-@\\t\\r]`` (a formula prefix after
  any number of apostrophes: ``'=x`` is written ``''=x``), else ``s`` unchanged;
- ``unescape_text(s)``: the inverse (drops the first apostrophe of a cell matching ``^'+[=+\\-@\\t\\r]``).

The pair is a bijection on strings. Numbers are never escaped (a negative number is a number, not
text). Writers: ``csv.writer`` rows go through :func:`escape_row` (or :func:`writer` /
:class:`DictWriter`), Arrow tables through :func:`escape_table` (or :func:`write_arrow_csv`).
Readers of text columns use :func:`unescape_text` or :func:`unescape_array`.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pyarrow is imported only by the Arrow helpers (the agent does not need it)
    import pyarrow as pa

FORMULA_PREFIXES = "=+-@\t\r"
_ESCAPE = re.compile(r"^'*[=+\-@\t\r]")
_UNESCAPE = re.compile(r"^'+[=+\-@\t\r]")
# The same patterns for Arrow's RE2 (replace the first match only).
_ARROW_ESCAPE = (r"^('*[=+\-@\t\r])", r"'\1")
_ARROW_UNESCAPE = (r"^'('*[=+\-@\t\r])", r"\1")


def escape_text(value: str) -> str:
    """A text cell safe to open in a spreadsheet (see the module docstring)."""
    return "'" + value if _ESCAPE.match(value) else value


def unescape_text(value: str) -> str:
    """The text :func:`escape_text` was given."""
    return value[1:] if _UNESCAPE.match(value) else value


def escape_row(row: Iterable[Any]) -> list[Any]:
    """A ``csv.writer`` row with its text cells escaped (numbers and None unchanged)."""
    return [escape_text(v) if isinstance(v, str) else v for v in row]


class _SafeWriter:
    """``csv.writer`` whose rows (the header included) are escaped."""

    def __init__(self, fh: Any, **kwargs: Any) -> None:
        self._w = csv.writer(fh, **kwargs)

    def writerow(self, row: Iterable[Any]) -> Any:
        return self._w.writerow(escape_row(row))

    def writerows(self, rows: Iterable[Iterable[Any]]) -> None:
        for row in rows:
            self._w.writerow(escape_row(row))


def writer(fh: Any, **kwargs: Any) -> _SafeWriter:
    """Like ``csv.writer(fh, **kwargs)``, with every text cell escaped."""
    return _SafeWriter(fh, **kwargs)


class DictWriter(csv.DictWriter):  # type: ignore[type-arg]
    """``csv.DictWriter`` with every text cell (and header name) escaped."""

    def writeheader(self) -> Any:
        return self.writer.writerow(escape_row(self.fieldnames))

    def writerow(self, rowdict: Mapping[str, Any]) -> Any:
        return super().writerow({k: escape_text(v) if isinstance(v, str) else v for k, v in rowdict.items()})

    def writerows(self, rowdicts: Iterable[Mapping[str, Any]]) -> None:
        for r in rowdicts:
            self.writerow(r)


def _is_text(t: pa.DataType) -> bool:
    import pyarrow as pa

    return bool(pa.types.is_string(t) or pa.types.is_large_string(t))


def _regex_array(col: Any, pattern: tuple[str, str], first: str) -> Any:
    """``col`` with ``pattern`` applied to its text cells; dictionary columns only touch their
    dictionary (then come back as plain text). ``first``: the characters a matching cell starts
    with (columns without any such cell are returned as they are, without a regex pass)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    t = col.type
    if pa.types.is_dictionary(t) and _is_text(t.value_type):
        chunks = col.chunks if isinstance(col, pa.ChunkedArray) else [col]
        fixed = [pa.DictionaryArray.from_arrays(c.indices, _regex_array(c.dictionary, pattern, first))
                 for c in chunks]
        out = pa.chunked_array(fixed, type=pa.dictionary(t.index_type, t.value_type)) if fixed else col
        return pc.cast(out, t.value_type) if isinstance(col, pa.ChunkedArray) else pc.cast(fixed[0], t.value_type)
    if not _is_text(t):
        return col
    starts = pc.utf8_slice_codeunits(col, 0, 1)
    if not pc.any(pc.is_in(starts, value_set=pa.array(list(first), type=t))).as_py():
        return col
    return pc.replace_substring_regex(col, pattern=pattern[0], replacement=pattern[1], max_replacements=1)


def escape_array(col: Any) -> Any:
    """A text (or dictionary-of-text) Arrow array with its cells escaped; other types unchanged.
    A dictionary column comes back as plain text (what a CSV holds anyway)."""
    return _regex_array(col, _ARROW_ESCAPE, FORMULA_PREFIXES + "'")


def unescape_array(col: Any) -> Any:
    """The inverse of :func:`escape_array` (text columns only; others unchanged)."""
    return _regex_array(col, _ARROW_UNESCAPE, "'")


def escape_table(table: pa.Table) -> pa.Table:
    """Every text column's cells and every column name escaped, for ``pyarrow.csv.write_csv``."""
    import pyarrow as pa

    return pa.Table.from_arrays([escape_array(c) for c in table.columns],
                                names=[escape_text(n) for n in table.column_names])


def unescape_table(table: pa.Table, columns: Iterable[str] | None = None) -> pa.Table:
    """A table read from a CSV file with its column names and text cells unescaped (only the
    cells of ``columns`` when given: a reader that knows its name columns skips the others)."""
    import pyarrow as pa

    which = set(table.column_names if columns is None else columns)
    return pa.Table.from_arrays([unescape_array(c) if n in which else c
                                 for n, c in zip(table.column_names, table.columns, strict=True)],
                                names=[unescape_text(n) for n in table.column_names])


def write_arrow_csv(table: pa.Table, sink: Any) -> None:
    """``pyarrow.csv.write_csv`` of the escaped table (the one way the project writes Arrow CSV)."""
    import pyarrow.csv as pacsv

    pacsv.write_csv(escape_table(table), sink)

"""Render rows (a list of dicts with the same keys) as a table, JSON, CSV or Markdown.

``table`` is a rich table on a terminal and plain aligned text otherwise, so piped output stays
stable and parseable. Numbers are rounded for tables only; JSON and CSV carry full values.

Cells may hold untrusted text (node output, imported records), so every format neutralises it:
table and Markdown cells lose escape sequences and control characters (``terminal_text``) and a
rich table shows them as plain text (no markup); Markdown also escapes ``\\ | [ ] ( )`` and
``< > &`` (no table breaks, links, images or raw HTML) and turns newlines into spaces; CSV text
starting with ``= + - @`` (or a tab or carriage return) gets a leading ``'`` so a spreadsheet
never runs it as a formula (numbers stay numbers); JSON writes NaN and infinities as ``null``.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
import sys
from collections.abc import Sequence
from typing import Any

from benchctl.terminal_text import clean
from benchctl.terminal_wrap import terminal_lines as terminal_lines  # the commands' import of it
from benchctl.terminal_wrap import terminal_width

FORMATS = ("table", "json", "csv", "md")
CSV_DIGITS = 12
"""Significant digits of a float in CSV: past them a float's text is arithmetic noise."""


def _cell(value: Any) -> str:
    if value is None or value == {}:
        return "-"
    if isinstance(value, dict):
        return ",".join(f"{k}={v}" for k, v in sorted(value.items()))
    if isinstance(value, list):
        return ",".join(map(str, value)) or "-"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) >= 100 else f"{value:.4g}"
    return str(value)


def _text(value: Any) -> str:
    """A table cell: composed by ``_cell``, without escape sequences or control characters."""
    return clean(_cell(value))


_MD_SPECIAL = re.compile(r"[\\|\[\]()<>&]")
_MD_ENTITIES = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")
"""OWASP's formula starters, and their full-width forms (spreadsheets fold them to ASCII)."""
_INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff"
"""Zero-width characters a spreadsheet may drop before it reads a cell."""
_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def _md(text: str) -> str:
    """A Markdown table cell that renders as the text itself."""
    return _MD_SPECIAL.sub(lambda m: _MD_ENTITIES.get(m.group(), "\\" + m.group()), clean(text))


def _csv_value(value: Any) -> Any:
    """A CSV cell: numbers as they are, floats at 12 significant digits (``0.4``, not the sum's
    ``0.4000000000000002``), non-finite ones and empty lists and maps empty, text cleaned and never
    a formula."""
    if isinstance(value, float):
        return float(f"{value:.{CSV_DIGITS}g}") if math.isfinite(value) else None
    if isinstance(value, list | tuple | dict) and not value:
        return None
    if value is None or isinstance(value, int):
        return value
    raw = _cell(value) if isinstance(value, dict | list) else str(value)
    text = clean(raw)
    # What a spreadsheet may see first once it trims spaces and zero-width characters.
    leads = (raw, text, text.lstrip().lstrip(_INVISIBLE).lstrip())
    if any(lead.startswith(_FORMULA_START) for lead in leads) and not _NUMBER.fullmatch(text.strip()):
        return "'" + text
    return text


def _finite(value: Any) -> Any:
    """``value`` with NaN and infinities (at any depth) replaced by None: JSON has no such numbers."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def _json(value: Any, indent: int | None = None) -> str:
    try:
        return json.dumps(value, indent=indent, allow_nan=False)
    except ValueError:  # a NaN or an infinity somewhere (rare): the slow path
        return json.dumps(_finite(value), indent=indent, allow_nan=False)


def render(rows: Sequence[dict[str, Any]], columns: Sequence[str], fmt: str, title: str = "",
           payload: Any = None, terminal: Sequence[str] | None = None, keep: Sequence[str] = ()) -> str:
    """``payload`` replaces ``rows`` for JSON output when the JSON shape is not a list of rows.

    On a terminal the table shows the columns of ``terminal`` (default ``columns``, in that order)
    that fit its width without breaking a word or a name: ``keep`` names the most wanted first, the
    others follow in their order (the last ones are left out first); a last line names what was left
    out. Piped output and md always show ``columns``."""
    if fmt == "json" and payload is None:  # one row per line: readable, and the C encoder keeps 10,000 rows fast
        return "[\n" + ",\n".join("  " + _json(row) for row in rows) + "\n]" if rows else "[]"
    if fmt == "json":
        return _json(payload, indent=2)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: _csv_value(v) for k, v in row.items()} for row in rows)
        return out.getvalue().rstrip("\n")
    if fmt == "md":
        lines = ["| " + " | ".join(map(_md, columns)) + " |", "|" + "|".join("---" for _ in columns) + "|"]
        lines += ["| " + " | ".join(_md(_cell(row.get(c))) for c in columns) + " |" for row in rows]
        return "\n".join(lines)
    cells = [[_text(row.get(c)) for c in columns] for row in rows]
    title = clean(title)
    if sys.stdout.isatty():
        shown = list(terminal or columns)
        every = [[_text(row.get(c)) for c in shown] for row in rows]
        return _fitted_table(every, shown, title, keep)
    widths = [max(len(c), *(len(r[i]) for r in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(([title] if title else []) + lines)


_BREAK = re.compile(r"(?<=\s)|(?<=[A-Za-z]-)(?=[A-Za-z0-9])")
"""Where a table cell may wrap: after a space, and after a hyphen between words (``cost-to-train``)."""
_WORD = re.compile(r"(?<=\s)(?=\S)")
_KEY = re.compile(r"[^\s:]:[^\s\d:/]")
"""A word holding this is a cell key (``runpod:H100_SXMx8:spot:region=US-KS-2``): a colon between
parts; a colon before a digit or a slash (``17:43:17``, ``http://``) is no separator."""
_KEY_BREAK = re.compile(r"(?<=[^\s:]:)(?=[^\s\d:/])|(?<=[^\s,],)(?=[^\s\d,])")
"""Where a cell key may wrap: after its ``:`` separators (and the ``,`` between env settings), never
at its hyphens (``on-demand``)."""
_HEADER_BREAK = re.compile(r"(?<=\s)|(?<=[A-Za-z][-_])(?=[A-Za-z0-9])")
"""Where a header may wrap: also after an underscore between words (``worst_case_`` ``usd``)."""
_PROSE = 16
"""Text with spaces wraps in lines of at least this many characters (not one word a line)."""
_FEWEST = 2
"""A terminal table shows at least this many columns (wrapped when they must)."""
_LONGEST_NAME = 30
"""A cell without spaces (a cell key, ``on-demand``, ``H100_SXM×8``) up to this long is never broken."""
_LONGEST_UNBROKEN = 12
"""A chunk longer than this folds inside itself rather than widen its column."""


def _chunks(text: str, breaks: re.Pattern[str] = _BREAK) -> list[str]:
    """``text`` in the pieces a line may end after: each word at ``breaks``, a cell key at ``_KEY_BREAK``."""
    return [chunk for word in _WORD.split(text) if word
            for chunk in (_KEY_BREAK if _KEY.search(word) else breaks).split(word) if chunk]


def _longest_chunk(text: str, breaks: re.Pattern[str] = _BREAK) -> int:
    return max((len(chunk.rstrip()) for chunk in _chunks(text, breaks)), default=0)


def _wrap(text: str, width: int, breaks: re.Pattern[str] = _BREAK) -> str:
    """``text`` in lines of at most ``width`` (chunks longer than that are left for rich to fold)."""
    lines: list[str] = []
    line = ""
    for chunk in _chunks(text, breaks):
        if line and len((line + chunk).rstrip()) > width:
            lines.append(line.rstrip())
            line = ""
        line += chunk
    return "\n".join([*lines, line.rstrip()])


def fit_widths(natural: Sequence[int], minimum: Sequence[int], available: int) -> list[int]:
    """Column widths summing to at most ``available`` where possible: the widest columns narrow
    first, none below its ``minimum`` (then the sum may exceed ``available``)."""
    widths = list(natural)
    while sum(widths) > available:
        slack = [(w, i) for i, (w, m) in enumerate(zip(widths, minimum, strict=True)) if w > m]
        if not slack:
            break
        widths[max(slack)[1]] -= 1
    return widths


def _comfortable(header: str, values: Sequence[str]) -> int:
    """The narrowest a column gets without breaking a name: its header in two lines at most, each value
    without spaces whole (up to _LONGEST_NAME), prose in lines of _PROSE (no word broken)."""
    head = _longest_chunk(header, _HEADER_BREAK)
    while _wrap(header, head, _HEADER_BREAK).count("\n") > 1:
        head += 1
    whole = [len(v) if " " not in v and len(v) <= _LONGEST_NAME
             else max(min(len(v), _PROSE), min(_LONGEST_NAME, _longest_chunk(v))) for v in values]
    return max(head, *whole, 1)


def _fitted_table(cells: list[list[str]], columns: Sequence[str], title: str, keep: Sequence[str]) -> str:
    """The most wanted columns (``render``) that fit the terminal comfortably, then a line naming
    the ones left out; when not even the ``keep`` columns fit, those, wrapped as ``_rich_table`` can."""
    import textwrap

    width = terminal_width()
    order = [*dict.fromkeys(c for c in keep if c in columns), *(c for c in columns if c not in keep)]
    need = {c: _comfortable(c, [row[i] for row in cells]) + 2 for i, c in enumerate(columns)}
    count = len(order)
    while count > _FEWEST and sum(need[c] for c in order[:count]) > width:
        count -= 1
    chosen = set(order[:count])
    picked = [i for i, c in enumerate(columns) if c in chosen]
    out = _rich_table([[row[i] for i in picked] for row in cells], [columns[i] for i in picked], title)
    hidden = [c for c in columns if c not in chosen]
    if hidden:
        note = f"(a wider terminal or --format json shows {', '.join(hidden)})"
        if len(note) > width:
            note = f"({len(hidden)} more columns on a wider terminal; --format json has every one)"
        out += "\n" + "\n".join(textwrap.wrap(note, width, break_on_hyphens=False))
    return out


def _rich_table(cells: list[list[str]], columns: Sequence[str], title: str) -> str:
    """A rich table as wide as the terminal at most: no vertical rules; headers and cells wrap at
    spaces and between hyphenated words, never inside a word (``fit_widths``). When even that is
    wider than the terminal (``--wide``), nothing wraps (read it with ``less -S``)."""
    from rich import box
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    width = terminal_width()
    texts = [list(columns), *cells]
    natural = [max(len(row[i]) for row in texts) for i in range(len(columns))]
    minimum = [_comfortable(columns[i], [row[i] for row in cells]) for i in range(len(columns))]
    if sum(minimum) + 2 * len(columns) > width:  # names must break: as little as can be
        minimum = [max(_longest_chunk(columns[i], _HEADER_BREAK),
                       *(min(_LONGEST_UNBROKEN, _longest_chunk(row[i])) for row in cells))
                   for i in range(len(columns))]
    widths = fit_widths(natural, minimum, width - 2 * len(columns))
    if sum(widths) + 2 * len(columns) > width:  # too many columns for the terminal: unwrapped, never mangled
        widths, width = natural, sum(natural) + 2 * len(columns)
    table = Table(title=Text(title) if title else None, box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  padding=(0, 1, 0, 0), title_justify="left")  # 2 characters between columns: a space, a rule
    for column, w in zip(columns, widths, strict=True):
        table.add_column(Text(_wrap(column, w, _HEADER_BREAK)), overflow="fold", width=w)
    for row in cells:
        table.add_row(*(Text(_wrap(value, w)) for value, w in zip(row, widths, strict=True)))
    console = Console(file=io.StringIO(), force_terminal=True, width=width)
    console.print(table)
    out = console.file
    assert isinstance(out, io.StringIO)
    return "\n".join(line.rstrip() for line in out.getvalue().rstrip("\n").splitlines())

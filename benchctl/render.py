"""Render rows (a list of dicts with the same keys) as a table, JSON, CSV or Markdown.

``table`` is a rich table on a terminal and plain aligned text otherwise, so piped output stays
stable and parseable. Numbers are rounded for tables only; JSON and CSV carry full values.
"""

from __future__ import annotations

import csv
import io
import json
import sys
from collections.abc import Sequence
from typing import Any

FORMATS = ("table", "json", "csv", "md")


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


def render(rows: Sequence[dict[str, Any]], columns: Sequence[str], fmt: str, title: str = "",
           payload: Any = None) -> str:
    """``payload`` replaces ``rows`` for JSON output when the JSON shape is not a list of rows."""
    if fmt == "json" and payload is None:  # one row per line: readable, and the C encoder keeps 10,000 rows fast
        return "[\n" + ",\n".join("  " + json.dumps(row) for row in rows) + "\n]" if rows else "[]"
    if fmt == "json":
        return json.dumps(payload, indent=2)
    if fmt == "csv":
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=list(columns), extrasaction="ignore", lineterminator="\n")
        writer.writeheader()
        writer.writerows({k: _cell(v) if isinstance(v, dict | list) else v for k, v in row.items()} for row in rows)
        return out.getvalue().rstrip("\n")
    cells = [[_cell(row.get(c)) for c in columns] for row in rows]
    if fmt == "md":
        lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in cells]
        return "\n".join(lines)
    if sys.stdout.isatty():
        return _rich_table(cells, columns, title)
    widths = [max(len(c), *(len(r[i]) for r in cells)) if cells else len(c) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    return "\n".join(([title] if title else []) + lines)


def _rich_table(cells: list[list[str]], columns: Sequence[str], title: str) -> str:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title or None)
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in cells:
        table.add_row(*row)
    console = Console(file=io.StringIO(), force_terminal=True, width=Console().width)
    console.print(table)
    out = console.file
    assert isinstance(out, io.StringIO)
    return out.getvalue().rstrip("\n")

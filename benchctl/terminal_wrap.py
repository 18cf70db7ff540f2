"""Text wrapped to the terminal it is printed on (commands, and the run's progress lines).

``terminal_width`` is the width rich reads (``COLUMNS``, else the terminal's own size, else 80);
``terminal_lines`` wraps only when the stream is a terminal, so piped output stays one line per item.
"""

from __future__ import annotations

import sys
from typing import TextIO


def terminal_width() -> int:
    """The terminal's width as rich reads it (``COLUMNS``, else the terminal's own size, else 80)."""
    from rich.console import Console

    return Console().width


def terminal_lines(text: str, indent: str = "", stream: TextIO | None = None) -> str:
    """``text`` wrapped to the terminal's width (each of its lines on its own, later lines of one
    starting with ``indent``) when ``stream`` (default stdout) is a terminal; as it is when it is
    not one (piped output stays one line per item)."""
    import textwrap

    if not (stream or sys.stdout).isatty():
        return text
    width = terminal_width()
    return "\n".join("\n".join(textwrap.wrap(line, width, subsequent_indent=indent, break_on_hyphens=False,
                                             break_long_words=False)) or line for line in text.split("\n"))

"""Untrusted text made safe to print on a terminal.

Text from nodes (stderr, metric names, event messages, artifact names) and from imported records
may carry escape sequences that clear the screen, set the window title or write the clipboard
(OSC 52). ``clean`` removes every escape sequence (CSI, OSC, DCS/SOS/PM/APC strings, and their
8-bit C1 forms) and every other C0/C1 control character and DEL, keeping ordinary text and
unicode. Tabs, carriage returns and newlines become spaces, unless ``newlines`` keeps ``\\n``.
"""

from __future__ import annotations

import re

_SEQUENCE = re.compile(
    r"(?:\x1b\[|\x9b)[\x30-\x3f]*[\x20-\x2f]*[\x40-\x7e]?"  # CSI (an unterminated one to the end of its params)
    r"|(?:\x1b[\]PX^_]|[\x9d\x90\x98\x9e\x9f])[^\x07\x1b\x9c]*(?:\x07|\x1b\\|\x9c)?"  # OSC, DCS, SOS, PM, APC to ST/BEL
    r"|\x1b[\x20-\x2f]*[\x30-\x7e]?"  # any other ESC sequence (or a lone ESC)
)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_BLANK = re.compile(r"\r\n|[\t\r]")


def clean(text: str, newlines: bool = False) -> str:
    """``text`` without escape sequences and control characters; see the module docstring."""
    if text.isprintable():  # the common case, checked in C
        return text
    text = _BLANK.sub(lambda m: "\n" if m.group() == "\r\n" else " ", _SEQUENCE.sub("", text))
    text = _CONTROL.sub("", text)
    return text if newlines else text.replace("\n", " ")

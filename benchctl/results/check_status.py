"""A preflight check's status, and a preflight run's verdict, as the controller reads them.

The payload writes them as plain strings (``payload/node/checks.py``: ``STATUS_ORDER``; it imports
nothing of benchctl); the values here are exactly those strings, so stored events and
``preflight.json`` files compare equal to the members.
"""

from __future__ import annotations

import enum


class CheckStatus(str, enum.Enum):
    SKIP = "skip"
    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"

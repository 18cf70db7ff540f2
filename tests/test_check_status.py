"""The controller's check statuses are the payload's, and the controller compares statuses only
through them."""

from __future__ import annotations

import re
from pathlib import Path

from benchctl.payload.node.checks import STATUS_ORDER, verdict
from benchctl.results.check_status import CheckStatus


def test_the_controller_knows_exactly_the_statuses_the_payload_writes() -> None:
    assert {s.value for s in CheckStatus} == set(STATUS_ORDER)
    assert verdict([{"status": "warn"}, {"status": "pass"}]) == CheckStatus.WARN


def test_no_controller_module_compares_a_status_or_verdict_with_a_literal() -> None:
    root = Path(__file__).resolve().parent.parent / "benchctl"
    literal = re.compile(r"""(status|verdict)["')\]]*\s*(==|!=|in)\s*\(?\s*["'](skip|pass|warn|fail)["']""")
    offenders = [f"{path.relative_to(root)}: {m.group(0)}" for path in root.rglob("*.py")
                 for m in literal.finditer(path.read_text())]
    assert offenders == []

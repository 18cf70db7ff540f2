"""The docs promise what the code does (issue 29 item 8): ``--confirm-above`` is compared with the
most a run may spend, the worst case capped by the budget (``PlanResult.capped_usd``), so a $490
worst case under a $5 budget asks nothing; the README said it asked above the worst case."""

from __future__ import annotations

import inspect

from tests.conftest import REPO


def test_the_confirm_above_promise_names_the_budget_cap() -> None:
    from benchctl.cli import run

    assert "result.capped_usd <= confirm_above" in inspect.getsource(run._confirm_spend)
    readme = " ".join((REPO / "README.md").read_text().split())
    assert "asks when the most it may spend (the worst case, capped by `budget_usd`" in readme
    resilience = " ".join((REPO / "docs" / "resilience.md").read_text().split())
    assert "plus that worst case, capped by `budget_usd`) is above `--confirm-above`" in resilience

"""Exit codes and hints that match what happened (issue 29 item 7)."""

from __future__ import annotations

from pathlib import Path

from tests.conftest import cli_here
from tests.test_workload_edit import finished  # noqa: F401  (the fixture: a finished two-cell campaign)


def test_offers_exits_1_when_no_provider_answered_and_no_catalog_priced(home: Path) -> None:
    """Without credentials only local and ssh 'answered', with nothing: that is no answer (its help says 1)."""
    result = cli_here("offers", "--gpu", "B200", "--count", "8", "--market", "spot", home=home)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "no offers for B200 x8" in result.stdout and "no provider answered" in result.stderr
    local = cli_here("offers", "--provider", "local", "--gpu", "cpu", home=home)
    assert local.returncode == 0, "a local node is an answer"


def test_down_of_a_finished_campaign_does_not_suggest_resume(home: Path, finished: Path) -> None:  # noqa: F811
    result = cli_here("down", "tiny", home=home)
    assert result.returncode == 0, result.stderr
    assert "resume" not in result.stdout and "the campaign is complete" in result.stdout, result.stdout

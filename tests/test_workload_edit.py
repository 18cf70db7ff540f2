"""A measured campaign's workload cannot change under its stored step times (issue 18, item 1):
editing target.model, total_batch_size or vocab_size is refused like a payload edit; the ratio,
pure arithmetic on the same measurement, still re-prices."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchctl.engine.scheduler import run_campaign
from tests.conftest import TINY_CAMPAIGN, TWO_LOCAL_CELLS, cli_here, run_cli
from tests.fakes.memory_provider import MemoryProvider
from tests.memory_campaign import memory_run, offer


@pytest.fixture
def finished(home: Path, tmp_path: Path) -> Path:
    """The tiny two-cell campaign finished in this process against ``MemoryProvider`` (the real
    engine and store, millisecond polls; ``test_cli.py`` runs it with real payloads, marked slow), its
    store at ``home``; returns the campaign file the test may edit."""
    home.mkdir(parents=True)
    provider = MemoryProvider([offer(host="one", count=1, hourly_usd=0.5), offer(host="two", count=2, hourly_usd=1.0)])
    run = memory_run(tmp_path, provider, matrix=TWO_LOCAL_CELLS, db=f"sqlite:///{home / 'benchctl.db'}")
    assert run_campaign(run.ctx, concurrency=2).complete
    run.engine.dispose()
    return tmp_path / "tiny.yaml"


def board(home: Path) -> list[dict]:
    return json.loads(cli_here("leaderboard", "--format", "json", home=home).stdout)


@pytest.mark.parametrize(("old", "new", "change"), [
    ("model: nanochat-d1", "model: nanochat-d2", "target.model nanochat-d1 → nanochat-d2"),
    ("total_batch_size: 128", "total_batch_size: 256", "target.total_batch_size 128 → 256"),
    ("vocab_size: 512", "vocab_size: 1024", "target.vocab_size 512 → 1024"),
])
def test_a_workload_edit_of_a_finished_campaign_is_refused(home: Path, finished: Path, old: str, new: str,
                                                          change: str) -> None:
    before = board(home)
    finished.write_text(finished.read_text().replace(old, new))
    refused = cli_here("run", str(finished), home=home)  # refused before any node or signal handler
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert change in refused.stderr and "new name" in refused.stderr and f"restore {change.split()[0]}" \
        in refused.stderr
    assert board(home) == before, "no result re-priced, nothing stored"
    stored = json.loads(cli_here("status", "--format", "json", home=home).stdout)["campaigns"][0]
    assert all(c["attempts"] == 1 for c in stored["cells"]), "nothing measured again"


def test_a_payload_edit_names_the_field(home: Path, finished: Path) -> None:
    finished.write_text(finished.read_text().replace("sequence_len: 32", "sequence_len: 16"))
    refused = cli_here("run", str(finished), home=home)  # refused before any node or signal handler
    assert refused.returncode == 2
    assert "different payload section: payload.profile.sequence_len 32 → 16" in refused.stderr


def test_the_ratio_still_reprices_the_same_measurement(home: Path, finished: Path) -> None:
    before = {r["cell"]: r for r in board(home)}
    finished.write_text(finished.read_text().replace("ratio: 8.5", "ratio: 17"))
    again = run_cli("run", str(finished), home=home)
    assert again.returncode == 0, again.stderr
    for row in board(home):
        old = before[row["cell"]]
        assert row["step_time_ms"] == old["step_time_ms"] and row["target_steps"] == 2 * old["target_steps"]


def test_an_unset_vocab_size_is_the_presets() -> None:
    from benchctl.campaign.spec import parse_campaign
    from benchctl.engine.same_measurement import workload as _workload

    text = TINY_CAMPAIGN.format(name="tiny", matrix=TWO_LOCAL_CELLS, steps=3, max_attempts=2)
    unset = parse_campaign(text.replace("vocab_size: 512, ", ""), "a.yaml")
    explicit = parse_campaign(text.replace("vocab_size: 512", "vocab_size: 32768"), "b.yaml")
    assert _workload(unset) == _workload(explicit)
    assert _workload(unset) != _workload(parse_campaign(text, "c.yaml"))


def test_a_price_edit_of_a_done_cell_is_said_not_applied(home: Path, finished: Path) -> None:
    """Issue 29 item 3: the edit was accepted and ignored without a word."""
    before = board(home)
    finished.write_text(finished.read_text().replace("price_usd_per_hour: 0.5", "price_usd_per_hour: 2.5"))
    again = run_cli("run", str(finished), home=home)
    assert again.returncode == 0, again.stderr
    assert "local:cpux1:on-demand: price_usd_per_hour $0.50 → $2.50 not applied" in again.stderr, again.stderr
    assert "stays at the $0.50/h it ran at" in again.stderr
    assert "price_usd_per_hour $1.00" not in again.stderr, "an unchanged cell is not named"
    assert board(home) == before


def test_a_ratio_edit_says_what_it_did_to_the_numbers(home: Path, finished: Path) -> None:
    """Issue 29 item 3: a target edit re-priced every cell with only 'nothing to run'."""
    before = {r["cell"]: r for r in board(home)}
    finished.write_text(finished.read_text().replace("ratio: 8.5", "ratio: 17"))
    again = run_cli("run", str(finished), home=home)
    assert "target.target_param_data_ratio 8.5 → 17: done cells re-priced" in again.stderr, again.stderr
    for row in board(home):
        old = before[row["cell"]]
        assert (f"{row['cell']}: target steps {old['target_steps']:,} → {row['target_steps']:,}, cost-to-train "
                f"${old['cost_to_train_usd']:,.2f} → ${row['cost_to_train_usd']:,.2f}") in again.stderr

"""Every example output in the docs is produced by ``scripts/doc_samples.py`` (issue 29 item 8): each
marked block is rendered again here with the script's own ``render``, on an 80-column terminal,
against the stores this test run already has (the report tests' campaign; the tiny two-cell one
for the quick start's leaderboard, the same matrix as local-smoke), and must have the shape of the
committed block. A change of output format fails here until the docs are regenerated."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests import terminal
from tests.conftest import REPO, TINY_CAMPAIGN, TWO_LOCAL_CELLS, run_once
from tests.local_campaign import REPORT_CAMPAIGN

pytestmark = pytest.mark.slow


def _script() -> ModuleType:
    return terminal.doc_samples()


samples = _script()


@pytest.fixture(scope="module")
def stores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    """Campaign name → (BENCHCTL_HOME, campaign file) of the campaigns run once per test run;
    local-smoke's samples are read from the tiny campaign (same matrix, run by test_cli too)."""
    rep_home, rep_file, ran = run_once(tmp_path_factory, "rep", REPORT_CAMPAIGN)
    assert "local:cpux2:on-demand: done" in ran, ran
    tiny_home, tiny_file, ran = run_once(tmp_path_factory, "tiny", TINY_CAMPAIGN.format(
        name="tiny", matrix=TWO_LOCAL_CELLS, steps=3, max_attempts=2))
    assert ran.startswith("exit 0\n"), ran
    return {"rep": (rep_home, rep_file), "local-smoke": (tiny_home, tiny_file)}


def test_every_marked_block_is_a_sample_and_every_sample_is_in_the_docs() -> None:
    assert sorted(samples.committed()) == sorted(s.name for s in samples.SAMPLES)


@pytest.mark.parametrize("sample", samples.SAMPLES, ids=lambda s: s.name)
def test_the_committed_sample_has_the_shape_of_the_output_now(
        sample: Any, stores: dict[str, tuple[Path, Path]], tmp_path: Path) -> None:
    path, body = samples.committed()[sample.name]
    home, file = stores[sample.campaign] if sample.campaign else (tmp_path / "home", None)
    samples.write_bad_campaign(tmp_path)
    now = samples.render(sample, home, file, tmp_path)
    wide = samples.render(sample, home, file, tmp_path, width=samples.WIDE) if samples.shape(now).header else now
    assert samples.same_shape(body, now, wide), (
        f"{path.relative_to(REPO)}: sample {sample.name} no longer matches what the command prints; "
        f"run `.venv/bin/python scripts/doc_samples.py`.\ncommitted:\n{body}\nnow:\n{now}")


def test_shape_ignores_numbers_spacing_and_columns_values_push_out_but_not_words() -> None:
    table = "title 17,410 steps\nrank  step ms  cost $\n─────\n1     18.9     0.05\n2     20.1     0.10\n(3 more)\n"
    wide = "rank  step ms  cost $  model  flags\n─────\n"
    same = "title 9,520 steps\nrank  cost $\n─────\n1  118.25\n  wrapped\n2  10.5\n(4 more)\n"
    assert samples.same_shape(table, same, wide)
    assert not samples.same_shape(table, table.replace("cost $", "price $"), wide)  # a renamed column
    assert not samples.same_shape(table, table.replace("title", "heading"), wide)  # other words
    assert not samples.same_shape(table, table.replace("2     20.1     0.10\n", ""), wide)  # a row fewer
    assert not samples.same_shape(table, table.replace("(3 more)", "(3 more columns)"), wide)  # the footer

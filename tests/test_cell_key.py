"""Cell keys are built and read in one place (``benchctl.campaign.cell_key``): a campaign's cells, imported
records and the leaderboard's spot/on-demand pairing all go through it."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchctl.campaign.cell_key import CellKey
from benchctl.campaign.spec import CellSpec
from benchctl.results import leaderboard
from benchctl.results.records import Record


def test_a_campaign_cell_key_is_built_by_cell_key() -> None:
    cell = CellSpec(provider="skypilot", gpu="H100_SXM", count=8, market="spot", cloud="gcp", region="us-central1",
                    env={"NCCL_ALGO": "Ring", "A": "x:y z"}, max_attempts=1)
    key = CellKey.build("skypilot", "H100_SXMx8", "spot", [("cloud", "gcp"), ("region", "us-central1")],
                        {"NCCL_ALGO": "Ring", "A": "x:y z"})
    assert cell.key == str(key) == "skypilot:H100_SXMx8:spot:cloud=gcp:region=us-central1:env=A=x_y_z,NCCL_ALGO=Ring"


def test_an_imported_record_key_is_built_by_cell_key() -> None:
    record = Record(provider="runpod", gpu="H100_SXM", count=8, market="spot", hourly_usd=2.0, step_time_ms=100,
                    target_steps=10, region="US:TX", env={"B": "1"})
    assert record.key() == str(CellKey.build("runpod", "H100_SXMx8", "spot", [("region", "US:TX")], {"B": "1"}))
    assert record.key() == "runpod:H100_SXMx8:spot:region=US_TX:env=B=1"


@pytest.mark.parametrize("text", ["local:cpux2:on-demand", "aws:p5.48xlarge:spot:region=us-east-1", "a:b", "one",
                                  "free text: with colons", ""])
def test_any_stored_key_parses_back_to_itself(text: str) -> None:
    assert str(CellKey.parse(text)) == text


@pytest.mark.parametrize(("key", "configuration"), [
    ("vastai:H100_SXMx8:spot:min_vcpus=128", "vastai:H100_SXMx8:min_vcpus=128"),
    ("local:cpux2:on-demand", "local:cpux2"),
    ("a:b", "a:b"),
])
def test_the_leaderboard_pairs_markets_by_the_key_less_its_market(key: str, configuration: str) -> None:
    assert CellKey.parse(key).without_market() == configuration
    assert leaderboard.configuration_key(key) == configuration
    assert CellKey.parse(key).market == (key.split(":")[2] if key.count(":") >= 2 else None)


def test_no_other_controller_module_joins_or_splits_keys_on_colons() -> None:
    root = Path(__file__).resolve().parent.parent / "benchctl"
    offenders = [str(path.relative_to(root)) for path in root.rglob("*.py") if path.name != "cell_key.py"
                 and any(s in path.read_text() for s in ('":".join', 'split(":")', "_KEY_UNSAFE"))]
    assert offenders == []

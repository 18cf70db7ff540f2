"""Multi-node cells, first slice of issue 19: ``nodes: N`` in a campaign file is parsed, expanded
and keyed; ``plan`` and the budget price it at the node's price × N; the leaderboard rows carry it;
``plan`` and ``run`` refuse it (one line, exit 2) on a provider that cannot rent N nodes as one
unit; ``run`` rents it on one that can (``test_cluster_engine.py``, ``test_cluster_local.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sqlmodel import Session, select

from benchctl.campaign.spec import parse_campaign
from benchctl.cli.run import register_campaign
from benchctl.engine.budget import Admission, Budget, worst_case_spend
from benchctl.engine.plan import plan_campaign
from benchctl.engine.providers import Providers
from benchctl.errors import SpecError
from benchctl.provisioners.base import Offer, OfferRequest
from benchctl.provisioners.registry import PROVIDERS
from benchctl.results.leaderboard import display_row, leaderboard_rows
from benchctl.store.models import Cell
from tests.conftest import cli_here
from tests.local_campaign import home_store

# device_batch_size × sequence_len = 64 tokens per device; 4096 divides by 64 × 2 ranks × {1, 2, 4, 16} nodes.
BASE = """\
name: nodes
budget_usd: 50
target: {{model: nanochat-d1, target_param_data_ratio: 8.5, total_batch_size: 4096}}
defaults: {{market: on-demand, max_attempts: 2}}
payload: {{profile: {{device_batch_size: 2, sequence_len: 32}}}}
matrix:
{matrix}
"""
LOCAL = "  - {{provider: local, gpu: cpu, count: 2, price_usd_per_hour: 0.5{more}}}"


def campaign_text(matrix: str) -> str:
    return BASE.format(matrix=matrix)


def local_cells(*more: str) -> str:
    return campaign_text("\n".join(LOCAL.format(more=m) for m in more))


def test_nodes_is_part_of_the_key_only_above_one_node() -> None:
    cells = parse_campaign(local_cells("", ", nodes: 2, region: r"), "n.yaml").cells
    assert [(c.nodes, c.count, c.key) for c in cells] == [
        (1, 2, "local:cpux2:on-demand"),  # as stored today: a 1-node cell keeps its key
        (2, 2, "local:cpux2:on-demand:region=r:nodes=2"),
    ]
    (explicit,) = parse_campaign(local_cells(", nodes: 1"), "n.yaml").cells
    assert explicit.key == "local:cpux2:on-demand"


def test_an_explicit_single_node_repeats_the_implicit_one() -> None:
    with pytest.raises(SpecError, match="repeats cell local:cpux2:on-demand"):
        parse_campaign(local_cells("", ", nodes: 1"), "n.yaml")


def test_a_list_of_node_counts_expands_like_other_fields() -> None:
    campaign = parse_campaign(local_cells(", nodes: [1, 2, 16]"), "n.yaml")
    assert [c.key for c in campaign.cells] == ["local:cpux2:on-demand", "local:cpux2:on-demand:nodes=2",
                                               "local:cpux2:on-demand:nodes=16"]
    assert {c.count for c in campaign.cells} == {2}, "count stays GPUs per node"


@pytest.mark.parametrize(("value", "fragment"), [
    ("0", "greater than or equal to 1"), ("17", "less than or equal to 16"), ('"2"', "valid integer"),
    ("1.5", "valid integer"),
])
def test_a_bad_node_count_names_its_line_and_field(value: str, fragment: str) -> None:
    with pytest.raises(SpecError) as info:
        parse_campaign(local_cells(f", nodes: {value}"), "n.yaml")
    assert str(info.value).startswith("n.yaml:7 matrix[0].nodes: ")
    assert fragment in str(info.value)


def test_plan_prices_a_cell_as_every_node_of_it(home: Path) -> None:
    campaign = parse_campaign(local_cells("", ", nodes: 2"), "n.yaml")
    plan = plan_campaign(campaign, Providers(home, campaign.spec.providers))
    one, two = plan.rows
    assert (one["nodes"], two["nodes"]) == (1, 2)
    assert one["hourly_usd"] == pytest.approx(0.5)
    assert two["hourly_usd"] == pytest.approx(1.0)
    assert two["expected_usd"] == pytest.approx(2 * one["expected_usd"], rel=1e-3)  # rounded to 4 digits
    assert two["worst_case_usd"] == pytest.approx(2 * one["worst_case_usd"], rel=1e-3)
    assert plan.worst_case_usd == pytest.approx(one["worst_case_usd"] + two["worst_case_usd"])


def test_plan_shows_the_node_count_through_the_cli(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "n.yaml"
    path.write_text(local_cells(", nodes: 2"))
    result = cli_here("plan", str(path), "--format", "json", home=home)
    assert result.returncode == 0, result.stderr
    (row,) = json.loads(result.stdout)["cells"]
    assert (row["cell"], row["nodes"], row["hourly_usd"]) == ("local:cpux2:on-demand:nodes=2", 2, 1.0)


def test_run_takes_a_multi_node_cell_on_a_provider_that_rents_clusters_and_admits_it_at_every_node(
        home: Path, tmp_path: Path) -> None:
    # one node's worst case ($0.50/h × 2.42 h) fits $2, two nodes' does not: the cell ends on budget, unlaunched
    path = tmp_path / "n.yaml"
    path.write_text(local_cells(", nodes: 2").replace("budget_usd: 50", "budget_usd: 2"))
    result = cli_here("run", str(path), "--yes", home=home)
    assert "Traceback" not in result.stderr + result.stdout
    assert "multi-node runs are not implemented" not in result.stderr
    engine = home_store(home)
    with Session(engine) as s:
        (cell,) = s.exec(select(Cell)).all()
    assert (cell.key, cell.state) == ("local:cpux2:on-demand:nodes=2", "failed")
    assert "$0.50/h × 2 nodes" in (cell.reason or ""), cell.reason
    assert not list((home / "nodes").glob("*/node.json")), "no node was launched"


@pytest.mark.parametrize(("provider", "env", "cell", "why"), [
    ("vastai", {"VAST_API_KEY": "va", "VAST_URL": "http://127.0.0.1:9"}, "{provider: vastai, gpu: H100_SXM, count: 8, "
     "nodes: 2}", "Vast.ai rents one machine per call, with no way to rent several as one unit"),
    ("runpod", {"RUNPOD_API_KEY": "rp", "RUNPOD_API_BASE_URL": "http://127.0.0.1:9"}, "{provider: runpod, "
     "gpu: H100_SXM, count: 8, nodes: 4}", "its Instant Clusters (POST /v2/clusters"),
])
@pytest.mark.parametrize("command", ["plan", "run"])
def test_a_provider_that_cannot_rent_a_cluster_refuses_it_in_one_line(
        command: str, provider: str, env: dict[str, str], cell: str, why: str, home: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in env.items():  # a closed port: the refusal comes before any API is asked
        monkeypatch.setenv(name, value)
    path = tmp_path / "n.yaml"
    path.write_text(campaign_text(f"  - {cell}"))
    result = cli_here(command, str(path), home=home)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"error: {provider}:H100_SXMx8:on-demand:nodes=")
    assert f"on {provider} cannot be planned or run: {why}" in line
    assert not (home / "benchctl.db").exists()


def test_every_provider_states_whether_it_can_rent_several_nodes_as_one_unit() -> None:
    from benchctl.provisioners.aws.provider import AWSProvider
    from benchctl.provisioners.local.provider import LocalProvider
    from benchctl.provisioners.runpod.provider import RunPodProvider
    from benchctl.provisioners.skypilot.provider import SkyPilotProvider
    from benchctl.provisioners.ssh import SSHProvider
    from benchctl.provisioners.vastai import VastProvider

    classes = (AWSProvider, LocalProvider, RunPodProvider, SkyPilotProvider, SSHProvider, VastProvider)
    assert sorted(c.name for c in classes) == sorted(PROVIDERS)
    assert {c.name for c in classes if c.multi_node_refusal is None} == {"local", "ssh", "aws", "skypilot"}


class _OneOffer:
    """A provider whose only offer costs ``hourly_usd`` per node."""

    def __init__(self, hourly_usd: float) -> None:
        self.hourly_usd = hourly_usd

    def get(self, name: str) -> _OneOffer:
        return self

    def offers(self, request: OfferRequest) -> list[Offer]:
        return [Offer("local", "o", request.gpu, request.count, 1, "here", self.hourly_usd, request.market)]


def test_the_budget_worst_case_counts_every_node() -> None:
    campaign = parse_campaign(local_cells("", ", nodes: 4"), "n.yaml")
    one, four = campaign.cells
    single = worst_case_spend(campaign, [one], _OneOffer(1.0), 0.0)
    assert worst_case_spend(campaign, [four], _OneOffer(1.0), 0.0) == pytest.approx(4 * single)


def test_admission_prices_the_attempt_at_every_node(home: Path, tmp_path: Path) -> None:
    campaign = parse_campaign(local_cells(", nodes: 2"), "n.yaml")
    engine = home_store(home)
    row = register_campaign(engine, campaign, str(tmp_path / "n.yaml"))
    budget = Budget(engine, row.id or 0, budget_usd=3.0, attempt_worst_case_s=3600.0)
    verdict, _, _ = budget.admit(2.0)
    assert verdict is Admission.LAUNCH, "one node at $2/h for at most 1 h fits $3"
    verdict, why, _ = budget.admit(2.0, nodes=2)
    assert verdict is Admission.OVER
    assert "$2.00/h × 2 nodes × 1.00 h" in why and "worst case $4.00" in why


def test_leaderboard_rows_carry_the_node_count(home: Path, tmp_path: Path) -> None:
    campaign = parse_campaign(local_cells("", ", nodes: 2"), "n.yaml")
    engine = home_store(home)
    register_campaign(engine, campaign, str(tmp_path / "n.yaml"))
    rows = {r["cell"]: r for r in leaderboard_rows(engine)}
    assert rows["local:cpux2:on-demand"]["nodes"] == 1
    assert rows["local:cpux2:on-demand:nodes=2"]["nodes"] == 2
    assert display_row(rows["local:cpux2:on-demand:nodes=2"])["configuration"] == "2 nodes × cpu×2"
    assert display_row(rows["local:cpux2:on-demand"])["configuration"] == "cpu×2"


def test_a_cell_stored_before_nodes_existed_has_one_node(home: Path, tmp_path: Path) -> None:
    campaign = parse_campaign(local_cells(""), "n.yaml")
    engine = home_store(home)
    register_campaign(engine, campaign, str(tmp_path / "n.yaml"))
    with Session(engine) as s:  # the config as a version without nodes stored it
        (cell,) = s.exec(select(Cell)).all()
        config = json.loads(cell.config_json)
        del config["nodes"]
        cell.config_json = json.dumps(config)
        s.add(cell)
        s.commit()
    (row,) = leaderboard_rows(engine)
    assert row["nodes"] == 1


def test_leaderboard_json_with_nodes_imports_back_and_a_two_node_record_keeps_its_nodes(home: Path,
                                                                                          tmp_path: Path) -> None:
    rows = tmp_path / "rows.yaml"
    rows.write_text("- {provider: lambda, gpu: H100_SXM, count: 8, nodes: 2, market: on-demand, hourly_usd: 47.84, "
                    "step_time_ms: 400, target: {model: nanochat-d26, target_param_data_ratio: 8.5, "
                    "total_batch_size: 524288}}\n")
    assert cli_here("import", str(rows), "--campaign", "pub", home=home).returncode == 0
    exported = cli_here("leaderboard", "--format", "json", home=home)
    (row,) = json.loads(exported.stdout)
    assert row["nodes"] == 2 and row["cell"] == "lambda:H100_SXMx8:on-demand:nodes=2"
    again = tmp_path / "export.json"
    again.write_text(exported.stdout)
    back = cli_here("import", str(again), "--campaign", "pub2", home=home)
    assert back.returncode == 0, back.stderr
    assert {r["nodes"] for r in json.loads(cli_here("leaderboard", "--format", "json", home=home).stdout)} == {2}

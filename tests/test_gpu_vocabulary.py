"""One GPU vocabulary end to end (issue 27, item 1): every GPU name a cell can carry is known from
``plan`` to the node-side checks (``payload.node.gpu_models``), or refused at ``plan`` with the names to use."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchctl.campaign.spec import parse_campaign
from benchctl.errors import SpecError
from benchctl.payload.node import thresholds
from benchctl.payload.node.checks import Expect, Facts, judge
from benchctl.payload.node.cluster_checks import judge_cluster
from benchctl.payload.node.gpu_models import BF16_PEAK_FLOPS, canonical, known_models
from benchctl.provisioners import vastai
from benchctl.provisioners.aws.instances import INSTANCES
from benchctl.provisioners.aws.instances import resolve as resolve_aws
from benchctl.provisioners.runpod.provider import GPU_TYPE_IDS
from benchctl.provisioners.skypilot.task import ACCELERATORS, PER_CLOUD
from tests.conftest import REPO, cli_here

H200_REAL = REPO / "tests" / "fixtures" / "preflight" / "h200-single-real"
CAMPAIGN = """\
name: vocab
budget_usd: 50
target: {{model: nanochat-d1, target_param_data_ratio: 8.5, total_batch_size: 4096}}
defaults: {{market: on-demand, max_attempts: 2}}
payload: {{profile: {{device_batch_size: 2, sequence_len: 32}}}}
matrix:
  - {cell}
"""


def test_every_provider_table_speaks_the_payloads_names() -> None:
    # the AWS table called p5e/p5en "H200_SXM" and SkyPilot's map took H100, A100, L4, H100_MEGA,
    # A100_80GB: names gpu_inventory compared with the driver's model and failed healthy nodes on
    known = set(known_models())
    tables = {"aws": {k.gpu for k in INSTANCES.values()}, "skypilot": set(ACCELERATORS),
              **{f"skypilot {cloud}": set(names) for cloud, names in PER_CLOUD.items()},
              "runpod": set(GPU_TYPE_IDS), "vastai": set(vastai.GPU_NAMES)}
    assert {name: names - known for name, names in tables.items() if names - known} == {}
    for model in BF16_PEAK_FLOPS:  # and every name has the node side's figures
        assert model in thresholds.EXPECTED_GEMM_TFLOPS and model in thresholds.EXPECTED_HBM_GBPS, model
    assert {gpu for gpu, _ in thresholds.CLUSTER_REFERENCE} <= known


@pytest.mark.parametrize("name", ["H100", "A100", "L4", "H100_MEGA", "A100_80GB", "NVIDIA H100 80GB HBM3"])
def test_a_name_no_node_check_knows_is_refused_at_plan_with_the_names_to_use(home: Path, tmp_path: Path,
                                                                             name: str) -> None:
    path = tmp_path / "vocab.yaml"
    path.write_text(CAMPAIGN.format(cell=f"{{provider: skypilot, cloud: aws, gpu: '{name}', count: 8}}"))
    result = cli_here("plan", str(path), home=home)
    assert result.returncode == 2, result.stdout
    assert f"vocab.yaml:7 matrix[0].gpu: unknown GPU model {name!r}" in result.stderr, result.stderr
    assert "known: cpu, H100_SXM, H100_NVL, H100_PCIE, H200" in result.stderr
    assert "Traceback" not in result.stderr
    if name == "H100":
        assert "H100 is H100_SXM or H100_NVL or H100_PCIE: say which" in result.stderr


def test_an_alias_becomes_the_payloads_name_in_the_cell() -> None:
    (cell,) = parse_campaign(CAMPAIGN.format(cell="{provider: vastai, gpu: h200-sxm, count: 8}"), "v.yaml").cells
    assert (cell.gpu, cell.key) == ("H200", "vastai:H200x8:on-demand")
    with pytest.raises(SpecError, match="unknown GPU model 'B100'"):
        parse_campaign(CAMPAIGN.format(cell="{provider: vastai, gpu: B100, count: 8}"), "v.yaml")


def test_the_real_h200_snapshot_passes_with_what_a_p5e_cell_expects(home: Path) -> None:
    # What the engine puts in job.json for an aws cell naming only its instance type: the
    # offer's GPU, which is the AWS table's (provisioners/aws/provider.py offers).
    (cell,) = parse_campaign(CAMPAIGN.format(cell="{provider: aws, instance_type: p5e.48xlarge}"), "p.yaml").cells
    gpu = cell.gpu or resolve_aws(cell.instance_type, cell.gpu, cell.count).gpu
    assert (gpu, cell.world_size) == ("H200", 8)
    # the snapshot is one real H200 (driver 580): judged as one GPU of that cell
    result = cli_here("preflight", "--replay", str(H200_REAL), "--expect", f"gpu={gpu},count=1", "--format", "json",
                      home=home)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["verdict"] == "pass" and report["expect"] == {"gpu": "H200", "count": 1}
    inventory = {c["name"]: c for c in judge(Facts(H200_REAL), Expect(gpu, 1), thresholds.resolve())}["gpu_inventory"]
    assert inventory["status"] == "pass" and inventory["observed"]["models"] == ["H200"]
    # and the cross-node thresholds apply to 8 of them
    figures = {"busbw_gbps": 470.0, "algbw_gbps": 268.6, "wrong": 0, "ranks": 8}
    probe = {"bytes": 8 << 30, "nodes": 2, "count": 8, "intra_node": [{**figures, "node_rank": n} for n in (0, 1)],
             "inter_node": [], "cluster": {**figures, "busbw_gbps": 360.0, "ranks": 16}}
    checks = {c["name"]: c for c in judge_cluster(probe, gpu, cell.world_size, thresholds.resolve(), set())}
    assert all("no published figure" not in c["hint"] for c in checks.values()), checks
    assert checks["inter_node_busbw"]["expected"].startswith(">= 350 GB/s")


@pytest.mark.parametrize(("name", "model"), [("H200_SXM", "H200"), ("h200 sxm", "H200"), ("H100-SXM", "H100_SXM"),
                                             ("CPU", "cpu"), ("H100", None), ("L4", None)])
def test_canonical_follows_aliases_and_refuses_families(name: str, model: str | None) -> None:
    assert canonical(name) == model

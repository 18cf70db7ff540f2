"""Campaign files: matrix expansion, stable cell keys, and every bad input as a precise error.

Bad inputs are checked twice: ``parse_campaign`` raises a SpecError whose text is
``file:line path: problem``, and ``benchctl run`` turns it into one line on stderr, exit code 2,
no traceback and no database.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pydantic import BaseModel

from benchctl.campaign.spec import (
    Campaign,
    CampaignSpec,
    CellSpec,
    Defaults,
    PayloadSpec,
    ProfileSpec,
    Target,
    load_campaign,
    parse_campaign,
)
from benchctl.errors import SpecError
from tests.conftest import REPO, cli_here

# Line numbers below refer to this text; every edit replaces one unique piece of it.
BASE = """\
name: t
budget_usd: 5
target:
  model: nanochat-d1
  vocab_size: 512
  target_param_data_ratio: 8.5
  total_batch_size: 128
defaults:
  market: on-demand
  max_attempts: 2
payload:
  phases: [preflight, profile]
  profile:
    device_batch_size: 2
    sequence_len: 32
matrix:
  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}
  - provider: local
    gpu: cpu
    count: 2
    price_usd_per_hour: 1.0
"""

# device_batch_size × sequence_len = 64 tokens per device; 4096 divides by 64 × {1, 2, 4, 8}.
KEYS_BASE = """\
name: keys
budget_usd: 50
target: {{model: nanochat-d1, target_param_data_ratio: 8.5, total_batch_size: 4096}}
defaults: {{market: spot, max_attempts: 4}}
payload: {{profile: {{device_batch_size: 2, sequence_len: 32}}}}
matrix:
{matrix}
"""


def edit(old: str, new: str, text: str = BASE) -> str:
    assert text.count(old) == 1, f"{old!r} must occur exactly once"
    return text.replace(old, new)


def keys_campaign(matrix: str) -> Campaign:
    return parse_campaign(KEYS_BASE.format(matrix=matrix), "k.yaml")


def spec_error(text: str, file: str = "f.yaml") -> SpecError:
    with pytest.raises(SpecError) as info:
        parse_campaign(text, file)
    return info.value


# --------------------------------------------------------------------------------------------- valid files


def test_base_text_is_valid() -> None:
    campaign = parse_campaign(BASE, "f.yaml")
    assert [c.key for c in campaign.cells] == ["local:cpux1:on-demand", "local:cpux2:on-demand"]
    assert [c.price_usd_per_hour for c in campaign.cells] == [0.5, 1.0]
    assert campaign.spec.name == "t"
    assert campaign.source == "f.yaml"


def test_list_values_expand_into_the_cross_product_in_file_order() -> None:
    campaign = keys_campaign("  - {provider: local, gpu: cpu, count: [1, 2], market: [spot, on-demand], "
                             "price_usd_per_hour: 0.5}")
    assert [c.key for c in campaign.cells] == [
        "local:cpux1:spot",
        "local:cpux1:on-demand",
        "local:cpux2:spot",
        "local:cpux2:on-demand",
    ]
    assert [(c.count, c.market) for c in campaign.cells] == [(1, "spot"), (1, "on-demand"), (2, "spot"),
                                                             (2, "on-demand")]
    assert all(c.price_usd_per_hour == 0.5 for c in campaign.cells)


def test_three_lists_give_every_combination() -> None:
    campaign = keys_campaign("  - {provider: runpod, gpu: [H100_SXM, H100_PCIE], count: [4, 8], "
                             "market: [spot, on-demand]}")
    assert len(campaign.cells) == 8
    assert len({c.key for c in campaign.cells}) == 8
    assert campaign.cells[0].key == "runpod:H100_SXMx4:spot"
    assert campaign.cells[-1].key == "runpod:H100_PCIEx8:on-demand"


def test_entries_without_lists_give_one_cell_each() -> None:
    campaign = keys_campaign("  - {provider: runpod, gpu: H100_SXM, count: 8}\n"
                             "  - {provider: runpod, gpu: H100_PCIE, count: 8}")
    assert [c.key for c in campaign.cells] == ["runpod:H100_SXMx8:spot", "runpod:H100_PCIEx8:spot"]


def test_defaults_apply_and_entries_override_them() -> None:
    campaign = keys_campaign("  - {provider: runpod, gpu: H100_SXM, count: 8}\n"
                             "  - {provider: runpod, gpu: H100_SXM, count: 4, market: on-demand, max_attempts: 1}")
    first, second = campaign.cells
    assert (first.market, first.max_attempts, first.image) == ("spot", 4, None)
    assert (second.market, second.max_attempts) == ("on-demand", 1)


def test_builtin_defaults_when_the_file_has_no_defaults_section() -> None:
    text = edit("defaults:\n  market: on-demand\n  max_attempts: 2\n", "")
    campaign = parse_campaign(text, "f.yaml")
    assert {(c.market, c.max_attempts, c.image) for c in campaign.cells} == {("on-demand", 3, None)}
    assert campaign.spec.payload.timeout_minutes == 120
    assert campaign.spec.payload.profile.warmup_steps == 3
    assert campaign.spec.payload.profile.steps == 10


def test_default_image_applies_but_only_an_entry_image_is_part_of_the_key() -> None:
    text = KEYS_BASE.format(matrix="  - {provider: runpod, gpu: H100_SXM, count: 8}\n"
                                   "  - {provider: runpod, gpu: H100_SXM, count: 4, image: 'my/img:1'}").replace(
        "defaults: {market: spot, max_attempts: 4}",
        'defaults: {market: spot, max_attempts: 4, image: "pytorch/pytorch:2.8.0"}')
    campaign = parse_campaign(text, "k.yaml")
    first, second = campaign.cells
    assert first.image is None and campaign.image(first) == "pytorch/pytorch:2.8.0"
    assert first.key == "runpod:H100_SXMx8:spot"
    assert campaign.image(second) == "my/img:1"
    assert second.image == "my/img:1"
    assert second.key == "runpod:H100_SXMx4:spot:image=my_img_1"


def test_instance_type_cells_and_optional_coordinates_in_the_key() -> None:
    campaign = keys_campaign("  - {provider: aws, instance_type: p5.48xlarge, region: us-east-1}\n"
                             "  - {provider: vastai, gpu: H100_SXM, count: 8, min_vcpus: 128}\n"
                             "  - {provider: aws, gpu: H100_SXM, count: 8, instance_type: p5.48xlarge}")
    assert [c.key for c in campaign.cells] == [
        "aws:p5.48xlarge:spot:region=us-east-1",
        "vastai:H100_SXMx8:spot:min_vcpus=128",
        "aws:H100_SXMx8:spot:instance_type=p5.48xlarge",
    ]
    assert [c.world_size for c in campaign.cells] == [8, 8, 8], "an aws instance type runs one rank per GPU"


@pytest.mark.parametrize(("entry", "message"), [
    ("{provider: aws, instance_type: m7i.large}",
     "aws instance type 'm7i.large' is not in benchctl's table (known: c5.large, c5.xlarge, p4d.24xlarge, "),
    ("{provider: aws, instance_type: p5.48xlarge, count: 4}", "p5.48xlarge has 8× H100_SXM, not 4× H100_SXM"),
    ("{provider: aws, gpu: H100_PCIE, count: 8}", "no aws instance type has 8× H100_PCIE"),
    ("{provider: aws, gpu: H200_SXM, count: 8}", "8× H200 is more than one aws instance type (p5e.48xlarge, "
     "p5en.48xlarge); set instance_type"),
])
def test_aws_cells_name_an_instance_type_of_the_table(entry: str, message: str) -> None:
    error = spec_error(KEYS_BASE.format(matrix=f"  - {entry}"), "k.yaml")
    assert "k.yaml:" in str(error) and "matrix[0]" in str(error), str(error)
    assert message in str(error)
    (cell,) = keys_campaign("  - {provider: aws, gpu: H100_SXM, count: 8}").cells
    assert cell.key == "aws:H100_SXMx8:spot", "a gpu and count the table maps to one type are enough"


def test_aws_settings_are_checked() -> None:
    text = KEYS_BASE.format(matrix="  - {provider: aws, instance_type: c5.large}").replace(
        "matrix:", "providers: {aws: {ssh_cidr: my-laptop}}\nmatrix:")
    assert "'my-laptop' is not an address range; give one like 203.0.113.7/32" in str(spec_error(text))


def test_skypilot_cells_name_their_cloud_and_it_is_part_of_the_key() -> None:
    campaign = keys_campaign("  - {provider: skypilot, cloud: [lambda, gcp], gpu: H100_SXM, count: 8, "
                             "market: on-demand}\n"
                             "  - {provider: skypilot, cloud: gcp, gpu: H100_SXM, count: 8, region: us-central1}")
    assert [c.key for c in campaign.cells] == [
        "skypilot:H100_SXMx8:on-demand:cloud=lambda",
        "skypilot:H100_SXMx8:on-demand:cloud=gcp",
        "skypilot:H100_SXMx8:spot:cloud=gcp:region=us-central1",
    ]
    with pytest.raises(SpecError, match=r"k.yaml:7 matrix\[0\]: skypilot cells need cloud"):
        keys_campaign("  - {provider: skypilot, gpu: H100_SXM, count: 8}")
    with pytest.raises(SpecError, match=r"matrix\[0\]: cloud is for skypilot cells"):
        keys_campaign("  - {provider: runpod, cloud: lambda, gpu: H100_SXM, count: 8}")


def test_an_aws_on_demand_cell_may_name_a_capacity_reservation_and_it_is_part_of_the_key() -> None:
    (cell,) = keys_campaign("  - {provider: aws, instance_type: p5.48xlarge, nodes: 2, market: on-demand, "
                            "capacity_reservation: cr-0123456789abcdef0}").cells
    assert cell.key == "aws:p5.48xlarge:on-demand:capacity_reservation=cr-0123456789abcdef0:nodes=2"
    for entry, message in [
        ("{provider: aws, instance_type: p5.48xlarge, capacity_reservation: cr-0123456789abcdef0}",
         "capacity_reservation is for aws on-demand cells"),
        ("{provider: runpod, gpu: H100_SXM, count: 8, market: on-demand, capacity_reservation: cr-0123456789abcdef0}",
         "capacity_reservation is for aws on-demand cells"),
        ("{provider: aws, instance_type: p5.48xlarge, market: on-demand, capacity_reservation: my-block}",
         "capacity_reservation"),
    ]:
        assert message in str(spec_error(KEYS_BASE.format(matrix=f"  - {entry}"), "k.yaml"))


def test_keys_are_stable_across_parses() -> None:
    matrix = "  - {provider: local, gpu: cpu, count: [1, 2], market: [spot, on-demand], price_usd_per_hour: 0.5}"
    assert [c.key for c in keys_campaign(matrix).cells] == [c.key for c in keys_campaign(matrix).cells]


def test_key_ignores_price_and_max_attempts() -> None:
    before = keys_campaign("  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 0.5}").cells[0]
    after = keys_campaign("  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 9.0, max_attempts: 7}"
                          ).cells[0]
    assert (before.price_usd_per_hour, before.max_attempts) == (0.5, 4)
    assert (after.price_usd_per_hour, after.max_attempts) == (9.0, 7)
    assert before.key == after.key == "local:cpux2:spot"


def test_key_changes_with_region() -> None:
    east = keys_campaign("  - {provider: aws, instance_type: p5.48xlarge, region: us-east-1}").cells[0]
    west = keys_campaign("  - {provider: aws, instance_type: p5.48xlarge, region: us-west-2}").cells[0]
    none = keys_campaign("  - {provider: aws, instance_type: p5.48xlarge}").cells[0]
    assert east.key == "aws:p5.48xlarge:spot:region=us-east-1"
    assert west.key == "aws:p5.48xlarge:spot:region=us-west-2"
    assert none.key == "aws:p5.48xlarge:spot"


def test_the_shipped_local_smoke_campaign_parses() -> None:
    campaign = load_campaign(REPO / "campaigns" / "local-smoke.yaml")
    assert campaign.spec.name == "local-smoke"
    assert [c.key for c in campaign.cells] == ["local:cpux1:on-demand", "local:cpux2:on-demand"]
    assert [c.max_attempts for c in campaign.cells] == [2, 2]


def test_profile_model_equal_to_target_model_is_accepted() -> None:
    text = edit("    device_batch_size: 2\n", "    model: nanochat-d1\n    device_batch_size: 2\n")
    assert parse_campaign(text, "f.yaml").spec.payload.profile.model == "nanochat-d1"


def test_batch_check_is_skipped_without_the_profile_phase() -> None:
    text = edit("  phases: [preflight, profile]", "  phases: [preflight]")
    text = edit("    count: 2\n", "    count: 3\n", text)
    assert [c.count for c in parse_campaign(text, "f.yaml").cells] == [1, 3]


# ------------------------------------------------------------------------------------------ bad inputs

BLOCK_COUNT_WITH_ZERO = "    count:\n      - 2\n      - 0\n"  # the 0 is on line 22
BLOCK_COUNT_NOT_DIVIDING = "    count:\n      - 2\n      - 3\n"  # the 3 is on line 22

# (id, text, line, path, fragment of the problem)
BAD: list[tuple[str, str, int, str, str]] = [
    ("unknown-top-level-key", edit("budget_usd: 5\n", "budget_usd: 5\nbudgt: 3\n"), 3, "budgt", "unknown key"),
    ("unknown-key-in-target", edit("  vocab_size: 512\n", "  vocab_size: 512\n  modle: x\n"), 6, "target.modle",
     "unknown key"),
    ("unknown-key-in-matrix-entry", edit("    count: 2\n", "    count: 2\n    gpus: 3\n"), 21, "matrix[1].gpus",
     "unknown key"),
    ("unknown-key-in-profile", edit("    sequence_len: 32\n", "    sequence_len: 32\n    batch: 3\n"), 16,
     "payload.profile.batch", "unknown key"),
    ("budget-wrong-type", edit("budget_usd: 5", 'budget_usd: "lots"'), 2, "budget_usd", "valid number"),
    ("count-wrong-type", edit("    count: 2\n", "    count: eight\n"), 20, "matrix[1].count", "valid integer"),
    ("ratio-wrong-type", edit("target_param_data_ratio: 8.5", "target_param_data_ratio: high"), 6,
     "target.target_param_data_ratio", "valid number"),
    ("count-zero", edit("    count: 2\n", "    count: 0\n"), 20, "matrix[1].count", "greater than or equal to 1"),
    ("count-zero-in-list", edit("    count: 2\n", BLOCK_COUNT_WITH_ZERO), 22, "matrix[1].count[1]",
     "greater than or equal to 1"),
    ("budget-negative", edit("budget_usd: 5", "budget_usd: -1"), 2, "budget_usd", "greater than 0"),
    ("budget-zero", edit("budget_usd: 5", "budget_usd: 0"), 2, "budget_usd", "greater than 0"),
    ("max-attempts-zero", edit("  max_attempts: 2", "  max_attempts: 0"), 10, "defaults.max_attempts",
     "greater than or equal to 1"),
    ("bad-name", edit("name: t", "name: 'my campaign'"), 1, "name", "is not a campaign name"),
    ("unknown-provider", edit("  - provider: local", "  - provider: lambda"), 18, "matrix[1].provider",
     "'local', 'ssh', 'runpod', 'vastai', 'aws' or 'skypilot'"),
    ("unknown-market", edit("    gpu: cpu\n", "    gpu: cpu\n    market: reserved\n"), 20, "matrix[1].market",
     "'spot' or 'on-demand'"),
    ("unknown-market-in-list", edit("    gpu: cpu\n", "    gpu: cpu\n    market: [spot, reserved]\n"), 20,
     "matrix[1].market[1]", "'spot' or 'on-demand'"),
    ("unknown-default-market", edit("  market: on-demand", "  market: cheap"), 9, "defaults.market",
     "'spot' or 'on-demand'"),
    ("missing-matrix", BASE.split("matrix:")[0], 1, "matrix", "missing required key"),
    ("missing-target", edit("target:\n  model: nanochat-d1\n  vocab_size: 512\n  target_param_data_ratio: 8.5\n"
                            "  total_batch_size: 128\n", ""), 1, "target", "missing required key"),
    ("empty-matrix", BASE.split("matrix:")[0] + "matrix: []\n", 16, "matrix", "at least 1 item"),
    ("matrix-entry-not-a-mapping", edit("  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}",
                                        "  - local"), 17, "matrix[0]", "valid dictionary"),
    ("empty-list-in-matrix-entry", edit("    count: 2\n", "    count: []\n"), 20, "matrix[1].count", "empty list"),
    ("duplicate-top-level-key", BASE + "budget_usd: 6\n", 22, "budget_usd",
     "duplicate key 'budget_usd' (first at line 2)"),
    ("duplicate-key-in-matrix-entry", edit("    count: 2\n", "    count: 2\n    gpu: cpu\n"), 21, "matrix[1].gpu",
     "duplicate key 'gpu' (first at line 19)"),
    ("duplicate-key-in-flow-entry", edit("count: 1, price", "count: 1, count: 2, price"), 17, "matrix[0].count",
     "duplicate key 'count' (first at line 17)"),
    ("unknown-model-preset", edit("  model: nanochat-d1", "  model: gpt5"), 4, "target.model",
     "unknown model preset 'gpt5'"),
    ("profile-model-differs", edit("    device_batch_size: 2\n", "    model: nanochat-d2\n    device_batch_size: 2\n"),
     14, "payload.profile.model", "differs from target.model 'nanochat-d1'"),
    ("unknown-phase", edit("[preflight, profile]", "[preflight, profile, nccl]"), 12, "payload.phases",
     "unknown phase 'nccl'"),
    ("phase-listed-twice", edit("[preflight, profile]", "[preflight, profile, preflight]"), 12, "payload.phases",
     "listed twice"),
    ("no-phases", edit("[preflight, profile]", "[]"), 12, "payload.phases", "at least 1 item"),
    ("local-cell-without-price", edit("    price_usd_per_hour: 1.0\n", ""), 18, "matrix[1]",
     "local cells need price_usd_per_hour"),
    ("runpod-cell-with-price", edit("  - provider: local", "  - provider: runpod"), 18, "matrix[1]",
     "runpod uses its own price"),
    ("cell-without-gpu-count-or-instance-type", edit("    gpu: cpu\n    count: 2\n", ""), 18, "matrix[1]",
     "a cell needs gpu and count"),
    ("cell-with-gpu-but-no-count", edit("    count: 2\n", ""), 18, "matrix[1]", "a cell needs gpu and count"),
    ("total-batch-not-divisible", edit("    count: 2\n", "    count: 3\n"), 20, "matrix[1].count",
     "2 × 32 × 3 = 192"),
    ("total-batch-not-divisible-in-list", edit("    count: 2\n", BLOCK_COUNT_NOT_DIVIDING), 22,
     "matrix[1].count[1]", "2 × 32 × 3 = 192"),
    ("repeated-cell", edit("    count: 2\n", "    count: 1\n"), 18, "matrix[1]",
     "repeats cell local:cpux1:on-demand of matrix[0]"),
    ("yaml-syntax-error", edit("budget_usd: 5", "budget_usd: 5: 6"), 2, "", "YAML syntax error"),
    ("yaml-bad-indentation", edit("  vocab_size: 512", "   vocab_size: 512"), 5, "", "YAML syntax error"),
    ("not-a-mapping", "- name: t\n- budget_usd: 5\n", 1, "", "must be a mapping"),
]


@pytest.mark.parametrize(("text", "line", "path", "fragment"), [case[1:] for case in BAD],
                         ids=[case[0] for case in BAD])
def test_bad_input_names_file_line_and_path(text: str, line: int, path: str, fragment: str) -> None:
    err = spec_error(text)
    prefix = f"f.yaml:{line} {path}: " if path else f"f.yaml:{line}: "
    assert str(err).startswith(prefix), str(err)
    assert fragment in str(err)
    assert (err.file, err.line, err.path) == ("f.yaml", line, path)
    assert err.exit_code == 2


@pytest.mark.parametrize("text", ["", "# only a comment\n", "\n\n"], ids=["empty", "only-comment", "blank-lines"])
def test_empty_file(text: str) -> None:
    err = spec_error(text)
    assert str(err).startswith("f.yaml: the file is empty; a campaign needs name, budget_usd, target, matrix")
    assert err.line is None


def test_every_problem_is_reported_one_per_line() -> None:
    text = edit("budget_usd: 5\n", "budget_usd: 5\nbudgt: 3\n")
    text = edit("  vocab_size: 512\n", "  vocab_size: 512\n  modle: x\n", text)
    lines = str(spec_error(text)).splitlines()
    assert len(lines) == 2
    assert sorted(line.split(": ")[0] for line in lines) == ["f.yaml:3 budgt", "f.yaml:7 target.modle"]


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.yaml"
    with pytest.raises(SpecError) as info:
        load_campaign(path)
    assert str(info.value) == f"{path}: no such file; check the path"


def test_directory_instead_of_a_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as info:
        load_campaign(tmp_path)
    assert str(info.value).startswith(f"{tmp_path}: cannot read the file (")


# ------------------------------------------------------------------------------------------------ CLI


def _by_id(case_id: str) -> tuple[str, int, str, str]:
    for cid, text, line, path, fragment in BAD:
        if cid == case_id:
            return text, line, path, fragment
    raise KeyError(case_id)


CLI_CASES = ["unknown-top-level-key", "unknown-key-in-matrix-entry", "budget-wrong-type", "count-wrong-type",
             "count-zero", "count-zero-in-list", "budget-negative", "unknown-provider", "unknown-market",
             "missing-matrix", "yaml-syntax-error", "duplicate-top-level-key", "duplicate-key-in-matrix-entry",
             "local-cell-without-price", "repeated-cell"]


def _assert_clean_usage_error(result: subprocess.CompletedProcess[str], home: Path) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "Traceback" not in result.stdout
    assert not (home / "benchctl.db").exists()


@pytest.mark.parametrize("case_id", CLI_CASES)
def test_cli_rejects_bad_file(case_id: str, tmp_path: Path, home: Path) -> None:
    text, line, path, fragment = _by_id(case_id)
    file = tmp_path / "bad.yaml"
    file.write_text(text)
    result = cli_here("run", str(file), home=home)
    _assert_clean_usage_error(result, home)
    where = f"{file}:{line} {path}: " if path else f"{file}:{line}: "
    assert f"error: {where}" in result.stderr
    assert fragment in result.stderr


@pytest.mark.parametrize("text", ["", "# only a comment\n"], ids=["empty", "only-comment"])
def test_cli_rejects_empty_file(text: str, tmp_path: Path, home: Path) -> None:
    file = tmp_path / "empty.yaml"
    file.write_text(text)
    result = cli_here("run", str(file), home=home)
    _assert_clean_usage_error(result, home)
    assert f"error: {file}: the file is empty" in result.stderr


def test_cli_rejects_missing_file(tmp_path: Path, home: Path) -> None:
    file = tmp_path / "nope.yaml"
    result = cli_here("run", str(file), home=home)
    _assert_clean_usage_error(result, home)
    assert f"error: {file}: no such file; check the path" in result.stderr


def test_cli_rejects_a_directory(tmp_path: Path, home: Path) -> None:
    folder = tmp_path / "campaigns"
    folder.mkdir()
    result = cli_here("run", str(folder), home=home)
    _assert_clean_usage_error(result, home)
    assert str(folder) in result.stderr
    assert "is a directory" in result.stderr


# ------------------------------------------------------------------------------------------------ docs


def _fields(model: type[BaseModel]) -> set[str]:
    return set(model.model_fields)


def test_reference_documents_every_key() -> None:
    doc = (REPO / "docs" / "campaign-reference.md").read_text()
    from benchctl.campaign.spec import ProvidersSpec, WorkloadTarget
    from benchctl.provisioners.registry import PROVIDERS
    from benchctl.provisioners.ssh import SSHNode

    settings = [entry.settings for entry in PROVIDERS.values() if entry.settings is not None]
    models = (CampaignSpec, Target, WorkloadTarget, Defaults, PayloadSpec, ProfileSpec, CellSpec, ProvidersSpec,
              SSHNode, *settings)
    keys = set().union(*(_fields(m) for m in models))
    missing = sorted(k for k in keys if f"`{k}`" not in doc and f".{k}`" not in doc)
    assert missing == []


@pytest.mark.parametrize("name", ["local-smoke.yaml", "h100-matrix.yaml", "h100-matrix-d12.yaml",
                                  "skypilot-lambda.yaml"])
def test_shipped_campaign_files_parse(name: str) -> None:
    from benchctl.campaign.spec import load_campaign
    from benchctl.results.cost import steps_for

    campaign = load_campaign(REPO / "campaigns" / name)
    assert campaign.cells and len({c.key for c in campaign.cells}) == len(campaign.cells)
    if name == "h100-matrix.yaml":
        assert sorted(c.key for c in campaign.cells) == sorted([
            "runpod:H100_SXMx8:on-demand", "runpod:H100_PCIEx8:on-demand", "runpod:H100_NVLx8:on-demand",
            "vastai:H100_SXMx8:spot:min_vcpus=128", "aws:p5.48xlarge:spot:region=us-east-1"])
        target = campaign.spec.target
        assert steps_for(target.model, target.target_param_data_ratio, target.total_batch_size) == 14_889


@pytest.mark.parametrize(("collectives", "path", "message"), [
    ("{max_bytes: lots}", "payload.collectives.max_bytes", "not a size"),
    ("{min_bytes: 1G, max_bytes: 1M}", "payload.collectives", "min_bytes (1073741824) is above max_bytes"),
    ("{ops: [all_reduce, allreduce]}", "payload.collectives.ops[1]", "input should be"),
    ("{factor: 1}", "payload.collectives.factor", "greater than or equal to 2"),
])
def test_bad_collectives_settings(collectives: str, path: str, message: str) -> None:
    import re

    text = re.sub(r"(?m)^  collectives: .*$", f"  collectives: {collectives}",
                  (REPO / "campaigns" / "local-smoke.yaml").read_text())
    with pytest.raises(SpecError) as err:
        parse_campaign(text, "c.yaml")
    assert f" {path}:" in str(err.value) and message in str(err.value)


def test_collectives_sizes_accept_units() -> None:
    from benchctl.campaign.spec import load_campaign

    campaign = load_campaign(REPO / "campaigns" / "h100-matrix.yaml")
    config = campaign.collectives_config()
    assert (config.min_bytes, config.max_bytes, config.ops) == (8, 8 * 1024**3, ["all_reduce", "all_gather",
                                                                                 "reduce_scatter"])


def test_env_is_a_matrix_axis_and_part_of_the_key() -> None:
    text = (REPO / "campaigns" / "local-smoke.yaml").read_text().replace(
        "  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 1.00}",
        "  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 1.00,\n"
        "     env: [{}, {NCCL_ALGO: Ring, NCCL_MIN_NCHANNELS: 4}, {GLOO_SOCKET_IFNAME: lo}]}")
    cells = parse_campaign(text, "e.yaml").cells
    assert [c.key for c in cells] == [
        "local:cpux1:on-demand", "local:cpux2:on-demand",
        "local:cpux2:on-demand:env=NCCL_ALGO=Ring,NCCL_MIN_NCHANNELS=4",
        "local:cpux2:on-demand:env=GLOO_SOCKET_IFNAME=lo"]
    assert cells[2].env == {"NCCL_ALGO": "Ring", "NCCL_MIN_NCHANNELS": "4"}


@pytest.mark.parametrize(("env", "message"), [
    ("{HF_TOKEN: abc}", "looks like a secret"),
    ("{AWS_SECRET_ACCESS_KEY: x}", "looks like a secret"),
    ("{'1BAD': x}", "is not an environment variable name"),
    ("{NCCL_ALGO: [Ring]}", "give a plain value"),
])
def test_bad_env(env: str, message: str) -> None:
    text = (REPO / "campaigns" / "local-smoke.yaml").read_text().replace(
        "count: 2, price_usd_per_hour: 1.00}", f"count: 2, price_usd_per_hour: 1.00, env: {env}}}")
    with pytest.raises(SpecError) as err:
        parse_campaign(text, "e.yaml")
    assert "matrix[1].env" in str(err.value) and message in str(err.value)


MERGE_BASE = """name: m
budget_usd: 5
target: {model: nanochat-d2, vocab_size: 8192, target_param_data_ratio: 8.5, total_batch_size: 512}
payload: {profile: {device_batch_size: 4, sequence_len: 64}}
matrix:
  - &one {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}
  - {<<: *one, count: 2}
"""


def test_yaml_merge_keys_share_matrix_entries() -> None:
    cells = parse_campaign(MERGE_BASE, "m.yaml").cells
    assert [(c.key, c.price_usd_per_hour) for c in cells] == [("local:cpux1:on-demand", 0.5),
                                                              ("local:cpux2:on-demand", 0.5)]


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("count: 2}", "count: !!int abc}", "m.yaml:7 matrix[1].count: cannot read this value"),
    ("count: 2}", "count: !custom 1}", "m.yaml:7 matrix[1].count: cannot read this value"),
    ("count: 2}", "count: '2'}", "m.yaml:7 matrix[1].count: input should be a valid integer"),
    ("count: 2}", "count: true}", "m.yaml:7 matrix[1].count: input should be a valid integer"),
    ("budget_usd: 5", "budget_usd: .inf", "m.yaml:2 budget_usd: input should be a finite number"),
    ("price_usd_per_hour: 0.5}", "price_usd_per_hour: .nan}",
     "m.yaml:6 matrix[0].price_usd_per_hour: input should be a finite"),
    ("name: m", "name: m\n? [a]: x", "m.yaml:2: cannot read this value"),
    ("{<<: *one, count: 2}", "{<<: [1], count: 2}", "m.yaml:7 matrix[1]: bad merge key"),
    ("target_param_data_ratio: 8.5", "target_param_data_ratio: 0.00001",
     "m.yaml:3 target.target_param_data_ratio: this target trains for less than one step"),
])
def test_odd_yaml_and_values_are_clean_errors(old: str, new: str, expected: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_campaign(MERGE_BASE.replace(old, new), "m.yaml")
    assert str(err.value).startswith(expected)


def test_preflight_thresholds_are_checked() -> None:
    base = (REPO / "campaigns" / "local-smoke.yaml").read_text()
    good = base.replace("payload:\n", "payload:\n  preflight: {thresholds: {budget_s: 30, shm_min_mb: 512}}\n")
    assert parse_campaign(good, "p.yaml").spec.payload.preflight.thresholds == {"budget_s": 30, "shm_min_mb": 512}
    bad = base.replace("payload:\n", "payload:\n  preflight: {thresholds: {shm_min: 512}}\n")
    with pytest.raises(SpecError) as err:
        parse_campaign(bad, "p.yaml")
    message = str(err.value)
    assert "payload.preflight.thresholds" in message and "unknown preflight threshold 'shm_min'" in message

"""Images that can run the profile: what each shipped campaign's cells run (sshd where the provider
needs it, a C compiler for torch.compile), the plan's warning for an image known to have no
compiler (PyTorch's -runtime images, pytorch/pytorch issue 116696), the memory judged eager there,
and eager rows shown as such on the leaderboard."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchctl.campaign.images import cell_image, compile_warnings, no_compiler, runs_eager
from benchctl.campaign.memory_fit import cell_fit
from benchctl.campaign.spec import load_campaign, parse_campaign
from benchctl.provisioners import vastai
from benchctl.provisioners.runpod import provider as runpod
from benchctl.results.leaderboard import COLUMNS, display_row
from tests.conftest import REPO

RUNTIME = "pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime"
DEFAULTS = {"runpod": runpod.DEFAULT_IMAGE, "vastai": vastai.DEFAULT_IMAGE}
"""What a container provider runs when the campaign names no image."""


@pytest.mark.parametrize(("image", "known"), [
    (RUNTIME, True), ("pytorch/pytorch:2.4.1-cuda12.4-cudnn9-runtime", True),
    ("ghcr.io/pytorch/pytorch-nightly:2.9.0.dev20250801-cuda12.8-cudnn9-runtime", True),
    ("pytorch/pytorch:2.10.0-cuda12.8-cudnn9-runtime", False),  # gcc from PR 170235 on
    ("pytorch/pytorch:2.8.0-cuda12.8-cudnn9-devel", False), (runpod.DEFAULT_IMAGE, False), (None, False),
])
def test_pytorch_runtime_images_before_2_10_are_known_to_have_no_compiler(image: str | None, known: bool) -> None:
    assert (no_compiler(image) is not None) is known


@pytest.mark.parametrize("path", sorted((REPO / "campaigns").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_cell_runs_an_image_that_can_compile(path: Path) -> None:
    """Today's h100-matrix campaigns sent PyTorch's -runtime image to RunPod (no sshd: never reachable)
    and Vast (no compiler: torch.compile fails at the first step, every attempt)."""
    campaign = load_campaign(path)
    for cell in campaign.cells:
        image = cell_image(campaign, cell) or DEFAULTS.get(cell.provider)
        assert no_compiler(image) is None, f"{path.name} {cell.key}: {image}"
        if cell.provider == "runpod":  # RunPod reaches pods only through the image's own sshd
            assert image is not None and image.startswith("runpod/"), f"{path.name} {cell.key}: {image}"
    assert compile_warnings(campaign, campaign.cells) == []


def _campaign(image: str, compile_: bool = True) -> str:
    return f"""
name: img
budget_usd: 100
target: {{model: nanochat-d26, target_param_data_ratio: 8.5, total_batch_size: 524288}}
defaults: {{image: "{image}"}}
payload:
  phases: [preflight, profile]
  profile: {{device_batch_size: 16, sequence_len: 2048, compile: {str(compile_).lower()}}}
matrix:
  - {{provider: runpod, gpu: H100_SXM, count: 8}}
  - {{provider: vastai, gpu: H100_SXM, count: 8}}
  - {{provider: aws, instance_type: p5.48xlarge, region: us-east-1}}
"""


def test_a_runtime_image_is_warned_at_plan_and_its_cells_judged_eager() -> None:
    campaign = parse_campaign(_campaign(RUNTIME), "img.yaml")
    runpod_cell, vast_cell, aws_cell = campaign.cells
    assert runs_eager(campaign, runpod_cell)
    (warning,) = compile_warnings(campaign, campaign.cells)
    assert RUNTIME in warning and "116696" in warning and "2 cell(s)" in warning and "eager" in warning
    assert runs_eager(campaign, vast_cell) and not runs_eager(campaign, aws_cell), "aws runs the AMI, not the image"
    # compiled, d26 at 16 fits an 80 GB card; eager it does not: the plan judges what will run
    assert not cell_fit(campaign, vast_cell).fits and cell_fit(campaign, aws_cell).fits

    devel = parse_campaign(_campaign("pytorch/pytorch:2.8.0-cuda12.8-cudnn9-devel"), "img.yaml")
    assert compile_warnings(devel, devel.cells) == [] and all(cell_fit(devel, c).fits for c in devel.cells)
    eager = parse_campaign(_campaign(RUNTIME, compile_=False), "img.yaml")
    assert compile_warnings(eager, eager.cells) == [], "compile: false measures eager on purpose: nothing to warn"


def test_eager_gpu_rows_say_so_on_the_leaderboard() -> None:
    row = {name: None for name in COLUMNS} | {"env": {}, "flags": ["eager_fallback"], "gpu": "H100_SXM", "count": 8,
                                              "precision": "bf16", "compiled": False, "status": "done"}
    shown = display_row(row)
    assert shown["precision"] == "bf16 eager" and shown["flags"] == "eager_fallback"
    assert display_row(row | {"compiled": True})["precision"] == "bf16"
    assert display_row(row | {"precision": "f32"})["precision"] == "f32", "CPU never compiles: nothing to flag"

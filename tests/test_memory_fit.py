"""``plan`` shows each cell's memory estimate against its GPU; ``plan`` and ``run`` refuse, before
anything is rented or written, a cell whose profile cannot fit."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchctl.campaign.memory_fit import cell_fit
from benchctl.campaign.spec import parse_campaign
from tests.test_plan import SKY_CAMPAIGN, _plan_in_process, sky_standin

__all__ = ["sky_standin"]  # the fixture, shared with test_plan

# the spec's default device batch (32), compiled (the default): d26 needs ≈128 GiB per GPU at 32, ≈77 at 16,
# ≈51 at 8 on 8 GPUs; eager ≈204, ≈109, ≈62
DEFAULT_BATCH = SKY_CAMPAIGN.replace("payload: {profile: {device_batch_size: 8, sequence_len: 2048}}\n", "")
EAGER_16 = SKY_CAMPAIGN.replace("device_batch_size: 8,", "device_batch_size: 16, compile: false,")


def _main_in_process(*args: str) -> int:
    from benchctl.cli.main import main

    try:
        main(list(args))
    except SystemExit as exc:
        return int(exc.code or 0)
    return 0


def test_plan_shows_the_estimate_and_the_cards_memory(home: Path, tmp_path: Path, sky_standin,  # type: ignore[no-untyped-def]
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sky.yaml"
    path.write_text(SKY_CAMPAIGN)
    assert _plan_in_process(str(path), "--format", "json") == 0
    rows = json.loads(capsys.readouterr().out)["cells"]
    assert [(r["mem_est_gib"], r["gpu_mem_gib"]) for r in rows] == [(51.0, 79.6), (51.0, 79.6)]
    assert _plan_in_process(str(path)) == 0
    table = capsys.readouterr().out
    assert "mem_est_gib" in table and "gpu_mem_gib" in table and " 51 " in table  # 51.0 as the table prints it


def test_plan_refuses_a_cell_that_cannot_fit_and_says_what_to_set(home: Path, tmp_path: Path, sky_standin,  # type: ignore[no-untyped-def]
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sky.yaml"
    path.write_text(DEFAULT_BATCH)
    assert _plan_in_process(str(path)) == 2
    err = capsys.readouterr().err
    assert err.strip() == (
        "error: cell skypilot:H100_SXMx8:on-demand:cloud=lambda: nanochat-d26 at device_batch_size 32 needs "
        "≈128.3 GiB per GPU, more than the 79.6 GiB of one H100_SXM; set payload.profile.device_batch_size: 16 "
        "(gradient accumulation ×2 keeps total_batch_size 524288). Nothing was rented.")
    assert sky_standin.launched == [] and not (home / "benchctl.db").exists()


def test_an_eager_profile_is_judged_by_the_eager_estimate(home: Path, tmp_path: Path, sky_standin,  # type: ignore[no-untyped-def]
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    # compiled, d26 at 16 fits an 80 GB card (upstream's setting); without torch.compile it does not
    path = tmp_path / "sky.yaml"
    path.write_text(EAGER_16)
    assert _plan_in_process(str(path)) == 2
    err = capsys.readouterr().err
    assert "device_batch_size 16 needs ≈109.2 GiB per GPU" in err
    assert "set payload.profile.device_batch_size: 8 (gradient accumulation ×4" in err
    path.write_text(EAGER_16.replace(" compile: false,", ""))
    assert _plan_in_process(str(path), "--format", "json") == 0
    assert [r["mem_est_gib"] for r in json.loads(capsys.readouterr().out)["cells"]] == [76.8, 76.8]


def test_run_refuses_before_any_provider_or_database_is_touched(home: Path, tmp_path: Path, sky_standin,  # type: ignore[no-untyped-def]
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    sky_standin.enabled = []  # were the provider asked first, run would stop on its credentials instead
    path = tmp_path / "sky.yaml"
    path.write_text(DEFAULT_BATCH.replace("count: 8", "count: 4"))
    assert _main_in_process("run", str(path), "--yes") == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cell skypilot:H100_SXMx4:on-demand:cloud=lambda: nanochat-d26 at device_batch_size "
                          "32 needs ≈")
    assert "set payload.profile.device_batch_size: 16 (gradient accumulation ×4" in err and "Traceback" not in err
    assert sky_standin.launched == [] and not (home / "benchctl.db").exists()


def test_cpu_cells_and_unknown_gpus_are_not_judged(tmp_path: Path) -> None:
    text = SKY_CAMPAIGN.replace("gpu: H100_SXM, count: 8, market: on-demand",
                                "gpu: GH200, count: 8, market: on-demand")  # no card memory in the table
    campaign = parse_campaign(text, str(tmp_path / "c.yaml"))
    fits = [cell_fit(campaign, cell) for cell in campaign.cells]
    assert [(f.mem_est_gib, f.gpu_mem_gib, f.fits) for f in fits] == [(None, None, True), (51.0, 79.6, True)]


@pytest.mark.parametrize("name", ["h100-matrix.yaml", "skypilot-lambda.yaml", "h100-2node.yaml"])
def test_the_shipped_d26_campaigns_run_upstreams_device_batch_and_fit(name: str) -> None:
    """Issue 28 item 3: upstream's device batch 16 where the estimate at the cell's world size fits the card
    (8 ranks: 76.8 GiB against an 80 GB card's 79.6; one rank measured 80.3 on an H200, which is why the
    estimate, not the world-size-1 figure, decides)."""
    from benchctl.campaign.spec import load_campaign

    campaign = load_campaign(Path(__file__).resolve().parent.parent / "campaigns" / name)
    assert campaign.spec.target.model == "nanochat-d26"
    assert campaign.spec.payload.profile.device_batch_size == 16
    for cell in campaign.cells:
        fit = cell_fit(campaign, cell)
        assert cell.world_size >= 8 and fit.fits, (cell.key, fit)
        assert fit.mem_est_gib is None or fit.mem_est_gib <= 77.0


PUBLISHED_FP8_SAVING_GIB = 9e9 / 1024**3
"""Upstream's published fp8 saving at d26 (karpathy/nanochat dev/LOG.md, 2026-02-02: about 9 GB),
read as 9e9 bytes: published there, not measured here."""


def test_fp8_is_judged_as_bf16_even_where_the_published_saving_would_let_it_through(tmp_path: Path) -> None:
    """Issue 28 item 3: the estimate takes no fp8 term (payload.workloads.memory_estimate says why): d26 at device
    batch 16 on one H100 is refused at fp8 as at bf16, although 82.4 GiB less upstream's ≈8.4 GiB would fit."""
    one_gpu = SKY_CAMPAIGN.replace("device_batch_size: 8,", "device_batch_size: 16,").replace("count: 8", "count: 1")
    fits = {}
    for precision in ("bf16", "fp8"):
        text = one_gpu.replace("sequence_len: 2048}", f"sequence_len: 2048, precision: {precision}}}")
        campaign = parse_campaign(text, str(tmp_path / f"{precision}.yaml"))
        assert campaign.spec.payload.profile.precision == precision
        fits[precision] = cell_fit(campaign, campaign.cells[0])
    assert fits["fp8"] == fits["bf16"]
    fit = fits["fp8"]
    assert fit.mem_est_gib is not None and fit.gpu_mem_gib is not None
    assert not fit.fits, fit
    assert fit.mem_est_gib - PUBLISHED_FP8_SAVING_GIB < fit.gpu_mem_gib  # the choice matters here

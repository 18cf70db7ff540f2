"""`benchctl predict`: JSON keys and sources, bad input (exit 2), and calibration from the store's own
results (an imported measurement changes the next prediction; --no-store ignores it)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import cli_here

D26 = "{model: nanochat-d26, target_param_data_ratio: 8.5, total_batch_size: 524288}"
H100_MEASURED = f"""\
- {{provider: lambda, gpu: H100_SXM, count: 8, market: on-demand, hourly_usd: 23.92, step_time_ms: 702,
   optimizer_ms: 40, precision: bf16, attention: flash_attn3, interconnect: nvswitch_mesh NV18,
   busbw_gbps: 300.0, busbw_bytes: 1073741824, target: {D26}}}
"""
ARGS = ("predict", "--model", "nanochat-d26", "--gpu", "H100_SXM", "--count", "8", "--format", "json")


def predicted(home: Path, *extra: str) -> dict:
    result = cli_here(*ARGS, *extra, home=home)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_json_carries_the_parts_the_range_and_every_source(home: Path) -> None:
    report = predicted(home)
    for key in ("step_time_ms", "step_time_ms_low", "step_time_ms_high", "compute_ms", "comm_ms", "sources"):
        assert key in report
    assert {s["kind"] for s in report["sources"].values()} <= {"published", "assumed"}  # an empty store


def test_a_stored_measurement_refines_the_prediction(home: Path, tmp_path: Path) -> None:
    before = predicted(home)
    rows = tmp_path / "rows.yaml"
    rows.write_text(H100_MEASURED)
    assert cli_here("import", str(rows), "--campaign", "published", home=home).returncode == 0
    after = predicted(home)
    assert after["sources"]["mfu"]["kind"] == "imported"
    assert "published/lambda:H100_SXMx8:on-demand" in after["sources"]["mfu"]["source"]
    assert after["compute_ms"] == pytest.approx(702 - 40)  # its forward+backward, now its own MFU
    assert after["sources"]["busbw_gbps"]["value"] == 300.0 and after["sources"]["busbw_gbps"]["kind"] == "imported"
    assert after["step_time_ms"] != pytest.approx(before["step_time_ms"])
    assert predicted(home, "--no-store")["step_time_ms"] == pytest.approx(before["step_time_ms"])


def test_any_model_by_parameter_count(home: Path) -> None:
    result = cli_here("predict", "--params", "1000000000", "--flops-per-token", "6e9", "--gpu", "H100_PCIE",
                      "--count", "8", "--format", "json", home=home)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["sources"]["busbw_gbps"]["value"] == 40  # PCIe only, the published figure
    assert report["comm_total_ms"] > 0


@pytest.mark.parametrize(("args", "says"), [
    (("--model", "nanochat-d26", "--gpu", "H100", "--count", "8"), "say which"),
    (("--model", "llama", "--gpu", "H100_SXM", "--count", "8"), "--params"),
    (("--gpu", "H100_SXM", "--count", "8"), "give --model"),
    (("--params", "100", "--gpu", "H100_SXM", "--count", "8"), "--flops-per-token"),
])
def test_bad_input_is_one_line_and_exit_2(home: Path, args: tuple[str, ...], says: str) -> None:
    result = cli_here("predict", *args, home=home)
    assert result.returncode == 2 and says in result.stderr and "Traceback" not in result.stderr

"""The step-time model's arithmetic on hand-computed inputs, its sources, and its fit."""

from __future__ import annotations

import math

import pytest

from benchctl.payload.workloads.param_groups import Collective
from benchctl.predict.calibration import Calibration, ComputePoint, default_points, defaults
from benchctl.predict.model import Figure, Inputs, breakdown, collective_ms, predict
from benchctl.predict.workload import OptimizerGroup, Workload, custom, nanochat, newton_schulz_flops


def fig(value: float, low: float | None = None, high: float | None = None) -> Figure:
    return Figure(value, value if low is None else low, value if high is None else high, "assumed", "test")


def inputs(busbw: float | None = 100.0, latency: float = 10.0, mfu: Figure | None = None) -> Inputs:
    return Inputs(peak_flops=fig(1e15), mfu=mfu or fig(0.5), optimizer_mfu=fig(0.25), hbm_tbps=fig(1.0),
                  adamw_bytes_per_element=fig(16), fp8_linear_speedup=fig(1.0),
                  busbw_gbps=None if busbw is None else fig(busbw), latency_us=None if busbw is None else fig(latency))


def test_collective_time_is_latency_plus_bytes_times_bus_factor_over_busbw() -> None:
    # 1e9 bytes of bf16 reduce-scatter at 8 ranks: factor 7/8; 1e9 × 0.875 / 100e9 s = 8.75 ms, + 10 µs
    op = Collective("reduce_scatter", "bf16", 500_000_000)
    assert collective_ms(op, 8, 100.0, 10.0) == pytest.approx(8.76)
    # all_reduce: factor 2·7/8
    assert collective_ms(Collective("all_reduce", "f32", 250_000_000), 8, 100.0, 0.0) == pytest.approx(17.5)


def test_compute_is_flops_per_rank_over_peak_times_mfu() -> None:
    work = Workload("w", 3e9, 1e9, 1_000_000, (), world_size=8)
    # 4e9 × 1e6 / 8 = 5e14 FLOPs per rank at 0.5 × 1e15 = 1 s
    assert breakdown(work, inputs()).compute_ms == pytest.approx(1000.0)


def test_fp8_speeds_up_only_the_linear_layers() -> None:
    work = Workload("w", 3e9, 1e9, 1_000_000, (), world_size=8)
    fp8 = Inputs(**{**inputs().__dict__, "fp8_linear_speedup": fig(1.5)})
    # (3e9 / 1.5 + 1e9) × 1e6 / 8 = 3.75e14 at 5e14 FLOP/s = 750 ms
    assert breakdown(work, fp8).compute_ms == pytest.approx(750.0)


def test_optimizer_timeline_overlaps_updates_with_the_queued_collectives() -> None:
    # two groups, each: reduce-scatter 10 ms, update 4 ms, all-gather 10 ms (busbw chosen so), no latency.
    # NCCL stream: RS1 0-10, RS2 10-20; compute: U1 10-14, U2 20-24; AG1 queued behind RS2: 20-30; AG2 30-40.
    rs = Collective("reduce_scatter", "bf16", 500_000_000)  # 1e9 B × 7/8 / 87.5e9 = 10 ms
    ag = Collective("all_gather", "bf16", 500_000_000)
    update = OptimizerGroup("g", (rs, ag), ns_flops_per_matrix=1e12, matrices_per_rank=1)  # 1e12 / 2.5e14 = 4 ms
    work = Workload("w", 0.0, 0.0, 1, (update, update), world_size=8)
    parts = breakdown(work, inputs(busbw=87.5, latency=0.0))
    assert parts.update_ms == pytest.approx(8.0)
    assert parts.comm_total_ms == pytest.approx(40.0)
    assert parts.comm_ms == pytest.approx(40.0 - 8.0)  # the step ends with AG2 at 40 ms


def test_one_gpu_has_no_communication() -> None:
    work = nanochat("nanochat-d12", 1, 65_536)
    parts = breakdown(work, inputs(busbw=None))
    assert parts.comm_ms == 0 and parts.comm_total_ms == 0


def test_data_parallel_hides_the_all_reduce_behind_the_backward() -> None:
    work = custom(params=100 * 2**20, flops_per_token=6e9, world_size=8, tokens_per_step=1000)
    assert len(work.groups[0].collectives) == 8  # 200 MiB of bf16 gradients in 25 MiB buckets
    parts = breakdown(work, inputs(busbw=1000.0, latency=0.0))
    bucket = 25 * 2**20 * 2 * 7 / 8 / 1000e9 * 1000
    assert parts.comm_ms == pytest.approx(bucket)  # compute 6e9×1000/8/5e14 s = 1.5 ms: the last bucket shows


def test_newton_schulz_flops() -> None:
    # r=2, c=3: 5 × (4·4·3 + 2·8) = 5 × 64
    assert newton_schulz_flops(3, 2) == 320


def test_flops_per_token_match_the_payload_model() -> None:
    torch = pytest.importorskip("torch")
    from benchctl.payload.workloads.model import build_model
    from benchctl.payload.workloads.presets import model_dims

    model = build_model(model_dims("nanochat-d2"), 256, torch.device("meta"))
    assert nanochat("nanochat-d2", 1, 1, seq_len=256).flops_per_token == pytest.approx(model.flops_per_token(256))


def test_prediction_json_keys_and_sources() -> None:
    work = nanochat("nanochat-d26", 8, 524_288)
    report = predict(work, Calibration().inputs("H100_SXM", 8, 1, "bf16", None, work)).as_dict()
    for key in ("step_time_ms", "step_time_ms_low", "step_time_ms_high", "compute_ms", "comm_ms", "sources"):
        assert key in report
    assert report["step_time_ms_low"] < report["step_time_ms"] < report["step_time_ms_high"]
    assert report["step_time_ms"] == pytest.approx(report["compute_ms"] + report["optimizer_update_ms"]
                                                   + report["comm_ms"])
    for name in ("peak_flops", "mfu", "busbw_gbps", "latency_us"):
        source = report["sources"][name]
        assert source["source"] and source["kind"] in ("measured", "imported", "published", "assumed")
    assert "H200" in report["sources"]["mfu"]["source"]  # borrowed from the H200 points, and says so


def test_defaults_are_data_with_a_source_each() -> None:
    data = defaults()
    for name, entry in data["interconnects"].items():
        if not name.startswith("_"):
            assert entry["source"] and entry["low"] <= entry["busbw_gbps"] <= entry["high"]
    assert all(p["source"] for p in data["compute_points"])


def test_a_measured_point_changes_the_prediction() -> None:
    work = nanochat("nanochat-d26", 8, 524_288)
    before = predict(work, Calibration().inputs("H100_SXM", 8, 1, "bf16", None, work))
    # an H100 measured at 700 ms with 650 ms of forward and backward: MFU of its own, no longer H200's
    point = ComputePoint("H100_SXM", "bf16", work, 700.0, 650.0, None, "measured", "measured in this store: c/x")
    after = predict(work, Calibration().with_points([point]).inputs("H100_SXM", 8, 1, "bf16", None, work))
    assert after.mid.compute_ms == pytest.approx(650.0)
    assert after.mid.step_ms < before.mid.step_ms
    assert after.inputs.mfu.kind == "measured"


def test_mfu_fit_is_a_line_in_log_flops() -> None:
    points = default_points()
    cal = Calibration(points[1:])  # d20 and d26: d12 is extrapolated along their line
    mfus = [cal.point_mfu(p) for p in points]
    xs = [math.log(p.workload.flops_per_token) for p in points]
    slope = (mfus[2] - mfus[1]) / (xs[2] - xs[1])
    fitted, _ = cal.mfu("H200", "bf16", points[0].workload)
    assert fitted.value == pytest.approx(mfus[1] + slope * (xs[0] - xs[1]))

"""The communication-volume model: d26's collectives in their parameters' dtypes, and those a real step issues."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
import torch.multiprocessing as mp

from benchctl.payload.workloads.commvolume import comm_volume
from tests.conftest import run_cli


def _ops(report: dict[str, Any]) -> dict[tuple[str, str], tuple[int, int]]:
    return {(o["op"], o["dtype"]): (o["calls"], o["total_bytes"]) for o in report["ops"]}


def test_d26_at_world_size_8_moves_every_parameter_in_its_own_dtype() -> None:
    report = comm_volume("nanochat-d26", 8)
    # the published nsys kernel counts (10 steps × 8 ranks: 1,520 AllGather, 1,120 RS-bf16, 400 RS-f32) ÷ 80
    assert _ops(report) == {("all_gather", "bf16"): (14, 1_526_726_656), ("all_gather", "f32"): (5, 4_205_340_672),
                            ("reduce_scatter", "bf16"): (14, 1_526_726_656),
                            ("reduce_scatter", "f32"): (5, 4_205_340_672), ("all_reduce", "f32"): (2, 208)}
    assert round(report["total_bytes"] / 1e9, 3) == 11.464
    assert report["scaling_params"] == 918_426_912
    groups = {g["name"]: g for g in report["groups"]}
    assert set(groups) == {"wte", "value_embeds", "lm_head", "resid_lambdas", "x0_lambdas", "muon(1664, 1664)",
                           "muon(6656, 1664)", "muon(1664, 6656)", "muon(13, 32)"}
    assert {name: g["dtype"] for name, g in groups.items() if g["dtype"] == "bf16"} == {"wte": "bf16",
                                                                                         "value_embeds": "bf16"}
    assert groups["value_embeds"]["num_params"] == 13
    assert groups["muon(6656, 1664)"]["padded_count"] == 32  # 26 matrices padded to a multiple of 8
    assert groups["muon(1664, 1664)"]["reduce_scatter_bytes"] == 104 * 1664 * 1664 * 4
    assert groups["muon(1664, 1664)"]["all_gather_bytes"] == 104 * 1664 * 1664 * 4
    assert groups["lm_head"]["all_gather_bytes"] == 32768 * 1664 * 4
    assert groups["wte"]["reduce_scatter_bytes"] == 32768 * 1664 * 2
    assert groups["resid_lambdas"]["all_reduce_bytes"] == 26 * 4
    assert report["total_bytes"] == sum(o["total_bytes"] for o in report["ops"])
    # the publication's ≈ 7.1 GB counted 2 bytes per element for every collective
    assert abs(report["total_bytes_at_2_bytes_per_element"] / 1e9 - 7.1) < 0.25


def test_padding_follows_the_world_size() -> None:
    groups = {g["name"]: g for g in comm_volume("nanochat-d26", 1)["groups"]}
    assert groups["muon(6656, 1664)"]["padded_count"] == 26


def _count_one_step(rank: int, world: int, rendezvous: str, out_dir: str) -> None:
    import torch
    import torch.distributed as dist

    from benchctl.payload.workloads.model import build_model
    from benchctl.payload.workloads.optim import ZeroMuonAdamW
    from benchctl.payload.workloads.presets import model_dims

    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=world)
    counted: list[tuple[str, str, int]] = []
    names = {torch.bfloat16: "bf16", torch.float32: "f32"}

    def wrap(op: str, attr: str, whole: int) -> None:
        original = getattr(dist, attr, None)
        if original is None:
            return

        def counting(*args: Any, **kwargs: Any) -> Any:
            tensor = args[whole]
            counted.append((op, names[tensor.dtype], tensor.numel() * tensor.element_size()))
            return original(*args, **kwargs)

        setattr(dist, attr, counting)

    wrap("all_reduce", "all_reduce", 0)
    wrap("reduce_scatter", "reduce_scatter_single", 1)  # (output, input): the input is the whole array
    wrap("reduce_scatter", "reduce_scatter_tensor", 1)
    wrap("all_gather", "all_gather_single", 0)  # (output, input): the output is the whole array
    wrap("all_gather", "all_gather_into_tensor", 0)
    model = build_model(model_dims("nanochat-d3", 256), 16, "cpu")
    optimizer = ZeroMuonAdamW(model, rank, world)
    batch = torch.randint(0, 256, (2, 17))
    model(batch[:, :-1], batch[:, 1:]).backward()
    optimizer.step()
    Path(out_dir, f"rank{rank}.json").write_text(json.dumps(counted))
    dist.destroy_process_group()


@pytest.mark.slow
def test_collectives_of_a_real_step_equal_the_model(tmp_path: Path) -> None:
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    mp.spawn(_count_one_step, args=(2, str(tmp_path / f"rv-{uuid.uuid4().hex}"), str(tmp_path)), nprocs=2)
    predicted = _ops(comm_volume("nanochat-d3", 2, vocab_size=256))
    for rank in range(2):
        counted: dict[tuple[str, str], tuple[int, int]] = {}
        for op, dtype, size in json.loads((tmp_path / f"rank{rank}.json").read_text()):
            calls, total = counted.get((op, dtype), (0, 0))
            counted[(op, dtype)] = (calls + 1, total + size)
        assert counted == predicted
    # d3: value embeddings on layers 0 and 2; Muon groups (d, d), (4d, d), (d, 4d) and the two ve_gates
    assert predicted[("reduce_scatter", "bf16")][0] == 1 + 2  # wte, value_embeds ×2
    assert predicted[("reduce_scatter", "f32")][0] == 1 + 4  # lm_head, 4 Muon groups
    assert predicted[("all_gather", "f32")][0] == 1 + 4


@pytest.mark.slow
def test_comm_volume_cli(home: Path) -> None:
    result = run_cli("comm-volume", "--model", "nanochat-d26", "--world-size", "8", "--format", "json", home=home)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["scaling_params"] == 918_426_912
    table = run_cli("comm-volume", "--model", "nanochat-d26", "--world-size", "8", home=home)
    assert "muon(6656, 1664)" in table.stdout and "11.464 GB per step" in table.stdout
    bad = run_cli("comm-volume", "--model", "gpt5", "--world-size", "8", home=home)
    assert bad.returncode == 2 and "unknown model preset" in bad.stderr and "Traceback" not in bad.stderr

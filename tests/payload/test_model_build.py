"""The model is built on the meta device and materialised on the target: same weights, no host copy."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from benchctl.payload.workloads import model as model_module
from benchctl.payload.workloads.model import GPT, build_model
from benchctl.payload.workloads.param_groups import module_params
from benchctl.payload.workloads.presets import model_dims

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("model", "vocab"), [("nanochat-d3", 256), ("nanochat-d26", None)])
def test_the_parameter_list_without_torch_is_the_models(model: str, vocab: int | None) -> None:
    dims = model_dims(model, vocab)
    built = build_model(dims, 16, "meta")
    assert all(p.is_meta for p in built.parameters())
    assert module_params(built) == dims.parameters()
    assert {p.name: p.dtype for p in dims.parameters() if p.dtype == "bf16"} == {
        "wte.weight": "bf16", **{f"value_embeds.{i}.weight": "bf16" for i in range(dims.depth)
                                 if dims.has_value_embedding(i)}}


def test_meta_build_gives_the_weights_of_a_direct_build_with_the_same_seed() -> None:
    dims = model_dims("nanochat-d3", 256)
    direct = GPT(dims, 32)  # the old path: constructed (and initialised) on the CPU
    materialised = build_model(dims, 32, "cpu", seed=0)
    tensors = dict(direct.named_parameters()) | dict(direct.named_buffers())
    other = dict(materialised.named_parameters()) | dict(materialised.named_buffers())
    assert set(tensors) == set(other) and "cos_table" in tensors
    for name, tensor in tensors.items():
        assert tensor.dtype == other[name].dtype and torch.equal(tensor, other[name]), name
    assert materialised.cos_table[0, 1, 0, 0].item() == pytest.approx(0.5403, abs=1e-2)  # cos(1): not left empty
    reseeded = build_model(dims, 32, "cpu", seed=1)
    assert not torch.equal(reseeded.wte.weight, materialised.wte.weight)


def test_nothing_is_allocated_before_the_model_reaches_its_device(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[Any, bool]] = []
    original = model_module.materialise

    def recording(module: nn.Module, device: torch.device) -> None:
        if isinstance(module, GPT):
            tensors = [*module.parameters(), *module.buffers()]
            seen.append((device.type, all(t.is_meta for t in tensors)))
        original(module, device)

    monkeypatch.setattr(model_module, "materialise", recording)
    model = build_model(model_dims("nanochat-d3", 256), 16, "cpu")
    assert seen == [("cpu", True)]
    assert all(p.device.type == "cpu" for p in model.parameters())


_RSS_PROBE = """
import json, resource, sys
import torch
from benchctl.payload.workloads.model import build_model
from benchctl.payload.workloads.presets import model_dims
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
model = build_model(model_dims("nanochat-d20"), 2048, "meta")
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"grew_kib": after - before, "params": sum(p.numel() for p in model.parameters())}))
"""


@pytest.mark.slow
def test_building_d20_for_another_device_touches_no_host_memory() -> None:
    """A host build of d20 would take ≈3.4 GB of RAM per rank (8 ranks: 27 GB) before the copy to the GPU."""
    out = subprocess.run([sys.executable, "-c", _RSS_PROBE], capture_output=True, text=True, cwd=ROOT, check=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    probe = json.loads(out.stdout)
    assert probe["params"] > 800_000_000
    assert probe["grew_kib"] < 200 * 1024, probe


_IMPORTS_PROBE = """
import json, sys
import torch
from benchctl.payload.workloads.model import build_model
from benchctl.payload.workloads.presets import model_dims
build_model(model_dims("nanochat-d3", 256), 16, "cpu")
print(json.dumps(sorted(m for m in ("torch._dynamo", "sympy") if m in sys.modules)))
"""


@pytest.mark.slow  # an interpreter importing torch
def test_building_the_model_imports_no_compiler() -> None:
    """Initialising on ``meta`` through torch's Python reference ops imported torch._dynamo and sympy:
    about 1.8 s of CPU per rank and attempt, billed on a node that runs without ``compile``."""
    out = subprocess.run([sys.executable, "-c", _IMPORTS_PROBE], capture_output=True, text=True, cwd=ROOT,
                         check=True, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert json.loads(out.stdout) == []

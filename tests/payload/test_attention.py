"""Attention kernels (payload.workloads.attention), checked on CPU: which kernel a node gets, in the order
FA3 (installed, else upstream's ``kernels`` hub build, Hopper only) → FA2 → compiled flex_attention
→ SDPA, with importability stood in for (nothing is downloaded); flex's sliding-window block mask
gives SDPA's dense-masked output; Flash-Attention is called with FA's window convention."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

import pytest
import torch

from benchctl.payload.workloads import attention
from benchctl.payload.workloads.attention import Kernel, attend, block_mask, choose
from benchctl.payload.workloads.model import build_model
from benchctl.payload.workloads.presets import model_dims

CUDA = torch.device("cuda", 0)


class FakeFlash:
    """Stands in for flash_attn / flash_attn_interface: records its call, answers SDPA's output."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []

    def flash_attn_func(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                        window_size: tuple[int, int]) -> torch.Tensor:
        self.calls.append({"dtype": q.dtype, "causal": causal, "window_size": window_size})
        return attend(q.float(), k.float(), v.float(), window_size[0] if window_size[0] >= 0 else q.size(1))


def _node(monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int], modules: dict[str, Any]) -> list[str]:
    """A CUDA node of ``capability`` where exactly ``modules`` import; returns the imports tried."""
    tried: list[str] = []

    def fake_import(name: str) -> Any:
        tried.append(name)
        if name in modules:
            return modules[name]
        raise ImportError(name)

    monkeypatch.setattr(attention.importlib, "import_module", fake_import)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: capability)
    return tried


def _hub(kernel_module: Any = None, fails: bool = False) -> Any:
    """A fake ``kernels`` package: ``get_kernel(name)`` returns an object with ``flash_attn_interface``."""
    asked: list[str] = []

    def get_kernel(name: str) -> Any:
        asked.append(name)
        if fails:
            raise OSError("hub unreachable")
        return types.SimpleNamespace(flash_attn_interface=kernel_module)

    return types.SimpleNamespace(get_kernel=get_kernel, asked=asked)


FLEX = "torch.nn.attention.flex_attention"


def test_cpu_runs_sdpa_and_imports_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    tried = _node(monkeypatch, (9, 0), {"flash_attn_interface": object(), "flash_attn": object(), FLEX: object()})
    assert choose(torch.device("cpu"), compiled=True).name == "sdpa" and tried == []


def test_hopper_prefers_installed_fa3(monkeypatch: pytest.MonkeyPatch) -> None:
    fa3, hub = object(), _hub(object())
    _node(monkeypatch, (9, 0), {"flash_attn_interface": fa3, "kernels": hub, "flash_attn": object()})
    kernel = choose(CUDA, compiled=True)
    assert kernel.name == "flash_attn3" and kernel.flash is fa3 and hub.asked == []


def test_hopper_without_fa3_installed_loads_it_from_upstreams_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    interface = object()
    hub = _hub(interface)
    _node(monkeypatch, (9, 0), {"kernels": hub, "flash_attn": object()})
    kernel = choose(CUDA, compiled=True)
    assert kernel.name == "flash_attn3" and kernel.flash is interface and hub.asked == ["varunneal/flash-attention-3"]


def test_a_hub_that_fails_falls_through_to_fa2(monkeypatch: pytest.MonkeyPatch) -> None:
    fa2 = object()
    _node(monkeypatch, (9, 0), {"kernels": _hub(fails=True), "flash_attn": fa2})
    kernel = choose(CUDA, compiled=True)
    assert kernel.name == "flash_attn" and kernel.flash is fa2


@pytest.mark.parametrize("capability", [(8, 0), (8, 9), (10, 0)])
def test_fa3_only_on_hopper(monkeypatch: pytest.MonkeyPatch, capability: tuple[int, int]) -> None:
    hub = _hub(object())
    tried = _node(monkeypatch, capability, {"flash_attn_interface": object(), "kernels": hub, FLEX: object()})
    assert choose(CUDA, compiled=True).name == "flex"
    assert "flash_attn_interface" not in tried and hub.asked == []


def test_fa2_needs_ampere(monkeypatch: pytest.MonkeyPatch) -> None:
    _node(monkeypatch, (7, 5), {"flash_attn": object(), FLEX: object()})
    assert choose(CUDA, compiled=False).name == "sdpa"


@pytest.mark.parametrize(("compiled", "expected"), [(True, "flex"), (False, "sdpa")])
def test_without_flash_attention_flex_only_when_compiled(monkeypatch: pytest.MonkeyPatch, compiled: bool,
                                                         expected: str) -> None:
    _node(monkeypatch, (9, 0), {FLEX: object()})
    assert choose(CUDA, compiled=compiled).name == expected


def test_flex_needs_torch_to_have_it(monkeypatch: pytest.MonkeyPatch) -> None:
    _node(monkeypatch, (8, 0), {})
    assert choose(CUDA, compiled=True).name == "sdpa"


def test_a_pinned_kernel_is_the_one_run_even_where_a_faster_one_exists(monkeypatch: pytest.MonkeyPatch) -> None:
    _node(monkeypatch, (9, 0), {"flash_attn_interface": object(), FLEX: object()})
    assert choose(CUDA, compiled=True, pinned="sdpa").name == "sdpa"
    assert choose(CUDA, compiled=True, pinned="flash_attn3").name == "flash_attn3"


def test_a_pinned_kernel_the_node_lacks_is_refused_naming_the_one_it_has(monkeypatch: pytest.MonkeyPatch) -> None:
    _node(monkeypatch, (9, 0), {FLEX: object()})
    with pytest.raises(ValueError, match="'flash_attn3' was asked for but this node runs 'flex'"):
        choose(CUDA, compiled=True, pinned="flash_attn3")
    with pytest.raises(ValueError, match="'flex' was asked for but this node runs 'sdpa'"):
        choose(CUDA, compiled=False, pinned="flex")
    with pytest.raises(ValueError, match="none of flash_attn3, flash_attn, flex, sdpa"):
        choose(CUDA, compiled=True, pinned="flash")


def test_a_campaign_pins_attention_into_the_job(tmp_path: Path) -> None:
    from benchctl.campaign.spec import load_campaign

    campaign = tmp_path / "c.yaml"
    campaign.write_text(
        "name: pin\nbudget_usd: 1\n"
        "target: {model: nanochat-d2, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 256}\n"
        "payload: {phases: [profile], profile: {device_batch_size: 2, sequence_len: 64, attention: sdpa}}\n"
        "matrix: [{provider: local, gpu: cpu, count: 1, price_usd_per_hour: 1}]\n")
    loaded = load_campaign(campaign)
    (cell,) = loaded.cells
    assert loaded.profile_config(cell).attention == "sdpa"  # type: ignore[union-attr]


def _qkv(b: int, t: int, h: int, d: int, kv_heads: int | None = None) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(t + h)
    return (torch.randn(b, t, h, d, generator=g), torch.randn(b, t, kv_heads or h, d, generator=g),
            torch.randn(b, t, kv_heads or h, d, generator=g))


@pytest.mark.parametrize("window", [0, 1, 100, 128, 200, 383])
def test_flex_block_mask_equals_sdpa_with_the_dense_band_mask(window: int) -> None:
    """Windows inside one 128-token block, across block edges and nearly the whole context."""
    q, k, v = _qkv(2, 384, 2, 16)
    flex = Kernel("flex")
    torch.testing.assert_close(attend(q, k, v, window, flex), attend(q, k, v, window, Kernel()))
    assert list(flex.masks) == [(window, 384, "cpu")] if window < 383 else not flex.masks


def test_flex_with_grouped_query_heads() -> None:
    q, k, v = _qkv(1, 256, 4, 16, kv_heads=2)
    torch.testing.assert_close(attend(q, k, v, 64, Kernel("flex")), attend(q, k, v, 64, Kernel()))


def test_the_block_mask_skips_the_blocks_outside_the_band() -> None:
    """What makes flex faster than the dense mask: blocks wholly outside the band are never computed."""
    mask = block_mask(Kernel("flex"), 1024, 2048, torch.device("cpu"))
    blocks = 2048 // 128
    computed = int(mask.kv_num_blocks.sum() + mask.full_kv_num_blocks.sum())
    assert computed < blocks * (blocks + 1) // 2  # fewer than causal alone
    assert mask.kv_num_blocks.device.type == "cpu"  # made where q lives


def test_flash_attention_gets_fa_window_convention() -> None:
    fake = FakeFlash()
    q, k, v = _qkv(1, 64, 2, 16)
    out = attend(q, k, v, 16, Kernel("flash_attn3", fake))
    attend(q, k, v, 63, Kernel("flash_attn3", fake))
    assert fake.calls == [{"dtype": torch.bfloat16, "causal": True, "window_size": (16, 0)},
                          {"dtype": torch.bfloat16, "causal": True, "window_size": (-1, 0)}]
    assert out.shape == q.shape


def test_build_model_makes_flex_masks_for_each_short_window_on_the_device(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(attention, "choose",
                        lambda device, compiled, pinned=None: Kernel("flex") if compiled else Kernel())
    monkeypatch.setattr("benchctl.payload.workloads.model.choose", attention.choose)
    model = build_model(model_dims("nanochat-d4", 64), 256, "cpu", compiled=True)
    assert model.attention == "flex" and list(model.kernel.masks) == [(128, 256, "cpu")]
    assert build_model(model_dims("nanochat-d4", 64), 256, "cpu").attention == "sdpa"

"""The campaign knob ``payload.profile.precision`` (issue 28 item 1): fp8 | bf16, default as the
record; it reaches the payload's ProfileConfig and job.json, a bad value is one clear line, and the
profile's samples record the precision the matmuls really ran in."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
import torch.distributed as dist

from benchctl.campaign.spec import parse_campaign
from benchctl.errors import SpecError
from benchctl.payload.job import Job, ProfileConfig
from benchctl.payload.workloads import profile

CAMPAIGN = """\
name: precise
budget_usd: 5
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
payload:
  phases: [profile]
  profile:
    device_batch_size: 2
    sequence_len: 32{precision}
matrix:
  - {{provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}}
"""


def _text(value: str | None) -> str:
    return CAMPAIGN.format(precision="" if value is None else f"\n    precision: {value}")


@pytest.mark.parametrize(("value", "expected"), [(None, None), ("fp8", "fp8"), ("bf16", "bf16")])
def test_precision_reaches_the_profile_config_and_job_json(value: str | None, expected: str | None) -> None:
    campaign = parse_campaign(_text(value), "c.yaml")
    cfg = campaign.profile_config(campaign.cells[0])
    assert cfg.precision == expected
    job = Job(campaign="t", cell="c", attempt=1, token="t", gpu="cpu", count=1, phases=["profile"], profile=cfg)
    assert Job.from_dict(json.loads(job.to_json())).profile == cfg


@pytest.mark.parametrize("value", ["fp16", "f32", "FP8"])
def test_a_bad_precision_names_the_file_line_key_and_the_choices(value: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_campaign(_text(value), "c.yaml")
    message = str(err.value)
    assert message.startswith("c.yaml:9 payload.profile.precision:"), message
    assert "'fp8' or 'bf16'" in message


def test_a_job_json_written_before_the_knob_still_loads() -> None:
    raw: dict[str, Any] = {"model": "nanochat-d2", "device_batch_size": 1, "sequence_len": 16, "total_batch_size": 16,
                           "warmup_steps": 0, "steps": 1}
    assert ProfileConfig(**raw).precision is None


class Samples:
    def __init__(self) -> None:
        self.samples: list[dict[str, Any]] = []

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        self.samples.append(fields)
        return fields


@pytest.fixture
def gloo_group() -> Iterator[None]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize(("asked", "expected"), [(None, "f32"), ("bf16", "f32"), ("fp8", "fp8")])
def test_every_sample_records_the_precision_the_matmuls_ran_in(gloo_group: None, asked: str | None,
                                                               expected: str) -> None:
    cfg = ProfileConfig(model="nanochat-d2", vocab_size=64, device_batch_size=1, sequence_len=16, total_batch_size=16,
                        warmup_steps=1, steps=1, precision=asked)
    job = Job(campaign="t", cell="c", attempt=1, token="t", gpu="cpu", count=1, phases=["profile"], profile=cfg)
    events = Samples()
    profile.profile_rank(job, 0, 1, events)  # type: ignore[arg-type]
    assert events.samples and {s["precision"] for s in events.samples} == {expected}
    assert all("precision_note" not in s for s in events.samples)

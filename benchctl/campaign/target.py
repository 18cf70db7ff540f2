"""What a result is priced against, without the rest of the campaign file: the ``Target`` (its
optimizer steps), the bounds on steps and nodes, and the campaign-name rule.

``campaign/spec.py`` re-exports these; ``benchctl import`` loads only this module (the campaign
spec brings the provider registry and the payload's job schema with it).
"""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator

from benchctl.payload.workloads.presets import UnknownPreset, model_dims, target_steps

_CAMPAIGN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
CAMPAIGN_NAME_MAX = 100
MAX_TARGET_STEPS = 10**12
MAX_NODES = 16
MAX_MODEL_DEPTH = 1000


def check_campaign_name(name: str) -> str:
    """``name`` when it can name a campaign (in the store, in artifact paths, on pages); else ValueError."""
    if len(name) > CAMPAIGN_NAME_MAX or not _CAMPAIGN_NAME.fullmatch(name):
        shown = name if len(name) <= 40 else name[:40] + "…"
        raise ValueError(f"{shown!r} is not a campaign name: use letters, digits, '_', '.' and '-' (starting with a "
                         f"letter or digit), at most {CAMPAIGN_NAME_MAX} characters")
    return name


class _Strict(BaseModel):
    """No unknown keys, no coercion between types (``count: "2"`` or ``count: true`` is an error),
    no infinities or NaN."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


def _check_preset(name: str) -> str:
    try:
        depth = model_dims(name).depth
    except UnknownPreset as exc:
        raise ValueError(str(exc)) from None
    if depth > MAX_MODEL_DEPTH:
        raise ValueError(f"{name!r} is deeper than the deepest preset benchctl sizes (nanochat-d{MAX_MODEL_DEPTH})")
    return name


class Target(_Strict):
    """What "cost-to-train" means: train ``model`` to ``target_param_data_ratio`` tokens per parameter."""

    model: str
    target_param_data_ratio: float = Field(gt=0, le=1e6)
    total_batch_size: int = Field(gt=0, description="tokens per optimizer step")
    vocab_size: int | None = Field(default=None, gt=0, le=2**31)

    _model = field_validator("model")(_check_preset)

    def train_steps(self) -> int:
        """Target optimizer steps: floor(ratio × scaling params / tokens per step)."""
        return target_steps(self.model, self.target_param_data_ratio, self.total_batch_size, self.vocab_size)

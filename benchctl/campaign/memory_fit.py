"""Does each cell's profile fit its GPU? Checked by ``plan`` and ``run`` before anything is rented.

Per cell: the per-GPU estimate of the profile phase (``payload.workloads.memory_estimate``: the target's
model, the profile's sequence length and device batch, the cell's world size, compiled or not as
the profile says, eager on an image known to have no compiler: ``benchctl.campaign.images``;
fp8 judged as bf16, as the estimate explains) against one card's memory (``payload.node.gpu_memory``).
A cell on a GPU the table does not know (or on ``cpu``), or a campaign without the profile phase,
is not judged.
``refuse_unfit`` raises UsageError (exit 2) naming the first cell that cannot fit, its estimate,
the card's memory and the largest device batch that would fit (with gradient accumulation making
up the total batch).
"""

from __future__ import annotations

from dataclasses import dataclass

from benchctl.campaign.images import runs_eager
from benchctl.campaign.spec import Campaign, CellSpec
from benchctl.errors import UsageError
from benchctl.payload.node.gpu_memory import card_memory_gib
from benchctl.payload.workloads.memory_estimate import estimate
from benchctl.provisioners.aws.instances import INSTANCES as AWS_INSTANCES


@dataclass(frozen=True)
class CellFit:
    cell: str
    mem_est_gib: float | None
    gpu_mem_gib: float | None

    @property
    def fits(self) -> bool:
        return self.mem_est_gib is None or self.gpu_mem_gib is None or self.mem_est_gib <= self.gpu_mem_gib


def cell_fit(campaign: Campaign, cell: CellSpec, device_batch_size: int | None = None) -> CellFit:
    """The estimate and the card memory for one cell (None where not judged)."""
    gpu = cell.gpu
    if gpu is None and cell.instance_type in AWS_INSTANCES:
        gpu = AWS_INSTANCES[cell.instance_type].gpu
    card = card_memory_gib(gpu, cell.instance_type)
    if card is None or "profile" not in campaign.spec.payload.phases:
        return CellFit(cell.key, None, card and round(card, 1))
    profile, target = campaign.spec.payload.profile, campaign.spec.nanochat_target
    total = estimate(target.model, profile.sequence_len, device_batch_size or profile.device_batch_size,
                     cell.world_size, target.vocab_size, compiled=not runs_eager(campaign, cell)).total_gib
    return CellFit(cell.key, round(total, 1), round(card, 1))


def refuse_unfit(campaign: Campaign) -> None:
    """Raise UsageError for the first cell whose profile cannot fit its GPU's memory."""
    for cell in campaign.cells:
        fit = cell_fit(campaign, cell)
        if fit.fits:
            continue
        profile = campaign.spec.payload.profile
        hint = "no device batch fits: use a GPU with more memory or a smaller model"
        for batch in range(profile.device_batch_size - 1, 0, -1):
            per_micro = batch * profile.sequence_len * cell.world_size
            if campaign.spec.nanochat_target.total_batch_size % per_micro == 0 and cell_fit(campaign, cell, batch).fits:
                accum = campaign.spec.nanochat_target.total_batch_size // per_micro
                hint = (f"set payload.profile.device_batch_size: {batch} (gradient accumulation ×{accum} keeps "
                        f"total_batch_size {campaign.spec.nanochat_target.total_batch_size})")
                break
        raise UsageError(f"cell {cell.key}: {campaign.spec.nanochat_target.model} at device_batch_size "
                         f"{profile.device_batch_size} needs ≈{fit.mem_est_gib} GiB per GPU, more than the "
                         f"{fit.gpu_mem_gib} GiB of one {cell.gpu or cell.instance_type}; {hint}. Nothing was rented.")

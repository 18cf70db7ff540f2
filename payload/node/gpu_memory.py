"""Usable memory of one GPU, by the names campaigns give GPUs (``H100_SXM``) or the driver reports (pure).

GiB as ``nvidia-smi --query-gpu=memory.total`` reports them (MiB ÷ 1024): an "80 GB" H100 shows
81,559 MiB = 79.6 GiB. Names are matched without case, spaces, dashes or underscores, so
``H100_SXM``, ``H100-SXM`` and ``h100 sxm`` are one name. The A100 comes in 40 and 80 GB: a bare
``A100`` is SkyPilot's 40 GB one; ``A100_SXM``/``A100_PCIE`` are the 80 GB cards the providers
list under those names (AWS's p4d.24xlarge carries 40 GB ones: ``INSTANCE_MEMORY_GIB``).
"""

from __future__ import annotations

import re

H100_80GB = 81_559 / 1024
CARD_MEMORY_GIB = {
    "H100SXM": H100_80GB, "H100PCIE": H100_80GB, "H100": H100_80GB, "H100MEGA": H100_80GB,
    "H10080GBHBM3": H100_80GB,
    "H100NVL": 95_830 / 1024,
    "H200": 143_771 / 1024, "H200SXM": 143_771 / 1024, "H200NVL": 143_771 / 1024,
    "B200": 183_359 / 1024,
    "A100SXM": 80.0, "A100PCIE": 80.0, "A10080GB": 80.0, "A100": 40.0, "A10040GB": 40.0,
    "L40S": 46_068 / 1024,
    "L4": 23_034 / 1024,
}
INSTANCE_MEMORY_GIB = {"p4d.24xlarge": 40.0}
"""Instance types whose GPU name alone does not tell the card's memory."""
_NOISE = re.compile(r"[\s_\-]+|^NVIDIA")


def card_memory_gib(gpu: str | None, instance_type: str | None = None) -> float | None:
    """GiB one card of ``gpu`` offers; None for ``cpu`` or a name the table does not hold."""
    if instance_type in INSTANCE_MEMORY_GIB:
        return INSTANCE_MEMORY_GIB[instance_type]
    if not gpu:
        return None
    return CARD_MEMORY_GIB.get(_NOISE.sub("", gpu.upper()))

"""GPU models told apart by the name the driver reports, and their published bf16 dense peaks (pure)."""

from __future__ import annotations

BF16_PEAK_FLOPS = {
    "H100_SXM": 989e12,
    "H100_NVL": 835e12,
    "H100_PCIE": 756e12,
    "H200": 989e12,
    "GH200": 989e12,
    "B200": 2250e12,
    "A100_SXM": 312e12,
    "A100_PCIE": 312e12,
    "L40S": 362e12,
}


def gpu_model(device_name: str) -> str | None:
    """``NVIDIA H100 80GB HBM3`` → ``H100_SXM``; None when the name is not in the table."""
    name = device_name.upper()
    if "GH200" in name:
        return "GH200"
    for family in ("H200", "B200", "L40S"):
        if family in name:
            return family
    if "H100" in name:
        if "NVL" in name:
            return "H100_NVL"
        return "H100_PCIE" if "PCIE" in name else "H100_SXM"
    if "A100" in name:
        return "A100_PCIE" if "PCIE" in name else "A100_SXM"
    return None


def bf16_peak(device_name: str) -> float | None:
    model = gpu_model(device_name)
    return BF16_PEAK_FLOPS.get(model) if model else None

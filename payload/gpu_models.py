"""GPU models told apart by the name the driver reports, and their published bf16 dense peaks (pure).

The keys of ``BF16_PEAK_FLOPS`` (and ``cpu``) are benchctl's one GPU vocabulary: a campaign cell, a
job, ``preflight --expect``, the thresholds and the leaderboard all use these names. ``canonical``
maps the spellings clouds use (``ALIASES``) onto them; anything else is refused with the list.
"""

from __future__ import annotations

BF16_PEAK_FLOPS = {
    "H100_SXM": 989e12,
    "H100_NVL": 835e12,
    "H100_PCIE": 756e12,
    "H200": 989e12,
    "H200_NVL": 835e12,
    "GH200": 989e12,
    "B200": 2250e12,
    "A100_SXM": 312e12,
    "A100_PCIE": 312e12,
    "L40S": 362e12,
}

NAME_RULES: tuple[tuple[str, str, str], ...] = (
    # (family, form-factor marker, model), first match wins: every form factor is tried before its
    # family's bare name, or "NVIDIA H200 NVL" would be taken for the SXM board (an NVSwitch mesh)
    ("GH200", "", "GH200"),
    ("H200", "NVL", "H200_NVL"),
    ("H200", "PCIE", "H200_NVL"),  # the H200's PCIe card is the NVL
    ("H200", "", "H200"),
    ("H100", "NVL", "H100_NVL"),
    ("H100", "PCIE", "H100_PCIE"),
    ("H100", "", "H100_SXM"),  # "NVIDIA H100 80GB HBM3"
    ("A100", "PCIE", "A100_PCIE"),
    ("A100", "", "A100_SXM"),  # "NVIDIA A100-SXM4-80GB"
    ("B200", "", "B200"),
    ("L40S", "", "L40S"),
)


ALIASES = {"H200_SXM": "H200"}
"""Other names of a model: AWS's p5e/p5en, RunPod and Vast list the H200 SXM board as "H200 SXM"
(the driver reports "NVIDIA H200"); benchctl calls it ``H200`` (its NVL card is ``H200_NVL``)."""


def known_models() -> list[str]:
    """Every name a cell may give as its GPU, ``cpu`` first."""
    return ["cpu", *BF16_PEAK_FLOPS]


def canonical(name: str) -> str | None:
    """The model ``name`` means (case, ``-`` and spaces forgiven, ``ALIASES`` followed); None when
    it means none, e.g. a bare family (``H100``: SXM, NVL or PCIe?) or a model without figures."""
    wanted = name.strip().upper().replace("-", "_").replace(" ", "_")
    for model in known_models():
        if model.upper() == wanted:
            return model
    return ALIASES.get(wanted)


def unknown_model(name: str) -> str:
    """Why ``name`` is refused and what to write instead."""
    family = [m for m in BF16_PEAK_FLOPS if m.split("_")[0] == name.strip().upper().replace("-", "_")]
    which = f"; {name} is {' or '.join(family)}: say which" if len(family) > 1 else ""
    return f"unknown GPU model {name!r}{which}; known: {', '.join(known_models())}"


def gpu_model(device_name: str) -> str | None:
    """``NVIDIA H100 80GB HBM3`` → ``H100_SXM``, ``NVIDIA H200 NVL`` → ``H200_NVL``; None when the
    name is not in the table."""
    name = device_name.upper()
    for family, marker, model in NAME_RULES:
        if family in name and marker in name:
            return model
    return None


def bf16_peak(device_name: str) -> float | None:
    model = gpu_model(device_name)
    return BF16_PEAK_FLOPS.get(model) if model else None

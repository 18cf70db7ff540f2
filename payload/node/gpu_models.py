"""GPU models told apart by the name the driver reports, and their published bf16 dense peaks (pure).

The keys of ``BF16_PEAK_FLOPS`` (and ``cpu``) are benchctl's one GPU vocabulary: a campaign cell, a
job, ``preflight --expect``, the thresholds and the leaderboard all use these names. ``canonical``
maps the spellings clouds use (``ALIASES``) onto them; a campaign cell refuses anything else with
the list. Preflight alone also judges a node whose GPU is outside the table (``outside_table``,
``names_model``), on what does not depend on the model.
"""

from __future__ import annotations

import re

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
    name is not in the table. A family counts only at the start of a word: ``NVIDIA GB200`` is no B200."""
    name = device_name.upper()
    for family, marker, model in NAME_RULES:
        if re.search(rf"(?<![A-Z0-9]){family}", name) and marker in name:
            return model
    return None


def _words(name: str) -> list[str]:
    return [w for w in re.split(r"[\s_\-]+", name.strip().upper()) if w]


def outside_table(name: str) -> str | None:
    """``name`` itself when it is a GPU model outside the table that preflight can still judge on
    what does not depend on the model (``B300``, ``Tesla V100``, ``RTX 4090``); None when it means a
    table model, or looks like a misspelt one (a word starting with a table family or ``CPU``:
    ``H100``, ``h100 sxm5``, ``A100-80GB``), which ``unknown_model`` refuses."""
    if canonical(name) is not None or not _words(name):
        return None
    families = {family for family, _, _ in NAME_RULES} | {"CPU"}
    if any(word.startswith(family) for word in _words(name) for family in families):
        return None
    return name.strip()


def names_model(expected: str, device_name: str) -> bool:
    """Does the driver's ``device_name`` name the model ``expected`` (outside the table)? Every word
    of ``expected`` is a word of it, case, ``-`` and ``_`` forgiven: ``B300`` and ``NVIDIA B300
    SXM6 AC`` name ``NVIDIA B300 SXM6 AC``; ``B30`` does not."""
    words = _words(expected)
    return bool(words) and set(words) <= set(_words(device_name))


def bf16_peak(device_name: str) -> float | None:
    model = gpu_model(device_name)
    return BF16_PEAK_FLOPS.get(model) if model else None

"""Which container image a cell's node runs, and whether that image is known to have no C compiler.

The campaign's image (a cell's ``image``, else ``defaults.image``) applies only to the providers
that start containers (``CONTAINER_PROVIDERS``); without one each provider runs its own default,
chosen to have sshd where the provider needs it, gcc and Python's headers (``torch.compile``) and
the CUDA its torch needs (docs/providers.md names them). aws runs the AMI, ssh and local what is there.

``no_compiler`` knows one family by name: PyTorch's official ``-runtime`` images before 2.10 ship
no C compiler, so Triton cannot build its launchers and ``torch.compile`` fails at the first step
(pytorch/pytorch issue 116696; the release Dockerfile installs gcc in the runtime stage only when
``TRITON_VERSION`` is passed, which the final-release builds did not; PR 170235, merged Dec 2025,
installs it from then on). Any other image is proved on the node (preflight ``compile_toolchain``).
"""

from __future__ import annotations

import re

from benchctl.campaign.spec import Campaign, CellSpec

CONTAINER_PROVIDERS = frozenset({"runpod", "vastai", "skypilot"})
_PYTORCH_RUNTIME = re.compile(r"^(?:(?:docker\.io|ghcr\.io)/)?pytorch/pytorch(?:-nightly)?:(\d+)\.(\d+)[^:]*-runtime$")
FIRST_WITH_GCC = (2, 10)


def cell_image(campaign: Campaign, cell: CellSpec) -> str | None:
    """The image the cell's node runs as the campaign names it; None: the provider's default (or no image)."""
    return campaign.image(cell) if cell.provider in CONTAINER_PROVIDERS else None


def no_compiler(image: str | None) -> str | None:
    """Why ``image`` cannot ``torch.compile`` (None: not known to be unable)."""
    found = _PYTORCH_RUNTIME.match(image or "")
    if found is None or (int(found[1]), int(found[2])) >= FIRST_WITH_GCC:
        return None
    return f"{image} has no C compiler (PyTorch's -runtime images before 2.10: pytorch/pytorch issue 116696)"


def runs_eager(campaign: Campaign, cell: CellSpec) -> bool:
    """The profile will run eager on this cell: ``compile: false``, or an image known to have no compiler."""
    return not campaign.spec.payload.profile.compile or no_compiler(cell_image(campaign, cell)) is not None


def compile_warnings(campaign: Campaign, cells: list[CellSpec]) -> list[str]:
    """One line per image known to have no compiler among the cells, when the profile compiles."""
    payload = campaign.spec.payload
    if not payload.profile.compile or "profile" not in payload.phases:
        return []
    by_image: dict[str, list[str]] = {}
    for cell in cells:
        image = cell_image(campaign, cell)
        if no_compiler(image) and image:
            by_image.setdefault(image, []).append(cell.key)
    return [f"{no_compiler(image)}: the profile of {len(keys)} cell(s) ({keys[0]}{', …' if len(keys) > 1 else ''}) "
            "will run eager, not compiled (flag eager_fallback; not comparable with compiled results): use a "
            "-devel image, or leave image unset for each provider's default" for image, keys in by_image.items()]

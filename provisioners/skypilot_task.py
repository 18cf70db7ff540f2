"""A cell's request as a SkyPilot task config, and its validation by SkyPilot's own schema (no network).

- ``task_config(request, name, disk_size)``: the YAML-shaped dict SkyPilot takes: ``resources``
  with ``infra`` (the cell's ``cloud``, ``/region`` when set), ``accelerators`` (``gpu`` × ``count``,
  e.g. H100_SXM × 8 → ``H100:8``, through ``ACCELERATORS``; other names pass as they are),
  ``instance_type``, ``cpus`` (``min_vcpus+``), ``use_spot`` (market spot), ``disk_size`` and
  ``image_id: docker:<image>`` when the cell has an image. No ``run``, ``setup``, ``workdir`` or
  ``envs``: the task only rents the cluster; the payload and its ``job.json`` go over SSH as on
  every provider, so nothing secret and nothing per-attempt is in the task.
- ``validate(config, label)``: ``sky.Task.from_yaml_config``, which checks the schema (known
  keys, types, the cloud's name) offline. It does not check names against the catalogs (an
  accelerator, a region, an instance type): the price lookup and the launch do that. A schema
  error becomes a ``ProviderError`` that names the cell.
"""

from __future__ import annotations

import copy
from typing import Any

from provisioners.base import OfferRequest, ProviderError

ACCELERATORS = {"H100_SXM": "H100", "H100": "H100", "H100_MEGA": "H100-MEGA", "H200": "H200", "H200_SXM": "H200",
                "A100_SXM": "A100-80GB", "A100_80GB": "A100-80GB", "A100": "A100", "B200": "B200", "L4": "L4"}
"""benchctl GPU names → SkyPilot accelerator names. H100 PCIe and NVL have no accelerator name of
their own in SkyPilot: pin them with ``instance_type``."""


def accelerators(request: OfferRequest) -> str | None:
    """``<name>:<count>`` for SkyPilot, or None when the cell names only an instance type."""
    if not request.gpu:
        return None
    return f"{ACCELERATORS.get(request.gpu, request.gpu)}:{request.count}"


def task_config(request: OfferRequest, name: str, disk_size: int) -> dict[str, Any]:
    """The SkyPilot task for ``request`` (see the module doc); ``name`` is the task's name."""
    resources: dict[str, Any] = {"use_spot": request.market == "spot", "disk_size": disk_size}
    cloud = request.extra.get("cloud")
    if cloud:
        resources["infra"] = f"{cloud}/{request.region}" if request.region else str(cloud)
    if (acc := accelerators(request)) is not None:
        resources["accelerators"] = acc
    if request.instance_type:
        resources["instance_type"] = request.instance_type
    if request.min_vcpus:
        resources["cpus"] = f"{request.min_vcpus}+"
    if request.image:
        resources["image_id"] = f"docker:{request.image}"
    return {"name": name, "resources": resources}


def validate(config: dict[str, Any], label: str) -> Any:
    """The ``sky.Task`` for ``config``; a config SkyPilot's schema refuses → ProviderError naming ``label``."""
    import sky
    from sky import exceptions

    try:
        return sky.Task.from_yaml_config(copy.deepcopy(config))  # it consumes the dict it is given
    except (exceptions.InvalidSkyPilotConfigError, ValueError, TypeError, AssertionError) as exc:  # it asserts, too
        problem = " ".join(str(exc).split())
        raise ProviderError(f"{label}: SkyPilot refuses the cell's resources: {problem}; fix the cell "
                            "(docs/providers.md#skypilot)") from None

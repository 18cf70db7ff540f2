"""A cell's request as a SkyPilot task config, and its validation by SkyPilot's own schema (no network).

- ``task_config(request, name, disk_size)``: the YAML-shaped dict SkyPilot takes: ``resources``
  with ``infra`` (the cell's ``cloud``, ``/region`` when set), ``accelerators`` (``gpu`` × ``count``,
  e.g. H100_SXM × 8 → ``H100:8``, through ``ACCELERATORS``; other names pass as they are),
  ``instance_type``, ``cpus`` (``min_vcpus+``), ``use_spot`` (market spot), ``disk_size`` and
  ``image_id: docker:<image>`` when the cell has an image. GPU names are per cloud (``PER_CLOUD``):
  a cloud whose catalog cannot tell a GPU's form (SXM, PCIe, NVL) from another's is refused for
  that GPU (``validate_gpu``) unless the cell pins ``instance_type``. No ``run``, ``setup``, ``workdir`` or
  ``envs``: the task only rents the cluster; the payload and its ``job.json`` go over SSH as on
  every provider, so nothing secret and nothing per-attempt is in the task.
- ``validate(config, label)``: ``sky.Task.from_yaml_config``, which checks the schema (known
  keys, types, the cloud's name) offline. It does not check names against the catalogs (an
  accelerator, a region, an instance type): the price lookup and the launch do that. A schema
  error becomes a ``ProviderError`` that names the cell. Then the cloud's own feature flags
  (``unsupported``): a cell that needs what SkyPilot says its cloud lacks (``num_nodes`` > 1 on
  RunPod or Vast, spot on Lambda, a docker image where none runs...) is refused the same way,
  instead of every launch failing over to nothing.
"""

from __future__ import annotations

import copy
from typing import Any

from benchctl.provisioners.base import OfferRequest, ProviderError

ACCELERATORS = {"H100_SXM": "H100", "H200": "H200", "A100_SXM": "A100-80GB", "B200": "B200"}
"""benchctl GPU names (``payload.node.gpu_models``, the only ones a cell can carry) → SkyPilot accelerator
names on clouds whose catalogs give an SXM part the plain name (AWS, GCP, Azure, Lambda...). There,
PCIe and NVL parts have no name of their own: such cells pin ``instance_type``."""
PER_CLOUD: dict[str, dict[str, str | None]] = {
    # sky/catalog/data_fetchers/fetch_runpod.py (SkyPilot 0.14.1): DEFAULT_GPU_INFO and GPU_NAME_OVERRIDES
    # ('H100-PCIe' -> 'H100', 'A100-PCIe' -> 'A100-80GB', 'A100-SXM' -> 'A100-80GB-SXM').
    "runpod": {"H100_SXM": "H100-SXM", "H100_PCIE": "H100", "H100_NVL": "H100-NVL", "A100_SXM": "A100-80GB-SXM",
               "A100_PCIE": "A100-80GB", "H200": "H200-SXM"},
    # sky/catalog/data_fetchers/fetch_vast.py: the form suffix is cut off the name
    # (re.sub(r'(Ti|PCIE|SXM4|SXM|NVL)$', '', gpu)): one name for every form (H200 and H200 NVL too).
    "vast": {"H200": None},
}
FORMS = ("_SXM", "_PCIE", "_NVL")
"""benchctl names that say a part's form (payload/node/gpu_models.py); a cloud must tell them apart."""


def accelerator_name(gpu: str, cloud: str) -> str | None:
    """SkyPilot's name for ``gpu`` on ``cloud``; None when that cloud's catalog cannot tell the
    ``gpu``'s form (SXM, PCIe, NVL) from another's."""
    cloud = cloud.lower()
    if cloud in PER_CLOUD:
        return PER_CLOUD[cloud].get(gpu, None if gpu.endswith(FORMS) else gpu)
    if gpu.endswith(("_PCIE", "_NVL")):
        return None
    return ACCELERATORS.get(gpu, gpu)


def accelerators(request: OfferRequest) -> str | None:
    """``<name>:<count>`` for SkyPilot, or None when the cell names only an instance type (or a GPU
    its cloud cannot name: ``validate_gpu`` refuses that cell)."""
    name = accelerator_name(request.gpu, _cloud(request)) if request.gpu else None
    return f"{name}:{request.count}" if name is not None else None


def validate_gpu(request: OfferRequest) -> None:
    """ProviderError naming the cell when its cloud's catalog cannot tell its GPU's form apart and
    no ``instance_type`` pins it."""
    if request.gpu and not request.instance_type and accelerator_name(request.gpu, _cloud(request)) is None:
        raise ProviderError(f"{request.label}: SkyPilot's {_cloud(request)} catalog cannot tell {request.gpu} from "
                            "the other forms of that GPU (SXM, PCIe, NVL); pin `instance_type`, or use that "
                            "cloud's own provider (docs/providers.md#skypilot)")


def pinned_accelerators(request: OfferRequest, instance_type: str, catalog: str | None) -> str | None:
    """What the task asks for a cell that pins ``instance_type``: the catalog's own name for that type's
    GPUs (``catalog``, e.g. GCP's a3-megagpu-8g is ``H100-MEGA:8``: SkyPilot refuses ``H100:8`` with it,
    ``ResourcesMismatchError``) when it is the cell's GPU, so many (the same name, or it followed by
    ``-``); the cell's own where the catalog names none. ProviderError naming the cell when the type
    carries another GPU or count (GCP's a2-highgpu-8g is ``A100:8``, 40 GB, not A100_SXM's ``A100-80GB``)."""
    asked = accelerators(request)
    if asked is None or catalog is None or catalog == asked:
        return asked
    (name, count), (theirs, their_count) = asked.split(":"), catalog.split(":")
    if count == their_count and theirs.startswith(f"{name}-"):
        return catalog
    raise ProviderError(f"{request.label}: SkyPilot's {_cloud(request)} catalog has {instance_type} with {catalog}, "
                        f"not {request.gpu} × {request.count} ({asked}): pin an instance type of that GPU, or leave "
                        "`instance_type` out")


def form_conflict(gpu: str, instance_type: str) -> bool:
    """True when an instance type's name says another form than ``gpu`` (Lambda's ``gpu_1x_h100_pcie``
    is ``H100`` in SkyPilot's catalog, as its ``gpu_8x_h100_sxm5`` is)."""
    name = instance_type.lower()
    others = [form for form in ("sxm", "pcie", "nvl") if not gpu.lower().endswith(f"_{form}")]
    return gpu.endswith(FORMS) and any(form in name for form in others)


def _cloud(request: OfferRequest) -> str:
    return str(request.extra.get("cloud", "")).lower()


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
    nodes = int(request.extra.get("nodes") or 1)
    return {"name": name, "resources": resources, **({"num_nodes": nodes} if nodes > 1 else {})}


def validate(config: dict[str, Any], label: str) -> Any:
    """The ``sky.Task`` for ``config``; a config SkyPilot's schema refuses → ProviderError naming ``label``."""
    import sky
    from sky import exceptions

    try:
        task = sky.Task.from_yaml_config(copy.deepcopy(config))  # it consumes the dict it is given
    except (exceptions.InvalidSkyPilotConfigError, ValueError, TypeError, AssertionError) as exc:  # it asserts, too
        problem = " ".join(str(exc).split())
        raise ProviderError(f"{label}: SkyPilot refuses the cell's resources: {problem}; fix the cell "
                            "(docs/providers.md#skypilot)") from None
    unsupported(task, label)
    return task


FIXES = {"multi-node": "use nodes: 1 or another cloud", "spot_instance": "use market: on-demand or another cloud",
         "docker_image": "drop the cell's image (the cloud's own image runs the payload)"}
"""What the user can change, per SkyPilot feature (``CloudImplementationFeatures`` values)."""


def unsupported(task: Any, label: str) -> None:
    """ProviderError naming the cell and SkyPilot's reason for each feature the task needs that its
    cloud lacks. The features are SkyPilot's own: ``Resources.get_required_cloud_features`` (spot,
    docker image, network tier...) and ``Task.get_required_cloud_features`` (multi-node for
    ``num_nodes`` > 1), judged by ``Cloud.check_features_are_supported`` (sky/clouds/cloud.py, each
    cloud's ``_CLOUD_UNSUPPORTED_FEATURES``), as SkyPilot's optimizer filters a cloud out. Offline;
    Kubernetes (and SSH node pools) and Slurm are not judged here: their answer is the cluster's."""
    from sky import clouds, exceptions

    (resources,) = task.resources
    cloud = resources.cloud
    if cloud is None or isinstance(cloud, (clouds.Kubernetes, clouds.Slurm)):
        return
    problems = []
    needed = resources.get_required_cloud_features() | task.get_required_cloud_features()
    for feature in sorted(needed, key=lambda f: f.value):
        try:
            cloud.check_features_are_supported(resources, {feature})
        except exceptions.NotSupportedError as exc:  # a table: a header row, then "<feature>  <reason>"
            reason = " ".join(str(exc).strip().splitlines()[-1].split()).removeprefix(feature.value).strip()
            fix = FIXES.get(feature.value, "change the cell")
            problems.append(f"{feature.value}: {reason} ({fix})")
    if problems:
        raise ProviderError(f"{label}: SkyPilot cannot launch this cell on {cloud}: {'; '.join(problems)} "
                            "(docs/providers.md#skypilot)")

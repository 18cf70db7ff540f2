"""Which clouds SkyPilot can ask for their fast network between nodes, and what a cell's offer sells.

SkyPilot (0.14.1, read in its installed source) asks a cloud for its best network between nodes
with ``resources.network_tier: best`` (``sky/resources.py``; the feature
``CloudImplementationFeatures.CUSTOM_NETWORK_TIER``). A cloud that lists that feature in its
``_CLOUD_UNSUPPORTED_FEATURES`` (Azure, Lambda, RunPod, Vast, Fluidstack, Paperspace, Cudo, DO, SCP,
Hyperbolic, Shadeform, ...) is filtered out when asked for it, so it is never asked. AWS turns it into
EFA on its EFA instance types (``sky/clouds/aws.py``), GCP into GPUDirect-TCPX/RDMA
(``sky/clouds/gcp.py``), Nebius into InfiniBand for 8× H100/H200/B200/B300 only
(``sky/clouds/nebius.py``, ``sky/provision/nebius/constants.py``). Kubernetes, SSH node pools and
Slurm depend on the cluster: not asked, and their offer says nothing (the cell's ``fabric`` does).
Everywhere else the offer sells ``none``: its nodes have no RDMA between them that SkyPilot can get.
"""

from __future__ import annotations

from typing import Any

from benchctl.provisioners.base import OfferRequest
from benchctl.provisioners.skypilot.task import accelerator_name

BEST_TIER = {"aws", "gcp"}
"""Clouds whose ``network_tier: best`` SkyPilot turns into their RDMA network for any GPU."""
INFINIBAND_GPUS = {"nebius": ({"h100", "h200", "b200", "b300"}, 8)}
"""Clouds that have it only for some GPUs, so many per node (SkyPilot's accelerator names)."""
CLUSTER_DEFINED = {"kubernetes", "k8s", "ssh", "slurm"}


def _cloud(request: OfferRequest) -> str:
    return str(request.extra.get("cloud", "")).lower()


def best_tier(request: OfferRequest) -> bool:
    """SkyPilot can ask ``request``'s cloud for its RDMA network between nodes."""
    cloud = _cloud(request)
    if cloud in BEST_TIER:
        return True
    if cloud in INFINIBAND_GPUS and request.gpu:
        names, count = INFINIBAND_GPUS[cloud]
        return str(accelerator_name(request.gpu, cloud) or "").lower() in names and request.count == count
    return False


def network_resources(request: OfferRequest) -> dict[str, Any]:
    """``{"network_tier": "best"}`` for a cluster's cell (``nodes`` > 1) on a cloud that has it, else nothing."""
    return {"network_tier": "best"} if int(request.extra.get("nodes") or 1) > 1 and best_tier(request) else {}


def fabric_sold(request: OfferRequest) -> str | None:
    """The offer's fabric (``Offer.fabric``): None (the cell's ``fabric`` says) where SkyPilot asks for
    the best tier or the cluster decides, ``none`` where SkyPilot cannot get RDMA between nodes."""
    if best_tier(request) or _cloud(request) in CLUSTER_DEFINED:
        return None
    return "none"

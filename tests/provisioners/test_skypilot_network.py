"""SkyPilot cells of several nodes ask for the cloud's RDMA network (``network_tier: best``) where
SkyPilot has it, and their offer says ``none`` where it has not (provisioners/skypilot/network.py)."""

from __future__ import annotations

import pytest

from benchctl.provisioners.base import OfferRequest
from benchctl.provisioners.skypilot.network import fabric_sold, network_resources
from benchctl.provisioners.skypilot.task import task_config, validate


def request(cloud: str, nodes: int = 2, gpu: str = "H100_SXM", count: int = 8) -> OfferRequest:
    extra = {"cloud": cloud, **({"nodes": nodes} if nodes > 1 else {})}
    return OfferRequest(gpu=gpu, count=count, market="on-demand", label="cell", extra=extra)


@pytest.mark.parametrize(("cloud", "gpu", "count", "tier", "sold"), [
    ("aws", "H100_SXM", 8, True, None),        # EFA on EFA instance types (sky/clouds/aws.py)
    ("gcp", "H100_SXM", 8, True, None),        # GPUDirect (sky/clouds/gcp.py)
    ("nebius", "H100_SXM", 8, True, None),     # InfiniBand for 8 × H100/H200/B200/B300 only
    ("nebius", "H100_SXM", 4, False, "none"),
    ("lambda", "H100_SXM", 8, False, "none"),  # CUSTOM_NETWORK_TIER unsupported in sky/clouds/lambda_cloud.py
    ("azure", "H100_SXM", 8, False, "none"),
    ("kubernetes", "H100_SXM", 8, False, None),  # the cluster decides; the cell's fabric says
])
def test_network_tier_where_skypilot_has_it(cloud: str, gpu: str, count: int, tier: bool, sold: str | None) -> None:
    cell = request(cloud, gpu=gpu, count=count)
    assert network_resources(cell) == ({"network_tier": "best"} if tier else {})
    assert fabric_sold(cell) == sold
    assert network_resources(request(cloud, nodes=1, gpu=gpu, count=count)) == {}  # one node: nothing between nodes


def test_skypilot_accepts_the_tier_it_is_given_and_the_cloud_supports_it() -> None:
    """The task SkyPilot validates (its own schema and the cloud's feature flags, offline)."""
    from sky import clouds

    cell = request("aws")
    config = task_config(cell, "cell", 100)
    config["resources"].update(network_resources(cell))
    (resources,) = validate(config, "cell").resources
    assert str(resources.network_tier.value) == "best"
    clouds.AWS.check_features_are_supported(resources, resources.get_required_cloud_features())
    from sky import exceptions

    lam = resources.copy(cloud=clouds.Lambda(), instance_type=None, accelerators={"H100": 8})
    with pytest.raises(exceptions.NotSupportedError):  # why Lambda is never asked for it
        clouds.Lambda.check_features_are_supported(lam, lam.get_required_cloud_features())

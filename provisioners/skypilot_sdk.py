"""The handful of SkyPilot SDK calls the ``skypilot`` provider makes, behind one small seam.

``SkyClient`` is what the provider needs; ``SkySDK`` does it with the ``sky`` package (SkyPilot
0.14: calls go to its API server and return request ids). Tests hand the provider a stand-in
with the same methods. None of these calls is made at import time; importing this module does
not import ``sky``, constructing ``SkySDK`` does (a missing SDK is an ImportError there).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, cast


@dataclass(frozen=True)
class Cluster:
    name: str
    status: str
    """SkyPilot's cluster status name: INIT, UP, STOPPED, AUTOSTOPPING, PENDING."""


@dataclass(frozen=True)
class CatalogPrice:
    instance_type: str
    hourly_usd: float


class SkyClient(Protocol):
    def launch(self, task: Any, cluster_name: str, autodown_idle_minutes: int) -> str:
        """Submit a launch (returns at once); the request's id."""

    def request_status(self, request_id: str) -> str | None:
        """PENDING, RUNNING, SUCCEEDED, FAILED or CANCELLED; None when the server no longer knows it."""

    def clusters(self, names: list[str] | None) -> list[Cluster]:
        """The named clusters that exist (all of this user's when None), spot ones refreshed from the cloud."""

    def down(self, cluster_name: str) -> None:
        """Tear the cluster down and wait until it is; a cluster that does not exist is success."""

    def price(self, cloud: str, accelerators: str | None, instance_type: str | None, use_spot: bool,
              region: str | None, cpus: str | None) -> CatalogPrice | None:
        """The catalog's cheapest instance for these resources and its hourly price; None when none fits."""

    def ssh_config(self, cluster_name: str) -> Path:
        """The ssh config file that defines ``cluster_name`` as a host alias."""

    def enabled_clouds(self) -> list[str]:
        """The clouds SkyPilot has credentials for (``sky check``), lower-case names."""

    def launch_error(self, request_id: str) -> str:
        """Why a FAILED launch request failed, as SkyPilot says it ("" when it does not say)."""


class SkySDK:
    """``SkyClient`` through the ``sky`` package."""

    def __init__(self) -> None:
        import sky

        self.sky = sky

    def launch(self, task: Any, cluster_name: str, autodown_idle_minutes: int) -> str:
        # autodown: with no SkyPilot job on the cluster, "idle" means no SSH session, i.e. our controller is gone.
        return str(self.sky.launch(task, cluster_name=cluster_name, idle_minutes_to_autostop=autodown_idle_minutes,
                                   down=True))

    def request_status(self, request_id: str) -> str | None:
        found = self.sky.api_status([request_id])
        if not found:
            return None
        status = found[0].status
        return str(getattr(status, "value", status))

    def clusters(self, names: list[str] | None) -> list[Cluster]:
        from sky.utils.common import StatusRefreshMode

        records = self.sky.get(self.sky.status(cluster_names=names, refresh=StatusRefreshMode.AUTO))
        return [Cluster(name=r.name, status=str(getattr(r.status, "value", r.status))) for r in records]

    def down(self, cluster_name: str) -> None:
        from sky import exceptions

        try:
            self.sky.stream_and_get(self.sky.down(cluster_name))
        except exceptions.ClusterDoesNotExist:
            return

    def price(self, cloud: str, accelerators: str | None, instance_type: str | None, use_spot: bool,
              region: str | None, cpus: str | None) -> CatalogPrice | None:
        from sky import catalog
        from sky.utils import registry

        provider = registry.CLOUD_REGISTRY.from_str(cloud)
        if provider is None:
            return None
        accs: dict[str, int] = {}
        if accelerators:
            acc_name, acc_count = accelerators.split(":")
            accs = {acc_name: int(acc_count)}
        if instance_type is None:
            name, count = next(iter(accs.items()))
            fits, _ = catalog.get_instance_type_for_accelerator(name, count, cpus=cpus, use_spot=use_spot,
                                                                region=region, clouds=cloud)
            if not fits:
                return None
            instance_type = fits[0]  # sorted by price
        if not accs:
            accs = dict(provider.get_accelerators_from_instance_type(instance_type) or {})
        hourly = (provider.instance_type_to_hourly_cost(instance_type, use_spot, region, None)
                  + provider.accelerators_to_hourly_cost(accs, use_spot, region, None))
        return CatalogPrice(instance_type, float(hourly))

    def enabled_clouds(self) -> list[str]:
        from sky.client import sdk

        return [str(cloud).lower() for cloud in self.sky.get(sdk.enabled_clouds())]

    def launch_error(self, request_id: str) -> str:
        try:
            self.sky.get(cast(Any, request_id))  # a failed request raises the exception it failed with
        except Exception as exc:  # SkyPilot's reason, whatever its type, is the message
            return f"{type(exc).__name__}: {exc}"
        return ""

    def ssh_config(self, cluster_name: str) -> Path:
        from sky.skylet import constants

        return Path(os.path.expanduser(f"{constants.SKY_USER_FILE_PATH}/ssh/{cluster_name}"))

"""The ``skypilot`` provider: any cloud SkyPilot reaches, through its Python SDK (extra ``benchctl[skypilot]``).

- A cell becomes a SkyPilot task (``skypilot_task``), validated offline by SkyPilot's own schema.
- Offers: one per cell, priced from SkyPilot's catalog for the cell's cloud (the cheapest
  instance type that fits, which the launch then pins). That catalog price is also the billed
  price: SkyPilot reports no bill.
- Launch submits ``sky.launch`` (returns a request id at once) for cluster
  ``<campaign tag>--<token>`` with autodown after ``autodown_idle_minutes`` without an SSH
  session (the task runs no SkyPilot job, so idle means our controller is gone); the cluster
  name and the request id are the node's details. ``owned`` lists clusters by the tag prefix.
- Status (``cluster_state``): starting while the launch request runs; running once it
  succeeded and the cluster is UP; a cluster that is gone, STOPPED or AUTOSTOPPING without our
  ``down`` is preempted when it was spot, terminated otherwise; INIT after the launch (SkyPilot
  found it unhealthy) → unknown. Cluster statuses are read with SkyPilot's AUTO refresh, which
  asks the cloud about spot clusters (how a preemption shows).
- SSH goes to the host alias SkyPilot writes for the cluster: its ssh config file, copied once
  the cluster is up (SkyPilot deletes it when it finds the cluster gone; the copy keeps the last
  reads of a reclaimed node possible) and read with ``ssh -F``, with our host-key pinning on top.
- Terminate: ``sky.down``, waited for; a cluster already gone is success.
- Credentials are SkyPilot's own (``sky check``, its API server); benchctl never reads them.
- Errors: one table (``error_table``) types SkyPilot's exceptions (auth, no capacity, cluster
  gone, API server unreachable); connection errors and timeouts are ``Unavailable``, retried
  (bounded), nothing else is; any other error SkyPilot raised is a ``ProviderError``; one raised
  by our own code is re-raised as it is.
"""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from pydantic import Field

from provisioners.api_retry import ErrorTable, Wording, by_type, call_api
from provisioners.base import (
    AuthError,
    NoCapacity,
    Node,
    NodeGone,
    NodeState,
    Offer,
    OfferRequest,
    Provider,
    ProviderError,
    ProviderSettings,
    Unavailable,
)
from provisioners.skypilot_sdk import SkyClient, SkySDK
from provisioners.skypilot_task import accelerators, task_config, validate
from provisioners.ssh_transport import SSHEndpoint, SSHTransport

CLUSTER_NAME = re.compile(r"[a-zA-Z]([-_.a-zA-Z0-9]*[a-zA-Z0-9])?")
"""SkyPilot's rule for cluster names."""
IN_FLIGHT = ("PENDING", "WAITING", "RUNNING")
T = TypeVar("T")


class SkyPilotSettings(ProviderSettings):
    """The campaign's ``providers.skypilot``."""

    python: str = Field(default="python3", description="the cluster's interpreter with PyTorch")
    workdir: str = Field(default="benchctl", min_length=1, description="our files on the cluster (relative: home)")
    disk_size: int = Field(default=256, ge=10, description="GB of disk per cluster")
    autodown_idle_minutes: int = Field(default=30, ge=1, description="SkyPilot tears the cluster down after this "
                                       "long without an SSH session (the controller is gone)")


def error_table() -> ErrorTable:
    """The one table: SkyPilot's (and the network's) exceptions → typed errors."""
    import requests

    table: list[tuple[type[BaseException] | tuple[type[BaseException], ...], type[ProviderError]]] = [
        ((ConnectionError, TimeoutError, requests.exceptions.ConnectionError, requests.exceptions.Timeout),
         Unavailable)]
    try:
        from sky import exceptions as sky
    except ImportError:  # a stand-in client without the SDK
        return table
    return [*table, ((sky.ApiServerConnectionError, sky.ServerTemporarilyUnavailableError), Unavailable),
            ((sky.ApiServerAuthenticationError, sky.InvalidCloudCredentials, sky.NoCloudAccessError,
              sky.PermissionDeniedError, sky.CloudUserIdentityError), AuthError),
            (sky.ResourcesUnavailableError, NoCapacity), (sky.ClusterDoesNotExist, NodeGone)]


def classify(exc: BaseException) -> type[ProviderError] | None:
    """The table's type; else a ProviderError for what SkyPilot raised (its SDK raises errors of
    any type, a server's re-raised as they were: one of SkyPilot's classes, or raised in its
    code); None for anything else (ours: re-raised)."""
    typed = by_type(error_table())(exc)
    if typed is None and (_is_sky_module(type(exc).__module__) or _raised_in_sky(exc)):
        return ProviderError
    return typed


def _is_sky_module(name: str) -> bool:
    return name == "sky" or name.startswith("sky.")


def _raised_in_sky(exc: BaseException) -> bool:
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    return tb is not None and _is_sky_module(str(tb.tb_frame.f_globals.get("__name__", "")))


def _wording(what: str) -> Wording:
    def wording(typed: type[ProviderError], exc: BaseException) -> str:
        if typed is Unavailable:
            return (f"skypilot: its API server did not answer while trying to {what} (retried): "
                    f"{type(exc).__name__}: {exc}; check `sky api info`")
        return f"skypilot could not {what}: {type(exc).__name__}: {exc}"

    return wording


def cluster_state(request: str | None, cluster: str | None, use_spot: bool, downed: bool) -> NodeState:
    """A node's state from its launch request's status and its cluster's (None: no such cluster)."""
    if downed:
        return NodeState.TERMINATED
    if request in IN_FLIGHT:
        return NodeState.STARTING
    if cluster is None and request in ("FAILED", "CANCELLED"):
        return NodeState.TERMINATED  # the launch never made a cluster
    if cluster is None or cluster in ("STOPPED", "AUTOSTOPPING"):
        return NodeState.PREEMPTED if use_spot else NodeState.TERMINATED
    if cluster == "UP":
        return NodeState.RUNNING
    if cluster == "PENDING":
        return NodeState.STARTING
    return NodeState.UNKNOWN


class SkyPilotProvider(Provider):
    name = "skypilot"

    def __init__(self, root: Path, settings: SkyPilotSettings | None = None, client: SkyClient | None = None) -> None:
        self.client: SkyClient = client if client is not None else SkySDK()
        self.root = root
        self.settings = settings or SkyPilotSettings()
        self._downed: set[str] = set()
        self.sleep: Callable[[float], None] = time.sleep
        """Between retries (a test replaces it)."""

    def _call(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        return call_api(lambda: fn(*args), classify, _wording(what), max_s=60, sleep=self.sleep)

    # -- Provider ---------------------------------------------------------------------------------
    def validate(self, request: OfferRequest) -> None:
        if not request.extra.get("cloud"):
            raise ProviderError(f"{request.label}: skypilot cells need `cloud` (e.g. cloud: lambda)")
        validate(task_config(request, "benchctl", self.settings.disk_size), request.label)

    def check_access(self, requests: Sequence[OfferRequest]) -> None:
        wanted = sorted({str(r.extra.get("cloud", "")).lower() for r in requests} - {""})
        if not wanted:
            return
        enabled = set(self._call("read the enabled clouds", self.client.enabled_clouds))
        missing = [cloud for cloud in wanted if cloud not in enabled]
        if missing:
            raise ProviderError(f"skypilot: no credentials for {', '.join(missing)} (enabled: "
                                f"{', '.join(sorted(enabled)) or 'none'}): set them up and run "
                                f"`sky check {' '.join(missing)}`")

    def offers(self, request: OfferRequest) -> list[Offer]:
        self.validate(request)
        cloud = str(request.extra["cloud"])
        config = task_config(request, "benchctl", self.settings.disk_size)
        resources = config["resources"]
        price = self._call("read SkyPilot's catalog", self.client.price, cloud, accelerators(request),
                           request.instance_type, request.market == "spot", request.region, resources.get("cpus"))
        if price is None:
            return []
        config["resources"]["instance_type"] = price.instance_type  # what was priced is what is launched
        return [Offer(provider=self.name, offer_id=f"{cloud}:{price.instance_type}", gpu=request.gpu,
                      count=request.count, vcpus=request.min_vcpus or 0, region=request.region or cloud,
                      hourly_usd=round(price.hourly_usd, 4), market=request.market, details={"task": config})]

    def launch(self, offer: Offer, token: str, campaign_tag: str) -> Node:
        cluster = f"{campaign_tag}--{token}"
        if not CLUSTER_NAME.fullmatch(cluster):
            raise ProviderError(f"{cluster!r} is not a valid SkyPilot cluster name; use letters, digits, - _ . "
                                "in the campaign name")
        config = {**offer.details["task"], "name": cluster}
        task = validate(config, cluster)
        request_id = self._call("submit a launch", self.client.launch, task, cluster,
                                self.settings.autodown_idle_minutes)
        details = {"cluster": cluster, "request_id": request_id, "use_spot": offer.market == "spot"}
        return Node(provider=self.name, node_id=cluster, token=token, campaign_tag=campaign_tag, offer=offer,
                    details=details, hourly_usd=offer.hourly_usd, host=cluster)

    def _cluster(self, name: str) -> str | None:
        found = [c for c in self._call("read cluster status", self.client.clusters, [name]) if c.name == name]
        return found[0].status if found else None

    def status(self, node: Node) -> NodeState:
        """The node's state; ProviderError with SkyPilot's reason when its launch failed without a cluster."""
        request_id = node.details.get("request_id")
        request = self._call("read the launch request", self.client.request_status, request_id) if request_id \
            else None
        cluster = self._cluster(node.node_id)
        downed = node.node_id in self._downed
        if request == "FAILED" and cluster is None and not downed:
            why = self._call("read why the launch failed", self.client.launch_error, request_id)
            raise ProviderError(f"skypilot could not launch {node.node_id}: {why or 'SkyPilot gives no reason'} "
                                f"(`sky api logs {request_id}` has the whole log)")
        return cluster_state(request, cluster, bool(node.details.get("use_spot")), downed)

    def transport(self, node: Node) -> SSHTransport:
        config = self.root / "ssh_config" / node.node_id
        if not config.is_file():
            written = self.client.ssh_config(node.node_id)
            if not written.is_file():
                raise ProviderError(f"skypilot has not written the ssh config of {node.node_id} yet ({written})")
            config.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            shutil.copyfile(written, config)
        endpoint = SSHEndpoint(host=node.node_id, config_file=str(config), workdir=self.settings.workdir,
                               python=self.settings.python)
        return SSHTransport(endpoint, self.root / "known_hosts" / node.node_id, node.token)

    def terminate(self, node: Node) -> None:
        self._downed.add(node.node_id)
        self._call("tear the cluster down", self.client.down, node.node_id)
        (self.root / "ssh_config" / node.node_id).unlink(missing_ok=True)

    def owned(self, campaign_tag: str) -> list[Node]:
        nodes = []
        for cluster in self._call("list clusters", self.client.clusters, None):
            if not cluster.name.startswith(f"{campaign_tag}--"):
                continue
            offer = Offer(provider=self.name, offer_id="", gpu="", count=0, vcpus=0, region="", hourly_usd=0.0,
                          market="")
            nodes.append(Node(provider=self.name, node_id=cluster.name, token=cluster.name.rsplit("--", 1)[1],
                              campaign_tag=campaign_tag, offer=offer, details={"cluster": cluster.name}))
        return nodes

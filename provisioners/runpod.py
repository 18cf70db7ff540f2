"""The ``runpod`` provider, through the runpod SDK (extra ``benchctl[runpod]``).

- Offers: the GPU type's prices from ``gpuTypes`` (secure or community cloud per the settings;
  on-demand = the cloud's price, spot = a bid of max(minimumBidPrice, the cloud's spot price),
  both per GPU × count).
- Launch: on-demand through the ``podFindAndDeployOnDemand`` mutation (what the SDK's
  ``create_pod`` sends); spot through ``podRentInterruptable`` with ``bidPerGpu``. Every query is
  a constant of ``runpod_graphql`` and campaign values travel as GraphQL variables. The pod is
  named ``<campaign tag>--<token>`` (``owned`` lists by that prefix) and gets the campaign's
  public key as ``PUBLIC_KEY``. The billed price is the pod's ``costPerHr``, the host its
  ``machineId``.
- Status from ``desiredStatus``: RUNNING with a runtime → running, without → starting;
  CREATED/RESTARTING → starting; EXITED on an INTERRUPTABLE pod (we never stop pods, we
  terminate them) → preempted; EXITED otherwise, DEAD, TERMINATED, PAUSED or no pod → terminated;
  anything else → unknown.
- SSH: ``root`` at the ``runtime.ports`` entry with privatePort 22.
- Errors, in one table (``error_table``): connection errors, timeouts, unreadable answers and
  answers without data (429, 5xx) are ``Unavailable``, retried (bounded); a refused key (401) is
  ``AuthError`` and a GraphQL error a ``ProviderError``, reported at once; anything else is ours
  and re-raised as it is.
- The key: ``RUNPOD_API_KEY``, else the SDK's ``~/.runpod/config.toml``. It is handed to the SDK
  only, never to nodes, events or the store.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from provisioners import runpod_graphql
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
from provisioners.ssh_keys import campaign_key
from provisioners.ssh_transport import SSHEndpoint, SSHTransport

GPU_TYPE_IDS = {"H100_SXM": "NVIDIA H100 80GB HBM3", "H100_PCIE": "NVIDIA H100 PCIe", "H100_NVL": "NVIDIA H100 NVL",
                "A100_SXM": "NVIDIA A100-SXM4-80GB", "A100_PCIE": "NVIDIA A100 80GB PCIe"}
KEY_HELP = "set RUNPOD_API_KEY, or put api_key in ~/.runpod/config.toml (`runpod config`)"


DEFAULT_IMAGE = "runpod/pytorch:2.8.0-py3.11-cuda12.8.1-cudnn-devel-ubuntu22.04"
"""The pod's image when neither the cell nor the campaign's defaults name one."""


class RunPodSettings(ProviderSettings):
    """The campaign's ``providers.runpod``."""

    cloud: Literal["SECURE", "COMMUNITY", "ALL"] = "SECURE"
    python: str = Field(default="python3", description="the pod's interpreter with PyTorch")
    workdir: str = Field(default="/workspace/benchctl", min_length=1)
    container_disk_gb: int = Field(default=50, ge=10)


def sdk() -> Any:
    """The runpod module. Importing it configures the root logger (INFO to stderr, from one of its
    serverless modules): that is undone, so our output stays ours."""
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    import runpod

    root.handlers[:] = handlers
    root.setLevel(level)
    return runpod


def api_key() -> str | None:
    """The key from RUNPOD_API_KEY, else from the SDK's config file; None when neither has one."""
    if os.environ.get("RUNPOD_API_KEY"):
        return os.environ["RUNPOD_API_KEY"]
    return getattr(sdk(), "api_key", None) or None


def _wording(what: str) -> Wording:
    def wording(typed: type[ProviderError], exc: BaseException) -> str:
        if typed is AuthError:
            return f"runpod refused the API key while trying to {what} (401): {KEY_HELP}"
        if typed is Unavailable:
            return f"runpod API unavailable while trying to {what} (retried): {type(exc).__name__}: {exc}"
        return f"runpod could not {what}: {exc}"

    return wording


def error_table() -> ErrorTable:
    """The runpod SDK's exceptions (and requests', from its transport) as typed errors."""
    import requests
    from runpod import error

    return ((error.AuthenticationError, AuthError), (error.QueryError, ProviderError),
            (requests.exceptions.RequestException, Unavailable))


class RunPodProvider(Provider):
    name = "runpod"

    def __init__(self, root: Path, settings: RunPodSettings | None = None) -> None:
        runpod = sdk()
        key = api_key()
        if not key:
            raise AuthError(f"runpod: no API key: {KEY_HELP}")
        runpod.api_key = key
        self.runpod = runpod
        self.root = root
        self.settings = settings or RunPodSettings()
        self._endpoints: dict[str, SSHEndpoint] = {}
        self.sleep: Callable[[float], None] = time.sleep
        """Between retries (a test replaces it)."""

    # -- the API, with retries -------------------------------------------------------------------
    def _graphql(self, what: str, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        """``query``'s data; campaign values go in ``variables``, never into the query text."""
        def post() -> dict[str, Any]:
            return runpod_graphql.post(query, variables or {}, self.runpod.api_key)

        return call_api(post, by_type(error_table()), _wording(what), max_s=60, sleep=self.sleep)

    # -- Provider ---------------------------------------------------------------------------------
    def offers(self, request: OfferRequest) -> list[Offer]:
        gpu_id = GPU_TYPE_IDS.get(request.gpu, request.gpu)
        types = self._graphql("list GPU prices", runpod_graphql.GPU_TYPES,
                              {"gpuTypeId": gpu_id, "gpuCount": request.count}).get("gpuTypes") or []
        offers = []
        for gpu in types:
            for cloud in ("SECURE", "COMMUNITY") if self.settings.cloud == "ALL" else (self.settings.cloud,):
                prefix = cloud.lower()
                if not gpu.get(f"{prefix}Cloud"):
                    continue
                if request.market == "spot":
                    spot = gpu.get(f"{prefix}SpotPrice")
                    floor = (gpu.get("lowestPrice") or {}).get("minimumBidPrice")
                    if spot is None and floor is None:
                        continue
                    per_gpu = max(p for p in (spot, floor) if p is not None)
                else:
                    per_gpu = gpu.get(f"{prefix}Price")
                    if per_gpu is None:
                        continue
                offers.append(Offer(provider=self.name, offer_id=f"{gpu['id']}|{cloud}", gpu=request.gpu,
                                    count=request.count, vcpus=request.min_vcpus or 0, region=cloud.lower(),
                                    hourly_usd=round(per_gpu * request.count, 4), market=request.market,
                                    details={"gpu_type_id": gpu["id"], "cloud": cloud, "per_gpu": per_gpu,
                                             "image": request.image or DEFAULT_IMAGE}))
        return sorted(offers, key=lambda o: o.hourly_usd)

    def launch(self, offer: Offer, token: str, campaign_tag: str) -> Node:
        _, public = campaign_key(self.root / "keys", campaign_tag)
        name = f"{campaign_tag}--{token}"
        d = offer.details
        pod_input: dict[str, Any] = {
            "name": name, "imageName": d["image"], "gpuTypeId": d["gpu_type_id"], "gpuCount": offer.count,
            "cloudType": d["cloud"], "startSsh": True, "supportPublicIp": True, "ports": "22/tcp",
            "volumeInGb": 0, "containerDiskInGb": self.settings.container_disk_gb, "minVcpuCount": offer.vcpus or 1,
            "env": [{"key": "PUBLIC_KEY", "value": public}]}
        if offer.market == "spot":
            answer = self._graphql("rent a spot pod", runpod_graphql.RENT_SPOT,
                                   {"input": {**pod_input, "bidPerGpu": d["per_gpu"]}})
            pod = answer["podRentInterruptable"]
        else:
            pod = self._graphql("create a pod", runpod_graphql.DEPLOY_ON_DEMAND,
                                {"input": pod_input})["podFindAndDeployOnDemand"]
        if not pod or not pod.get("id"):
            raise NoCapacity(f"runpod did not create a pod for {offer.offer_id}: no capacity now")
        billed = self._pod(pod["id"])
        return Node(provider=self.name, node_id=pod["id"], token=token, campaign_tag=campaign_tag, offer=offer,
                    details={"pod_id": pod["id"]}, host=pod.get("machineId") or None,
                    hourly_usd=float(billed["costPerHr"]) if billed and billed.get("costPerHr") is not None else None)

    def _pod(self, pod_id: str) -> dict[str, Any] | None:
        pod = self._graphql("read a pod", runpod_graphql.POD, {"podId": pod_id}).get("pod")
        return dict(pod) if pod else None

    def status(self, node: Node) -> NodeState:
        return pod_state(self._pod(node.node_id))

    def transport(self, node: Node) -> SSHTransport:
        endpoint = self._endpoints.get(node.node_id)
        if endpoint is None:
            pod = self._pod(node.node_id) or {}
            ssh = [p for p in ((pod.get("runtime") or {}).get("ports") or []) if p.get("privatePort") == 22]
            if not ssh:
                raise ProviderError(f"runpod pod {node.node_id} has no SSH port yet")
            private, _ = campaign_key(self.root / "keys", node.campaign_tag)
            endpoint = SSHEndpoint(host=ssh[0]["ip"], port=int(ssh[0]["publicPort"]), user="root", key=str(private),
                                   workdir=self.settings.workdir, python=self.settings.python)
            self._endpoints[node.node_id] = endpoint
        return SSHTransport(endpoint, self.root / "known_hosts" / node.node_id, node.token)

    def terminate(self, node: Node) -> None:
        """Idempotent: a pod the API no longer has is terminated."""
        with contextlib.suppress(NodeGone):
            self._terminate(node.node_id)
        self._endpoints.pop(node.node_id, None)

    def _terminate(self, pod_id: str) -> None:
        """``podTerminate``; NodeGone when it fails because the pod no longer exists (read back:
        the API's error is a message, not a code)."""
        try:
            self._graphql("terminate a pod", runpod_graphql.TERMINATE, {"podId": pod_id})
        except (AuthError, Unavailable):
            raise
        except ProviderError as exc:
            if self._pod(pod_id) is None:
                raise NodeGone(f"runpod pod {pod_id} is gone") from exc
            raise

    def owned(self, campaign_tag: str) -> list[Node]:
        pods = (self._graphql("list pods", runpod_graphql.PODS).get("myself") or {}).get("pods") or []
        nodes = []
        for pod in pods:
            name = str(pod.get("name") or "")
            if not name.startswith(f"{campaign_tag}--") or pod.get("desiredStatus") == "TERMINATED":
                continue
            offer = Offer(provider=self.name, offer_id=str(pod.get("machineId") or ""), gpu="",
                          count=int(pod.get("gpuCount") or 0), vcpus=int(pod.get("vcpuCount") or 0), region="",
                          hourly_usd=float(pod.get("costPerHr") or 0.0), market="")
            nodes.append(Node(provider=self.name, node_id=pod["id"], token=name.rsplit("--", 1)[1],
                              campaign_tag=campaign_tag, offer=offer, details={"pod_id": pod["id"]}))
        return nodes

    def idle_shutdown_command(self, node: Node) -> str | None:
        # RunPod images carry runpodctl and the pod's own scoped key; removing the pod stops billing.
        return 'runpodctl remove pod "$RUNPOD_POD_ID"'


def pod_state(pod: dict[str, Any] | None) -> NodeState:
    """A pod's state from its ``desiredStatus`` (see the module doc)."""
    if pod is None:
        return NodeState.TERMINATED
    status = pod.get("desiredStatus")
    if status == "RUNNING":
        return NodeState.RUNNING if pod.get("runtime") else NodeState.STARTING
    if status in ("CREATED", "RESTARTING"):
        return NodeState.STARTING
    if status == "EXITED":
        return NodeState.PREEMPTED if pod.get("podType") == "INTERRUPTABLE" else NodeState.TERMINATED
    if status in ("DEAD", "TERMINATED", "PAUSED"):
        return NodeState.TERMINATED
    return NodeState.UNKNOWN

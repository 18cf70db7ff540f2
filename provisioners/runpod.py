"""The ``runpod`` provider, through the runpod SDK (extra ``benchctl[runpod]``).

- Offers: the GPU type's prices from ``gpuTypes`` (secure or community cloud per the settings;
  on-demand = the cloud's price, spot = a bid of max(minimumBidPrice, the cloud's spot price),
  both per GPU × count).
- Launch: on-demand through ``create_pod``; spot through the ``podRentInterruptable`` mutation
  with ``bidPerGpu``. The pod is named ``<campaign tag>--<token>`` (``owned`` lists by that
  prefix) and gets the campaign's public key as ``PUBLIC_KEY``. The billed price is the pod's
  ``costPerHr``, the host its ``machineId``.
- Status from ``desiredStatus``: RUNNING with a runtime → running, without → starting;
  CREATED/RESTARTING → starting; EXITED on an INTERRUPTABLE pod (we never stop pods, we
  terminate them) → preempted; EXITED otherwise, DEAD, TERMINATED, PAUSED or no pod → terminated;
  anything else → unknown.
- SSH: ``root`` at the ``runtime.ports`` entry with privatePort 22.
- Every SDK call is retried (bounded) on connection errors, timeouts, unreadable answers and
  answers without data (429, 5xx); a refused key (401) or a GraphQL error is reported at once.
- The key: ``RUNPOD_API_KEY``, else the SDK's ``~/.runpod/config.toml``. It is handed to the SDK
  only, never to nodes, events or the store.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from provisioners.api_retry import with_retries
from provisioners.base import Node, NodeState, Offer, OfferRequest, Provider, ProviderError
from provisioners.ssh_keys import campaign_key
from provisioners.ssh_transport import SSHEndpoint, SSHTransport

GPU_TYPE_IDS = {"H100_SXM": "NVIDIA H100 80GB HBM3", "H100_PCIE": "NVIDIA H100 PCIe", "H100_NVL": "NVIDIA H100 NVL",
                "A100_SXM": "NVIDIA A100-SXM4-80GB", "A100_PCIE": "NVIDIA A100 80GB PCIe"}
KEY_HELP = "set RUNPOD_API_KEY, or put api_key in ~/.runpod/config.toml (`runpod config`)"
T = TypeVar("T")


@dataclass(frozen=True)
class RunPodSettings:
    cloud: str = "SECURE"
    python: str = "python3"
    workdir: str = "/workspace/benchctl"
    container_disk_gb: int = 50
    default_image: str = "runpod/pytorch:2.8.0-py3.11-cuda12.8.1-cudnn-devel-ubuntu22.04"


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


def _retryable(exc: BaseException) -> bool:
    import requests

    return isinstance(exc, requests.exceptions.ConnectionError | requests.exceptions.Timeout | ValueError
                      | KeyError | TypeError) and not _is_sdk_error(exc)


def _is_sdk_error(exc: BaseException) -> bool:
    from runpod import error

    return isinstance(exc, error.RunPodError)


class RunPodProvider(Provider):
    name = "runpod"

    def __init__(self, root: Path, settings: RunPodSettings | None = None) -> None:
        runpod = sdk()
        key = api_key()
        if not key:
            raise ProviderError(f"runpod: no API key: {KEY_HELP}")
        runpod.api_key = key
        self.runpod = runpod
        self.root = root
        self.settings = settings or RunPodSettings()
        self._endpoints: dict[str, SSHEndpoint] = {}

    # -- the SDK, with retries --------------------------------------------------------------------
    def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        from runpod import error

        try:
            return with_retries(lambda: fn(*args, **kwargs), _retryable, max_s=60)
        except error.AuthenticationError as exc:
            raise ProviderError(f"runpod refused the API key while trying to {what} (401): {KEY_HELP}") from exc
        except error.QueryError as exc:
            raise ProviderError(f"runpod could not {what}: {exc}") from exc
        except Exception as exc:
            if _retryable(exc):
                raise ProviderError(f"runpod API unavailable while trying to {what} (retried): "
                                    f"{type(exc).__name__}: {exc}") from exc
            raise

    def _graphql(self, what: str, query: str) -> dict[str, Any]:
        from runpod.api.graphql import run_graphql_query

        def run() -> dict[str, Any]:
            answer = run_graphql_query(query)
            return dict(answer["data"])  # no "data" (a 429 or 5xx body): KeyError, retried

        return self._call(what, run)

    # -- Provider ---------------------------------------------------------------------------------
    def offers(self, request: OfferRequest) -> list[Offer]:
        gpu_id = GPU_TYPE_IDS.get(request.gpu, request.gpu)
        query = f"""query {{ gpuTypes(input: {{id: "{gpu_id}"}}) {{ id securePrice communityPrice secureSpotPrice
            communitySpotPrice secureCloud communityCloud lowestPrice(input: {{gpuCount: {request.count}}}) {{
            minimumBidPrice uninterruptablePrice }} }} }}"""
        types = self._graphql("list GPU prices", query).get("gpuTypes") or []
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
                                             "image": request.image or self.settings.default_image}))
        return sorted(offers, key=lambda o: o.hourly_usd)

    def launch(self, offer: Offer, token: str, campaign_tag: str) -> Node:
        _, public = campaign_key(self.root / "keys", campaign_tag)
        name = f"{campaign_tag}--{token}"
        d = offer.details
        if offer.market == "spot":
            mutation = f"""mutation {{ podRentInterruptable(input: {{ bidPerGpu: {d['per_gpu']}, name: "{name}",
                imageName: "{d['image']}", gpuTypeId: "{d['gpu_type_id']}", gpuCount: {offer.count},
                cloudType: {d['cloud']}, startSsh: true, supportPublicIp: true, ports: "22/tcp", volumeInGb: 0,
                containerDiskInGb: {self.settings.container_disk_gb}, minVcpuCount: {offer.vcpus or 1},
                env: [{{ key: "PUBLIC_KEY", value: "{public}" }}] }}) {{ id costPerHr podType machineId }} }}"""
            pod = self._graphql("rent a spot pod", mutation)["podRentInterruptable"]
        else:
            pod = self._call("create a pod", self.runpod.create_pod, name=name, image_name=d["image"],
                             gpu_type_id=d["gpu_type_id"], cloud_type=d["cloud"], gpu_count=offer.count,
                             container_disk_in_gb=self.settings.container_disk_gb, min_vcpu_count=offer.vcpus or 1,
                             ports="22/tcp", support_public_ip=True, start_ssh=True, env={"PUBLIC_KEY": public})
        if not pod or not pod.get("id"):
            raise ProviderError(f"runpod did not create a pod for {offer.offer_id}: no capacity now")
        details: dict[str, Any] = {"pod_id": pod["id"], "host": pod.get("machineId") or ""}
        billed = self._pod(pod["id"])
        if billed and billed.get("costPerHr") is not None:
            details["billed_usd_per_hour"] = float(billed["costPerHr"])
        return Node(provider=self.name, node_id=pod["id"], token=token, campaign_tag=campaign_tag, offer=offer,
                    details=details)

    def _pod(self, pod_id: str) -> dict[str, Any] | None:
        return self._call("read a pod", self.runpod.get_pod, pod_id)

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
        try:
            self._call("terminate a pod", self.runpod.terminate_pod, node.node_id)
        except ProviderError as exc:
            if "not found" not in str(exc).lower():
                raise
        self._endpoints.pop(node.node_id, None)

    def owned(self, campaign_tag: str) -> list[Node]:
        pods = self._call("list pods", self.runpod.get_pods) or []
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

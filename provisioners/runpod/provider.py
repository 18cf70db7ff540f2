"""The ``runpod`` provider, through the runpod SDK (extra ``benchctl[runpod]``).

- Offers: the GPU type's on-demand price per cloud from ``gpuTypes`` (secure or community per
  the settings; both: one offer per cloud type, so a sold-out cloud's next offer is the other),
  per GPU × count. A GPU type RunPod does not have is bad input (``UnknownGpuType``: refused by
  ``check_access`` before a run, never retried). Spot cells are refused by ``validate``: RunPod's
  supported APIs rent no interruptible pods (docs/providers.md).
- Launch: the ``podFindAndDeployOnDemand`` mutation (what the SDK's ``create_pod`` sends). Every
  query is a constant of ``runpod_graphql`` and campaign values travel as GraphQL variables. The
  pod is named ``<campaign tag>--<token>`` (``owned`` lists by that prefix). The campaign's public
  key goes in through the pod's start command (``dockerArgs``, ``start_command``: it authorizes the
  key in the container, then runs the image's ``/start.sh`` or sshd), and as ``SSH_PUBLIC_KEY`` and
  ``PUBLIC_KEY`` (RunPod's proxied SSH, ``/start.sh``). A create that got no answer may have succeeded:
  the pod is looked up by that name before the mutation is sent again. The billed price is the
  pod's ``costPerHr``, the host its ``machineId``.
- Status from ``desiredStatus``: RUNNING with a public 22/tcp port → running (RunPod shows a
  ``runtime`` before its ports), RUNNING without → starting; CREATED/RESTARTING → starting, but
  RESTARTING after the pod was seen running → preempted, for good (a restart wipes the container
  disk and kills the payload);
  EXITED on an INTERRUPTABLE pod → preempted; EXITED otherwise, DEAD, TERMINATED, PAUSED or no
  pod → terminated; anything else → unknown.
- SSH: ``root`` at the ``runtime.ports`` entry with privatePort 22 and ``isIpPublic``; the image
  must have sshd, or apt-get to install it (``start_command``).
- Errors, in one table (``error_table`` and ``classify``): connection errors, timeouts,
  unreadable answers and answers without data (429, 5xx) are ``Unavailable``, retried (bounded;
  a create is never blindly re-sent, see above); a refused key (401) is ``AuthError``; a GraphQL
  error saying RunPod has no instances is ``NoCapacity``, any other a ``ProviderError``, both
  reported at once; anything else is ours and re-raised as it is.
- The key: ``RUNPOD_API_KEY``, else the SDK's ``~/.runpod/config.toml``. It is handed to the SDK
  only, never to nodes, events or the store.
- Idle shutdown (the payload's dead-man switch): the pod terminates itself with the pod-scoped
  ``RUNPOD_API_KEY`` RunPod puts in its container, read from PID 1's environment on the node, and
  the pod id from the controller (``provisioners.self_destroy``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from benchctl.provisioners.api_retry import ErrorTable, Wording, by_type, call_api
from benchctl.provisioners.base import (
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
from benchctl.provisioners.container_env import CONTAINER_ENVIRON, container_python
from benchctl.provisioners.runpod import queries as runpod_graphql
from benchctl.provisioners.runpod import start_command
from benchctl.provisioners.self_destroy import self_destroy_command
from benchctl.provisioners.ssh_keys import campaign_key
from benchctl.provisioners.ssh_transport import SSHEndpoint, SSHTransport

GPU_TYPE_IDS = {"H100_SXM": "NVIDIA H100 80GB HBM3", "H100_PCIE": "NVIDIA H100 PCIe", "H100_NVL": "NVIDIA H100 NVL",
                "A100_SXM": "NVIDIA A100-SXM4-80GB", "A100_PCIE": "NVIDIA A100 80GB PCIe", "H200": "NVIDIA H200",
                "B200": "NVIDIA B200", "L40S": "NVIDIA L40S"}
"""benchctl's GPU names (``payload.node.gpu_models``) → RunPod's GPU type ids (docs.runpod.io/references/gpu-types)."""
KEY_VARIABLES = ("SSH_PUBLIC_KEY", "PUBLIC_KEY")
"""The pod's env holding the campaign's public key. ``SSH_PUBLIC_KEY`` overrides the account's keys
for RunPod's proxied SSH only (docs.runpod.io/pods/configuration/override-public-keys); RunPod fills
``PUBLIC_KEY`` from the account's keys (whether a pod's own value survives is not documented), and
RunPod images' ``/start.sh`` authorizes it. Neither reaches the container's sshd for sure: the start
command (``start_command``) does."""
CREATE_TRIES = 3
SPOT_UNAVAILABLE = ("RunPod spot is unavailable: RunPod's supported APIs (REST v2, the runpod SDK) rent no "
                    "interruptible pods; use market: on-demand")
KEY_HELP = "set RUNPOD_API_KEY, or put api_key in ~/.runpod/config.toml (`runpod config`)"


DEFAULT_IMAGE = "runpod/pytorch:1.0.2-cu1281-torch280-ubuntu2404"
"""The pod's image when neither the cell nor the campaign's defaults name one: RunPod's own (runpod/containers,
official-templates/pytorch/README.md lists the tag) on ``nvidia/cuda:12.8.1-cudnn-devel-ubuntu24.04``
with build-essential, openssh-server and python3.x-dev (official-templates/base/Dockerfile), torch 2.8.0
(cu128) in Python 3.12, which is ``python3`` on Ubuntu 24.04; its ``/start.sh``
(container-template/start.sh) authorizes ``PUBLIC_KEY`` and starts sshd. So: sshd, a compiler and the
headers ``torch.compile`` needs, and the CUDA the torch needs."""


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
        if typed is NoCapacity:
            return f"runpod has no capacity to {what} now: {exc}"
        if typed is Unavailable:
            return f"runpod API unavailable while trying to {what} (retried): {type(exc).__name__}: {exc}"
        return f"runpod could not {what}: {exc}"

    return wording


CAPACITY_MESSAGES = ("there are no longer any instances available", "does not have the resources to deploy")
"""How RunPod words "no capacity": a GraphQL error on the create mutation (the SDK raises it as
``QueryError``), e.g. "There are no longer any instances available with the requested
specifications. Please refresh and try again." (runpodctl prints it as ``graphql error: ...``)."""


class UnknownGpuType(ProviderError):
    """The cell names a GPU type RunPod does not have: bad input, never retried."""


def error_table() -> ErrorTable:
    """The runpod SDK's exceptions (and requests', from its transport) as typed errors. A
    ``QueryError`` whose message is one of ``CAPACITY_MESSAGES`` is ``NoCapacity`` (see ``classify``)."""
    import requests
    from runpod import error

    return ((error.AuthenticationError, AuthError), (error.QueryError, ProviderError),
            (requests.exceptions.RequestException, Unavailable))


def classify(exc: BaseException) -> type[ProviderError] | None:
    """``error_table``'s verdict, with RunPod's capacity errors told apart from other GraphQL errors."""
    from runpod import error

    if isinstance(exc, error.QueryError) and any(m in str(exc).lower() for m in CAPACITY_MESSAGES):
        return NoCapacity
    return by_type(error_table())(exc)


class RunPodProvider(Provider):
    name = "runpod"
    multi_node_refusal = ("its Instant Clusters (POST /v2/clusters, https://docs.runpod.io/api-reference-v2/"
                          "clusters/create-a-cluster) are not supported by benchctl yet")

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
        self.container_environ = CONTAINER_ENVIRON
        """Where the node reads its container's environment (its PATH for the payload's Python, its key at
        idle shutdown; a test names a file)."""
        self._ran: set[str] = set()
        """Pods seen running (a restart after that ends the attempt)."""
        self._restarted: set[str] = set()
        self._lock = threading.Lock()
        self.sleep: Callable[[float], None] = time.sleep
        """Between retries (a test replaces it)."""

    # -- the API, with retries -------------------------------------------------------------------
    def _graphql(self, what: str, query: str, variables: dict[str, Any] | None = None,
                 tries: int = 5) -> dict[str, Any]:
        """``query``'s data; campaign values go in ``variables``, never into the query text."""
        def post() -> dict[str, Any]:
            return runpod_graphql.post(query, variables or {}, self.runpod.api_key)

        return call_api(post, classify, _wording(what), tries=tries, max_s=60, sleep=self.sleep)

    # -- Provider ---------------------------------------------------------------------------------
    def validate(self, request: OfferRequest) -> None:
        """RunPod rents on-demand pods only: a spot cell is refused (see ``SPOT_UNAVAILABLE``)."""
        if request.market == "spot":
            raise ProviderError(f"{request.label or request.gpu}: {SPOT_UNAVAILABLE}")

    def plan_notes(self) -> list[str]:
        return ["the pod's start command authorizes the campaign key, then runs the image's /start.sh "
                "(RunPod's own images) or its sshd; an image with neither sshd nor apt-get to install it "
                "is never reachable and its attempts end at the ready timeout"]

    def offers(self, request: OfferRequest) -> list[Offer]:
        self.validate(request)
        gpu_id = GPU_TYPE_IDS.get(request.gpu, request.gpu)
        types = self._graphql("list GPU prices", runpod_graphql.GPU_TYPES,
                              {"gpuTypeId": gpu_id}).get("gpuTypes") or []
        if not types:
            raise UnknownGpuType(f"{request.label or request.gpu}: runpod has no GPU type {gpu_id!r}: "
                                 "use one of benchctl's names or RunPod's own GPU type id")
        offers = []
        for gpu in types:
            for cloud in ("SECURE", "COMMUNITY") if self.settings.cloud == "ALL" else (self.settings.cloud,):
                prefix = cloud.lower()
                per_gpu = gpu.get(f"{prefix}Price") if gpu.get(f"{prefix}Cloud") else None
                if not per_gpu:
                    continue
                offers.append(Offer(provider=self.name, offer_id=f"{gpu['id']}|{cloud}", gpu=request.gpu,
                                    count=request.count, vcpus=request.min_vcpus or 0, region=cloud.lower(),
                                    hourly_usd=round(per_gpu * request.count, 4), market=request.market,
                                    details={"gpu_type_id": gpu["id"], "cloud": cloud, "per_gpu": per_gpu,
                                             "image": request.image or DEFAULT_IMAGE}))
        return sorted(offers, key=lambda o: o.hourly_usd)

    def check_access(self, requests: Sequence[OfferRequest]) -> None:
        """Every cell's GPU type is one RunPod has (one ``gpuTypes`` listing): an unknown id is bad
        input, refused before anything is written, not a capacity wait at run time."""
        try:
            listed = self._graphql("list GPU types", runpod_graphql.GPU_TYPE_IDS).get("gpuTypes") or []
        except ProviderError:
            return  # an API that does not answer now is reported by the offers call that follows
        known = {g.get("id") for g in listed}
        unknown = [f"{r.label or r.gpu}: runpod has no GPU type {GPU_TYPE_IDS.get(r.gpu, r.gpu)!r}: use one of "
                   f"{', '.join(sorted(GPU_TYPE_IDS))} or RunPod's own GPU type id"
                   for r in requests if GPU_TYPE_IDS.get(r.gpu, r.gpu) not in known]
        if unknown:
            raise UnknownGpuType("\n".join(unknown))

    def launch(self, offer: Offer, token: str, campaign_tag: str) -> Node:
        _, public = campaign_key(self.root / "keys", campaign_tag)
        key = start_command.key_line(public)
        name = f"{campaign_tag}--{token}"
        d = offer.details
        pod_input: dict[str, Any] = {
            "name": name, "imageName": d["image"], "gpuTypeId": d["gpu_type_id"], "gpuCount": offer.count,
            "cloudType": d["cloud"], "startSsh": True, "supportPublicIp": True, "ports": "22/tcp",
            "volumeInGb": 0, "containerDiskInGb": self.settings.container_disk_gb, "minVcpuCount": offer.vcpus or 1,
            "dockerArgs": start_command.docker_args(key),
            "env": [{"key": variable, "value": key} for variable in KEY_VARIABLES]}
        pod = self._create("create a pod", runpod_graphql.DEPLOY_ON_DEMAND, "podFindAndDeployOnDemand",
                           {"input": pod_input}, name)
        if not pod or not pod.get("id"):
            raise NoCapacity(f"runpod did not create a pod for {offer.offer_id}: no capacity now")
        billed = self._pod(pod["id"])
        return Node(provider=self.name, node_id=pod["id"], token=token, campaign_tag=campaign_tag, offer=offer,
                    details={"pod_id": pod["id"]}, host=pod.get("machineId") or None,
                    hourly_usd=float(billed["costPerHr"]) if billed and billed.get("costPerHr") is not None else None)

    def _create(self, what: str, mutation: str, field: str, variables: dict[str, Any],
                name: str) -> dict[str, Any] | None:
        """Send a create mutation once per try. When a try got no answer (it may have created the
        pod all the same: RunPod has no idempotency key), the pods are listed first and a pod of
        this ``name`` (the attempt token's) is the answer; the mutation is re-sent only when none
        exists."""
        for tries_left in range(CREATE_TRIES - 1, -1, -1):
            try:
                return self._graphql(what, mutation, variables, tries=1).get(field)
            except Unavailable:
                found = self._pod_named(name)
                if found is not None:
                    return found
                if not tries_left:
                    raise
                self.sleep(2.0)
        return None

    def _pod_named(self, name: str) -> dict[str, Any] | None:
        pods = (self._graphql("list pods", runpod_graphql.PODS).get("myself") or {}).get("pods") or []
        return next((dict(p) for p in pods if p.get("name") == name and p.get("desiredStatus") != "TERMINATED"),
                    None)

    def _pod(self, pod_id: str) -> dict[str, Any] | None:
        pod = self._graphql("read a pod", runpod_graphql.POD, {"podId": pod_id}).get("pod")
        return dict(pod) if pod else None

    def status(self, node: Node) -> NodeState:
        """``pod_state``, and a pod seen running that then restarts is preempted for good: a restart
        kills the container and wipes its disk, the attempt's payload and events with it."""
        with self._lock:
            if node.node_id in self._restarted:
                return NodeState.PREEMPTED
        pod = self._pod(node.node_id)
        state = pod_state(pod)
        with self._lock:
            if state is NodeState.RUNNING:
                self._ran.add(node.node_id)
            elif node.node_id in self._ran and (pod or {}).get("desiredStatus") == "RESTARTING":
                self._restarted.add(node.node_id)
                return NodeState.PREEMPTED
        return state

    def transport(self, node: Node) -> SSHTransport:
        endpoint = self._endpoints.get(node.node_id)
        if endpoint is None:
            ssh = public_ssh_port(self._pod(node.node_id))
            if ssh is None:
                raise ProviderError(f"runpod pod {node.node_id} has no public SSH port (22/tcp)")
            private, _ = campaign_key(self.root / "keys", node.campaign_tag)
            endpoint = SSHEndpoint(host=ssh["ip"], port=int(ssh["publicPort"]), user="root", key=str(private),
                                   workdir=self.settings.workdir,
                                   python=container_python(self.settings.python, self.container_environ))
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
        # The pod terminates itself with its pod-scoped RUNPOD_API_KEY, read from its container's environment:
        # a payload started over SSH has neither that key nor RUNPOD_POD_ID (the id comes from here).
        return self_destroy_command(self.settings.python, self.name, node.node_id, runpod_graphql.base_url(),
                                    self.container_environ)


def pod_state(pod: dict[str, Any] | None) -> NodeState:
    """A pod's state from its ``desiredStatus`` (see the module doc)."""
    if pod is None:
        return NodeState.TERMINATED
    status = pod.get("desiredStatus")
    if status == "RUNNING":
        return NodeState.RUNNING if public_ssh_port(pod) else NodeState.STARTING
    if status in ("CREATED", "RESTARTING"):
        return NodeState.STARTING
    if status == "EXITED":
        return NodeState.PREEMPTED if pod.get("podType") == "INTERRUPTABLE" else NodeState.TERMINATED
    if status in ("DEAD", "TERMINATED", "PAUSED"):
        return NodeState.TERMINATED
    return NodeState.UNKNOWN


def public_ssh_port(pod: dict[str, Any] | None) -> dict[str, Any] | None:
    """The pod's ``runtime.ports`` entry for 22/tcp on a public IP; None until RunPod publishes it
    (``runtime`` appears before its ports do)."""
    ports = ((pod or {}).get("runtime") or {}).get("ports") or []
    return next((p for p in ports if p.get("privatePort") == 22 and p.get("isIpPublic") and p.get("ip")
                 and p.get("publicPort")), None)


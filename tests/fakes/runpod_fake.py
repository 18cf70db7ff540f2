"""A local RunPod API: the GraphQL endpoint the runpod SDK talks to, executed with graphql-core.

Pods get their SSH endpoint on a real sshd the test runs (``runtime.ports``: privatePort 22 →
the sshd's port, on a public IP, beside a private-IP entry). Which keys that sshd accepts is what
the pod's container does (``runpod_container``): its start command (``dockerArgs``, else the
image's: RunPod's images run ``/start.sh``, which authorizes ``PUBLIC_KEY`` only and starts sshd only
when that is set) runs in real bash, and the keys it leaves in root's ``authorized_keys`` are
authorized there once it started sshd. ``PUBLIC_KEY`` is the account's keys (``account_keys``),
whatever the pod set; ``SSH_PUBLIC_KEY`` reaches RunPod's proxied SSH only, which the fake has not.
``no_sshd``/``no_apt`` hold images without openssh-server or apt-get. A booted pod has a
``runtime`` first and its ports ``ports_s`` later. ``sold_out`` holds (GPU type id,
cloud) pairs whose create mutations fail with RunPod's capacity error. ``faults`` is a queue of
answers served before the next real ones: ``401``, ``429``, ``500`` (an HTML page), ``malformed``
(broken JSON), ``drop`` (connection closed), ``slow`` (answers after 3 s) or ``answer_lost`` (the
request is carried out, then the connection closes without its answer).
Each pod has its own ``RUNPOD_API_KEY`` (``pod_keys``), good for terminating that pod only, and
``container_environ`` is its container's environment. Every behaviour's source is in
tests/fakes/README.md (RunPod).
Requests carry ``query`` and ``variables``, executed as a GraphQL server does: the variables are
data, coerced to their declared types. Point the SDK at it with ``RUNPOD_API_BASE_URL``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from graphql import build_schema, graphql_sync

from tests.fakes import runpod_container
from tests.fakes.eviction import kill_container
from tests.fakes.http_server import FakeHandler, serving

SCHEMA = build_schema("""
enum CloudTypeEnum { ALL SECURE COMMUNITY }
input GpuTypeFilter { id: String }
input GpuLowestPriceInput { gpuCount: Int }
type LowestPrice { minimumBidPrice: Float uninterruptablePrice: Float }
type GpuType {
  id: String displayName: String manufacturer: String memoryInGb: Int maxGpuCount: Int cudaCores: Int
  secureCloud: Boolean communityCloud: Boolean securePrice: Float communityPrice: Float oneMonthPrice: Float
  threeMonthPrice: Float oneWeekPrice: Float communitySpotPrice: Float secureSpotPrice: Float
  lowestPrice(input: GpuLowestPriceInput): LowestPrice
}
type Port { ip: String isIpPublic: Boolean privatePort: Int publicPort: Int type: String }
type PodRuntime { ports: [Port] uptimeInSeconds: Int }
type Machine { podHostId: String gpuDisplayName: String }
type Pod {
  id: String! name: String containerDiskInGb: Int costPerHr: Float desiredStatus: String dockerArgs: String
  dockerId: String env: [String] gpuCount: Int imageName: String lastStatusChange: String machineId: String
  memoryInGb: Float podType: String port: Int ports: String uptimeSeconds: Int vcpuCount: Float
  volumeInGb: Float volumeMountPath: String runtime: PodRuntime machine: Machine
}
type User { id: String pods: [Pod] }
input PodFilter { podId: String! }
input EnvironmentVariableInput { key: String! value: String }
input PodFindAndDeployOnDemandInput {
  name: String imageName: String cloudType: CloudTypeEnum startSsh: Boolean gpuTypeId: String
  supportPublicIp: Boolean gpuCount: Int volumeInGb: Int minVcpuCount: Int minMemoryInGb: Int
  allowedCudaVersions: [String] dataCenterId: String dockerArgs: String countryCode: String
  containerDiskInGb: Int ports: String volumeMountPath: String env: [EnvironmentVariableInput]
  templateId: String networkVolumeId: String minDownload: Int minUpload: Int
}
type Query { gpuTypes(input: GpuTypeFilter): [GpuType] pod(input: PodFilter): Pod myself: User }
type Mutation {
  podFindAndDeployOnDemand(input: PodFindAndDeployOnDemandInput): Pod
  podTerminate(input: PodFilter): Boolean
}
""")

GPU_TYPES = {
    "NVIDIA H100 80GB HBM3": {"secure": 2.99, "community": 2.69, "secure_spot": 1.75, "community_spot": 1.49,
                              "min_bid": 1.25},
    "NVIDIA H100 PCIe": {"secure": 2.39, "community": 1.99, "secure_spot": 1.35, "community_spot": 1.19,
                         "min_bid": 0.99},
    "NVIDIA H100 NVL": {"secure": 2.79, "community": 2.59, "secure_spot": 1.59, "community_spot": 1.39,
                        "min_bid": 1.15},
    "cpu": {"secure": 0.10, "community": 0.08, "secure_spot": 0.05, "community_spot": 0.04, "min_bid": 0.06},
}
"""Prices per GPU and hour. ``cpu`` is this fake's own type: its pods run the CPU payload here."""


class FakeRunPod:
    def __init__(self, api_key: str, ssh_port: int, authorized_keys: Path, workdir: Path, boot_s: float = 0.3,
                 containers: Path | None = None) -> None:
        self.api_key, self.ssh_port, self.authorized_keys, self.workdir = api_key, ssh_port, authorized_keys, workdir
        self.containers = containers or authorized_keys.parent / "runpod-containers"
        """Each pod's container root, ``<containers>/<pod id>``."""
        self.no_sshd: set[str] = set()
        self.no_apt: set[str] = set()
        self.booted: dict[str, runpod_container.Booted] = {}
        """What each pod's container did at its start (keys, sshd, its log)."""
        self.boot_s = boot_s
        self.pods: dict[str, dict[str, Any]] = {}
        self.faults: list[str] = []
        self.sold_out: set[tuple[str, str]] = set()
        self.account_keys = ""
        """The account's SSH keys, which RunPod puts in every pod's PUBLIC_KEY."""
        self.ports_s = boot_s
        """How long after its runtime a pod's port mappings appear."""
        self.pod_keys: dict[str, str] = {}
        """Each pod's own ``RUNPOD_API_KEY`` (in its container, never in the API's answers)."""
        self.requests: list[str] = []
        """Every request body received (a test checks what went over the wire)."""
        self.lock = threading.Lock()

    # -- resolvers (graphql-core calls root attributes with (info, **args)) ------------------------
    def gpuTypes(self, info: Any, input: dict | None = None) -> list[dict]:
        wanted = (input or {}).get("id")
        return [_gpu_type(name, p) for name, p in GPU_TYPES.items() if wanted in (None, name)]

    def pod(self, info: Any, input: dict) -> dict | None:
        with self.lock:
            pod = self.pods.get(input["podId"])
            return self._view(pod) if pod else None

    def myself(self, info: Any) -> dict:
        with self.lock:
            return {"id": "user-1", "pods": [self._view(p) for p in self.pods.values()]}

    def podFindAndDeployOnDemand(self, info: Any, input: dict) -> dict:
        self._check_capacity(input)
        prices = GPU_TYPES[input["gpuTypeId"]]
        per_gpu = prices["community" if input.get("cloudType") == "COMMUNITY" else "secure"]
        return self._create(input, "RESERVED", per_gpu)

    def podTerminate(self, info: Any, input: dict) -> bool:
        with self.lock:
            if self.pods.pop(input["podId"], None) is None:
                raise ValueError(f"pod {input['podId']} not found")
        return True

    # -- state ------------------------------------------------------------------------------------
    def _check_capacity(self, spec: dict) -> None:
        if (spec.get("gpuTypeId"), spec.get("cloudType")) in self.sold_out:
            raise ValueError(NO_INSTANCES)

    def _create(self, spec: dict, pod_type: str, per_gpu: float) -> dict:
        pod_id = uuid.uuid4().hex[:14]
        env = {e["key"]: e.get("value") or "" for e in spec.get("env") or []}
        env["PUBLIC_KEY"] = self.account_keys
        image = str(spec.get("imageName") or "")
        booted = runpod_container.boot(self.containers / pod_id, image, spec.get("dockerArgs"),
                                       {**env, "RUNPOD_POD_ID": pod_id}, no_sshd=image in self.no_sshd,
                                       no_apt=image in self.no_apt)
        if booted.keys:
            with self.authorized_keys.open("a") as keys:
                keys.write("".join(f"{k}\n" for k in booted.keys))
        pod = {"id": pod_id, "name": spec.get("name"), "imageName": spec.get("imageName"), "podType": pod_type,
               "desiredStatus": "RUNNING", "costPerHr": round(per_gpu * (spec.get("gpuCount") or 1), 4),
               "gpuCount": spec.get("gpuCount"), "vcpuCount": float(spec.get("minVcpuCount") or 8),
               "env": [f"{k}={v}" for k, v in env.items()], "dockerArgs": spec.get("dockerArgs"),
               "created": time.time(), "machineId": f"m-{pod_id[:6]}"}
        with self.lock:
            self.pods[pod_id] = pod
            self.pod_keys[pod_id] = uuid.uuid4().hex
            self.booted[pod_id] = booted
        return self._view(pod)

    def _view(self, pod: dict) -> dict:
        up = time.time() - pod["created"] - self.boot_s
        booted = pod["desiredStatus"] == "RUNNING" and up >= 0
        ports = [{"ip": "10.65.0.2", "isIpPublic": False, "privatePort": 22, "publicPort": 22, "type": "tcp"},
                 {"ip": "127.0.0.1", "isIpPublic": True, "privatePort": 22, "publicPort": self.ssh_port,
                  "type": "tcp"}] if up >= self.ports_s else []
        return {**pod, "runtime": {"ports": ports, "uptimeInSeconds": 1} if booted else None,
                "machine": {"podHostId": f"{pod['id']}-host", "gpuDisplayName": "H100"}}

    def key_for(self, authorization: str, body: bytes) -> str:
        """The key a request must carry: the account's, or a pod's own ``RUNPOD_API_KEY`` for a
        ``podTerminate`` of that pod (anything else with it is refused as a wrong key)."""
        with self.lock:
            own = next((p for p, k in self.pod_keys.items() if authorization == f"Bearer {k}"), None)
        if own is not None:
            with contextlib.suppress(ValueError, AttributeError):
                request = json.loads(body)
                if "podTerminate" in request["query"] and (request.get("variables") or {}).get("podId") == own:
                    return self.pod_keys[own]
        return self.api_key

    def container_environ(self, pod_id: str) -> bytes:
        """The pod's container environment as its PID 1 has it (``/proc/1/environ``)."""
        with self.lock:
            key = self.pod_keys[pod_id]
        return f"PATH=/usr/bin\0RUNPOD_POD_ID={pod_id}\0RUNPOD_API_KEY={key}\0RUNPOD_GPU_COUNT=8\0".encode()

    def restart(self, pod_id: str) -> None:
        """RunPod restarts the pod (host maintenance, an edit of the pod): ``desiredStatus``
        RESTARTING, no ``runtime``, every process in its container killed and its container disk
        wiped; ``come_back`` makes it RUNNING again, a fresh container."""
        with self.lock:
            pod = self.pods[pod_id]
            pod.update(desiredStatus="RESTARTING")
        kill_container(self.workdir, str(pod["name"]).rsplit("--", 1)[-1])

    def come_back(self, pod_id: str) -> None:
        with self.lock:
            self.pods[pod_id].update(desiredStatus="RUNNING", created=time.time())

    def inventory(self) -> list[str]:
        """Pods that would still bill (not terminated)."""
        with self.lock:
            return sorted(self.pods)


NO_INSTANCES = ("There are no longer any instances available with the requested specifications. "
                "Please refresh and try again.")
"""RunPod's out-of-capacity answer to a create mutation, a GraphQL error (see tests/fakes/README.md)."""


def _gpu_type(name: str, p: dict) -> dict:
    return {"id": name, "displayName": name, "manufacturer": "Nvidia", "memoryInGb": 80, "maxGpuCount": 8,
            "secureCloud": True, "communityCloud": True, "securePrice": p["secure"], "communityPrice": p["community"],
            "secureSpotPrice": p["secure_spot"], "communitySpotPrice": p["community_spot"],
            "lowestPrice": lambda info, input=None: {"minimumBidPrice": p["min_bid"],
                                                     "uninterruptablePrice": p["community"]}}


@contextmanager
def running_fake_runpod(fake: FakeRunPod) -> Iterator[str]:
    """Serve ``fake`` on 127.0.0.1; yields the base URL for RUNPOD_API_BASE_URL."""

    class Handler(FakeHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            fake.requests.append(body.decode(errors="replace"))
            lost = bool(fake.faults) and fake.faults[0] == "answer_lost" and bool(fake.faults.pop(0))
            if self.answer_fault(fake.faults, fake.key_for(self.headers.get("Authorization", ""), body),
                                 b'{"data": {"pod": ', b'{"error": "unauthorized"}'):
                return
            request = json.loads(body)
            result = graphql_sync(SCHEMA, request["query"], root_value=fake,
                                  variable_values=request.get("variables"))
            answer: dict[str, Any] = {"data": result.data}
            if result.errors:
                answer["errors"] = [{"message": e.message} for e in result.errors]
            if lost:
                self.drop()
                return
            self.send_body(200, json.dumps(answer).encode(), "application/json")

    with serving(Handler) as url:
        yield url

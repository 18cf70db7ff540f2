"""A stand-in for the few SkyPilot SDK calls the ``skypilot`` provider makes (``SkyClient``).

SkyPilot's launch path needs its API server and a cloud, so tests hand the provider this object
instead of ``SkySDK``. It keeps SkyPilot's shapes: ``launch`` returns a request id at once and
the request runs for ``boot_s``; then the cluster is UP. It behaves as a *remote* API server: no
ssh config file is written on this machine; a status record carries the handle's head IP, ssh
port and user and the key's content (``_include_credentials``), pointing at the test's real sshd,
where the stand-in's own key is authorized (SkyPilot logs in with its own key). A cluster of
``num_nodes`` lists that many nodes (all on the test's sshd, internal IPs 10.0.0.11, .12, …). ``preempt`` kills
the cluster's processes and removes it, as a refreshed status shows a reclaimed spot cluster;
``down`` removes it. ``catalog`` is the catalog, one row per instance type;
``lands_in`` is where a launch really lands (region, one node's $/hr), as the handle's
``launched_resources`` says after a failover. Status records go through ``SkySDK``'s own reader
(``sdk._cluster``) from a handle shaped as SkyPilot's, whose ``get_hourly_price`` is the whole
cluster's (one node's × ``launched_nodes``). ``faults`` is a queue of exceptions raised
by the next calls.

Autodown is enforced as SkyPilot's skylet does it (sky/skylet/events.py ``StopEvent._run``,
SkyPilot 0.14.1): the cluster is idle unless a job is pending/running or, with ``wait_for``
jobs_and_ssh (the default, sky/skylet/autostop_lib.py ``DEFAULT_AUTOSTOP_WAIT_FOR``), an ssh
session holds a PTY (``has_active_ssh_sessions`` looks for processes on /dev/pts). benchctl runs
no job and its ssh sessions have no PTY, so every cluster here is idle; the idle timer restarts
when the autostop setting is (re)submitted (``set_autostop`` calls ``set_last_active_time_to_now``)
and the cluster is torn down (``down=True``) once ``idle_minutes`` have passed since. A SkyPilot
minute lasts ``minute_s`` here (tests shorten it).
"""

from __future__ import annotations

import itertools
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchctl.provisioners.skypilot.sdk import CatalogPrice, Cluster, _cluster
from tests.fakes.eviction import kill_container
from tests.fakes.sshd import SSHServer

PRICES = [("lambda", "H100:8", False, "gpu_8x_h100_sxm5", 23.92), ("lambda", "cpu:1", False, "cpu_1x", 0.2),
          # Lambda sells no spot (sky/clouds/lambda_cloud.py): spot rows are another cloud's
          ("gcp", "cpu:1", True, "n2-standard-2", 0.07), ("gcp", "cpu:1", False, "n2-standard-2", 0.2),
          ("gcp", "H100:8", True, "a3-highgpu-8g", 31.4),
          # SkyPilot's Lambda catalog names both the PCIe and the SXM single-GPU types "H100"
          ("lambda", "H100:1", False, "gpu_1x_h100_pcie", 2.49), ("lambda", "H100:1", False, "gpu_1x_h100_sxm5", 3.29),
          # its RunPod catalog names them apart (sky/catalog/data_fetchers/fetch_runpod.py)
          ("runpod", "H100:1", False, "1x_H100_SECURE", 2.39),
          ("runpod", "H100-SXM:1", False, "1x_H100-SXM_SECURE", 2.69),
          # GCP's a3-megagpu-8g carries "H100-MEGA" (sky/catalog/gcp_catalog.py), billed 9.46006 + 82.75421
          # in us-central1 (tests/fixtures/skypilot_catalog/README.md)
          ("gcp", "H100-MEGA:8", False, "a3-megagpu-8g", 92.21427)]


@dataclass
class _Resources:
    """The handle's ``launched_resources`` (sky/resources.py ``Resources``): ONE node's region, type,
    market and price, the region being where the launch landed after any failover."""

    region: str
    instance_type: str
    use_spot: bool
    hourly_usd: float

    def get_cost(self, seconds: float) -> float:
        """One node's cost for ``seconds`` in its region (``Resources.get_cost``)."""
        return self.hourly_usd * seconds / 3600


@dataclass
class _Handle:
    """The fields of ``CloudVmRayResourceHandle`` (sky/backends/cloud_vm_ray_backend.py) that a client reads."""

    launched_resources: _Resources
    launched_nodes: int
    cached_internal_ips: list[str]
    cached_external_ips: list[str]
    cached_external_ssh_ports: list[int]
    ssh_user: str
    docker_user: str | None = None

    def get_hourly_price(self) -> float:
        """The whole cluster's: ``launched_resources.get_cost(3600) * launched_nodes``, as SkyPilot's."""
        return self.launched_resources.get_cost(3600) * self.launched_nodes


@dataclass
class _Cluster:
    name: str
    task: Any
    request_id: str
    ready_at: float
    idle_minutes: int
    status: str = "INIT"
    last_active: float = 0.0
    unhealthy: str | None = None


@dataclass
class SkyPilotStandIn:
    sshd: SSHServer
    root: Path
    workdir: Path
    """Where the provider's work dir is on the "clusters" (all share the test sshd)."""
    boot_s: float = 0.5
    minute_s: float = 60.0
    """How long one of SkyPilot's idle minutes lasts here."""
    catalog: list[tuple[str, str, bool, str, float]] = field(default_factory=lambda: list(PRICES))
    """The catalog: (cloud, accelerators, spot, instance type, $/hr), one row per instance type."""
    faults: list[BaseException] = field(default_factory=list)
    launched: list[dict[str, Any]] = field(default_factory=list)
    """Every launch: cluster name, the task's resources and the autodown minutes."""
    requests: dict[str, str] = field(default_factory=dict)
    enabled: list[str] = field(default_factory=lambda: ["aws", "gcp", "lambda"])
    """What ``sky check`` enabled."""
    errors: dict[str, BaseException] = field(default_factory=dict)
    """The exception each failed launch request failed with."""
    lands_in: tuple[str, float] | None = None
    """Where launches really land (region, $/hr of one node) when SkyPilot failed over; else the task's region."""
    autodowned: list[str] = field(default_factory=list)
    """Clusters the skylet tore down by autodown."""
    renewals: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    api_server_running: bool = False
    """Whether a local API server runs: a call that needs one starts it when none answers, as
    SkyPilot's client does (sky/server/common.py ``check_server_healthy_or_start_fn``, 0.14.1);
    ``prices`` reads the catalog on the client and needs none (sky/catalog/__init__.py)."""
    started_api_server: bool = False
    api_server_starts: int = 0
    """How many times a call started the local API server (each start is seconds and a process)."""
    container: SSHServer | None = None
    """The docker container's sshd on every VM of a cluster launched with a docker image (``add_container``)."""

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.key = self.root / "sky-key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)], check=True)
        with (self.sshd.root / "authorized_keys").open("a") as keys:
            keys.write(Path(f"{self.key}.pub").read_text())
        self._clusters: dict[str, _Cluster] = {}
        self._ids = itertools.count(1)

    def add_container(self, container: SSHServer) -> None:
        """Clusters launched with ``image_id: docker:…`` run their container's sshd at ``container``
        (SkyPilot's port 10022 on the VM, sky/skylet/constants.py ``DEFAULT_DOCKER_PORT``, reached
        from the VM; the container shares the VM's network, ``--net=host``), which authorizes the
        keys the VM does (sky/provision/docker_utils.py ``initialize``). The handle's ``docker_user``
        is the container's user; the VM's ``ssh_user`` stays the VM's."""
        with (container.root / "authorized_keys").open("a") as keys:
            keys.write(Path(f"{self.key}.pub").read_text())
        self.container = container

    # -- SkyClient --------------------------------------------------------------------------------
    def _fault(self) -> None:
        with self.lock:
            fault = self.faults.pop(0) if self.faults else None
        if fault is not None:
            raise fault

    def launch(self, task: Any, cluster_name: str, autodown_idle_minutes: int) -> str:
        self._fault()
        with self.lock:
            request_id = f"req-{next(self._ids)}"
            (resources,) = task.resources  # read its attributes: to_yaml_config would consult the catalog
            self.launched.append({"cluster": cluster_name, "cloud": str(resources.cloud).lower(),
                                  "instance_type": resources.instance_type, "use_spot": resources.use_spot,
                                  "region": resources.region, "autodown_idle_minutes": autodown_idle_minutes,
                                  "num_nodes": task.num_nodes})
            self._clusters[cluster_name] = _Cluster(cluster_name, task, request_id, time.monotonic() + self.boot_s,
                                                    autodown_idle_minutes)
            self.requests[request_id] = "RUNNING"
        return request_id

    def _advance(self) -> None:
        now = time.monotonic()
        for cluster in list(self._clusters.values()):
            if cluster.status == "INIT" and cluster.unhealthy is None and now >= cluster.ready_at:
                cluster.status = "UP"
                cluster.last_active = now  # the launch submits the autostop setting once the cluster is up
                self.requests[cluster.request_id] = "SUCCEEDED"
            # StopEvent: no job and no PTY session, so idle; down once idle_minutes passed since last_active.
            if cluster.status == "UP" and cluster.idle_minutes >= 0 \
                    and now - cluster.last_active >= cluster.idle_minutes * self.minute_s:
                self.autodowned.append(cluster.name)
                self._remove(cluster.name)

    def renew_autodown(self, cluster_name: str, idle_minutes: int) -> None:
        from sky import exceptions

        self._fault()
        with self.lock:
            self._advance()
            cluster = self._clusters.get(cluster_name)
            if cluster is None or cluster.status != "UP":  # SkyPilot refuses a cluster that is not UP
                raise exceptions.ClusterNotUpError(f"cluster {cluster_name!r} is not up")
            cluster.idle_minutes, cluster.last_active = idle_minutes, time.monotonic()
            self.renewals.append(cluster_name)

    def request_status(self, request_id: str) -> str | None:
        self._fault()
        with self.lock:
            self._advance()
            return self.requests.get(request_id)

    def clusters(self, names: list[str] | None) -> list[Cluster]:
        self._fault()
        with self.lock:
            self._advance()
            return [self._record(c) for c in self._clusters.values() if names is None or c.name in names]

    def _record(self, cluster: _Cluster) -> Cluster:
        """What ``sky.status(_include_credentials=True)`` returns, read by ``SkySDK``'s own reader
        (``sdk._cluster``): a record with SkyPilot's field names, and once the cluster was up a handle
        with its nodes' IPs and ports, its ssh user and what was launched, and the credentials."""
        record: dict[str, Any] = {"name": cluster.name, "status": cluster.status, "handle": None,
                                  "init_kind": "unhealthy" if cluster.unhealthy else None,
                                  "init_status_reason": cluster.unhealthy}
        if cluster.status == "UP" or cluster.unhealthy:
            record["handle"] = handle = self._handle(cluster)
            record["credentials"] = {"ssh_user": handle.ssh_user, "ssh_private_key_content": self.key.read_text()}
            if handle.docker_user:  # sky/backends/backend_utils.py ssh_credentials_from_handles
                record["credentials"]["docker_user"] = handle.docker_user
        return _cluster(record)

    def _handle(self, cluster: _Cluster) -> _Handle:
        (resources,) = cluster.task.resources
        cloud, spot = str(resources.cloud).lower(), bool(resources.use_spot)
        listed = [usd for c, _, s, itype, usd in self.catalog
                  if (c, s, itype) == (cloud, spot, resources.instance_type)]
        region, hourly = self.lands_in or (resources.region or "us-east-1", listed[0] if listed else 0.0)
        # every node is the test's sshd; internal IPs as a cloud's private subnet gives them, head first
        nodes = range(cluster.task.num_nodes)
        docker = resources.extract_docker_image() is not None
        docker_user = (self.container.user if self.container else self.sshd.user) if docker else None
        return _Handle(_Resources(region, resources.instance_type, spot, hourly), cluster.task.num_nodes,
                       [f"10.0.0.{rank + 11}" for rank in nodes], [self.sshd.host for _ in nodes],
                       [self.sshd.port for _ in nodes], self.sshd.user, docker_user)

    def down(self, cluster_name: str) -> None:
        self._fault()
        with self.lock:
            self._remove(cluster_name)

    def prices(self, cloud: str, accelerators: str | None, instance_type: str | None, use_spot: bool,
               region: str | None, cpus: str | None) -> list[CatalogPrice]:
        self._fault()
        wanted = instance_type or accelerators or ""
        found = [CatalogPrice(itype, usd, acc) for c, acc, spot, itype, usd in self.catalog
                 if (c, spot) == (cloud, use_spot) and wanted in (acc, itype)]
        return sorted(found, key=lambda p: p.hourly_usd)

    def enabled_clouds(self) -> list[str]:
        self._fault()
        if not self.api_server_running:
            self.api_server_running = self.started_api_server = True
            self.api_server_starts += 1
        return list(self.enabled)

    def stop_started_api_server(self) -> None:
        """``sky api stop`` (sky/client/sdk.py ``api_stop``) on the server our call started."""
        if self.started_api_server:
            self.api_server_running = self.started_api_server = False

    def launch_error(self, request_id: str) -> BaseException | None:
        self._fault()
        with self.lock:
            return self.errors.get(request_id)

    # -- what the cloud does --------------------------------------------------------------------------
    def preempt(self, cluster_name: str) -> None:
        """The cloud reclaims the spot cluster: its processes die, and it is gone."""
        with self.lock:
            self._remove(cluster_name)

    def make_unhealthy(self, cluster_name: str, reason: str) -> None:
        """A refresh found the cluster abnormal: INIT with ``init_kind`` unhealthy and SkyPilot's reason
        (sky/global_user_state.py, the INIT_KIND_UNHEALTHY record fields)."""
        with self.lock:
            cluster = self._clusters[cluster_name]
            cluster.status, cluster.unhealthy = "INIT", reason

    def preempt_nodes(self, cluster_name: str, ranks: list[int]) -> None:
        """The cloud reclaims some nodes of a spot cluster (node rank 0 is the head): their processes
        die, and a refreshed status shows the cluster INIT, unhealthy, with SkyPilot's reason
        (sky/backends/backend_utils.py ``_update_cluster_status``: fewer nodes than ``launched_nodes``
        is "one or more nodes terminated"; the event text is ``ABNORMAL_STATUS_REASON_PREFIX`` of
        sky/global_user_state.py, the reason, then "Transitioned to INIT")."""
        with self.lock:
            cluster = self._clusters[cluster_name]
            token = cluster_name.rsplit("--", 1)[1]
            for rank in ranks:
                kill_container(self.workdir, token if rank == 0 else f"{token}-n{rank}")
            cluster.status = "INIT"
            cluster.unhealthy = ("Cluster is abnormal because one or more nodes terminated. Transitioned to INIT "
                                 "(details: cluster is unhealthy).")

    def _remove(self, cluster_name: str) -> None:
        from sky import exceptions

        cluster = self._clusters.pop(cluster_name, None)
        if cluster is not None:
            if self.requests[cluster.request_id] == "RUNNING":
                self.requests[cluster.request_id] = "FAILED"  # the launch did not see the cluster up
                self.errors[cluster.request_id] = exceptions.ResourcesUnavailableError(
                    f"{cluster_name} was reclaimed while it was being provisioned")
            kill_container(self.workdir, cluster_name.rsplit("--", 1)[1])

    def inventory(self) -> list[str]:
        with self.lock:
            return sorted(self._clusters)

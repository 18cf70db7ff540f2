"""The ``skypilot`` provider: any cloud SkyPilot reaches, through its Python SDK (extra ``benchctl[skypilot]``).

- A cell becomes a SkyPilot task (``skypilot_task``), validated offline by SkyPilot's own schema.
- Offers: one per cell, priced from SkyPilot's catalog for the cell's cloud (the cheapest
  instance type that fits, which the launch then pins; the cheapest single region's total). Once
  the cluster is up, each node's billed price is the handle's (``billed_usd``: what was launched,
  in the region it landed, per node; the attempt sums its members').
- Launch submits ``sky.launch`` (returns a request id at once) for cluster
  ``<campaign tag>--<token>`` with autodown after ``autodown_idle_minutes`` whatever runs there;
  SkyPilot would count our clusters idle from the start (no job, no PTY session), so the
  controller renews the setting from ``status`` (its heartbeat): the cluster goes down that long
  after the controller stops watching it (the last renewal's time is a file's mtime, kept across
  controller restarts). ``owned`` lists clusters by the tag prefix.
- Status (``cluster_state``): starting while the launch request runs; running once it
  succeeded and the cluster is UP; a cluster that is gone or STOPPED without our ``down`` is
  preempted when it was spot, terminated otherwise, unless autodown removed it (AUTOSTOPPING, or
  gone after our renewals lapsed): a ``ProviderError`` saying so. INIT with SkyPilot's unhealthy
  reason: a ``ProviderError`` with it, except a spot cluster's INIT because the cloud took some of
  its nodes (``partly_preempted``): preempted; INIT otherwise is a launch under way (starting).
  Statuses are read with SkyPilot's AUTO refresh, which asks the cloud about spot clusters.
- SSH goes to the head's IP, port and user from the handle with the key's content from the status
  record (SkyPilot writes its ssh config on the API server's machine, which may not be ours); the
  key is kept under ``root/keys`` (0600), so the last reads of a reclaimed node stay possible. A
  cluster running a docker image is reached in its container, through its VM, as SkyPilot's own
  ssh config does, and the payload's Python runs in a login shell there (``docker.py``).
- Terminate: ``sky.down``, waited for, its output kept off the terminal; a cluster already gone is success.
- Clusters (``launch_cluster``, cells with ``nodes`` > 1): one SkyPilot cluster with the task's
  ``num_nodes``; node 0 is the head, peer ``k`` worker ``k`` in the handle's node order. Each
  member's status, autodown renewal and terminate act on the whole cluster (terminating any member
  downs it; the others are then terminated too); its SSH goes to that node's own IP and port; the
  rendezvous is the head's internal IP. ``owned`` lists one node per cluster (the head).
- Credentials are SkyPilot's own (``sky check``, its API server); benchctl never reads them.
- Errors: one table (``error_table``) types SkyPilot's exceptions (auth, no capacity, cluster
  gone, API server unreachable); connection errors and timeouts are ``Unavailable``, retried
  (bounded), nothing else is; a launch that failed for capacity is ``NoCapacity``; any other error
  SkyPilot raised is a ``ProviderError``; one raised by our own code is re-raised as it is.
"""

from __future__ import annotations

import contextlib
import glob
import os
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

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
    member_token,
)
from benchctl.provisioners.skypilot import docker
from benchctl.provisioners.skypilot.network import fabric_sold, network_resources
from benchctl.provisioners.skypilot.sdk import Cluster, SkyClient, SkySDK
from benchctl.provisioners.skypilot.task import (
    accelerators,
    form_conflict,
    pinned_accelerators,
    task_config,
    validate,
    validate_gpu,
)
from benchctl.provisioners.ssh_transport import SSHEndpoint, SSHTransport

CLUSTER_NAME = re.compile(r"[a-zA-Z]([-_.a-zA-Z0-9]*[a-zA-Z0-9])?")
"""SkyPilot's rule for cluster names."""
IN_FLIGHT = ("PENDING", "WAITING", "RUNNING")
PARTLY_GONE = ("one or more nodes terminated", "some but not all nodes are stopped")
"""SkyPilot's reasons for turning a cluster INIT when the cloud took some of its nodes (terminated,
or stopped as GCP may stop a spot VM): sky/backends/backend_utils.py ``_update_cluster_status``,
which notes that such an INIT can mean "the cluster is partially preempted" (SkyPilot 0.14.1)."""
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
    return [*table, ((sky.ApiServerConnectionError, sky.ServerTemporarilyUnavailableError,
                      sky.KubeAPIUnreachableError), Unavailable),  # the last subclasses ResourcesUnavailableError
            ((sky.ApiServerAuthenticationError, sky.InvalidCloudCredentials, sky.NoCloudAccessError,
              sky.PermissionDeniedError, sky.CloudUserIdentityError), AuthError),
            # sky/exceptions.py: no cloud/region/zone had the resources (after failover), or their prechecks
            # (quota) failed, or nothing was launched at all.
            ((sky.ResourcesUnavailableError, sky.ProvisionPrechecksError, sky.NoClusterLaunchedError), NoCapacity),
            (sky.ClusterDoesNotExist, NodeGone)]


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


CATALOG = "read SkyPilot's catalog"
"""What ``offers`` asks: SkyPilot reads its catalog on this machine, downloading it on first use and
when stale (sky/catalog/common.py ``read_catalog``), no API server involved."""


def _wording(what: str) -> Wording:
    def wording(typed: type[ProviderError], exc: BaseException) -> str:
        if typed is Unavailable and what == CATALOG:
            return (f"skypilot: could not download SkyPilot's catalog (it does on first use and when stale; "
                    f"is this machine offline?): {type(exc).__name__}: {exc}")
        if typed is Unavailable:
            return (f"skypilot: its API server did not answer while trying to {what} (retried): "
                    f"{type(exc).__name__}: {exc}; check `sky api info`")
        return f"skypilot could not {what}: {type(exc).__name__}: {exc}"

    return wording


def _name(node: Node) -> str:
    """The SkyPilot cluster a node (any member) is part of."""
    return str(node.details.get("cluster") or node.node_id)


def partly_preempted(cluster: Cluster | None, use_spot: bool) -> bool:
    """A spot cluster SkyPilot shows INIT because the cloud took some of its nodes (``PARTLY_GONE``)."""
    return (use_spot and cluster is not None and cluster.status == "INIT" and cluster.unhealthy is not None
            and any(reason in cluster.unhealthy for reason in PARTLY_GONE))


def cluster_state(request: str | None, cluster: str | None, use_spot: bool, downed: bool) -> NodeState:
    """A node's state from its launch request's status and its cluster's (None: no such cluster).
    AUTOSTOPPING and an unhealthy INIT are not states: ``status`` raises for them first."""
    if downed:
        return NodeState.TERMINATED
    if request in IN_FLIGHT:
        return NodeState.STARTING
    if cluster is None and request in ("FAILED", "CANCELLED"):
        return NodeState.TERMINATED  # the launch never made a cluster
    if cluster is None or cluster == "STOPPED":
        return NodeState.PREEMPTED if use_spot else NodeState.TERMINATED
    if cluster == "UP":
        return NodeState.RUNNING
    if cluster in ("PENDING", "INIT"):  # INIT without an unhealthy reason: a launch under way
        return NodeState.STARTING
    return NodeState.UNKNOWN


class SkyPilotProvider(Provider):
    name = "skypilot"
    multi_node_refusal = None  # SkyPilot's num_nodes (launch_cluster)
    access_unverified = ("its credentials are SkyPilot's own: `sky check` tests them (benchctl does not, as "
                         "asking would start SkyPilot's API server)")

    def __init__(self, root: Path, settings: SkyPilotSettings | None = None, client: SkyClient | None = None) -> None:
        self.client: SkyClient = client if client is not None else SkySDK()
        self.root = root
        self.settings = settings or SkyPilotSettings()
        self._downed: set[str] = set()
        """Clusters whose down we asked for (their members are terminated from then on)."""
        self._down_done: set[str] = set()
        """Clusters whose down succeeded: terminating another member of one asks nothing."""
        self.sleep: Callable[[float], None] = time.sleep
        """Between retries (a test replaces it)."""
        self.minute_s = 60.0
        """How long SkyPilot's idle minute is (a test shortens it, with its stand-in's)."""
        self.docker_port = docker.DOCKER_SSH_PORT
        """Where a docker cluster's container sshd listens on its VM (a test points it at its own)."""
        self._clouds_asked: set[str] = set()
        self._clouds_enabled: set[str] = set()
        """Clouds offers were asked for, and those ``check_access`` found enabled (``plan_notes``)."""

    def _call(self, what: str, fn: Callable[..., T], *args: Any) -> T:
        return call_api(lambda: fn(*args), classify, _wording(what), max_s=60, sleep=self.sleep)

    # -- Provider ---------------------------------------------------------------------------------
    def validate(self, request: OfferRequest) -> None:
        if not request.extra.get("cloud"):
            raise ProviderError(f"{request.label}: skypilot cells need `cloud` (e.g. cloud: lambda)")
        validate_gpu(request)
        validate(task_config(request, "benchctl", self.settings.disk_size), request.label)

    def close(self) -> None:
        self.client.stop_started_api_server()

    def check_access(self, requests: Sequence[OfferRequest]) -> None:
        wanted = sorted({str(r.extra.get("cloud", "")).lower() for r in requests} - {""})
        if not wanted:
            return
        enabled = set(self._call("read the enabled clouds", self.client.enabled_clouds))
        self._clouds_enabled |= enabled
        missing = [cloud for cloud in wanted if cloud not in enabled]
        if missing:
            raise ProviderError(f"skypilot: no credentials for {', '.join(missing)} (enabled: "
                                f"{', '.join(sorted(enabled)) or 'none'}): set them up and run "
                                f"`sky check {' '.join(missing)}`")

    def plan_notes(self) -> list[str]:
        """The clouds whose credentials nobody checked (``plan`` does not: ``access_unverified``)."""
        unchecked = sorted(self._clouds_asked - self._clouds_enabled)
        if not unchecked:
            return []
        return [f"credentials for {', '.join(unchecked)} not verified (that would start SkyPilot's API server): "
                f"`sky check {' '.join(unchecked)}` tests them; prices are SkyPilot's catalog's"]

    def offers(self, request: OfferRequest) -> list[Offer]:
        self.validate(request)
        cloud = str(request.extra["cloud"])
        self._clouds_asked.add(cloud.lower())
        config = task_config(request, "benchctl", self.settings.disk_size)
        resources = config["resources"]
        found = self._call(CATALOG, self.client.prices, cloud, accelerators(request),
                           request.instance_type, request.market == "spot", request.region, resources.get("cpus"))
        fitting = [p for p in found if not form_conflict(request.gpu, p.instance_type)]
        if not fitting:
            return []
        price = fitting[0]
        config["resources"]["instance_type"] = price.instance_type  # what was priced is what is launched
        if request.instance_type and (acc := pinned_accelerators(request, price.instance_type, price.accelerators)):
            config["resources"]["accelerators"] = acc  # the type's own GPU name (a3-megagpu-8g: H100-MEGA:8)
        config["resources"].update(network_resources(request))  # a cluster's RDMA network, where the cloud has one
        return [Offer(provider=self.name, offer_id=f"{cloud}:{price.instance_type}", gpu=request.gpu,
                      count=request.count, vcpus=request.min_vcpus or 0, region=request.region or cloud,
                      hourly_usd=round(price.hourly_usd, 4), market=request.market, details={"task": config},
                      fabric=fabric_sold(request))]

    def launch(self, offer: Offer, token: str, campaign_tag: str) -> Node:
        return self._submit(offer, token, campaign_tag, {})

    def _submit(self, offer: Offer, token: str, campaign_tag: str, more: dict[str, Any]) -> Node:
        """Submit the launch of cluster ``<campaign tag>--<token>`` (``more``: task fields beside the offer's)."""
        cluster = f"{campaign_tag}--{token}"
        if not CLUSTER_NAME.fullmatch(cluster):
            raise ProviderError(f"{cluster!r} is not a valid SkyPilot cluster name; use letters, digits, - _ . "
                                "in the campaign name")
        config = {**offer.details["task"], **more, "name": cluster}
        task = validate(config, cluster)
        request_id = self._call("submit a launch", self.client.launch, task, cluster,
                                self.settings.autodown_idle_minutes)
        details = {"cluster": cluster, "request_id": request_id, "use_spot": offer.market == "spot"}
        return Node(provider=self.name, node_id=cluster, token=token, campaign_tag=campaign_tag, offer=offer,
                    details=details, hourly_usd=offer.hourly_usd, host=cluster)

    def launch_cluster(self, offer: Offer, nodes: int, token: str, campaign_tag: str) -> Node:
        """One SkyPilot cluster of ``nodes`` nodes (the task's ``num_nodes``: SkyPilot provisions all of
        them or fails the launch, failing over as for one node). Node 0 is the head; peer ``k`` is
        worker ``k`` (node id ``<cluster>#k``, tagged ``member_token(token, k)``). Every member's
        status and terminate act on the whole cluster; its transport reaches that node."""
        head = self._submit(offer, token, campaign_tag, {"num_nodes": nodes})
        peers = tuple(replace(head, node_id=f"{head.node_id}#{rank}", token=member_token(token, rank),
                              details={**head.details, "node_rank": rank}) for rank in range(1, nodes))
        return replace(head, details={**head.details, "node_rank": 0}, peers=peers)

    def rendezvous_address(self, node: Node) -> str:
        """The head's internal IP, from the cluster's handle."""
        cluster = self._cluster(_name(node))
        if cluster is None or not cluster.nodes:
            raise ProviderError(f"skypilot gives no internal IP of {_name(node)}'s head yet")
        return cluster.nodes[0].internal

    def billed_usd(self, node: Node) -> float | None:
        """One node's price where the launch landed (the handle's, recorded by ``status`` once the
        cluster is up); the offer's until then."""
        billed = node.details.get("billed_usd_per_hour")
        return float(billed) if billed is not None else node.hourly_usd

    def _cluster(self, name: str) -> Cluster | None:
        found = [c for c in self._call("read cluster status", self.client.clusters, [name]) if c.name == name]
        return found[0] if found else None

    def status(self, node: Node) -> NodeState:
        """The node's state; a running cluster's autodown timer is restarted here (at most every quarter
        of ``autodown_idle_minutes``). ProviderError with SkyPilot's reason when its launch failed
        without a cluster (``NoCapacity`` when for capacity), when autodown removed it, or when
        SkyPilot found it unhealthy (a spot cluster that lost nodes to the cloud is preempted)."""
        request_id = node.details.get("request_id")
        request = self._call("read the launch request", self.client.request_status, request_id) if request_id \
            else None
        cluster = self._cluster(_name(node))
        downed = _name(node) in self._downed
        if not downed and partly_preempted(cluster, bool(node.details.get("use_spot"))):
            return NodeState.PREEMPTED  # every member: the attempt ends as preempted and downs the rest
        if not downed:
            self._raise_for(node, request, cluster)
        if cluster is not None and cluster.status == "UP" and not downed:
            self._keep(node, cluster)
        return cluster_state(request, cluster.status if cluster else None, bool(node.details.get("use_spot")),
                             downed)

    def _raise_for(self, node: Node, request: str | None, cluster: Cluster | None) -> None:
        request_id = node.details.get("request_id")
        if request == "FAILED" and cluster is None:
            exc = self._call("read why the launch failed", self.client.launch_error, request_id)
            why = f"{type(exc).__name__}: {exc}" if exc is not None else "SkyPilot gives no reason"
            typed = NoCapacity if exc is not None and classify(exc) is NoCapacity else ProviderError
            raise typed(f"skypilot could not launch {_name(node)}: {why} "
                        f"(`sky api logs {request_id}` has the whole log)")
        minutes = self.settings.autodown_idle_minutes
        renewed = self._renewed(_name(node))
        lapsed = renewed is not None and time.time() - renewed >= minutes * self.minute_s
        if (cluster is not None and cluster.status == "AUTOSTOPPING") or (cluster is None and lapsed):
            raise ProviderError(f"skypilot's autodown removed {_name(node)}: no controller renewed its idle timer "
                                f"for {minutes} minutes (autodown_idle_minutes); not a preemption")
        if cluster is not None and cluster.status == "INIT" and cluster.unhealthy:
            raise ProviderError(f"skypilot reports {_name(node)} unhealthy: {cluster.unhealthy}")

    def _keep(self, node: Node, cluster: Cluster) -> None:
        """Restart the autodown timer when a quarter of it has passed; record the launched price."""
        if cluster.launched is not None and cluster.launched.hourly_usd is not None:
            node.details["billed_usd_per_hour"] = round(cluster.launched.hourly_usd, 4)
            node.details["launched"] = {"region": cluster.launched.region,
                                        "instance_type": cluster.launched.instance_type,
                                        "use_spot": cluster.launched.use_spot}
        if cluster.access is not None:
            with contextlib.suppress(ProviderError):  # a worker the handle lists later: its transport says so
                self._save_access(node, cluster)
        minutes = self.settings.autodown_idle_minutes
        last = self._renewed(_name(node))
        if last is not None and time.time() - last < minutes * self.minute_s / 4:
            return
        try:
            self._call("renew the cluster's autodown", self.client.renew_autodown, _name(node), minutes)
        except ProviderError:
            if last is None:  # the launch's own setting counts from about now
                self._mark_renewed(_name(node))
            return  # tried again at the next status
        self._mark_renewed(_name(node))

    def _renewed(self, cluster: str) -> float | None:
        """When the cluster's autodown timer was last restarted (wall clock): a file's mtime under
        ``root/autodown``, so a restarted controller still tells an autodown from a preemption."""
        try:
            return (self.root / "autodown" / cluster).stat().st_mtime
        except FileNotFoundError:
            return None

    def _mark_renewed(self, cluster: str) -> None:
        path = self.root / "autodown" / cluster
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.touch()
        os.utime(path)

    def _save_access(self, node: Node, cluster: Cluster) -> None:
        """Keep the cluster's key (one for all its nodes) and this member's address: the head's for
        node 0, worker ``k``'s for node ``k`` (ProviderError while the handle does not list it yet);
        with a docker image, that node's VM and the container's user (ProviderError while SkyPilot
        gives none: the node is never reached on its VM instead)."""
        assert cluster.access is not None
        key = self.root / "keys" / _name(node)
        key.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        if not key.is_file() or key.read_text() != cluster.access.private_key:
            fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
            with os.fdopen(fd, "w") as out:
                out.write(cluster.access.private_key)
        rank = int(node.details.get("node_rank") or 0)
        if rank == 0:
            host, port = cluster.access.host, cluster.access.port
        elif rank < len(cluster.nodes):
            host, port = cluster.nodes[rank].external, cluster.nodes[rank].ssh_port
        else:
            raise ProviderError(f"skypilot lists no node {rank} of {_name(node)} yet")
        ssh: dict[str, Any] = {"host": host, "port": port, "user": cluster.access.user}
        image = str(node.offer.details.get("task", {}).get("resources", {}).get("image_id") or "")
        if image.startswith("docker:"):
            if not cluster.access.docker_user:
                raise ProviderError(f"skypilot gives no container user of {_name(node)} yet")
            ssh["docker_user"] = cluster.access.docker_user
        node.details["ssh"] = ssh

    def transport(self, node: Node) -> SSHTransport:
        ssh = node.details.get("ssh")
        key = self.root / "keys" / _name(node)
        if not ssh or not key.is_file():
            cluster = self._cluster(_name(node))
            if cluster is None or cluster.access is None:
                raise ProviderError(f"skypilot gives no head IP or ssh credentials for {_name(node)} yet")
            self._save_access(node, cluster)
            ssh = node.details["ssh"]
        endpoint = SSHEndpoint(host=str(ssh["host"]), port=int(ssh["port"]), user=str(ssh["user"]), key=str(key),
                               workdir=self.settings.workdir, python=self.settings.python)
        known_hosts = self.root / "known_hosts" / node.node_id
        if ssh.get("docker_user"):  # the container, through the node's VM
            config = self.root / "ssh" / node.node_id
            docker.write_config(config, endpoint.host, endpoint.port, endpoint.user, str(ssh["docker_user"]), key,
                                known_hosts.with_name(f"{node.node_id}.vm"), self.docker_port)
            endpoint = replace(endpoint, host=docker.ALIAS, config_file=str(config),
                               python=docker.login_python(self.settings.python))
        return SSHTransport(endpoint, known_hosts, node.token)

    def terminate(self, node: Node) -> None:
        """``sky.down`` of the member's whole cluster (once per process: every member ends with it)."""
        name = _name(node)
        if name in self._down_done:
            return
        self._downed.add(name)
        self._call("tear the cluster down", self.client.down, name)
        self._down_done.add(name)
        (self.root / "autodown" / name).unlink(missing_ok=True)
        (self.root / "keys" / name).unlink(missing_ok=True)
        for config in [self.root / "ssh" / name, *(self.root / "ssh").glob(f"{glob.escape(name)}#*")]:
            config.unlink(missing_ok=True)

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

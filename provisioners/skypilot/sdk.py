"""The handful of SkyPilot SDK calls the ``skypilot`` provider makes, behind one small seam.

``SkyClient`` is what the provider needs; ``SkySDK`` does it with the ``sky`` package (SkyPilot
0.14: calls go to its API server and return request ids). Tests hand the provider a stand-in
with the same methods. None of these calls is made at import time; importing this module does
not import ``sky``, constructing ``SkySDK`` does (a missing SDK is an ImportError there).
"""

from __future__ import annotations

import contextlib
import io
import logging
import re
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol, cast


@dataclass(frozen=True)
class Access:
    """How to log in to a cluster's head, from its handle and the credentials ``sky.status`` returns
    with ``_include_credentials`` (what SkyPilot's own CLI writes its ssh config from on a client
    of a remote API server: sky/client/cli/command.py, ``_get_cluster_records_and_set_ssh_config``)."""

    host: str
    port: int
    user: str
    private_key: str = field(repr=False)
    """The key's content (the API server's key file is on the server's machine); never in a repr."""
    docker_user: str | None = None
    """The container's user when the cluster runs a docker image (``host``, ``port``, ``user`` are then
    the VM's: provisioners/skypilot/docker.py)."""


@dataclass(frozen=True)
class Launched:
    """What the launch actually rented, from the handle's ``launched_resources``: one node's type,
    market, region (where it landed after any failover) and hourly price (``get_cost(3600)``)."""

    region: str | None
    instance_type: str | None
    use_spot: bool
    hourly_usd: float | None


@dataclass(frozen=True)
class NodeIP:
    """One node of a cluster, from the handle's ``stable_internal_external_ips`` and
    ``stable_ssh_ports`` (head first, then the workers in a stable order: the node ranks; the same
    order SkyPilot gives a job as ``SKYPILOT_NODE_IPS``)."""

    internal: str
    external: str
    ssh_port: int


@dataclass(frozen=True)
class Cluster:
    name: str
    status: str
    """SkyPilot's cluster status name: INIT, UP, STOPPED, AUTOSTOPPING, PENDING."""
    unhealthy: str | None = None
    """For INIT: SkyPilot's reason when a refresh found the cluster abnormal (``init_kind`` unhealthy)."""
    access: Access | None = None
    launched: Launched | None = None
    nodes: tuple[NodeIP, ...] = ()
    """Every node, head first (empty until the handle knows their IPs)."""


@dataclass(frozen=True)
class CatalogPrice:
    instance_type: str
    hourly_usd: float
    accelerators: str | None = None
    """``<name>:<count>`` the catalog gives the instance type (GCP's a3-megagpu-8g: ``H100-MEGA:8``);
    None where it names none (a VM GPUs are attached to)."""


class SkyClient(Protocol):
    def launch(self, task: Any, cluster_name: str, autodown_idle_minutes: int) -> str:
        """Submit a launch (returns at once); the request's id. Autodown after ``autodown_idle_minutes``
        counted from the last ``renew_autodown``, whatever runs on the cluster (``wait_for`` none)."""

    def renew_autodown(self, cluster_name: str, idle_minutes: int) -> None:
        """Set autodown again: SkyPilot restarts the cluster's idle timer on every setting."""

    def request_status(self, request_id: str) -> str | None:
        """PENDING, RUNNING, SUCCEEDED, FAILED or CANCELLED; None when the server no longer knows it."""

    def clusters(self, names: list[str] | None) -> list[Cluster]:
        """The named clusters that exist (all of this user's when None), spot ones refreshed from the cloud."""

    def down(self, cluster_name: str) -> None:
        """Tear the cluster down and wait until it is; a cluster that does not exist is success."""

    def prices(self, cloud: str, accelerators: str | None, instance_type: str | None, use_spot: bool,
               region: str | None, cpus: str | None) -> list[CatalogPrice]:
        """The catalog's instance types that fit these resources (or the one named), each at its cheapest
        single region's hourly price (the cell's region when given), cheapest first. An instance type's
        GPUs are billed as the catalog names them for that type, whatever ``accelerators`` says."""

    def enabled_clouds(self) -> list[str]:
        """The clouds SkyPilot has credentials for (``sky check``), lower-case names."""

    def stop_started_api_server(self) -> None:
        """Stop the local API server if a call of this client started it (none was running before)."""

    def launch_error(self, request_id: str) -> BaseException | None:
        """The exception a FAILED launch request failed with (None when SkyPilot gives none)."""


class SkySDK:
    """``SkyClient`` through the ``sky`` package."""

    def __init__(self) -> None:
        import sky

        self.sky = sky
        self._api_server_was_up: bool | None = None
        _as_client()

    def launch(self, task: Any, cluster_name: str, autodown_idle_minutes: int) -> str:
        from sky.skylet.autostop_lib import AutostopWaitFor

        # wait_for NONE: SkyPilot's "idle" (no job, no PTY ssh session) is true all along for us; only our
        # renewals (renew_autodown) keep the cluster (sky/skylet/events.py StopEvent._run).
        # sky.launch echoes "Running on cluster: <name>" to stdout (sky/client/sdk.py _launch, click.secho)
        with _this_threads_stdout_dropped():
            return str(self.sky.launch(task, cluster_name=cluster_name,
                                       idle_minutes_to_autostop=autodown_idle_minutes,
                                       wait_for=AutostopWaitFor.NONE, down=True))

    def renew_autodown(self, cluster_name: str, idle_minutes: int) -> None:
        from sky.skylet.autostop_lib import AutostopWaitFor

        # sky/skylet/autostop_lib.py set_autostop: "Reset timer whenever an autostop setting is submitted".
        self.sky.get(self.sky.autostop(cluster_name, idle_minutes, wait_for=AutostopWaitFor.NONE, down=True))

    def request_status(self, request_id: str) -> str | None:
        found = self.sky.api_status([request_id])
        if not found:
            return None
        status = found[0].status
        return str(getattr(status, "value", status))

    def clusters(self, names: list[str] | None) -> list[Cluster]:
        from sky.utils.common import StatusRefreshMode

        records = self.sky.get(self.sky.status(cluster_names=names, refresh=StatusRefreshMode.AUTO,
                                               _include_credentials=True))
        return [_cluster(r) for r in records]

    def down(self, cluster_name: str) -> None:
        from sky import exceptions

        try:
            # its streamed log goes to a buffer, not the terminal (benchctl's progress table): a stream of
            # our own, since redirecting sys.stdout would swallow every other thread's output too
            self.sky.stream_and_get(self.sky.down(cluster_name), output_stream=io.StringIO())
        except exceptions.ClusterDoesNotExist:
            return

    def prices(self, cloud: str, accelerators: str | None, instance_type: str | None, use_spot: bool,
               region: str | None, cpus: str | None) -> list[CatalogPrice]:
        from sky import catalog
        from sky.utils import registry

        provider = registry.CLOUD_REGISTRY.from_str(cloud)
        if provider is None:
            return []
        accs: dict[str, int] = {}
        if accelerators:
            acc_name, acc_count = accelerators.split(":")
            accs = {acc_name: int(acc_count)}
        types = [instance_type] if instance_type else []
        if instance_type is None:
            name, count = next(iter(accs.items()))
            fits, _ = catalog.get_instance_type_for_accelerator(name, count, cpus=cpus, use_spot=use_spot,
                                                                region=region, clouds=cloud)
            types = list(fits or [])
        found = []
        for itype in types:
            # the type's own GPUs: GCP's a3-megagpu-8g bills H100-MEGA (82.75 $/h for 8 in us-central1), not
            # the H100 of a3-highgpu-8g (33.61) a cell's "H100:8" names; a VM without its own takes the asked ones
            own = dict(provider.get_accelerators_from_instance_type(itype) or {})
            billed = own or accs
            # Each cost function takes its own minimum over regions when none is given: price region by
            # region and keep the cheapest whole (what one region bills), never a sum of two regions' minimums.
            regions = [region] if region else [r.name for r in provider.regions_with_offering(
                itype, billed or None, use_spot, None, None)]
            hourly = [provider.instance_type_to_hourly_cost(itype, use_spot, name, None)
                      + provider.accelerators_to_hourly_cost(billed, use_spot, name, None) for name in regions]
            if hourly:
                named = ",".join(f"{name}:{int(count)}" for name, count in own.items()) or None
                found.append(CatalogPrice(itype, float(min(hourly)), named))
        return sorted(found, key=lambda p: p.hourly_usd)

    def enabled_clouds(self) -> list[str]:
        from sky.client import sdk

        self._note_api_server()
        return [str(cloud).lower() for cloud in self.sky.get(sdk.enabled_clouds())]

    def _note_api_server(self) -> None:
        """Whether a local API server ran before our first call: the client starts one when none
        answers (sky/server/common.py ``check_server_healthy_or_start_fn``, SkyPilot 0.14.1)."""
        from sky.server import common as server_common

        if self._api_server_was_up is None:
            status = server_common.get_api_server_status().status
            self._api_server_was_up = status is not server_common.ApiServerStatus.UNHEALTHY

    def stop_started_api_server(self) -> None:
        from sky.client import sdk
        from sky.server import common as server_common

        if self._api_server_was_up is False and server_common.is_api_server_local():
            sdk.api_stop()  # sky/client/sdk.py ``api_stop``: the local server only
            self._api_server_was_up = None

    def launch_error(self, request_id: str) -> BaseException | None:
        try:
            self.sky.get(cast(Any, request_id))  # a failed request raises the exception it failed with
        except Exception as exc:  # SkyPilot's reason, whatever its type
            return exc
        return None


_PAYLOAD = re.compile(r"<sky-payload[^>]*>.*?</sky-payload>")
_ESCAPES = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b[@-_]|[\x00-\x08\x0b-\x1f\x7f]")


def plain_sky_text(text: str) -> str:
    """SkyPilot's terminal text as plain text: its encoded payloads dropped (``<sky-payload>…``:
    spinner controls its API server sends its client to render, sky/utils/message_utils.py
    ``encode_payload``, sky/utils/rich_utils.py ``EncodedStatusMessage``), colour and other escape
    sequences (colorama's, around its log lines) and control characters removed, blanks trimmed."""
    return _ESCAPES.sub("", _PAYLOAD.sub("", text)).strip()


class _PlainToStderr(io.TextIOBase):
    """The stream SkyPilot's log handler writes to instead of stdout (where benchctl's tables and
    JSON go): each complete line as plain text on stderr, prefixed ``skypilot:``, a line already
    shown once in this process not again (a retried call logs the same failure each time)."""

    def __init__(self) -> None:
        self._partial = ""
        self._shown: set[str] = set()
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            *lines, self._partial = (self._partial + text).split("\n")
            for line in (plain_sky_text(raw) for raw in lines):
                if line and line not in self._shown:
                    self._shown.add(line)
                    sys.stderr.write(f"skypilot: {line}\n")
        return len(text)

    def flush(self) -> None:
        sys.stderr.flush()


_SKY_LOG = _PlainToStderr()


def _as_client() -> None:
    """Make SkyPilot behave as in its own client process. SkyPilot assumes it runs inside its API
    server until one of its client calls says otherwise (sky/utils/annotations.py
    ``is_on_api_server``, set False by ``client_api``); meanwhile its catalog code prints encoded
    spinner payloads to stdout (sky/catalog/common.py ``read_catalog`` → rich_utils ``safe_status`` →
    ``EncodedStatus``), which only its own client decodes. benchctl reads the catalog directly, so
    it says so first. SkyPilot's log handler writes coloured lines to stdout (sky/sky_logging.py
    ``_setup_logger``): they go to stderr as plain text (``_PlainToStderr``). Idempotent."""
    from sky import sky_logging
    from sky.utils import annotations

    annotations.is_on_api_server = False
    for handler in logging.getLogger("sky").handlers:  # SkyPilot's own handlers only (others may be attached)
        if isinstance(handler, sky_logging.EnvAwareHandler) and handler.stream is not _SKY_LOG:
            with handler.lock or contextlib.nullcontext():  # not setStream: it flushes the old stream, which
                handler.stream = _SKY_LOG  # may be closed (a stdout captured and since closed)


_STDOUT_SWAP = threading.Lock()


class _DropThread(io.TextIOBase):
    """stdout that drops one thread's writes and passes every other thread's on."""

    def __init__(self, real: Any, thread: threading.Thread) -> None:
        self.real, self.thread = real, thread

    def write(self, text: str) -> int:
        return len(text) if threading.current_thread() is self.thread else int(self.real.write(text))

    def flush(self) -> None:
        self.real.flush()


@contextlib.contextmanager
def _this_threads_stdout_dropped() -> Iterator[None]:
    """What this thread prints on stdout meanwhile goes nowhere (not over benchctl's progress
    table); other threads' output still passes. One swap at a time."""
    with _STDOUT_SWAP:
        real = sys.stdout
        sys.stdout = _DropThread(real, threading.current_thread())
        try:
            yield
        finally:
            sys.stdout = real


def _field(record: Any, name: str) -> Any:
    return record.get(name) if isinstance(record, dict) else getattr(record, name, None)


def _cluster(record: Any) -> Cluster:
    """A ``sky.status`` record (sky/schemas/api/responses.py StatusResponse) as a ``Cluster``."""
    status = _field(record, "status")
    status = str(getattr(status, "value", status))
    unhealthy = _field(record, "init_status_reason") if _field(record, "init_kind") == "unhealthy" else None
    handle = _field(record, "handle")
    access = launched = None
    if handle is not None:
        credentials = _field(record, "credentials") or {}
        ips, ports = handle.cached_external_ips, handle.cached_external_ssh_ports
        if ips and credentials.get("ssh_private_key_content"):
            docker_user = credentials.get("docker_user") or getattr(handle, "docker_user", None)
            access = Access(host=str(ips[0]), port=int(ports[0]) if ports else 22,
                            user=str(credentials.get("ssh_user") or handle.ssh_user),
                            private_key=str(credentials["ssh_private_key_content"]),
                            docker_user=str(docker_user) if docker_user else None)
        resources = handle.launched_resources
        if resources is not None:
            try:  # one node's: the handle's get_hourly_price is get_cost(3600) × launched_nodes, the cluster's
                hourly: float | None = float(resources.get_cost(3600))
            except Exception:  # a catalog without the launched type: the price stays the offer's
                hourly = None
            launched = Launched(region=resources.region, instance_type=resources.instance_type,
                                use_spot=bool(resources.use_spot), hourly_usd=hourly)
    return Cluster(name=str(_field(record, "name")), status=status, unhealthy=unhealthy, access=access,
                   launched=launched, nodes=_nodes(handle))


def _nodes(handle: Any) -> tuple[NodeIP, ...]:
    """The handle's nodes, head first (sky/backends/cloud_vm_ray_backend.py ``cached_internal_ips``,
    ``cached_external_ips``, ``cached_external_ssh_ports``: one entry per node, in one order)."""
    if handle is None:
        return ()
    internal = getattr(handle, "cached_internal_ips", None) or []
    external = handle.cached_external_ips or []
    ports = handle.cached_external_ssh_ports or [22] * len(external)
    return tuple(NodeIP(str(i), str(e), int(p)) for i, e, p in zip(internal, external, ports, strict=False))

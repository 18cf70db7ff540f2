"""A stand-in for the few SkyPilot SDK calls the ``skypilot`` provider makes (``SkyClient``).

SkyPilot's launch path needs its API server and a cloud, so tests hand the provider this object
instead of ``SkySDK``. It keeps SkyPilot's shapes: ``launch`` returns a request id at once and
the request runs for ``boot_s``; then the cluster is UP and its ssh config file is written, a
``Host <cluster>`` alias (HostName, Port, User, IdentityFile, as SkyPilot writes them) that
resolves to the test's real sshd, where the stand-in's own key is authorized (SkyPilot logs in
with its own key, not the campaign's). ``preempt`` kills the cluster's processes and removes it,
as a refreshed status shows a reclaimed spot cluster; ``down`` removes it. ``prices`` is the
catalog: (cloud, accelerators or instance type, spot) → (instance type, $/hr). ``faults`` is a
queue of exceptions raised by the next calls.
"""

from __future__ import annotations

import itertools
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from provisioners.skypilot_sdk import CatalogPrice, Cluster
from tests.fakes.eviction import kill_container
from tests.fakes.sshd import SSHServer

PRICES = {("lambda", "H100:8", False): ("gpu_8x_h100_sxm5", 23.92), ("lambda", "cpu:1", False): ("cpu_1x", 0.2),
          ("lambda", "cpu:1", True): ("cpu_1x", 0.07), ("gcp", "H100:8", True): ("a3-highgpu-8g", 31.4)}


@dataclass
class _Cluster:
    name: str
    task: Any
    request_id: str
    ready_at: float
    status: str = "INIT"


@dataclass
class SkyPilotStandIn:
    sshd: SSHServer
    root: Path
    workdir: Path
    """Where the provider's work dir is on the "clusters" (all share the test sshd)."""
    boot_s: float = 0.5
    prices: dict[tuple[str, str, bool], tuple[str, float]] = field(default_factory=lambda: dict(PRICES))
    faults: list[BaseException] = field(default_factory=list)
    launched: list[dict[str, Any]] = field(default_factory=list)
    """Every launch: cluster name, the task's resources and the autodown minutes."""
    requests: dict[str, str] = field(default_factory=dict)
    enabled: list[str] = field(default_factory=lambda: ["aws", "gcp", "lambda"])
    """What ``sky check`` enabled."""
    errors: dict[str, str] = field(default_factory=dict)
    """Why each failed launch request failed."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self.key = self.root / "sky-key"
        subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(self.key)], check=True)
        with (self.sshd.root / "authorized_keys").open("a") as keys:
            keys.write(Path(f"{self.key}.pub").read_text())
        self._clusters: dict[str, _Cluster] = {}
        self._ids = itertools.count(1)

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
                                  "region": resources.region, "autodown_idle_minutes": autodown_idle_minutes})
            self._clusters[cluster_name] = _Cluster(cluster_name, task, request_id, time.monotonic() + self.boot_s)
            self.requests[request_id] = "RUNNING"
        return request_id

    def _advance(self) -> None:
        for cluster in self._clusters.values():
            if cluster.status == "INIT" and time.monotonic() >= cluster.ready_at:
                self.ssh_config(cluster.name).write_text(
                    f"# Added by the stand-in\nHost {cluster.name}\n  HostName {self.sshd.host}\n"
                    f"  User {self.sshd.user}\n  IdentityFile {self.key}\n  IdentitiesOnly yes\n"
                    "  StrictHostKeyChecking no\n  UserKnownHostsFile=/dev/null\n"
                    f"  Port {self.sshd.port}\n")
                cluster.status = "UP"
                self.requests[cluster.request_id] = "SUCCEEDED"

    def request_status(self, request_id: str) -> str | None:
        self._fault()
        with self.lock:
            self._advance()
            return self.requests.get(request_id)

    def clusters(self, names: list[str] | None) -> list[Cluster]:
        self._fault()
        with self.lock:
            self._advance()
            return [Cluster(c.name, c.status) for c in self._clusters.values() if names is None or c.name in names]

    def down(self, cluster_name: str) -> None:
        self._fault()
        with self.lock:
            self._remove(cluster_name)

    def price(self, cloud: str, accelerators: str | None, instance_type: str | None, use_spot: bool,
              region: str | None, cpus: str | None) -> CatalogPrice | None:
        self._fault()
        found = self.prices.get((cloud, instance_type or accelerators or "", use_spot))
        return CatalogPrice(*found) if found else None

    def enabled_clouds(self) -> list[str]:
        self._fault()
        return list(self.enabled)

    def launch_error(self, request_id: str) -> str:
        self._fault()
        with self.lock:
            return self.errors.get(request_id, "")

    def ssh_config(self, cluster_name: str) -> Path:
        (self.root / "ssh").mkdir(exist_ok=True)
        return self.root / "ssh" / cluster_name

    # -- what the cloud does --------------------------------------------------------------------------
    def preempt(self, cluster_name: str) -> None:
        """The cloud reclaims the spot cluster: its processes die, and it is gone."""
        with self.lock:
            self._remove(cluster_name)

    def _remove(self, cluster_name: str) -> None:
        cluster = self._clusters.pop(cluster_name, None)
        if cluster is not None:
            if self.requests[cluster.request_id] == "RUNNING":
                self.requests[cluster.request_id] = "FAILED"  # the launch did not see the cluster up
                self.errors[cluster.request_id] = (f"ResourcesUnavailableError: {cluster_name} was reclaimed "
                                                   "while it was being provisioned")
            kill_container(self.workdir, cluster_name.rsplit("--", 1)[1])
        self.ssh_config(cluster_name).unlink(missing_ok=True)

    def inventory(self) -> list[str]:
        with self.lock:
            return sorted(self._clusters)

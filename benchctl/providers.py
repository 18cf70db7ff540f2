"""Provider registry: a campaign's provider name → a Provider instance (imported lazily)."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path

from benchctl.errors import ProviderUnavailable
from benchctl.spec import CellSpec, ProvidersSpec
from provisioners.base import OfferRequest, Provider

AVAILABLE = ("local", "ssh")
"""Providers this version can drive. The others parse in campaign files but cannot run yet."""


class Providers:
    """One instance per provider name for the life of a command."""

    def __init__(self, home: Path, settings: ProvidersSpec | None = None) -> None:
        self.home = home
        self.settings = settings or ProvidersSpec()
        self._made: dict[str, Provider] = {}
        self._launch_locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def launch_lock(self, name: str) -> threading.Lock:
        """Held from reading a provider's offers to the end of a launch: no two cells of this
        controller take the same offer (a Vast.ai offer, an ssh machine)."""
        with self._guard:
            return self._launch_locks.setdefault(name, threading.Lock())

    def get(self, name: str) -> Provider:
        if name not in self._made:
            self._made[name] = self._make(name)
        return self._made[name]

    def _make(self, name: str) -> Provider:
        if name == "local":
            from provisioners.local import LocalProvider

            return LocalProvider(self.home / "nodes")
        if name == "ssh":
            from provisioners.ssh import SSHMachine, SSHProvider
            from provisioners.ssh_transport import SSHEndpoint

            nodes = self.settings.ssh.nodes if self.settings.ssh else []
            return SSHProvider(self.home / "ssh", [
                SSHMachine(name=n.label, gpu=n.gpu, count=n.count, hourly_usd=n.price_usd_per_hour,
                           endpoint=SSHEndpoint(host=n.host, port=n.port, user=n.user, key=n.key, workdir=n.workdir,
                                                python=n.python)) for n in nodes])
        raise ProviderUnavailable(
            f"provider {name!r} is not available in this version of benchctl (available: {', '.join(AVAILABLE)}); "
            "remove its cells from the campaign or use a version that ships it")

    def check(self, names: Iterable[str]) -> None:
        """Raise before anything is written when a campaign names a provider that cannot run."""
        for name in sorted(set(names)):
            self.get(name)


def offer_request(cell: CellSpec, label: str, exclude_hosts: Iterable[str] = ()) -> OfferRequest:
    """What a cell asks its provider for."""
    return OfferRequest(gpu=cell.gpu or "", count=cell.world_size, market=cell.market, region=cell.region,
                        instance_type=cell.instance_type, min_vcpus=cell.min_vcpus,
                        price_usd_per_hour=cell.price_usd_per_hour, exclude_hosts=tuple(sorted(exclude_hosts)),
                        label=label, extra={"faults": cell.faults.model_dump(exclude_none=True)} if cell.faults else {})

"""A campaign's provider name → a Provider instance, built from its row in ``benchctl.provisioners.registry``."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from benchctl.campaign.spec import CellSpec, ProvidersSpec
from benchctl.errors import ProviderUnavailable, UsageError
from benchctl.provisioners.base import OfferRequest, Provider, ProviderError
from benchctl.provisioners.registry import PROVIDERS

AVAILABLE = tuple(PROVIDERS)
"""Providers this version can drive: every name a campaign file accepts."""


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

    def close(self) -> None:
        """Each provider made gives back what it started for this command (``Provider.close``)."""
        for provider in self._made.values():
            provider.close()

    def _make(self, name: str) -> Provider:
        """A provider from its row in the table: its SDK missing or its credentials missing are usage
        errors (exit 2)."""
        entry = PROVIDERS.get(name)
        if entry is None:
            raise ProviderUnavailable(
                f"provider {name!r} is not available in this version of benchctl (available: "
                f"{', '.join(AVAILABLE)}); remove its cells from the campaign or use a version that ships it")
        try:
            return entry.make(self.home, self.settings.section(name))
        except ImportError as exc:
            if entry.extra is None:
                raise
            raise ProviderUnavailable(f"{name}: its SDK is not installed ({exc.name}): "
                                      f"pip install 'benchctl[{entry.extra}]'") from None
        except ProviderError as exc:
            if entry.extra is None:
                raise
            raise ProviderUnavailable(str(exc)) from None

    def check_cells(self, cells: Iterable[CellSpec], image: str | None = None, renting: bool = True) -> None:
        """Raise before anything is written when a provider refuses a cell's shape (checked offline,
        e.g. SkyPilot's schema: one line per such cell), or, once every shape passed, when its
        credentials cannot serve the cells (one line per provider, e.g. a cloud SkyPilot has not
        enabled). Not ``renting`` (``plan``): a provider with ``access_unverified`` is not asked.
        Call once each cell's provider is built (``engine.prepare.check_providers``)."""
        problems = []
        by_provider: dict[str, list[OfferRequest]] = {}
        for cell in cells:
            request = offer_request(cell, cell.key, image=image)
            try:
                self.get(cell.provider).validate(request)
            except ProviderError as exc:
                problems.append(str(exc))
            by_provider.setdefault(cell.provider, []).append(request)
        if problems:
            raise UsageError("\n".join(problems))
        for name, requests in sorted(by_provider.items()):
            if not renting and self.get(name).access_unverified:
                continue
            try:
                self.get(name).check_access(requests)
            except ProviderError as exc:
                problems.append(str(exc))
        if problems:
            raise ProviderUnavailable("\n".join(problems))


def unnamed(name: str, message: str) -> str:
    """A provider's ``message`` without a leading ``name: `` (its errors may name it, e.g. SkyPilot's
    ``skypilot: could not download …``): for a line that names the provider itself, once."""
    return message.removeprefix(f"{name}: ")


def offer_request(cell: CellSpec, label: str, exclude_hosts: Iterable[str] = (), image: str | None = None,
                  ) -> OfferRequest:
    """What a cell asks its provider for (``image``: the cell's, else the campaign's default)."""
    return OfferRequest(gpu=cell.gpu or "", count=cell.world_size, market=cell.market, region=cell.region,
                        image=cell.image or image,
                        instance_type=cell.instance_type, min_vcpus=cell.min_vcpus,
                        price_usd_per_hour=cell.price_usd_per_hour, exclude_hosts=tuple(sorted(exclude_hosts)),
                        label=label, extra=_extra(cell))


def _extra(cell: CellSpec) -> dict[str, Any]:
    """Provider-specific coordinates: the local provider's faults, SkyPilot's cloud, an aws cell's
    capacity reservation, and a cluster's node count (``nodes``, only above 1: a provider may list
    what a cluster needs)."""
    extra: dict[str, Any] = {}
    if cell.nodes > 1:
        extra["nodes"] = cell.nodes
    if cell.faults:
        extra["faults"] = cell.faults.model_dump(exclude_none=True)
    if cell.cloud:
        extra["cloud"] = cell.cloud
    if cell.capacity_reservation:
        extra["capacity_reservation"] = cell.capacity_reservation
    return extra

"""The one table of providers this version can drive: a campaign's provider name → its settings
class, how to build it and the pip extra holding its SDK. The campaign schema (which names a cell
may use, which ``providers.<name>`` sections exist), the provider factory and the docs read this
table; adding a provider is adding a row. Each provider imports its SDK lazily, in its constructor
or later, so reading the table never needs one."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchctl.provisioners.aws.provider import AWSProvider, AWSSettings
from benchctl.provisioners.base import Provider, ProviderSettings
from benchctl.provisioners.local.provider import LocalProvider, LocalSettings
from benchctl.provisioners.runpod.provider import RunPodProvider, RunPodSettings
from benchctl.provisioners.skypilot.provider import SkyPilotProvider, SkyPilotSettings
from benchctl.provisioners.ssh import SSHProvider, SSHSettings
from benchctl.provisioners.vastai import VastProvider, VastSettings


@dataclass(frozen=True)
class ProviderEntry:
    make: Callable[[Path, Any], Provider]
    """(the benchctl home, the campaign's settings or None) → the provider, keeping its files in a
    folder of the home. Raises ImportError when its SDK is missing, ProviderError when its
    credentials are."""
    settings: type[ProviderSettings] | None = None
    """The campaign's ``providers.<name>`` section (None: the provider takes no settings)."""
    extra: str | None = None
    """The pip extra that installs its SDK (``pip install 'benchctl[<extra>]'``); None: no SDK."""
    priced_by_user: bool = False
    """Nobody bills its nodes: each cell states ``price_usd_per_hour``."""


PROVIDERS: dict[str, ProviderEntry] = {
    "local": ProviderEntry(lambda home, s: LocalProvider(home / "nodes", python=s.python if s else None), LocalSettings,
                           priced_by_user=True),
    "ssh": ProviderEntry(lambda home, s: SSHProvider(home / "ssh", s.nodes if s else ()), SSHSettings),
    "runpod": ProviderEntry(lambda home, s: RunPodProvider(home / "runpod", s), RunPodSettings, "runpod"),
    "vastai": ProviderEntry(lambda home, s: VastProvider(home / "vastai", s), VastSettings, "vastai"),
    "aws": ProviderEntry(lambda home, s: AWSProvider(home / "aws", s), AWSSettings, "aws"),
    "skypilot": ProviderEntry(lambda home, s: SkyPilotProvider(home / "skypilot", s), SkyPilotSettings, "skypilot"),
}
"""In the order error messages list them."""

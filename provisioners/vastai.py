"""The ``vastai`` provider, through the ``vastai`` package's ``VastAI`` SDK (extra ``benchctl[vastai]``).

- Offers: ``search_offers`` with ``gpu_name``, ``num_gpus``, ``cpu_cores_effective ≥ min_vcpus``,
  ``reliability2`` and ``cuda_max_good`` floors and, optionally, datacenter hosts only
  (``hosting_type = 1``); machines marked bad by preflight (their ``machine_id``) are excluded;
  cheapest first. On-demand costs ``dph_total``; spot bids ``min_bid × (1 + bid_margin)``.
- Launch: ``create_instance`` with the bid (``price``; none on-demand), labelled
  ``<campaign tag>--<token>`` (``owned`` lists by that prefix), then the campaign's public key
  with ``attach_ssh``. Purchases go through the provider's launch lock, so two cells of one
  controller never buy one offer. The billed price is the instance's ``dph_total``.
- Status: running → running; loading/created/scheduling → starting; a bid instance that stopped
  or exited (outbid) → preempted; any other stopped/exited/offline, or no instance → terminated;
  anything else → unknown.
- SSH: direct (``public_ipaddr`` + ``ports["22/tcp"]``) or through Vast's proxy
  (``ssh_host``/``ssh_port``), as the settings say; direct falls back to the proxy.
- Errors: the SDK raises ``requests`` HTTP errors (its CLI exits 0 on them; its Python API does
  not), mapped in one table (``HTTP_STATUS_ERRORS``): 429, 5xx, connection errors, timeouts and
  unreadable answers are ``Unavailable``, retried (bounded); 401/403 ``AuthError``; 404
  ``NodeGone``; other 4xx are reported as they are; anything else is re-raised at once.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field

from provisioners.api_retry import Wording, call_api
from provisioners.base import (
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
from provisioners.ssh_keys import campaign_key
from provisioners.ssh_transport import SSHEndpoint, SSHTransport

GPU_NAMES = {"H100_SXM": "H100 SXM", "H100_PCIE": "H100 PCIE", "H100_NVL": "H100 NVL", "A100_SXM": "A100 SXM4",
             "A100_PCIE": "A100 PCIE"}
KEY_HELP = "set VAST_API_KEY, or put the key in ~/.config/vastai/vast_api_key (or ~/.vast_api_key)"
T = TypeVar("T")


DEFAULT_IMAGE = "pytorch/pytorch:2.8.0-cuda12.8-cudnn9-runtime"
"""The instance's image when neither the cell nor the campaign's defaults name one."""


class VastSettings(ProviderSettings):
    """The campaign's ``providers.vastai``."""

    min_reliability: float = Field(default=0.98, ge=0, le=1)
    min_cuda: float = Field(default=12.4, ge=0)
    datacenter_only: bool = False
    bid_margin: float = Field(default=0.1, ge=0, description="spot bid = min_bid × (1 + bid_margin)")
    ssh: Literal["direct", "proxy"] = "direct"
    disk_gb: int = Field(default=60, ge=10)
    python: str = Field(default="python3", description="the instance's interpreter with PyTorch")
    workdir: str = Field(default="/workspace/benchctl", min_length=1)


def api_key() -> str | None:
    """VAST_API_KEY, else the SDK's key files; None when there is none."""
    if os.environ.get("VAST_API_KEY"):
        return os.environ["VAST_API_KEY"]
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "vastai" / "vast_api_key"
    for path in (config, Path.home() / ".vast_api_key"):
        if path.is_file() and path.read_text().strip():
            return path.read_text().strip()
    return None


def _status_of(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


HTTP_STATUS_ERRORS: dict[int, type[ProviderError]] = {401: AuthError, 403: AuthError, 404: NodeGone,
                                                      429: Unavailable}
"""The one table: an HTTP status the SDK's ``HTTPError`` carries → typed error (5xx: Unavailable;
any other status: a ProviderError). Connection errors, timeouts and unreadable answers (all
``requests`` errors) are Unavailable; anything else is ours, re-raised as it is."""


def classify(exc: BaseException) -> type[ProviderError] | None:
    import requests

    if isinstance(exc, requests.exceptions.HTTPError):
        status = _status_of(exc) or 0
        return HTTP_STATUS_ERRORS.get(status, Unavailable if status >= 500 else ProviderError)
    if isinstance(exc, requests.exceptions.RequestException):
        return Unavailable
    return None


def _wording(what: str) -> Wording:
    def wording(typed: type[ProviderError], exc: BaseException) -> str:
        status = _status_of(exc)
        if typed is AuthError:
            return f"vastai refused the API key while trying to {what} ({status}): {KEY_HELP}"
        if typed is Unavailable:
            return f"vastai API unavailable while trying to {what} (retried): {type(exc).__name__}: {exc}"
        return f"vastai could not {what} ({status}): {_body(exc)}"

    return wording


class VastProvider(Provider):
    name = "vastai"

    def __init__(self, root: Path, settings: VastSettings | None = None, request_timeout_s: float = 30.0) -> None:
        from vastai import VastAI

        key = api_key()
        if not key:
            raise AuthError(f"vastai: no API key: {KEY_HELP}")
        self.settings = settings or VastSettings()
        self.sdk = VastAI(api_key=key, server_url=os.environ.get("VAST_URL") or "https://console.vast.ai", retry=1)
        self.sdk.client.timeout = request_timeout_s
        self.root = root
        self.sleep: Callable[[float], None] = time.sleep
        """Between retries (a test replaces it)."""

    def _call(self, what: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        return call_api(lambda: fn(*args, **kwargs), classify, _wording(what), max_s=90, sleep=self.sleep)

    def offers(self, request: OfferRequest) -> list[Offer]:
        s = self.settings
        query: dict[str, Any] = {"gpu_name": {"eq": GPU_NAMES.get(request.gpu, request.gpu)},
                                 "num_gpus": {"eq": request.count}, "reliability2": {"gte": s.min_reliability},
                                 "cuda_max_good": {"gte": s.min_cuda}}
        if request.min_vcpus:
            query["cpu_cores_effective"] = {"gte": request.min_vcpus}
        if request.exclude_hosts:
            bad = [int(h) for h in request.exclude_hosts if h.isdigit()]
            if bad:
                query["machine_id"] = {"notin": bad}
        if s.datacenter_only:
            query["hosting_type"] = {"eq": 1}
        spot = request.market == "spot"
        found = self._call("search offers", self.sdk.search_offers, query=query, type="bid" if spot else "on-demand",
                           order="dph_total") or []
        offers = []
        for o in found:
            price = round(float(o["min_bid"]) * (1 + s.bid_margin), 4) if spot else float(o["dph_total"])
            offers.append(Offer(provider=self.name, offer_id=str(o["id"]), gpu=request.gpu, count=int(o["num_gpus"]),
                                vcpus=int(o.get("cpu_cores_effective") or 0), region=str(o.get("geolocation") or ""),
                                hourly_usd=price, market=request.market, host=str(o["machine_id"]),
                                details={"bid": price if spot else None,
                                         "image": request.image or DEFAULT_IMAGE}))
        return sorted(offers, key=lambda o: o.hourly_usd)

    def launch(self, offer: Offer, token: str, campaign_tag: str) -> Node:
        _, public = campaign_key(self.root / "keys", campaign_tag)
        answer = self._call("rent an offer", self.sdk.create_instance, id=int(offer.offer_id),
                            image=offer.details["image"], disk=self.settings.disk_gb, label=f"{campaign_tag}--{token}",
                            price=offer.details.get("bid"), ssh=True, direct=self.settings.ssh == "direct")
        instance_id = answer.get("new_contract") if isinstance(answer, dict) else None
        if not instance_id:
            raise NoCapacity(f"vastai did not rent offer {offer.offer_id}: {answer}")
        node = Node(provider=self.name, node_id=str(instance_id), token=token, campaign_tag=campaign_tag, offer=offer,
                    details={"instance_id": int(instance_id)}, host=offer.host or None)
        try:
            self._call("add the campaign's SSH key", self.sdk.attach_ssh, int(instance_id), public)
            instance = self._instance(node)
        except ProviderError:
            self.terminate(node)  # rented but unusable: do not leave it billing
            raise
        if instance and instance.get("dph_total") is not None:
            node = replace(node, hourly_usd=float(instance["dph_total"]))
        return node

    def _instance(self, node: Node) -> dict[str, Any] | None:
        try:
            return self._call("read an instance", self.sdk.show_instance, int(node.node_id))
        except NodeGone:
            return None

    def status(self, node: Node) -> NodeState:
        return instance_state(self._instance(node))

    def transport(self, node: Node) -> SSHTransport:
        instance = self._instance(node) or {}
        direct = (instance.get("ports") or {}).get("22/tcp") or []
        if self.settings.ssh == "direct" and direct and instance.get("public_ipaddr"):
            host, port = str(instance["public_ipaddr"]), int(direct[0]["HostPort"])
        elif instance.get("ssh_host") and instance.get("ssh_port"):
            host, port = str(instance["ssh_host"]), int(instance["ssh_port"])
        else:
            raise ProviderError(f"vastai instance {node.node_id} has no SSH endpoint yet")
        private, _ = campaign_key(self.root / "keys", node.campaign_tag)
        endpoint = SSHEndpoint(host=host, port=port, user="root", key=str(private), workdir=self.settings.workdir,
                               python=self.settings.python)
        return SSHTransport(endpoint, self.root / "known_hosts" / node.node_id, node.token)

    def terminate(self, node: Node) -> None:
        with contextlib.suppress(NodeGone):
            self._call("destroy an instance", self.sdk.destroy_instance, int(node.node_id))

    def owned(self, campaign_tag: str) -> list[Node]:
        nodes = []
        for row in self._call("list instances", self.sdk.show_instances) or []:
            label = str(row.get("label") or "")
            if not label.startswith(f"{campaign_tag}--"):
                continue
            offer = Offer(provider=self.name, offer_id=str(row.get("offer", "")), gpu=str(row.get("gpu_name", "")),
                          count=int(row.get("num_gpus") or 0), vcpus=int(row.get("cpu_cores_effective") or 0),
                          region="", hourly_usd=float(row.get("dph_total") or 0.0), market="",
                          host=str(row.get("machine_id", "")))
            nodes.append(Node(provider=self.name, node_id=str(row["id"]), token=label.rsplit("--", 1)[1],
                              campaign_tag=campaign_tag, offer=offer, details={"instance_id": row["id"]}))
        return nodes


def instance_state(instance: dict[str, Any] | None) -> NodeState:
    """An instance's state (see the module doc)."""
    if instance is None:
        return NodeState.TERMINATED
    actual, intended = instance.get("actual_status"), instance.get("intended_status")
    if actual == "running" and intended != "stopped":
        return NodeState.RUNNING
    if actual in ("loading", "created", "scheduling") or (actual is None and intended == "running"):
        return NodeState.STARTING
    if actual in ("exited", "stopped", "offline") or intended == "stopped":
        return NodeState.PREEMPTED if instance.get("is_bid") else NodeState.TERMINATED
    return NodeState.UNKNOWN


def _body(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    try:
        return str(response.json()) if response is not None else str(exc)
    except ValueError:
        return str(exc)

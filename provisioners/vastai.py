"""The ``vastai`` provider, through the ``vastai`` package's ``VastAI`` SDK (extra ``benchctl[vastai]``).

- Offers: ``search_offers`` with ``gpu_name``, ``num_gpus``, ``cpu_cores_effective ≥ min_vcpus``,
  ``reliability`` (the documented filter; ``reliability2`` is silently ignored) and
  ``cuda_max_good`` floors and, optionally, datacenter hosts only (``hosting_type = 1``); machines
  marked bad by preflight (their ``machine_id``) are excluded; cheapest first. Priced as billed,
  with the disk actually rented (``disk_gb``): on-demand is the ``dph_total`` searched with
  ``allocated_storage = disk_gb`` (the SDK's default prices 5 GB); spot is the bid
  (``min_bid × (1 + bid_margin)``, storage excluded) plus ``storage_cost`` ($/GB per 30-day month)
  × ``disk_gb``. ``details["pricing"]`` says which. Without a key, ``public_price`` asks the same
  search anonymously (it is public) for a catalog price, never an offer (``provisioners/catalog.py``).
- Launch: ``create_instance`` with the bid (``price``; none on-demand), labelled
  ``<campaign tag>--<token>`` (``owned`` lists by that prefix), then the campaign's public key
  with ``attach_ssh``. Purchases go through the provider's launch lock, so two cells of one
  controller never buy one offer. A create is never re-sent blindly: it waits as long as the SDK
  does (``CREATE_TIMEOUT_S``), and after a try that may have reached Vast (timeout, dropped
  connection, 5xx) the label is looked up first and an instance carrying it is adopted. It asks
  ``cancel_unavail``: an offer that cannot start now answers 410 ``no_such_ask`` instead of a stopped
  instance billing its disk (the SDK sends false unless told). An offer gone or unknown (410
  ``no_such_ask``; 404, ``error: invalid_args``) is ``NoCapacity``. A bid that loses at rent time still creates
  the instance, stopped and billing its disk, and answers an error (200 or 4xx, ``success: false``):
  the instance it names and any carrying the label are destroyed, and the rent is ``NoCapacity``.
  The billed price is the instance's ``dph_total``.
- Destroy: a destroy that answers 200 with ``success: false``, or an error other than auth or
  unavailability, is read back: an instance Vast still has is an error (it bills), one it no longer
  has is gone (``NodeGone``, success for ``terminate``).
- Status (``actual_status`` is the host's state, ``intended_status`` the renter's intent):
  ``cur_state``, ``intended_status`` and ``next_state`` all stopped (how an outbid instance reads,
  as dstack's vastai backend reads it) → preempted for a bid, terminated otherwise; running →
  running; null/created/loading → starting; stopped/exited/rebooting (the container, and the
  payload in it, stopped) → preempted for a bid (outbid), terminated otherwise; unknown/offline/
  frozen (the host is out of touch or paused; the payload may live) → unknown; an intent of
  stopped alone (someone stopped it by hand) or no instance → terminated. A node once preempted
  stays so even when Vast resumes it by itself (its payload died when it was paused).
- SSH: direct (``public_ipaddr`` + ``ports["22/tcp"]``) or through Vast's proxy
  (``ssh_host``/``ssh_port``), as the settings say; direct falls back to the proxy when there is no
  mapping or the mapped port gives no SSH banner within ``probe_timeout_s``. The address is read
  once per node, not on every ``transport`` call.
- Idle shutdown (the payload's dead-man switch): the node destroys its own instance with
  ``CONTAINER_API_KEY``, the per-instance key Vast puts in every container, read from PID 1's
  environment on the node (``provisioners.self_destroy``); Vast has no idle stop of its own.
- Rate limits: Vast allows one call per endpoint and API key every ``MIN_INTERVAL_S`` seconds and
  sends no ``Retry-After``; one ``Limiter`` per API key, shared by every provider and thread of the
  process, spaces the calls. ``owned`` lists the account's instances a page (``PAGE_SIZE``) per
  call, each page one spaced call, following ``next_token``.
- Errors: the SDK raises ``requests`` HTTP errors, mapped in one table (``ERROR_CODES`` by the
  body's ``error``, then ``HTTP_STATUS_ERRORS``): the daily ``search_quota_exceeded`` 429 is
  ``SearchQuotaExceeded``, not retried; ``no_such_ask`` and 410 ``NoCapacity``; other 429s, 5xx,
  connection errors, timeouts and unreadable answers are ``Unavailable``, retried (bounded);
  401/403 ``AuthError``; 404 ``NodeGone``; other 4xx are reported as they are; anything else is
  re-raised at once.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import hashlib
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import Field

from benchctl.provisioners.api_retry import Wording, call_api
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
from benchctl.provisioners.self_destroy import self_destroy_command
from benchctl.provisioners.ssh_keys import campaign_key
from benchctl.provisioners.ssh_transport import SSHEndpoint, SSHTransport

GPU_NAMES = {"H100_SXM": "H100 SXM", "H100_PCIE": "H100 PCIE", "H100_NVL": "H100 NVL", "A100_SXM": "A100 SXM4",
             "A100_PCIE": "A100 PCIE"}
KEY_HELP = "set VAST_API_KEY, or put the key in ~/.config/vastai/vast_api_key (or ~/.vast_api_key)"
T = TypeVar("T")
HOURS_PER_MONTH = 24 * 30
"""``storage_cost`` is $/GB per 30-day month (vastai ``cli/commands/price_increase.py``)."""
CREATE_TIMEOUT_S = 120.0
"""How long a create may take to answer: the SDK's own default (vastai ``api/client.py``
``_DEFAULT_TIMEOUT_SECONDS``, "conservative enough for ... instance creation")."""
PAGE_SIZE = 25
"""Instances per page of ``GET /api/v1/instances/``: the documented maximum (vast-ai/docs
``api-reference/openapi/yaml/show_instances.yaml``, "max 25 per page"); pages follow ``next_token``."""
MIN_INTERVAL_S = {"search": 6.0, "create": 4.5, "show_instance": 2.0, "show_instances": 1.0, "destroy": 3.0,
                  "attach_ssh": 1.0}
"""Seconds between two calls of one endpoint with one key: the 429 thresholds of Vast's openapi.yaml
(PUT asks 4.5, DELETE instance 3.0, GET instance 2.0, GET v1 instances 1.0); search 10 a minute;
attach_ssh (no threshold documented) 1 s."""


DEFAULT_IMAGE = "pytorch/pytorch:2.8.0-cuda12.8-cudnn9-devel"
"""The instance's image when neither the cell nor the campaign's defaults name one. Vast's ssh launch
mode injects sshd into any image (docs.vast.ai, launch modes); the image must bring a C compiler for
``torch.compile``: PyTorch's ``-devel`` images do, its ``-runtime`` ones do not (pytorch/pytorch
issue 116696; pytorch/builder PR 1858 stopped running torch.compile on the runtime images only)."""


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


class SearchQuotaExceeded(ProviderError):
    """Vast's daily offer-search quota is spent: it resets at midnight UTC; retrying burns nothing but time."""


class Limiter:
    """Spaces the calls of each endpoint by ``MIN_INTERVAL_S`` (read at each call) plus ``margin``
    of it (the network reorders what leaves on time), across threads. ``clock`` and ``sleep`` are
    injectable; the wait happens outside the lock."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep,
                 intervals: dict[str, float] | None = None, margin: float = 0.1) -> None:
        self.clock, self.sleep, self.margin = clock, sleep, margin
        self.intervals = MIN_INTERVAL_S if intervals is None else intervals
        self._next: dict[str, float] = {}
        self._lock = threading.Lock()

    def wait(self, endpoint: str) -> None:
        """Return when a call of ``endpoint`` may go out; the slot is taken by this caller."""
        with self._lock:
            now = self.clock()
            start = max(now, self._next.get(endpoint, now))
            self._next[endpoint] = start + self.intervals.get(endpoint, 0.0) * (1 + self.margin)
        if start > now:
            self.sleep(start - now)


_LIMITERS: dict[str, Limiter] = {}
_LIMITERS_LOCK = threading.Lock()


def shared_limiter(key: str) -> Limiter:
    """The process's one limiter for an API key (kept by the key's hash, never the key)."""
    digest = hashlib.sha256(key.encode()).hexdigest()
    with _LIMITERS_LOCK:
        return _LIMITERS.setdefault(digest, Limiter())


def api_key() -> str | None:
    """VAST_API_KEY, else the SDK's key files; None when there is none."""
    if os.environ.get("VAST_API_KEY"):
        return os.environ["VAST_API_KEY"]
    config = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / "vastai" / "vast_api_key"
    for path in (config, Path.home() / ".vast_api_key"):
        if path.is_file() and path.read_text().strip():
            return path.read_text().strip()
    return None


PUBLIC_TIMEOUT_S = 4.0
"""How long one search of the public listing may take (it is tried twice at most)."""
PUBLIC_INTERVAL_S = 2.0
"""Seconds between two searches without a key: the ``x-rateLimit`` threshold of ``POST /api/v0/bundles/``
(vast-ai/docs @000751af ``api-reference/openapi/yaml/auto_post_api_v0_bundles_32b4bb.yaml``)."""
_PUBLIC_LIMITER = Limiter(intervals={"search": PUBLIC_INTERVAL_S})
_PUBLIC_UNREACHABLE: set[str] = set()
"""Listing URLs that failed in this process: not asked again (``plan`` stays fast offline)."""


def public_price(request: OfferRequest, settings: VastSettings | None = None) -> float | None:
    """The $/hr of the cheapest offer for ``request`` in Vast's public listing now, priced as ``offers``
    prices it (provisioners/catalog.py shows it as a catalog price: with no key nothing can be rented
    at it). Vast's offer search answers without a key (the endpoint declares ``security: []``, vast-ai/docs @000751af
    ``auto_post_api_v0_bundles_32b4bb.yaml``; dstackai/gpuhunt ``src/gpuhunt/providers/vastai.py`` posts to
    it with no credentials), and the SDK sends no ``Authorization`` header when its key is None (vastai
    ``api/client.py`` ``_build_headers``). None when a key is configured (offers are asked instead),
    when nothing matches, or when the listing cannot be read: one try and one retry of
    ``PUBLIC_TIMEOUT_S`` each, and a listing that failed is not asked again by this process."""
    url = os.environ.get("VAST_URL") or "https://console.vast.ai"
    if api_key() or url in _PUBLIC_UNREACHABLE:
        return None
    from vastai import VastAI

    sdk = VastAI(api_key="", server_url=url, retry=2)
    sdk.client.api_key, sdk.client.timeout = None, PUBLIC_TIMEOUT_S
    s = settings or VastSettings()
    try:
        _PUBLIC_LIMITER.wait("search")
        found = _offers(sdk.search_offers(**_search(request, s)) or [], request, s)
    except Exception as exc:
        if classify(exc) is None and not isinstance(exc, (KeyError, TypeError, ValueError)):
            raise
        _PUBLIC_UNREACHABLE.add(url)
        return None
    return found[0].hourly_usd if found else None


def _status_of(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    return getattr(response, "status_code", None)


def _error_code(exc: BaseException) -> str | None:
    code = _answer(exc).get("error")
    return code if isinstance(code, str) else None


ERROR_CODES: dict[str, type[ProviderError]] = {"search_quota_exceeded": SearchQuotaExceeded,
                                               "no_such_ask": NoCapacity}
HTTP_STATUS_ERRORS: dict[int, type[ProviderError]] = {401: AuthError, 403: AuthError, 404: NodeGone,
                                                      410: NoCapacity, 429: Unavailable}
"""The one table: the body's ``error`` (``ERROR_CODES``), else the HTTP status the SDK's
``HTTPError`` carries → typed error (5xx: Unavailable; any other status: a ProviderError).
Connection errors, timeouts and unreadable answers (all ``requests`` errors) are Unavailable;
anything else is ours, re-raised as it is."""


def classify(exc: BaseException) -> type[ProviderError] | None:
    import requests

    if isinstance(exc, requests.exceptions.HTTPError):
        code = _error_code(exc)
        if code in ERROR_CODES:
            return ERROR_CODES[code]
        status = _status_of(exc) or 0
        return HTTP_STATUS_ERRORS.get(status, Unavailable if status >= 500 else ProviderError)
    if isinstance(exc, requests.exceptions.RequestException):
        return Unavailable
    return None


def rent_classify(exc: BaseException) -> type[ProviderError] | None:
    """``classify`` for a rent: its 404 is the offer not found (``error: invalid_args``, ``no_such_ask``
    in the message: vast-ai/docs ``api-reference/openapi/yaml/create_instance.yaml``), ``NoCapacity``."""
    typed = classify(exc)
    return NoCapacity if typed is NodeGone else typed


def _may_have_reached(exc: BaseException) -> bool:
    """Whether a failed create may still have rented: anything but an answer that refused it."""
    status = _status_of(exc)
    return status is None or status >= 500


def _wording(what: str) -> Wording:
    def wording(typed: type[ProviderError], exc: BaseException) -> str:
        status = _status_of(exc)
        if typed is AuthError:
            return f"vastai refused the API key while trying to {what} ({status}): {KEY_HELP}"
        if typed is SearchQuotaExceeded:
            now = dt.datetime.now(dt.timezone.utc)
            midnight = dt.datetime.combine(now.date() + dt.timedelta(days=1), dt.time(), dt.timezone.utc)
            left = int((midnight - now).total_seconds() // 60)
            return (f"vastai's daily search quota is spent (429 search_quota_exceeded) while trying to {what}: "
                    f"it resets at midnight UTC, in {left // 60}h{left % 60:02d}m; not retried")
        if typed is Unavailable:
            return f"vastai API unavailable while trying to {what} (retried): {type(exc).__name__}: {exc}"
        return f"vastai could not {what} ({status}): {_body(exc)}"

    return wording


class VastProvider(Provider):
    name = "vastai"
    multi_node_refusal = ("Vast.ai rents one machine per call, with no way to rent several as one unit (its [Beta] "
                          "overlay networks only link instances already rented on one physical cluster); not "
                          "supported by benchctl yet")

    def __init__(self, root: Path, settings: VastSettings | None = None, request_timeout_s: float = 30.0) -> None:
        from vastai import VastAI

        key = api_key()
        if not key:
            raise AuthError(f"vastai: no API key: {KEY_HELP}")
        self.settings = settings or VastSettings()
        url = os.environ.get("VAST_URL") or "https://console.vast.ai"
        self.url = url
        self.container_environ = CONTAINER_ENVIRON
        """Where the node reads its container's environment (its PATH for the payload's Python, its key at
        idle shutdown; a test names a file)."""
        self.sdk = VastAI(api_key=key, server_url=url, retry=1)
        self.sdk.client.timeout = request_timeout_s
        self.create_sdk = VastAI(api_key=key, server_url=url, retry=1)
        """Creates only: they wait as long as the SDK would (``CREATE_TIMEOUT_S``)."""
        self.create_sdk.client.timeout = max(CREATE_TIMEOUT_S, request_timeout_s)
        self.limiter = shared_limiter(key)
        self.root = root
        self.sleep: Callable[[float], None] = time.sleep
        """Between retries (a test replaces it)."""
        self.probe_timeout_s = 5.0
        """How long the direct SSH port has to greet before the proxy is used instead."""
        self._endpoints: dict[str, tuple[str, int]] = {}
        self._lost: dict[str, NodeState] = {}
        self._lock = threading.Lock()

    def _call(self, what: str, endpoint: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        def once() -> T:
            self.limiter.wait(endpoint)
            return fn(*args, **kwargs)

        return call_api(once, classify, _wording(what), max_s=90, sleep=self.sleep)

    def offers(self, request: OfferRequest) -> list[Offer]:
        found = self._call("search offers", "search", self.sdk.search_offers, **_search(request, self.settings))
        return _offers(found or [], request, self.settings)

    def launch(self, offer: Offer, token: str, campaign_tag: str) -> Node:
        _, public = campaign_key(self.root / "keys", campaign_tag)
        label = f"{campaign_tag}--{token}"
        failure: ProviderError | None = None
        try:
            answer = self._create(offer, label)
        except (AuthError, NoCapacity):
            raise  # refused outright: nothing was created
        except ProviderError as exc:
            failure, answer = exc, _answer(exc.__cause__)
        instance_id = answer.get("new_contract") if isinstance(answer, dict) else None
        if failure is not None or not instance_id or answer.get("success") is False:
            left = self._destroy_left(label, instance_id)
            if failure is not None and not left:
                raise failure
            what = f"the bid lost ({answer.get('msg') or answer.get('error')})" if left else str(answer)
            raise NoCapacity(f"vastai did not rent offer {offer.offer_id}: {what}"
                             + (f"; the stopped instance it left ({', '.join(map(str, left))}) was destroyed"
                                if left else ""))
        node = Node(provider=self.name, node_id=str(instance_id), token=token, campaign_tag=campaign_tag, offer=offer,
                    details={"instance_id": int(instance_id)}, host=offer.host or None)
        try:
            self._call("add the campaign's SSH key", "attach_ssh", self.sdk.attach_ssh, int(instance_id), public)
            instance = self._instance(node)
        except ProviderError:
            self.terminate(node)  # rented but unusable: do not leave it billing
            raise
        if instance and instance.get("dph_total") is not None:
            node = replace(node, hourly_usd=float(instance["dph_total"]))
        return node

    def _create(self, offer: Offer, label: str) -> dict[str, Any]:
        """One rent of ``offer``: a try that may have reached Vast is followed by a look-up of
        ``label`` before anything is sent again; an instance carrying it is the answer."""
        uncertain = False

        def once() -> dict[str, Any]:
            nonlocal uncertain
            if uncertain:
                self.limiter.wait("show_instances")
                rows = self.sdk.show_instances_v1({"select_filters": {"label": {"eq": label}}, "limit": 25})
                mine = [r for r in rows.get("instances") or [] if r.get("label") == label]
                if mine:
                    return {"success": True, "new_contract": mine[0]["id"]}
            self.limiter.wait("create")
            try:
                return self.create_sdk.create_instance(
                    id=int(offer.offer_id), image=offer.details["image"], disk=self.settings.disk_gb, label=label,
                    price=offer.details.get("bid"), ssh=True, direct=self.settings.ssh == "direct",
                    cancel_unavail=True)
            except Exception as exc:
                uncertain = uncertain or (classify(exc) is Unavailable and _may_have_reached(exc))
                raise

        return call_api(once, rent_classify, _wording("rent an offer"), max_s=90 + CREATE_TIMEOUT_S,
                        sleep=self.sleep)

    def _destroy_left(self, label: str, named: int | None) -> list[int]:
        """Destroy what a failed rent left: the instance its answer named and any carrying its
        ``label`` (a lost bid creates one, stopped, billing its disk). The ids destroyed; one that
        cannot be destroyed now is left to ``owned`` (its label carries the campaign's tag)."""
        found = {int(named)} if named else set()
        with contextlib.suppress(ProviderError):
            found |= {int(row["id"]) for row in self._listing(label)}
        gone = []
        for instance_id in sorted(found):
            with contextlib.suppress(ProviderError):
                with contextlib.suppress(NodeGone):
                    self._destroy(instance_id)
                gone.append(instance_id)
        return gone

    def _destroy(self, instance_id: int) -> None:
        """Destroy ``instance_id``; ``NodeGone`` when Vast no longer has it. A refusal (a 200 whose
        ``success`` is false: the openapi's 200 answer says "Whether the destruction was successful";
        or an error but auth/unavailability) is read back: an instance still there raises it."""
        try:
            answer = self._call("destroy an instance", "destroy", self.sdk.destroy_instance, instance_id)
        except (AuthError, Unavailable, NodeGone):
            raise
        except ProviderError as exc:
            refused = exc
        else:
            if not isinstance(answer, dict) or answer.get("success") is not False:
                return
            refused = ProviderError(f"vastai did not destroy instance {instance_id}: {answer}")
        if self._read(instance_id) is None:
            raise NodeGone(f"vastai instance {instance_id} is gone") from refused
        raise refused

    def _instance(self, node: Node) -> dict[str, Any] | None:
        return self._read(int(node.node_id))

    def _read(self, instance_id: int) -> dict[str, Any] | None:
        try:
            return self._call("read an instance", "show_instance", self.sdk.show_instance, instance_id)
        except NodeGone:
            return None

    def status(self, node: Node) -> NodeState:
        if node.node_id in self._lost:
            return self._lost[node.node_id]
        state = instance_state(self._instance(node))
        if state in (NodeState.PREEMPTED, NodeState.TERMINATED):
            with self._lock:
                self._lost[node.node_id] = state
        return state

    def transport(self, node: Node) -> SSHTransport:
        with self._lock:
            known = self._endpoints.get(node.node_id)
        host, port = known or self._ssh_address(node)
        with self._lock:
            self._endpoints[node.node_id] = (host, port)
        private, _ = campaign_key(self.root / "keys", node.campaign_tag)
        endpoint = SSHEndpoint(host=host, port=port, user="root", key=str(private), workdir=self.settings.workdir,
                               python=container_python(self.settings.python, self.container_environ))
        return SSHTransport(endpoint, self.root / "known_hosts" / node.node_id, node.token)

    def _ssh_address(self, node: Node) -> tuple[str, int]:
        instance = self._instance(node) or {}
        direct = (instance.get("ports") or {}).get("22/tcp") or []
        if self.settings.ssh == "direct" and direct and instance.get("public_ipaddr"):
            address = (str(instance["public_ipaddr"]), int(direct[0]["HostPort"]))
            if _greets(address, self.probe_timeout_s):
                return address
        if instance.get("ssh_host") and instance.get("ssh_port"):
            return str(instance["ssh_host"]), int(instance["ssh_port"])
        raise ProviderError(f"vastai instance {node.node_id} has no SSH endpoint yet")

    def terminate(self, node: Node) -> None:
        with contextlib.suppress(NodeGone):
            self._destroy(int(node.node_id))

    def _listing(self, label: str | None = None) -> list[dict[str, Any]]:
        """The account's instances (only those labelled ``label`` when given), one page of at most
        ``PAGE_SIZE`` per call, each call spaced by the limiter (the SDK's ``show_instances`` asks
        for every page at once and trips the endpoint's interval past the first)."""
        params: dict[str, Any] = {"select_filters": {"label": {"eq": label}} if label else {},
                                  "order_by": [{"col": "id", "dir": "asc"}], "limit": PAGE_SIZE}
        rows: list[dict[str, Any]] = []
        while True:
            page = self._call("list instances", "show_instances", self.sdk.show_instances_v1, dict(params)) or {}
            rows += [r for r in page.get("instances") or [] if label is None or r.get("label") == label]
            if not page.get("next_token"):
                return rows
            params["after_token"] = page["next_token"]

    def idle_shutdown_command(self, node: Node) -> str | None:
        # Vast has no idle stop of its own: the node destroys itself with the per-instance key in its container.
        return self_destroy_command(self.settings.python, self.name, node.node_id, self.url, self.container_environ)

    def owned(self, campaign_tag: str) -> list[Node]:
        nodes = []
        for row in self._listing():
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


def _search(request: OfferRequest, s: VastSettings) -> dict[str, Any]:
    """The SDK's ``search_offers`` arguments for ``request`` (see the module doc)."""
    query: dict[str, Any] = {"gpu_name": {"eq": GPU_NAMES.get(request.gpu, request.gpu)},
                             "num_gpus": {"eq": request.count}, "reliability": {"gte": s.min_reliability},
                             "cuda_max_good": {"gte": s.min_cuda}}
    if request.min_vcpus:
        query["cpu_cores_effective"] = {"gte": request.min_vcpus}
    if request.exclude_hosts:
        bad = [int(h) for h in request.exclude_hosts if h.isdigit()]
        if bad:
            query["machine_id"] = {"notin": bad}
    if s.datacenter_only:
        query["hosting_type"] = {"eq": 1}
    return {"query": query, "type": "bid" if request.market == "spot" else "on-demand", "order": "dph_total",
            "storage": s.disk_gb}


def _offers(found: list[dict[str, Any]], request: OfferRequest, s: VastSettings) -> list[Offer]:
    """The search's answer as offers priced as billed, cheapest first."""
    offers = []
    for o in found:
        bid, price, pricing = _price(o, request.market == "spot", s)
        offers.append(Offer(provider="vastai", offer_id=str(o["id"]), gpu=request.gpu, count=int(o["num_gpus"]),
                            vcpus=int(o.get("cpu_cores_effective") or 0), region=str(o.get("geolocation") or ""),
                            hourly_usd=price, market=request.market, host=str(o["machine_id"]),
                            details={"bid": bid, "pricing": pricing, "image": request.image or DEFAULT_IMAGE}))
    return sorted(offers, key=lambda o: o.hourly_usd)


def _price(offer: dict[str, Any], spot: bool, s: VastSettings) -> tuple[float | None, float, str]:
    """(the bid to send, the billed $/hr, how it was priced) for an offer searched with
    ``allocated_storage = s.disk_gb``."""
    if not spot:
        return None, float(offer["dph_total"]), f"dph_total with {s.disk_gb} GB of disk"
    bid = round(float(offer["min_bid"]) * (1 + s.bid_margin), 4)
    storage = float(offer.get("storage_cost") or 0.0) * s.disk_gb / HOURS_PER_MONTH
    return bid, round(bid + storage, 4), (f"bid min_bid × {1 + s.bid_margin:g} + {s.disk_gb} GB of disk at "
                                          f"${float(offer.get('storage_cost') or 0.0):g}/GB/month")


def _greets(address: tuple[str, int], timeout: float) -> bool:
    """Whether an SSH server greets on ``address`` within ``timeout`` (connect and banner)."""
    try:
        with socket.create_connection(address, timeout=timeout) as conn:
            conn.settimeout(timeout)
            return conn.recv(4).startswith(b"SSH-")
    except OSError:
        return False


def instance_state(instance: dict[str, Any] | None) -> NodeState:
    """An instance's state (see the module doc)."""
    if instance is None:
        return NodeState.TERMINATED
    if instance.get("cur_state") == instance.get("intended_status") == instance.get("next_state") == "stopped":
        return NodeState.PREEMPTED if instance.get("is_bid") else NodeState.TERMINATED
    if instance.get("intended_status") == "stopped":
        return NodeState.TERMINATED
    actual = instance.get("actual_status")
    if actual == "running":
        return NodeState.RUNNING
    if actual in (None, "created", "loading"):
        return NodeState.STARTING
    if actual in ("stopped", "exited", "rebooting"):
        return NodeState.PREEMPTED if instance.get("is_bid") else NodeState.TERMINATED
    return NodeState.UNKNOWN


def _answer(exc: BaseException | None) -> dict[str, Any]:
    """The JSON object an HTTP error's response carried ({} when none)."""
    response = getattr(exc, "response", None)
    try:
        body = response.json() if response is not None else None
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def _body(exc: BaseException) -> str:
    response = getattr(exc, "response", None)
    try:
        return str(response.json()) if response is not None else str(exc)
    except ValueError:
        return str(exc)

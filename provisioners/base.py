"""The provider interface every provider implements, and the data it speaks in.

A provider rents nodes (``offers`` → ``launch``), reports their state from its own API
(``status``; never inferred from a connection timeout alone; unknown statuses → ``unknown``),
gives a ``Transport`` to reach them, ``terminate``s them (idempotent: a node already gone is
success) and lists every node carrying a campaign's tag (``owned``).
"""

from __future__ import annotations

import contextlib
import enum
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:
    from benchctl.provisioners.transfer_deadline import Deadline


class NodeState(str, enum.Enum):
    STARTING = "starting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    TERMINATED = "terminated"
    UNKNOWN = "unknown"


class ProviderError(Exception):
    """A provider call failed; the message says what failed and what to do."""


class AuthError(ProviderError):
    """The provider refused or lacks our credentials: fix them, retrying will not help."""


class NoCapacity(ProviderError):
    """The provider has nothing to rent for this request now."""


class Unavailable(ProviderError):
    """The provider's API did not answer usefully (connection, timeout, 429, 5xx): may pass on retry."""


class NodeGone(ProviderError):
    """The node does not exist at the provider any more (terminating it is then done)."""


class ProviderSettings(BaseModel):
    """A provider's settings as the campaign states them (``providers.<name>``): no unknown keys, no
    coercion between types (``disk_gb: "60"`` is an error), no infinities or NaN. Never credentials:
    these settings are stored with the campaign; keys stay in each provider's own place."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


@dataclass(frozen=True)
class OfferRequest:
    """What a cell asks for. Provider-specific fields travel in ``extra``."""

    gpu: str
    count: int
    market: str
    region: str | None = None
    instance_type: str | None = None
    min_vcpus: int | None = None
    price_usd_per_hour: float | None = None
    exclude_hosts: tuple[str, ...] = ()
    image: str | None = None
    """The container image the node runs (providers that start containers)."""
    label: str = ""
    """The cell's key: a provider may show it in node names, or count launches per cell."""
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Offer:
    """Something rentable now, at a price."""

    provider: str
    offer_id: str
    gpu: str
    count: int
    vcpus: int
    region: str
    hourly_usd: float
    market: str
    host: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    fabric: str | None = None
    """The network between nodes the provider sells with this offer, in
    ``payload.node.fabric_checks.FabricExpect.parse``'s words (``efa 32``, ``ib 8x400``, ``none``); None:
    it does not say (a cell's ``fabric`` then says, else nothing is expected of it)."""


@dataclass(frozen=True)
class Node:
    """A rented node. ``details`` holds what the provider needs to find it again after a crash.
    ``hourly_usd`` (the billed price) and ``host``, when a provider knows them only after the
    launch, replace the offer's price and host in the attempt's record (None: the offer's stand)."""

    provider: str
    node_id: str
    token: str
    campaign_tag: str
    offer: Offer
    details: dict[str, Any] = field(default_factory=dict)
    hourly_usd: float | None = None
    host: str | None = None
    peers: tuple[Node, ...] = ()
    """The other nodes of a cluster rented as one unit (``nodes`` > 1), node ranks 1 … N-1; this
    node is node rank 0 (its ``hourly_usd`` and the offer's are one node's price). Each peer is
    watched, reached and terminated as a node of its own."""

    def members(self) -> tuple[Node, ...]:
        """Every node of the unit in node-rank order: this one (without its peers), then its peers."""
        return (replace(self, peers=()), *self.peers)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Node:
        """The node ``to_dict`` wrote, by this version or an older one: older records kept the billed
        price and the host in ``details`` (``billed_usd_per_hour``, ``host``) and lack offer details."""
        data = dict(raw)
        details = dict(data.get("details") or {})
        if "hourly_usd" not in data and "billed_usd_per_hour" in details:
            billed = details.pop("billed_usd_per_hour")
            data["hourly_usd"] = float(billed) if billed is not None else None
        if "host" not in data and "host" in details:
            data["host"] = str(details.pop("host")) or None
        peers = tuple(cls.from_dict(peer) for peer in data.pop("peers", None) or ())
        return cls(**{**data, "details": details, "offer": Offer(**data["offer"]), "peers": peers})


def member_token(token: str, index: int) -> str:
    """The tag of a cluster's node ``index`` rented for the attempt ``token``: the attempt's token
    for node 0, ``<token>-n<index>`` for the others (``owned`` nodes are matched to attempts by it)."""
    return token if index == 0 else f"{token}-n{index}"


def of_attempt(node_token: str, attempt_token: str) -> bool:
    """The node tagged ``node_token`` belongs to the attempt ``attempt_token`` (any node of its cluster)."""
    return node_token == attempt_token or node_token.startswith(f"{attempt_token}-n")


def launch_members(provider: Provider, offers: Sequence[Offer], token: str, campaign_tag: str) -> Node:
    """``provider.launch`` each offer in turn as one unit (member ``i`` tagged ``member_token(token,
    i)``), all or nothing as ``Provider.launch_cluster`` says: node rank 0 with the others as peers."""
    launched: list[Node] = []
    try:
        for index, offer in enumerate(offers):
            launched.append(provider.launch(offer, member_token(token, index), campaign_tag))
    except BaseException:
        for node in launched:
            with contextlib.suppress(Exception):  # the launch's own failure is what the caller must see
                provider.terminate(node)
        raise
    return replace(launched[0], peers=tuple(launched[1:]))


@dataclass(frozen=True)
class CommandResult:
    code: int
    out: str
    err: str


class Transport(ABC):
    """Runs commands on a node and moves files. Remote paths are relative to the node's home.
    ``put``, ``get`` and ``read_from`` end by ``timeout`` (seconds, or a ``Deadline`` several
    transfers share) whatever the node does, raising ``TransferTimeout`` past it."""

    python: str = "python3"
    """The interpreter that runs the payload on the node."""
    max_artifact_bytes: int = 2 * 1024**3
    """What ``get`` may bring back from an untrusted node in all, over the transport's life."""

    @abstractmethod
    def run(self, cmd: str, timeout: float = 60.0) -> CommandResult:
        """Run a shell command to completion (raises ProviderError on timeout)."""

    @abstractmethod
    def start(self, cmd: str, cwd: str) -> None:
        """Start a shell command detached: it outlives this call, the connection and the controller."""

    @abstractmethod
    def put(self, local_dir: str, remote_dir: str, timeout: float | Deadline = 300.0) -> None:
        """Copy a local directory's contents into ``remote_dir`` (created if missing)."""

    @abstractmethod
    def get(self, remote_path: str, local_dir: str, timeout: float | Deadline = 600.0) -> None:
        """Copy a remote file or directory into ``local_dir``: never a link, never through one,
        at most ``max_artifact_bytes`` in all."""

    @abstractmethod
    def read_from(self, remote_file: str, offset: int, timeout: float | Deadline = 60.0,
                  limit: int | None = None) -> bytes:
        """Bytes of ``remote_file`` from ``offset`` on (at most ``limit`` of them); empty when the
        file does not exist yet."""

    def refused_members(self) -> list[str]:
        """What ``get`` refused to bring back (unsafe paths, over the size or member cap), with why, and
        what it kept with a warning (a file that changed while it was read)."""
        return []


class Provider(ABC):
    name: ClassVar[str]
    max_parallel_nodes: ClassVar[int | None] = None
    """How many of this provider's nodes a campaign may run at once (None: no limit). Nodes that
    share hardware (``local``) must not run side by side, or they skew each other's timings."""
    multi_node_refusal: ClassVar[str | None] = "it has no way to rent several nodes as one unit"
    """Why a cell with ``nodes`` > 1 cannot be planned on this provider (``plan`` and ``run`` refuse
    it with this reason), or None where the provider can rent several nodes as one unit: ``plan``
    prices such a cell at price × nodes, and ``run`` rents it with ``launch_cluster``."""

    @abstractmethod
    def offers(self, request: OfferRequest) -> list[Offer]:
        """What can be rented now for ``request``, cheapest first."""

    @abstractmethod
    def launch(self, offer: Offer, token: str, campaign_tag: str) -> Node:
        """Rent ``offer``; return fast with the provider's node id; tag the node with token and campaign."""

    def launch_cluster(self, offer: Offer, nodes: int, token: str, campaign_tag: str) -> Node:
        """Rent ``nodes`` nodes of ``offer`` as one unit, all or nothing: node rank 0 is returned
        with the others as its ``peers``; when any launch fails, the nodes already launched are
        terminated (each, whatever the others raise) before the failure is re-raised, so no part of
        a cluster is left billing. Default: ``launch`` each in turn, member ``i`` tagged with
        ``member_token(token, i)``. Providers with cluster machinery of their own override it."""
        return launch_members(self, [offer] * nodes, token, campaign_tag)

    def rendezvous_address(self, node: Node) -> str:
        """The address the other nodes of ``node``'s cluster reach it at (torch.distributed's
        rendezvous on node rank 0): the private address where the provider knows one. Default: the
        node's host."""
        if not node.host:
            raise ProviderError(f"{self.name} knows no address of node {node.node_id} for the cluster's rendezvous")
        return node.host

    @abstractmethod
    def status(self, node: Node) -> NodeState:
        """The node's state according to the provider."""

    @abstractmethod
    def transport(self, node: Node) -> Transport:
        """How to reach the node."""

    @abstractmethod
    def terminate(self, node: Node) -> None:
        """Stop billing for the node. Idempotent."""

    @abstractmethod
    def owned(self, campaign_tag: str) -> list[Node]:
        """Every live node at this provider that carries ``campaign_tag``."""

    def validate(self, request: OfferRequest) -> None:
        """Raise ProviderError (naming ``request.label``) when the provider refuses the request's shape,
        checked offline before anything is written or rented. Default: every shape is accepted."""
        return None

    def check_access(self, requests: Sequence[OfferRequest]) -> None:
        """Raise ProviderError (one line, naming what to set up) when the credentials at hand cannot
        serve these requests, e.g. a cloud SkyPilot has not enabled. Called before anything is
        written or rented; may ask the provider's API. Default: the constructor's checks suffice.
        Commands that rent nothing (``plan``) skip it where ``access_unverified`` says why."""
        return None

    access_unverified: str | None = None
    """Why commands that rent nothing (``plan``, ``check``) do not call ``check_access``: asking
    would start something that outlives the command (SkyPilot's API server), and what tests the
    credentials instead. None: they call it."""

    def close(self) -> None:
        """Give back what this provider started for the command and would leave running (e.g.
        SkyPilot's local API server after ``plan``). Default: nothing."""
        return None

    def plan_notes(self) -> list[str]:
        """What ``plan`` tells the user about this provider's cells: requirements it cannot check
        itself (e.g. what the image must run). Default: none."""
        return []

    def all_busy(self, request: OfferRequest) -> bool:
        """True when ``offers`` is empty only because every matching node is in use by other
        attempts (the cell should wait, not fail)."""
        return False

    def busy_detail(self, request: OfferRequest) -> str | None:
        """When ``all_busy``: who holds the nodes, for the user (None: nothing more to say)."""
        return None

    def spot_notice(self, node: Node) -> bool:
        """True when the node's own instance metadata announces its reclaim ahead (EC2 spot): the
        payload watches for it and stops measuring at a step boundary (``payload.spot_notice``)."""
        return False

    def billed_usd(self, node: Node) -> float | None:
        """One node's billed hourly price as known now (None: unknown, its offer's stands): the
        launch's (``node.hourly_usd``) unless the provider learns it only once the node runs."""
        return node.hourly_usd

    def ended_at(self, node: Node) -> float | None:
        """When a node that is gone stopped billing, where the provider says (unix time); None if unknown."""
        return None

    def idle_shutdown_command(self, node: Node) -> str | None:
        """A command the payload runs on the node after the dead-man switch stopped it, so the node
        stops billing without us (None: the provider offers no such way)."""
        return None

"""The ``ssh`` provider: machines you already have, listed in the campaign, reached over SSH.

Nothing is rented: ``launch`` claims a free machine for one attempt (a claim file per machine
under ``<root>/claims``, taken with O_EXCL, so two cells never share a machine), ``terminate``
stops only the processes we started there (their process groups, see ``SSHTransport.kill_all``)
and frees the claim, never the machine. Node records live in ``<root>/nodes/<token>.json``, so
``owned`` finds them after a controller crash. Host keys are pinned per machine under
``<root>/known_hosts/``. A machine's label names its files there: a campaign's ``name`` is a plain
file name (``NAME_RULE``), and any other label (a ``host:port``, a stored record) is encoded into
one (``machine_file``); so is a node token read back from the store or a claim file
(``node_records.file_name``), so no file lands outside those folders. A ``host`` (and
``rendezvous_host``) is a DNS name, an IPv4 or an IPv6 address (``ssh_transport.host_problem``).

A cell with ``nodes: N`` (``launch_cluster``) takes N free machines of its GPU and count as one
unit: the offer's machine as node 0, then the cheapest other free ones (in the campaign's order on a tie), each
claimed as a node of its own (token ``member_token``); all or nothing. Fewer such machines in the
campaign than N is an error; fewer free now is ``NoCapacity`` (the cell waits). The rendezvous
is node 0's ``rendezvous_host`` (default its ``host``).

Nothing here is preempted by a provider, but a machine can be lost under an attempt: ``status``
reports ``preempted`` once the machine answers and a process we started there is gone without
having ended (it restarted, or our processes were killed), so a cluster resumes on a new one.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from pydantic import Field, ValidationInfo, field_validator, model_validator

from benchctl.payload.node.gpu_models import canonical, unknown_model
from benchctl.provisioners.base import (
    NoCapacity,
    Node,
    NodeState,
    Offer,
    OfferRequest,
    Provider,
    ProviderError,
    ProviderSettings,
    launch_members,
)
from benchctl.provisioners.node_records import file_name, write_private
from benchctl.provisioners.ssh_transport import (
    SSHEndpoint,
    SSHTransport,
    endpoint_problem,
    host_problem,
    name_problem,
)

NAME_RULE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,63}")
NAME_ALLOWED = "1-64 letters, digits and . _ - : @, starting with a letter or digit"


def machine_file(folder: Path, label: str) -> Path:
    """The file of the machine ``label`` in ``folder`` (its claim, its pinned host keys): ``file_name``."""
    return folder / file_name(label)


class SSHNode(ProviderSettings):
    """A machine you already have, reached over SSH: one of the campaign's ``providers.ssh.nodes``."""

    name: str | None = Field(default=None, description="how cells and the store name it; default host:port")
    host: str = Field(min_length=1)
    port: int = Field(default=22, ge=1, le=65535)
    user: str = Field(min_length=1)
    key: str | None = Field(default=None, description="private key file; default: ssh's own choice (agent, ~/.ssh)")
    gpu: str = Field(min_length=1)
    count: int = Field(ge=1)
    price_usd_per_hour: float = Field(default=0.0, ge=0)
    python: str = Field(default="python3", description="the node's interpreter with PyTorch")
    workdir: str = Field(default="benchctl", min_length=1, description="our files on the node (relative: under home)")
    rendezvous_host: str | None = Field(default=None, min_length=1, description="the address the other nodes of a "
                                        "cluster reach this machine at (e.g. its private IP); default: host")

    @field_validator("name")
    @classmethod
    def _name(cls, value: str | None) -> str | None:
        """The name becomes a file name under the provider's folders (claims, pinned host keys)."""
        if value is not None and not NAME_RULE.fullmatch(value):
            raise ValueError(f"the ssh node name {value!r} is not allowed: a name is {NAME_ALLOWED} (it names "
                             "the node's files under $BENCHCTL_HOME/ssh); give the node another name")
        return value

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, value: str) -> str:
        """One GPU vocabulary (``payload.node.gpu_models``), as a cell's ``gpu``: an alias becomes
        the model's name; a name no node-side check knows is refused with the names to use."""
        model = canonical(value)
        if model is None:
            raise ValueError(unknown_model(value))
        return model

    @field_validator("host", "user", "rendezvous_host")
    @classmethod
    def _destination(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        problem = name_problem("user", value) if info.field_name == "user" else host_problem(value)
        if problem is not None:
            raise ValueError(f"{problem}; give the machine's address and login name")
        return value

    @property
    def label(self) -> str:
        return self.name or f"{self.host}:{self.port}"

    @property
    def endpoint(self) -> SSHEndpoint:
        return SSHEndpoint(host=self.host, port=self.port, user=self.user, key=self.key, workdir=self.workdir,
                           python=self.python)


class SSHSettings(ProviderSettings):
    """The campaign's ``providers.ssh``."""

    nodes: list[SSHNode] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_names(self) -> SSHSettings:
        labels = [n.label for n in self.nodes]
        if len(set(labels)) != len(labels):
            raise ValueError("two ssh nodes have the same name (or host:port); give each a distinct `name`")
        return self


class SSHProvider(Provider):
    name = "ssh"
    multi_node_refusal = None  # N of the listed machines as one unit (launch_cluster)

    def __init__(self, root: Path, machines: Sequence[SSHNode] = ()) -> None:
        self.root = root
        self.machines = {m.label: m for m in machines}
        for sub in ("claims", "nodes", "known_hosts"):
            (root / sub).mkdir(parents=True, exist_ok=True)

    def _matching(self, request: OfferRequest) -> list[SSHNode]:
        return [m for m in self.machines.values()
                if m.gpu.lower() == request.gpu.lower() and m.count == request.count
                and m.label not in request.exclude_hosts]

    def offers(self, request: OfferRequest) -> list[Offer]:
        free = [m for m in self._matching(request) if self._holder(m.label) is None]
        return [Offer(provider=self.name, offer_id=m.label, gpu=m.gpu, count=m.count, vcpus=0, region="ssh",
                      hourly_usd=m.price_usd_per_hour, market=request.market, host=m.label,
                      details={"endpoint": asdict(m.endpoint), "exclude_hosts": list(request.exclude_hosts)})
                for m in sorted(free, key=lambda m: m.price_usd_per_hour)]

    def all_busy(self, request: OfferRequest) -> bool:
        return any(self._holder(m.label) is not None for m in self._matching(request))

    def launch(self, offer: Offer, token: str, campaign_tag: str) -> Node:
        machine = self.machines.get(offer.offer_id)
        if machine is None:
            raise ProviderError(f"ssh node {offer.offer_id!r} is not in this campaign's providers.ssh.nodes")
        node = Node(provider=self.name, node_id=f"{machine.label}/{token}", token=token, campaign_tag=campaign_tag,
                    offer=offer, details={"machine": machine.label, "endpoint": asdict(machine.endpoint),
                                          "rendezvous_host": machine.rendezvous_host or machine.host})
        self._write_record(token, {"node": node.to_dict(), "campaign_tag": campaign_tag, "terminated": False,
                                   "created_at": time.time()})
        if not self._claim(machine.label, token):
            self._mark_terminated(token)
            raise ProviderError(f"ssh node {machine.label} is in use by another attempt; it is free again when "
                                "that attempt ends")
        return node

    def launch_cluster(self, offer: Offer, nodes: int, token: str, campaign_tag: str) -> Node:
        first = self.machines.get(offer.offer_id)
        if first is None:
            raise ProviderError(f"ssh node {offer.offer_id!r} is not in this campaign's providers.ssh.nodes")
        request = OfferRequest(gpu=first.gpu, count=first.count, market=offer.market,
                               exclude_hosts=tuple(offer.details.get("exclude_hosts") or ()))
        alike = [m for m in self._matching(request) if m.label != first.label]
        if len(alike) + 1 < nodes:
            raise ProviderError(f"a cluster of {nodes} needs {nodes} ssh nodes with {first.count}× {first.gpu}; "
                                f"providers.ssh.nodes lists {len(alike) + 1}: add machines or lower nodes")
        free = [offer, *(o for o in self.offers(request) if o.offer_id != first.label)]
        if len(free) < nodes:
            raise NoCapacity(f"{len(free)} of the {len(alike) + 1} ssh nodes with {first.count}× {first.gpu} are "
                             f"free now; the cluster needs {nodes}")
        return launch_members(self, free[:nodes], token, campaign_tag)

    def rendezvous_address(self, node: Node) -> str:
        return str(node.details.get("rendezvous_host") or SSHEndpoint(**node.details["endpoint"]).host)

    def status(self, node: Node) -> NodeState:
        """Terminated once ``terminate`` ended it; preempted when the machine answers and a process
        we started there is gone without having ended (the machine restarted, or our processes were
        killed: the attempt's work is lost); else running (a machine that does not answer too: the
        transport's calls fail, saying why)."""
        record = self._read_record(node.token)
        if record is None or record["terminated"]:
            return NodeState.TERMINATED
        try:
            vanished = self.transport(node).vanished()
        except ProviderError:
            return NodeState.RUNNING
        return NodeState.PREEMPTED if vanished else NodeState.RUNNING

    def ended_at(self, node: Node) -> float | None:
        record = self._read_record(node.token) or {}
        return record.get("terminated_at")

    def transport(self, node: Node) -> SSHTransport:
        return SSHTransport(SSHEndpoint(**node.details["endpoint"]),
                            machine_file(self.root / "known_hosts", str(node.details["machine"])), node.token)

    def terminate(self, node: Node) -> None:
        record = self._read_record(node.token)
        if record is None or record["terminated"]:
            return
        transport = self.transport(node)
        if endpoint_problem(transport.endpoint.host, transport.endpoint.user) is None:  # else ssh never reached it
            transport.kill_all()  # a ProviderError here leaves the claim: our processes may still run
            transport.close()
        claim = machine_file(self.root / "claims", str(node.details["machine"]))
        if self._holder(str(node.details["machine"])) == node.token:
            claim.unlink(missing_ok=True)
        self._mark_terminated(node.token)

    def owned(self, campaign_tag: str) -> list[Node]:
        nodes = []
        for path in sorted((self.root / "nodes").glob("*.json")):
            record = json.loads(path.read_text())
            if record["campaign_tag"] == campaign_tag and not record["terminated"]:
                nodes.append(Node.from_dict(record["node"]))
        return nodes

    # -- records and claims ---------------------------------------------------------------------
    def _holder(self, machine: str) -> str | None:
        """The token of the live attempt holding the machine (a claim whose node ended is stale)."""
        try:
            token = machine_file(self.root / "claims", machine).read_text().strip()
        except FileNotFoundError:
            return None
        record = self._read_record(token)
        return token if record is not None and not record["terminated"] else None

    def _claim(self, machine: str, token: str) -> bool:
        path = machine_file(self.root / "claims", machine)
        if path.exists() and self._holder(machine) is None:
            path.unlink(missing_ok=True)  # stale: its attempt ended without freeing it
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as handle:
            handle.write(token)
        return True

    def _read_record(self, token: str) -> dict | None:
        try:
            return dict(json.loads(self._record_path(token).read_text()))
        except FileNotFoundError:
            return None

    def _record_path(self, token: str) -> Path:
        """``nodes/<token>.json``; a token of another form than benchctl's (a store or claim file says
        what it likes) is encoded (``file_name``), never a path of its own."""
        return self.root / "nodes" / f"{file_name(token)}.json"

    def _write_record(self, token: str, record: dict) -> None:
        write_private(self._record_path(token), json.dumps(record, indent=2))

    def _mark_terminated(self, token: str) -> None:
        record = self._read_record(token)
        if record is not None:
            self._write_record(token, {**record, "terminated": True, "terminated_at": time.time()})

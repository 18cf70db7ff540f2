"""The ``local`` provider, the embedded default: nodes are process groups on this machine.

A node lives in ``<root>/<token>/`` (a token of another form than benchctl's encoded, ``_dir``):
``node.json`` (its record), ``home/`` (what a remote home would be). Launch starts a long-lived
leader process in its own session; every process of the node carries the node's marker
(``local_processes``), so ``terminate`` finds and kills them all, from any terminal. A leader that
died without our ``terminate`` reads as ``preempted``, the way a vanished spot node does.

A cluster (``launch_cluster``) is N such nodes on N of the virtual hosts, node 0 on the offer's
host and the others on the next hosts not excluded, each tagged with its member token; each
holds the machine lock under its own token, so the lock goes back with the last member. The
rendezvous is on 127.0.0.1. A preemption fault of a cluster kills node rank 1 (its leader counts
node 0's timed samples), so a node lost mid-profile can be tested; the other faults go to each
member whose host is faulty (``faults.node_ranks: [1]`` makes that node rank 1's host alone).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import shlex
import shutil
import subprocess
import sys
import time
from dataclasses import asdict, replace
from pathlib import Path

from pydantic import Field

from benchctl.provisioners.base import (
    NoCapacity,
    Node,
    NodeState,
    Offer,
    OfferRequest,
    Provider,
    ProviderError,
    ProviderSettings,
    Transport,
    launch_members,
)
from benchctl.provisioners.local import machine_lock as local_machine_lock
from benchctl.provisioners.local.processes import MARKER, kill_node_processes, node_env, process_alive
from benchctl.provisioners.local.transport import LocalTransport
from benchctl.provisioners.node_records import file_name, write_private


class LocalSettings(ProviderSettings):
    """The campaign's ``providers.local``."""

    python: str | None = Field(default=None, min_length=1, description=(
        "the command that runs the payload on local nodes (an interpreter with PyTorch, e.g. another "
        "virtual environment's python); default: the interpreter benchctl runs in"))


class LocalProvider(Provider):
    """This machine, offered as ``hosts`` virtual hosts (``local-0`` …) so that a host marked bad
    by preflight can be avoided like a real one. ``request.extra["faults"]`` (the cell's
    ``faults``) is injected into the first ``faults.hosts`` hosts (default 1), or with
    ``faults.node_ranks`` into ``local-<rank>`` for each rank: the host that node rank takes in a
    cluster on the first hosts (``[1]``: a cluster on ``local-0`` has its worker on the faulty
    ``local-1``; once that host is excluded, the next cluster is healthy): ``cuda_init: error``,
    ``numa: split``, ``shm_mb: N`` (read by the payload from ``BENCHCTL_FAULTS``), ``env`` (set
    for real in the node's environment), and preemption: ``preempt_after_s`` / ``preempt_at_step``
    kill the node (``local_leader``) in the first ``preemptions`` launches of the cell (counted
    under ``<root>/preemptions/``, so the count survives a controller crash); with ``seed`` each
    delay is drawn in ×[0.5, 1.5] of ``preempt_after_s``."""

    name = "local"
    multi_node_refusal = None  # N "nodes" of processes on this machine, on N of its virtual hosts
    max_parallel_nodes = 1  # local nodes share this machine's CPUs and GPUs: across processes too
    # (``local_machine_lock``): while another process runs a local node, there is no offer and
    # ``all_busy`` holds, so a cell waits rather than skew both measurements.

    def __init__(self, root: Path, hosts: int = 4, python: str | None = None) -> None:
        self.root = root
        self.hosts = hosts
        self.python = python or sys.executable
        """What runs ``-m payload`` on the nodes (``LocalSettings.python``)."""

    def offers(self, request: OfferRequest) -> list[Offer]:
        if request.gpu.lower() != "cpu" and _visible_gpus() < request.count:
            return []
        if local_machine_lock.held_elsewhere():
            return []
        faults = dict(request.extra.get("faults") or {})
        faulty = _faulty_hosts(faults)
        hosts = {f"local-{index}": {"faults": faults, "cell": request.label} if index in faulty else {}
                 for index in range(self.hosts) if f"local-{index}" not in request.exclude_hosts}
        cluster = int(request.extra.get("nodes") or 1) > 1  # the hosts a cluster's other nodes may take
        return [Offer(provider=self.name, offer_id=host, gpu=request.gpu, count=request.count,
                      vcpus=os.cpu_count() or 1, region="local", hourly_usd=request.price_usd_per_hour or 0.0,
                      market=request.market, host=host,
                      details={**details, "peers": {other: d for other, d in hosts.items() if other != host}}
                      if cluster else details)
                for host, details in hosts.items()]

    def all_busy(self, request: OfferRequest) -> bool:
        return local_machine_lock.held_elsewhere()

    def busy_detail(self, request: OfferRequest) -> str | None:
        who = local_machine_lock.holder()
        return (f"another controller runs a local node on this machine ({who or 'its holder wrote no name'}; lock "
                f"{local_machine_lock.lock_path()}): local nodes run one at a time, this cell waits for it")

    def launch(self, offer: Offer, token: str, campaign_tag: str) -> Node:
        if not local_machine_lock.take(token, who={"campaign": campaign_tag, "home": str(self.root.parent)}):
            raise NoCapacity(f"another process runs a local node on this machine "
                             f"({local_machine_lock.holder() or 'holder unknown'})")
        try:
            return self._launch(offer, token, campaign_tag)
        except BaseException:
            local_machine_lock.give_back(token)
            raise

    def launch_cluster(self, offer: Offer, nodes: int, token: str, campaign_tag: str) -> Node:
        """``nodes`` nodes on the offer's host and the next ones not excluded, all or nothing."""
        return launch_members(self, _member_offers(offer, nodes, self._dir(token) / "home"), token, campaign_tag)

    def rendezvous_address(self, node: Node) -> str:
        return "127.0.0.1"

    def _dir(self, token: str) -> Path:
        """``<root>/<token>``; a token of another form than benchctl's (a stored node says what it
        likes) is encoded (``node_records.file_name``), never a path of its own."""
        return self.root / file_name(token)

    def _launch(self, offer: Offer, token: str, campaign_tag: str) -> Node:
        node_dir = self._dir(token)
        (node_dir / "home").mkdir(parents=True, exist_ok=True)
        # The record exists before any process does, so no crash leaves a process nobody can find.
        _write_record(node_dir, {"node": None, "token": token, "campaign_tag": campaign_tag, "terminated": False,
                                 "created_at": time.time(), "offer": asdict(offer)})
        faults = offer.details.get("faults") or {}
        env = {**node_env(token), **faults.get("env", {}), MARKER: token}  # no fault drops the marker
        watched = str(offer.details.get("samples_home") or node_dir / "home")
        if faults:
            env["BENCHCTL_FAULTS"] = json.dumps(faults)
        command = ["sleep", "infinity"]
        preemption = self._preemption(faults, campaign_tag, str(offer.details.get("cell", "")))
        if preemption:
            command = [sys.executable, "-m", "benchctl.provisioners.local.leader", str(node_dir), token,
                       "--home", watched, *preemption]
        leader = subprocess.Popen(command, start_new_session=True, env=env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        # Until exec, the child still shows our environment: wait for the marker so that the node
        # never reads as gone right after launch.
        deadline = time.monotonic() + 10
        while not process_alive(leader.pid, token):
            if time.monotonic() > deadline or leader.poll() is not None:
                leader.kill()
                raise ProviderError(f"the local node {token} did not start")
            time.sleep(0.005)
        node = Node(provider=self.name, node_id=token, token=token, campaign_tag=campaign_tag, offer=offer,
                    details={"leader_pid": leader.pid, "dir": str(node_dir)})
        _write_record(node_dir, {**(_read_record(node_dir) or {}), "node": node.to_dict()})
        return node

    def _preemption(self, faults: dict, campaign_tag: str, cell: str) -> list[str]:
        """The leader's arguments when this launch is to be preempted; counts it in one file of
        ``<root>/preemptions/`` per campaign tag and cell key, whatever they hold (a key carries values of
        the campaign's env: ``node_records.file_name``, never a path outside the folder)."""
        after, at_step = faults.get("preempt_after_s"), faults.get("preempt_at_step")
        if after is None and at_step is None:
            return []
        counter = self.root / "preemptions" / file_name(f"{campaign_tag}--{cell}")
        counter.parent.mkdir(parents=True, exist_ok=True)
        done = int(counter.read_text()) if counter.exists() else 0
        if done >= int(faults.get("preemptions", 1)):
            return []
        counter.write_text(str(done + 1))
        args = []
        if after is not None:
            if faults.get("seed") is not None:
                after *= random.Random(f"{faults['seed']}/{cell}/{done}").uniform(0.5, 1.5)
            args += ["--after-s", f"{after:.3f}"]
        if at_step is not None:
            args += ["--at-step", str(at_step)]
        return args

    def status(self, node: Node) -> NodeState:
        record = _read_record(self._dir(node.node_id))
        if record is None or record["terminated"]:
            return NodeState.TERMINATED
        if node.details.get("leader_pid") is None:
            return NodeState.STARTING  # a launch that never finished (see ``owned``)
        return NodeState.RUNNING if process_alive(node.details["leader_pid"], node.token) else NodeState.PREEMPTED

    def ended_at(self, node: Node) -> float | None:
        node_dir = self._dir(node.node_id)
        ends = [float(t) for t in [(_read_record(node_dir) or {}).get("terminated_at")] if t]
        with contextlib.suppress(OSError, ValueError):
            ends.append(float((node_dir / "ended_at").read_text()))
        return min(ends, default=None)

    def idle_shutdown_command(self, node: Node) -> str | None:
        """The node "powers off": it records when, and its leader dies (the node reads as gone)."""
        node_dir = shlex.quote(str(self._dir(node.node_id)))
        return f"date +%s.%N > {node_dir}/ended_at; kill -9 {int(node.details['leader_pid'])}"

    def transport(self, node: Node) -> Transport:
        faults = node.offer.details.get("faults") or {}
        env = {**faults.get("env", {}), **({"BENCHCTL_FAULTS": json.dumps(faults)} if faults else {})}
        return LocalTransport(self._dir(node.node_id) / "home", node.token, node.details["leader_pid"], env,
                              python=self.python)

    def terminate(self, node: Node) -> None:
        kill_node_processes(node.token)  # whatever the record says: processes are what bills
        local_machine_lock.give_back(node.token)
        node_dir = self._dir(node.node_id)
        record = _read_record(node_dir)
        if record is None:
            return
        record["terminated"] = True
        record["terminated_at"] = time.time()
        _write_record(node_dir, record)

    def owned(self, campaign_tag: str) -> list[Node]:
        nodes = []
        for path in sorted(self.root.glob("*/node.json")):
            record = _read_record(path.parent)
            if not record or record["terminated"] or record.get("campaign_tag", "") != campaign_tag:
                continue
            if record["node"] is not None:
                nodes.append(Node.from_dict(record["node"]))
            else:  # a launch in progress, or one a crash cut short: its processes bill too
                offer = Offer(**record["offer"]) if "offer" in record else Offer(
                    provider=self.name, offer_id="", gpu="", count=0, vcpus=0, region="local", hourly_usd=0.0,
                    market="")
                nodes.append(Node(provider=self.name, node_id=record["token"], token=record["token"],
                                  campaign_tag=campaign_tag, offer=offer,
                                  details={"leader_pid": None, "dir": str(path.parent)}))
        return nodes

    def preempt(self, node: Node) -> None:
        """Fault injection: kill the node's processes without marking it terminated by us."""
        kill_node_processes(node.token)

    def remove(self, node: Node) -> None:
        """Delete a terminated node's directory."""
        if self.status(node) is not NodeState.TERMINATED:
            raise ProviderError(f"node {node.node_id} is still running: terminate it first")
        shutil.rmtree(self._dir(node.node_id), ignore_errors=True)


PREEMPTION_FAULTS = ("preempt_after_s", "preempt_at_step", "preemptions", "seed")
"""The faults that preempt a node: in a cluster, node rank 1's alone."""
PREEMPTED_RANK = 1


def _faulty_hosts(faults: dict) -> set[int]:
    """The indexes of the hosts that get ``faults`` (``hosts`` and ``node_ranks`` taken out of it):
    ``local-<rank>`` for each of ``node_ranks``, else the first ``hosts`` (default 1); none without faults."""
    count, ranks = int(faults.pop("hosts", 1)), faults.pop("node_ranks", None)
    if not faults:
        return set()
    return {int(rank) for rank in ranks} if ranks else set(range(count))


def _member_offers(offer: Offer, nodes: int, head_home: Path) -> list[Offer]:
    """The offer of each member of a ``nodes``-node cluster: node 0 on the offer's host, the others
    on the next hosts it lists as peers (each with its own host's faults); the cluster's
    preemption faults move to node rank 1, whose leader counts node 0's samples (``head_home``)."""
    peers = list((offer.details.get("peers") or {}).items())[:nodes - 1]
    if len(peers) < nodes - 1:
        raise ProviderError(f"a {nodes}-node local cluster needs {nodes} hosts that preflight has not marked bad; "
                            f"{len(peers) + 1} are left")
    head_faults = dict(offer.details.get("faults") or {})
    preemption = {k: head_faults.pop(k) for k in PREEMPTION_FAULTS if k in head_faults}
    members = [replace(offer, details=_with_faults(offer.details, head_faults))]
    for rank, (host, details) in enumerate(peers, start=1):
        faults = {k: v for k, v in (details.get("faults") or {}).items() if k not in PREEMPTION_FAULTS}
        if rank == PREEMPTED_RANK and preemption:
            faults.update(preemption)
            details = {**details, "cell": offer.details.get("cell", ""), "samples_home": str(head_home)}
        members.append(replace(offer, offer_id=host, host=host, details=_with_faults(details, faults)))
    return members


def _with_faults(details: dict, faults: dict) -> dict:
    """A member's offer details: ``faults`` (none: no key), no peers."""
    kept = {k: v for k, v in details.items() if k not in ("faults", "peers")}
    return {**kept, "faults": faults} if faults else kept


def _visible_gpus() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in out.splitlines())


def _record_path(node_dir: Path) -> Path:
    return node_dir / "node.json"


def _read_record(node_dir: Path) -> dict | None:
    try:
        return json.loads(_record_path(node_dir).read_text())
    except FileNotFoundError:
        return None


def _write_record(node_dir: Path, record: dict) -> None:
    write_private(_record_path(node_dir), json.dumps(record, indent=2))

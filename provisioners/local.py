"""The ``local`` provider, the embedded default: nodes are process groups on this machine.

A node lives in ``<root>/<token>/``: ``node.json`` (its record), ``home/`` (what a remote home
would be). Launch starts a long-lived leader process in a new process group; everything the
transport runs joins that group. ``terminate`` kills the group. A group that died without our
``terminate`` reads as ``preempted``, the way a vanished spot node does.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from provisioners.base import Node, NodeState, Offer, OfferRequest, Provider, ProviderError, Transport
from provisioners.local_transport import LocalTransport


class LocalProvider(Provider):
    name = "local"

    def __init__(self, root: Path) -> None:
        self.root = root

    def offers(self, request: OfferRequest) -> list[Offer]:
        if request.gpu.lower() != "cpu" and _visible_gpus() < request.count:
            return []
        return [Offer(provider=self.name, offer_id="localhost", gpu=request.gpu, count=request.count,
                      vcpus=os.cpu_count() or 1, region="local", hourly_usd=request.price_usd_per_hour or 0.0,
                      market=request.market, host="localhost")]

    def launch(self, offer: Offer, token: str, campaign_tag: str) -> Node:
        node_dir = self.root / token
        (node_dir / "home").mkdir(parents=True, exist_ok=True)
        leader = subprocess.Popen(["sleep", "infinity"], process_group=0, stdin=subprocess.DEVNULL,
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        node = Node(provider=self.name, node_id=token, token=token, campaign_tag=campaign_tag, offer=offer,
                    details={"pgid": leader.pid, "dir": str(node_dir)})
        _write_record(node_dir, {"node": node.to_dict(), "terminated": False, "created_at": time.time()})
        return node

    def status(self, node: Node) -> NodeState:
        record = _read_record(self.root / node.node_id)
        if record is None or record["terminated"]:
            return NodeState.TERMINATED
        return NodeState.RUNNING if _leader_alive(node.details["pgid"]) else NodeState.PREEMPTED

    def transport(self, node: Node) -> Transport:
        return LocalTransport(self.root / node.node_id / "home", node.details["pgid"])

    def terminate(self, node: Node) -> None:
        node_dir = self.root / node.node_id
        record = _read_record(node_dir)
        if record is None:
            return
        _kill_group(node.details["pgid"])
        record["terminated"] = True
        record["terminated_at"] = time.time()
        _write_record(node_dir, record)

    def owned(self, campaign_tag: str) -> list[Node]:
        nodes = []
        for path in sorted(self.root.glob("*/node.json")):
            record = _read_record(path.parent)
            if record and not record["terminated"] and record["node"]["campaign_tag"] == campaign_tag:
                nodes.append(Node.from_dict(record["node"]))
        return nodes

    def preempt(self, node: Node) -> None:
        """Fault injection: kill the node's processes without marking it terminated by us."""
        _kill_group(node.details["pgid"])

    def remove(self, node: Node) -> None:
        """Delete a terminated node's directory."""
        if self.status(node) is not NodeState.TERMINATED:
            raise ProviderError(f"node {node.node_id} is still running: terminate it first")
        shutil.rmtree(self.root / node.node_id, ignore_errors=True)


def _visible_gpus() -> int:
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in out.splitlines())


def _live_members(pgid: int) -> list[int]:
    """Pids in process group ``pgid`` that are not zombies (read from /proc; Linux)."""
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pgid, os.WNOHANG)  # reap our own dead leader, if it is our child
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            members.append(int(stat.parent.name))
    return members


def _leader_alive(pgid: int) -> bool:
    return pgid in _live_members(pgid)


def _kill_group(pgid: int, grace_s: float = 5.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and _live_members(pgid):
            time.sleep(0.05)
        if not _live_members(pgid):
            return


def _record_path(node_dir: Path) -> Path:
    return node_dir / "node.json"


def _read_record(node_dir: Path) -> dict | None:
    try:
        return json.loads(_record_path(node_dir).read_text())
    except FileNotFoundError:
        return None


def _write_record(node_dir: Path, record: dict) -> None:
    tmp = node_dir / "node.json.tmp"
    tmp.write_text(json.dumps(record, indent=2))
    os.replace(tmp, _record_path(node_dir))

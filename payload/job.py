"""The job.json contract between controller and payload (pure: no torch).

The controller writes job.json next to the uploaded payload; the payload reads it. It carries no
secrets. ``done_phases`` lists phases already completed by an earlier attempt of the same cell:
the runner skips them.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

HOST_DATA = ("synthetic", "tokenize")
"""Where the profile's batches come from (``payload.workloads.host_data``): one random batch, or text
tokenized on the host."""

PHASES = ("preflight", "p2p", "collectives", "profile", "command")
"""Phases this payload implements, in the order they run."""

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_BAD_NODE = 3
EXIT_IDLE = 4
"""The dead-man switch stopped the payload: the controller's heartbeat went stale."""
EXIT_RENDEZVOUS = 5
"""A worker node could not reach node 0's rendezvous port before NCCL started
(``payload.comm.ranks.probe_rendezvous``): no node is bad, the network between them is."""


@dataclass(frozen=True)
class ProfileConfig:
    """What the profile phase trains and for how long."""

    model: str
    device_batch_size: int
    sequence_len: int
    total_batch_size: int
    warmup_steps: int
    steps: int
    vocab_size: int | None = None
    seed: int = 0
    phase_timing: bool = True
    nsys: bool = False
    compile: bool = True
    """``torch.compile`` the model and the optimizer's updates on GPU (never on CPU)."""
    host_data: str = "synthetic"
    """One of HOST_DATA: ``tokenize`` makes every micro-step's batch by tokenizing text on the host."""
    precision: str | None = None
    """``fp8`` | ``bf16`` matmuls; None: as the record, fp8 where the GPU has it
    (``payload.workloads.fp8.choose_precision``)."""
    attention: str | None = None
    """Pin the attention kernel (``payload.workloads.attention.KERNELS``); None: the fastest the node has.
    A node without the pinned kernel fails the profile, naming the one it has."""


@dataclass(frozen=True)
class CollectivesConfig:
    """The collectives sweep: ops, sizes from min_bytes to max_bytes (× factor), iterations."""

    ops: list[str]
    min_bytes: int
    max_bytes: int
    factor: int = 2
    warmup_iters: int = 5
    iters: int = 20


@dataclass(frozen=True)
class CommandConfig:
    """The user's own command (``sh -c``) and how long it may run."""

    run: str
    timeout_minutes: float = 60.0


@dataclass(frozen=True)
class Job:
    """One attempt's instructions to the payload."""

    campaign: str
    cell: str
    attempt: int
    token: str
    gpu: str
    count: int
    phases: list[str]
    done_phases: list[str] = field(default_factory=list)
    profile: ProfileConfig | None = None
    collectives: CollectivesConfig | None = None
    command: CommandConfig | None = None
    preflight_thresholds: dict[str, float] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    """Environment for every process the payload starts (the cell's knobs, e.g. NCCL_ALGO)."""
    profile_steps_done: int = 0
    """Timed profile steps earlier attempts already recorded: this one measures only the rest,
    numbering its samples' ``timed_index`` from here."""
    max_idle_minutes: float | None = None
    """Dead-man switch: the payload stops itself when ``heartbeat`` (touched by the controller)
    is older than this (None: never)."""
    idle_shutdown: str | None = None
    """Shell command run after the dead-man switch stopped the payload (e.g. power the node off
    where the provider terminates a node that shuts down)."""
    nodes: int = 1
    """Nodes of the attempt's cluster; ``count`` is ranks (GPUs) per node: world size nodes × count."""
    node_rank: int = 0
    """This node's place in the cluster: node 0 holds global rank 0, the rendezvous and the
    events the controller reads; node k runs global ranks k × count … (k + 1) × count - 1."""
    master_addr: str = ""
    """Node 0's address as the other nodes reach it (nodes > 1)."""
    master_port: int = 0
    """The TCP port of torch.distributed's rendezvous on node 0, chosen per attempt (nodes > 1)."""
    instance_type: str | None = None
    """The cloud instance type the node was rented as (AWS), where the provider names one."""
    fabric: str | None = None
    """The fabric between nodes that was sold, in ``payload.node.fabric_checks.FabricExpect.parse``'s
    words (``ib 8x400``, ``efa 32``, ``none``): the cell's ``fabric``, else the provider's offer's;
    None: nobody said (nothing expected, the fabric checks fail no node)."""
    spot_notice: bool = False
    """Watch the node's instance metadata for the provider's spot interruption notice and stop
    measuring at a step boundary when it comes (``payload.spot_notice``; EC2 spot nodes)."""
    compile_caches: list[str] = field(default_factory=list)
    """Compile caches the controller shipped (``<key>.bin`` paths relative to this file's directory,
    each with its ``<key>.json`` manifest): the profile loads the one whose key is its own
    (``payload.workloads.compile_cache``)."""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Job:
        data = dict(raw)
        profile = data.pop("profile", None)
        collectives = data.pop("collectives", None)
        command = data.pop("command", None)
        return cls(**data, profile=ProfileConfig(**profile) if profile else None,
                   collectives=CollectivesConfig(**collectives) if collectives else None,
                   command=CommandConfig(**command) if command else None)

    @classmethod
    def load(cls, path: str | Path) -> Job:
        return cls.from_dict(json.loads(Path(path).read_text()))

    def pending_phases(self) -> list[str]:
        return [p for p in self.phases if p not in self.done_phases]

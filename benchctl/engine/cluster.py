"""A rented unit seen as one: its state, its end, its price and its rendezvous port, over every member.

A single node is a cluster of one (``Node.members()``), so the engine asks these for every
attempt. The unit's state is the worst of its members': any member preempted or terminated →
that (the attempt is preempted); all running → running; any unknown → unknown; else starting.
Every member is asked, each whatever the others raise.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable

from benchctl.provisioners.base import Node, NodeState, Provider

RENDEZVOUS_PORTS = range(20000, 32768)
"""Where an attempt's rendezvous port lies: below Linux's ephemeral range (32768–60999), so the
port is never one a node's own outgoing connections were given."""


def cluster_state(provider: Provider, node: Node) -> tuple[NodeState, str]:
    """The unit's state from every member's (the provider's ``status`` of each), and which node it
    is about (``the node``, or ``node k of N`` in a cluster) for messages."""
    members = node.members()
    states = [provider.status(member) for member in members]

    def which(rank: int) -> str:
        return "the node" if len(members) == 1 else f"node {rank} of {len(members)}"

    for gone in (NodeState.PREEMPTED, NodeState.TERMINATED):
        if gone in states:
            return gone, which(states.index(gone))
    if all(state is NodeState.RUNNING for state in states):
        return NodeState.RUNNING, which(0)
    if NodeState.UNKNOWN in states:
        return NodeState.UNKNOWN, which(states.index(NodeState.UNKNOWN))
    return NodeState.STARTING, which(next(i for i, s in enumerate(states) if s is not NodeState.RUNNING))


def terminate_all(terminate: Callable[[Node], None], node: Node) -> list[str]:
    """``terminate`` every member, each whatever the others raise; what failed, one line each. An
    interrupt (``KeyboardInterrupt``, ``SystemExit``) is raised once every member was asked."""
    failed = []
    interrupted: BaseException | None = None
    for rank, member in enumerate(node.members()):
        try:
            terminate(member)
        except Exception as exc:  # every member must still be asked: a failure of one bills for nothing else
            failed.append(f"node {rank} ({member.node_id}): {type(exc).__name__}: {exc}")
        except BaseException as exc:  # re-raised below, once the other members are asked
            interrupted = interrupted or exc
    if interrupted is not None:
        raise interrupted
    return failed


def cluster_ended_at(provider: Provider, node: Node) -> float | None:
    """When the last member stopped billing (the provider's ``ended_at`` of each); None if any is
    unknown, or no time at all: negative, not finite, or in the future (the local provider reads it
    from a file its node can write; ``1e308`` would price the attempt at infinity for good)."""
    ends = [provider.ended_at(member) for member in node.members()]
    now = time.time()
    if any(end is None or not isinstance(end, int | float) or not 0 <= end <= now + 60 for end in ends):
        return None  # (NaN fails the comparison too)
    return max(end for end in ends if end is not None)


def billed_hourly(provider: Provider, node: Node) -> float | None:
    """The unit's hourly price: each member's billed price (``provider.billed_usd``; its offer's where
    unknown), summed; None when no member's billed price is known (the attempt keeps the offer's × nodes)."""
    members = node.members()
    billed = [provider.billed_usd(member) for member in members]
    if all(price is None for price in billed):
        return None
    return sum(price if price is not None else m.offer.hourly_usd for price, m in zip(billed, members, strict=True))


def member_hosts(node: Node) -> list[str | None]:
    """Each member's host in node-rank order (its offer's where the node has none)."""
    return [member.host or member.offer.host or None for member in node.members()]


def rendezvous_port(token: str) -> int:
    """The attempt's rendezvous port on node 0, derived from its token: the same after a
    controller restart (re-attaching), and two attempts rarely share one."""
    digest = int.from_bytes(hashlib.sha256(token.encode()).digest()[:8], "big")
    return RENDEZVOUS_PORTS.start + digest % len(RENDEZVOUS_PORTS)

"""Hosts that failed preflight: excluded from every later attempt of the campaign.

A single node's bad verdict marks its host. A cluster's marks the host of the member the
payload's error event names (``bad_node_rank``: node 0's events, or a worker's that exited 3,
``worker_bad_rank``), else node 0's (the attempt's host): a bad worker node is replaced, not the
whole cluster's hosts. A verdict that names no node (the fabric, ``names_no_node``) marks no host.
Only node 0's events are stored, so the attempt's detail names the member
(``naming``), and ``campaign_bad_hosts`` reads it back from there (``named_in``).
"""

from __future__ import annotations

import json
import re
from typing import Any

from sqlalchemy.engine import Engine

from benchctl.engine.cluster import member_hosts
from benchctl.outcomes import OutcomeKind
from benchctl.provisioners.base import Node
from benchctl.store import queries as q


def bad_node_rank(errors: list[dict[str, Any]]) -> int | None:
    """The node rank the payload's last error event that names one names bad (``bad_node_rank``);
    None when none does, or when it is no node rank (the node is not trusted)."""
    for error in reversed(errors):
        rank = error.get("bad_node_rank")
        if isinstance(rank, int) and not isinstance(rank, bool) and rank >= 0:
            return rank
    return None


def bad_member_host(node: Node, rank: int | None) -> str | None:
    """The host of the cluster's member ``rank`` when it is a worker (1 … N-1); None otherwise."""
    hosts = member_hosts(node)
    return hosts[rank] if node.peers and rank is not None and 0 < rank < len(hosts) else None


def worker_bad_rank(errors: list[dict[str, Any]], worker_rank: int) -> int | None:
    """The node a worker's bad-node exit (3) names, from its error events: their ``bad_node_rank``;
    None when they say the fabric (``bad_node`` without a rank); the worker itself without either."""
    named = bad_node_rank(errors)
    if named is not None:
        return named
    return None if any(error.get("bad_node") is True for error in errors) else worker_rank


def naming(rank: int, nodes: int, host: str) -> str:
    """How an attempt's detail names the bad member of its cluster (read back by ``named_in``)."""
    return f"(node {rank} of {nodes}: {host})"


_NAMING = re.compile(r"\(node ([0-9]{1,4}) of ([0-9]{1,4}): ([^()]*)\)")


def named_in(detail: str | None, node: Node) -> str | None:
    """The host of the worker an attempt's ``detail`` names (``naming``): the last mention that
    is a worker of ``node``'s cluster on its own host (text a node wrote names no other host)."""
    hosts = member_hosts(node)
    for found in reversed(list(_NAMING.finditer(detail or ""))):
        rank, nodes, host = int(found[1]), int(found[2]), found[3]
        if nodes == len(hosts) and 0 < rank < nodes and hosts[rank] == host:
            return host
    return None


def campaign_bad_hosts(engine: Engine, campaign_id: int) -> set[str]:
    """Every host a ``bad_node`` attempt of the campaign found bad. Reads only those attempts, and the
    error events of those that rented a cluster: it costs the same however many other attempts ran."""
    bad = q.attempts_ended(engine, campaign_id, OutcomeKind.BAD_NODE.value)
    clusters = {attempt.id: node for attempt in bad if (node := _cluster(attempt)) is not None}
    errors = q.attempt_errors(engine, sorted(clusters))
    hosts: set[str] = set()
    for attempt in bad:
        host = None
        if (node := clusters.get(attempt.id)) is not None:
            found = _parsed(errors[attempt.id])
            host = bad_member_host(node, bad_node_rank(found)) or named_in(attempt.detail, node)
            if host is None and names_no_node(found):
                continue  # recorded before a verdict naming no node ended the attempt as an error
        host = host or attempt.host
        if host:
            hosts.add(host)
    return hosts


def _cluster(attempt: q.EndedAttempt) -> Node | None:
    """The cluster an attempt rented (its node 0 with peers); None for one node or an unreadable record."""
    if attempt.node_json is None:
        return None
    try:
        node = Node.from_dict(json.loads(attempt.node_json))
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    return node if node.peers else None


def _parsed(errors: list[str]) -> list[dict[str, Any]]:
    found = [json.loads(data) for data in errors]
    return [error for error in found if isinstance(error, dict)]


def names_no_node(errors: list[dict[str, Any]]) -> bool:
    """A cluster's bad verdict about the fabric between its nodes: ``bad_node`` without a rank."""
    return bad_node_rank(errors) is None and any(error.get("bad_node") is True for error in errors)

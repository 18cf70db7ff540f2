"""``benchctl down``: stop every node of a campaign and close its books.

Order matters: the leases are revoked first (a controller still running the campaign finds out at
its next renewal or state change, stops launching, and terminates what it launched), then every
node the providers list with the campaign's tag and every node an open attempt knows is
terminated, the open attempts are closed at the time their node stopped billing, and the
unfinished cells become ``cancelled`` (``benchctl resume`` continues them). A cluster's attempt is
closed once every member is terminated, at the time the last one stopped billing.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.engine import Engine

from benchctl.engine.cell_states import FINISHED, CellState
from benchctl.engine.cluster import cluster_ended_at
from benchctl.engine.providers import Providers
from benchctl.provisioners.base import Node, ProviderError
from benchctl.store import leases
from benchctl.store import queries as q


@dataclass(frozen=True)
class DownReport:
    terminated: list[str]
    closed_attempts: int
    cancelled_cells: int
    failures: list[str]


def down_campaign(engine: Engine, campaign_id: int, campaign_tag: str, provider_names: set[str],
                  providers: Providers, log: Callable[[str], None]) -> DownReport:
    leases.revoke_all(engine, campaign_id)
    terminated: list[str] = []
    failures: list[str] = []

    def stop(node: Node) -> bool:
        try:
            providers.get(node.provider).terminate(node)
        except ProviderError as exc:
            failures.append(f"{node.provider} node {node.node_id}: {exc}")
            return False
        if node.node_id not in terminated:
            terminated.append(node.node_id)
            log(f"terminated {node.provider} node {node.node_id}")
        return True

    for name in sorted(provider_names):
        for node in providers.get(name).owned(campaign_tag):
            stop(node)
    closed = 0
    for attempt in q.campaign_attempts(engine, campaign_id):
        if not attempt.open or attempt.id is None:
            continue
        ended = None
        if attempt.node_json is not None:
            node = Node.from_dict(json.loads(attempt.node_json))
            if not all([stop(member) for member in node.members()]):  # every member asked, whatever one says
                continue  # still billing: leave the attempt open so a later `down`/`resume` retries
            with contextlib.suppress(ProviderError):
                ended = cluster_ended_at(providers.get(node.provider), node)
        q.close_attempt(engine, attempt.id, "down", "stopped by `benchctl down`", terminated_at=ended)
        closed += 1
    cancelled = 0
    for cell in q.cells(engine, campaign_id):
        if cell.id is not None and CellState(cell.state) not in FINISHED:
            q.set_cell_state(engine, cell.id, CellState.CANCELLED.value,
                             "stopped by `benchctl down`; `benchctl resume` continues")
            cancelled += 1
    return DownReport(terminated, closed, cancelled, failures)

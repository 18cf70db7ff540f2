"""The skypilot provider's clusters (``launch_cluster``): one SkyPilot cluster of ``num_nodes``,
head and workers as members, through the SDK stand-in with SSH on the real sshd."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path

import pytest

from benchctl.provisioners.base import Node, NodeState, OfferRequest, ProviderError, of_attempt
from benchctl.provisioners.skypilot.provider import SkyPilotProvider, SkyPilotSettings
from tests.fakes.skypilot_standin import SkyPilotStandIn

pytestmark = pytest.mark.usefixtures("sky_home")


def _provider(tmp_path: Path, standin: SkyPilotStandIn) -> SkyPilotProvider:
    provider = SkyPilotProvider(tmp_path / "skypilot", SkyPilotSettings(workdir=str(tmp_path / "work")), client=standin)
    provider.sleep = lambda _: None
    return provider


def _cluster(provider: SkyPilotProvider, nodes: int, token: str = "bc-1") -> Node:
    request = OfferRequest(gpu="H100_SXM", count=8, market="on-demand", label="cellA", extra={"cloud": "lambda"})
    (offer,) = provider.offers(request)
    return provider.launch_cluster(offer, nodes, token, "camp")


def _running(provider: SkyPilotProvider, node: Node) -> None:
    deadline = time.monotonic() + 10
    while provider.status(node) is not NodeState.RUNNING:
        assert time.monotonic() < deadline, "the cluster never came up"
        time.sleep(0.05)


def test_a_cluster_is_one_launch_with_num_nodes_and_its_members_are_head_and_workers(
        tmp_path: Path, standin: SkyPilotStandIn) -> None:
    provider = _provider(tmp_path, standin)
    node = _cluster(provider, 3)
    (launched,) = standin.launched
    assert (launched["cluster"], launched["num_nodes"]) == ("camp--bc-1", 3)
    members = node.members()
    assert [m.node_id for m in members] == ["camp--bc-1", "camp--bc-1#1", "camp--bc-1#2"]
    assert [m.token for m in members] == ["bc-1", "bc-1-n1", "bc-1-n2"]
    assert all(of_attempt(m.token, "bc-1") for m in members)
    assert [m.details["node_rank"] for m in members] == [0, 1, 2]
    assert {m.details["cluster"] for m in members} == {"camp--bc-1"}
    for member in members:
        _running(provider, member)
    assert provider.rendezvous_address(node) == "10.0.0.11", "the head's internal IP"
    for rank, member in enumerate(members):
        result = provider.transport(member).run(f"echo node{rank}")
        assert (result.code, result.out.strip()) == (0, f"node{rank}")
    assert [n.token for n in provider.owned("camp")] == ["bc-1"], "one node per cluster: the head"
    provider.terminate(node)


def test_a_worker_reaches_its_own_node_and_terminating_any_member_downs_the_cluster(
        tmp_path: Path, standin: SkyPilotStandIn) -> None:
    provider = _provider(tmp_path, standin)
    node = _cluster(provider, 2, "bc-2")
    peer = Node.from_dict(node.to_dict()).peers[0]  # as the store keeps it
    _running(provider, peer)
    provider.transport(peer)
    assert peer.details["ssh"] == {"host": standin.sshd.host, "port": standin.sshd.port, "user": standin.sshd.user}
    provider.terminate(peer)
    assert standin.inventory() == [], "downing a worker downs the cluster"
    assert [provider.status(m) for m in node.members()] == [NodeState.TERMINATED] * 2
    standin.faults.append(RuntimeError("down called again"))
    provider.terminate(node)  # the cluster is down already: nothing is asked
    assert len(standin.faults) == 1
    standin.faults.clear()
    other = _provider(tmp_path / "controller2", standin)  # another controller ends what is already gone
    other.terminate(node)
    assert standin.inventory() == []


def test_a_worker_the_handle_does_not_list_yet_has_no_transport(tmp_path: Path, standin: SkyPilotStandIn) -> None:
    provider = _provider(tmp_path, standin)
    node = _cluster(provider, 2, "bc-3")
    _running(provider, node)
    ghost = Node.from_dict({**node.peers[0].to_dict(), "details": {**node.peers[0].details, "node_rank": 5}})
    with pytest.raises(ProviderError, match="lists no node 5 of camp--bc-3"):
        provider.transport(ghost)
    provider.terminate(node)


def test_a_worker_is_running_before_the_handle_lists_its_address(tmp_path: Path, standin: SkyPilotStandIn,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    provider = _provider(tmp_path, standin)
    node = _cluster(provider, 2, "bc-4")
    _running(provider, node)
    clusters = standin.clusters
    monkeypatch.setattr(standin, "clusters", lambda names: [replace(c, nodes=()) for c in clusters(names)])
    assert provider.status(node.peers[0]) is NodeState.RUNNING
    with pytest.raises(ProviderError, match="lists no node 1 of camp--bc-4 yet"):
        provider.transport(node.peers[0])
    provider.terminate(node)


def test_a_cluster_bills_each_node_at_the_price_it_landed_at(tmp_path: Path, standin: SkyPilotStandIn) -> None:
    """The handle's ``get_hourly_price`` is the whole cluster's (``launched_resources.get_cost(3600) ×
    launched_nodes``, sky/backends/cloud_vm_ray_backend.py); the attempt's price is each member's
    landed price summed: 2 nodes at the landed region's price bill 2×, not the catalog's, not 4×."""
    from benchctl.engine.cluster import billed_hourly

    provider = _provider(tmp_path, standin)
    node = _cluster(provider, 2, "bc-5")
    assert node.offer.hourly_usd == 23.92
    standin.lands_in = ("us-south-1", 25.5)  # SkyPilot failed over to a dearer region
    for member in node.members():
        _running(provider, member)
    assert billed_hourly(provider, node) == pytest.approx(51.0)
    assert [provider.billed_usd(m) for m in node.members()] == [25.5, 25.5]
    assert node.details["launched"]["region"] == "us-south-1"
    provider.terminate(node)


@pytest.mark.parametrize("preempted", [[1], [0]])
def test_a_spot_cluster_partly_preempted_is_preempted_not_an_error(tmp_path: Path, standin: SkyPilotStandIn,
                                                                   preempted: list[int]) -> None:
    """SkyPilot shows a cluster some of whose nodes the cloud took as INIT, unhealthy, "one or more
    nodes terminated" (sky/backends/backend_utils.py ``_update_cluster_status``: "For spot cluster,
    it can also represent that the cluster is partially preempted"): on spot, a preemption."""
    from benchctl.engine.cluster import cluster_state

    provider = _provider(tmp_path, standin)
    request = OfferRequest(gpu="H100_SXM", count=8, market="spot", label="cellA", extra={"cloud": "gcp", "nodes": 2})
    (offer,) = provider.offers(request)
    node = provider.launch_cluster(offer, 2, "bc-6", "camp")
    for member in node.members():
        _running(provider, member)
    standin.preempt_nodes("camp--bc-6", preempted)
    assert [provider.status(m) for m in node.members()] == [NodeState.PREEMPTED] * 2
    assert cluster_state(provider, node)[0] is NodeState.PREEMPTED
    provider.terminate(node)


def test_an_on_demand_cluster_that_lost_a_node_is_an_error(tmp_path: Path, standin: SkyPilotStandIn) -> None:
    provider = _provider(tmp_path, standin)
    node = _cluster(provider, 2, "bc-7")
    for member in node.members():
        _running(provider, member)
    standin.preempt_nodes("camp--bc-7", [1])
    with pytest.raises(ProviderError, match="camp--bc-7 unhealthy: Cluster is abnormal because one or more nodes "
                                            "terminated"):
        provider.status(node)
    provider.terminate(node)

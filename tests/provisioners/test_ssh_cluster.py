"""The ssh provider's clusters (``launch_cluster``): N of the campaign's machines as one unit,
each member reached over real SSH on its own sshd (two, three on 127.0.0.1)."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest

from benchctl.engine.cluster import cluster_state
from benchctl.provisioners.base import NoCapacity, Node, NodeState, OfferRequest, ProviderError, of_attempt
from benchctl.provisioners.ssh import SSHNode, SSHProvider
from tests.fakes.eviction import kill_container
from tests.fakes.sshd import SSHServer, running_sshd


@pytest.fixture
def sshds(tmp_path: Path) -> Iterator[list[SSHServer]]:
    with ExitStack() as stack:
        yield [stack.enter_context(running_sshd(tmp_path / f"sshd{i}")) for i in range(3)]


def _machine(name: str, sshd: SSHServer, tmp_path: Path, **more: object) -> SSHNode:
    return SSHNode(name=name, host=sshd.host, port=sshd.port, user=sshd.user, key=str(sshd.key), gpu="cpu", count=1,
                   python=sys.executable, workdir=str(tmp_path / "machines" / name), **more)  # type: ignore[arg-type]


def _provider(tmp_path: Path, sshds: list[SSHServer], **first: object) -> SSHProvider:
    return SSHProvider(tmp_path / "ssh", [_machine("box-a", sshds[0], tmp_path, price_usd_per_hour=1.0, **first),
                                          _machine("box-b", sshds[1], tmp_path, price_usd_per_hour=2.0),
                                          _machine("box-c", sshds[2], tmp_path, price_usd_per_hour=1.5)])


REQUEST = OfferRequest(gpu="cpu", count=1, market="on-demand", label="cell")


def test_a_cell_of_two_nodes_takes_two_free_machines_each_a_node_of_its_own(tmp_path: Path,
                                                                              sshds: list[SSHServer]) -> None:
    provider = _provider(tmp_path, sshds, rendezvous_host="10.0.0.5")
    offer = provider.offers(REQUEST)[0]
    node = provider.launch_cluster(offer, 2, "bc-1", "camp")
    members = node.members()
    assert [m.details["machine"] for m in members] == ["box-a", "box-c"], "the offer's, then the cheapest free"
    assert [m.token for m in members] == ["bc-1", "bc-1-n1"] and all(of_attempt(m.token, "bc-1") for m in members)
    assert provider.rendezvous_address(node) == "10.0.0.5"
    assert [provider.status(m) for m in members] == [NodeState.RUNNING] * 2
    for member, sshd in zip(members, (sshds[0], sshds[2]), strict=True):
        result = provider.transport(Node.from_dict(member.to_dict())).run("echo $SSH_CONNECTION")
        assert result.code == 0 and result.out.split()[3] == str(sshd.port), "each member reaches its own machine"
    assert [o.offer_id for o in provider.offers(REQUEST)] == ["box-b"], "both machines are claimed"
    assert sorted(n.token for n in provider.owned("camp")) == ["bc-1", "bc-1-n1"]
    for member in members:
        provider.terminate(member)
        provider.terminate(member)  # idempotent
    assert [provider.status(m) for m in members] == [NodeState.TERMINATED] * 2
    assert provider.owned("camp") == [] and len(provider.offers(REQUEST)) == 3


def test_the_rendezvous_defaults_to_the_host_and_bad_hosts_stay_out(tmp_path: Path, sshds: list[SSHServer]) -> None:
    provider = _provider(tmp_path, sshds)
    offer = provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand", exclude_hosts=("box-c",)))[0]
    node = provider.launch_cluster(offer, 2, "bc-2", "camp")
    assert [m.details["machine"] for m in node.members()] == ["box-a", "box-b"]
    assert provider.rendezvous_address(node) == "127.0.0.1"
    for member in node.members():
        provider.terminate(member)


def test_too_few_machines_is_an_error_and_too_few_free_ones_is_no_capacity(tmp_path: Path,
                                                                          sshds: list[SSHServer]) -> None:
    provider = _provider(tmp_path, sshds)
    offer = provider.offers(REQUEST)[0]
    with pytest.raises(ProviderError, match=r"a cluster of 4 needs 4 ssh nodes with 1× cpu; providers.ssh.nodes "
                                            r"lists 3: add machines or lower nodes"):
        provider.launch_cluster(offer, 4, "bc-3", "camp")
    held = provider.launch(provider.offers(REQUEST)[-1], "bc-other", "camp")  # box-b, for another attempt
    with pytest.raises(NoCapacity, match="2 of the 3 ssh nodes with 1× cpu are free now; the cluster needs 3"):
        provider.launch_cluster(offer, 3, "bc-4", "camp")
    assert [n.token for n in provider.owned("camp")] == ["bc-other"], "nothing of the refused cluster is claimed"
    provider.terminate(held)


def test_a_member_that_cannot_be_claimed_releases_the_others(tmp_path: Path, sshds: list[SSHServer],
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    provider = _provider(tmp_path, sshds)
    offer = provider.offers(REQUEST)[0]
    claim = provider._claim
    monkeypatch.setattr(provider, "_claim", lambda machine, token: machine != "box-c" and claim(machine, token))
    with pytest.raises(ProviderError, match="box-c is in use by another attempt"):
        provider.launch_cluster(offer, 2, "bc-5", "camp")
    assert provider.owned("camp") == [], "all or nothing: box-a is free again"
    assert len(provider.offers(REQUEST)) == 3


def test_a_member_that_lost_our_processes_is_preempted_one_whose_command_ended_runs(tmp_path: Path,
                                                                                    sshds: list[SSHServer]) -> None:
    provider = _provider(tmp_path, sshds)
    node = provider.launch_cluster(provider.offers(REQUEST)[0], 2, "bc-6", "camp")
    head, worker = node.members()
    provider.transport(head).start("true", cwd=".")
    provider.transport(worker).start("sleep 30", cwd=".")
    ended = tmp_path / "machines" / "box-a" / ".benchctl" / "bc-6.ended"
    deadline = time.monotonic() + 10
    while not ended.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [provider.status(m) for m in (head, worker)] == [NodeState.RUNNING] * 2, "ended well, or still running"
    kill_container(tmp_path / "machines" / "box-c", worker.token)  # box-c restarted: everything on it killed
    assert provider.status(worker) is NodeState.PREEMPTED
    assert cluster_state(provider, node) == (NodeState.PREEMPTED, "node 1 of 2")
    for member in (head, worker):
        provider.terminate(member)
    assert [provider.status(m) for m in (head, worker)] == [NodeState.TERMINATED] * 2
    assert not list((tmp_path / "machines").rglob(".benchctl/bc-6*")), "terminate cleared our records there"

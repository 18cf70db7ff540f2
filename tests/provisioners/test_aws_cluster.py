"""The aws provider's clusters (``launch_cluster``) through boto3 against moto's EC2
(tests/fakes/aws_fake.py, placement groups from tests/fakes/aws_placement.py); SSH on a real sshd."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from benchctl.provisioners.aws import cluster as aws_cluster
from benchctl.provisioners.aws.api import EC2, AWSError
from benchctl.provisioners.aws.instances import INSTANCES
from benchctl.provisioners.aws.provider import AWSProvider, AWSSettings
from benchctl.provisioners.base import NoCapacity, Node, NodeState, Offer, OfferRequest, ProviderError, of_attempt
from tests.fakes.aws_fake import FakeAWS, running_fake_aws
from tests.fakes.sshd import SSHServer, running_sshd


@dataclass
class AWS:
    fake: FakeAWS
    provider: AWSProvider
    sshd: SSHServer

    def client(self) -> Any:
        import boto3

        return boto3.client("ec2", region_name="us-east-1")

    def offer(self, instance_type: str, market: str = "on-demand") -> Offer:
        count = INSTANCES[instance_type].count
        return self.provider.offers(OfferRequest(gpu="", count=count, market=market, instance_type=instance_type))[0]

    def instance(self, instance_id: str) -> Any:
        return self.fake.instances[instance_id]


@pytest.fixture
def aws(tmp_path: Path) -> Iterator[AWS]:
    with running_sshd(tmp_path / "sshd") as sshd:
        fake = FakeAWS(sshd.root / "authorized_keys", tmp_path / "work")
        with running_fake_aws(fake):
            provider = AWSProvider(tmp_path / "aws", AWSSettings(ssh_cidr="127.0.0.1/32", ssh_port=sshd.port,
                                                                 ssh_user=sshd.user, python=sys.executable,
                                                                 workdir=str(tmp_path / "work")))
            yield AWS(fake, provider, sshd)
            if fake.live():  # what a test launched and left: the provider must find and end it
                for node in provider.owned("camp-a"):
                    provider.terminate(node)
            assert fake.live() == [], "an instance was left running in moto"


def _tags(aws: AWS, instance_id: str) -> dict[str, str]:
    (reservation,) = aws.client().describe_instances(InstanceIds=[instance_id])["Reservations"]
    return {t["Key"]: t["Value"] for t in reservation["Instances"][0].get("Tags", [])}


def test_a_p5_cluster_is_one_launch_of_n_in_a_cluster_placement_group_with_32_efas(aws: AWS) -> None:
    offer = aws.offer("p5.48xlarge")
    node = aws.provider.launch_cluster(offer, 2, "bc-tok", "camp-a")
    members = node.members()
    assert [m.token for m in members] == ["bc-tok", "bc-tok-n1"]
    assert [m.details["node_rank"] for m in members] == [0, 1]
    assert all(of_attempt(m.token, "bc-tok") for m in members)
    (sent,) = aws.fake.requests  # one run_instances for the whole cluster
    assert sent["client_token"] == "bc-tok"
    group = aws_cluster.group_name("camp-a", "bc-tok")
    placed = aws.fake.placement.groups[("us-east-1", group)]
    assert placed["Strategy"] == "cluster"
    assert {t["Key"]: t["Value"] for t in placed["Tags"]}["benchctl:campaign"] == "camp-a"
    assert sorted(i.id for i in aws.fake.placement.members[("us-east-1", group)]) == sorted(m.node_id for m in members)
    nics = sent["nics"]
    assert sum(n["InterfaceType"] in ("efa", "efa-only") for n in nics) == 32
    assert sorted(int(n["NetworkCardIndex"]) for n in nics) == list(range(32)), "one EFA per network card"
    assert [(n["NetworkCardIndex"], n["DeviceIndex"], n["InterfaceType"]) for n in nics[:2]] == [
        (0, 0, "efa"), (1, 1, "efa-only")]
    assert "security_group_ids" not in sent or not sent["security_group_ids"], "the groups are the interfaces'"
    for member in members:
        tags = _tags(aws, member.node_id)
        assert tags["benchctl:campaign"] == "camp-a"
        assert tags["benchctl:token"] == member.token
        assert tags["benchctl:node-rank"] == str(member.details["node_rank"])
        assert tags["Name"] == f"camp-a--{member.token}"
        assert aws.instance(member.node_id)._placement.zone == offer.details["zone"]
    assert aws.provider.rendezvous_address(node) == aws.instance(node.node_id).private_ip
    assert [aws.provider.status(m) for m in members] == [NodeState.RUNNING] * 2
    owned = {n.node_id: n for n in aws.provider.owned("camp-a")}
    assert {n.token for n in owned.values()} == {"bc-tok", "bc-tok-n1"}
    assert all(n.details["placement_group"] == group for n in owned.values())
    for member in members:
        aws.provider.terminate(member)
        aws.provider.terminate(member)  # idempotent
    assert aws.fake.live() == []
    assert ("us-east-1", group) not in aws.fake.placement.groups, "deleted with its last member"


def test_a_p4d_cluster_has_4_efas_per_node_and_a_spot_cluster_is_spot(aws: AWS) -> None:
    node = aws.provider.launch_cluster(aws.offer("p4d.24xlarge"), 3, "bc-p4", "camp-a")
    sent = aws.fake.requests[-1]
    assert [n["InterfaceType"] for n in sent["nics"]] == ["efa", "efa-only", "efa-only", "efa-only"]
    assert len(node.members()) == 3
    for member in node.members():
        aws.provider.terminate(member)
    spot = aws.provider.launch_cluster(aws.offer("p5.48xlarge", "spot"), 2, "bc-spot", "camp-a")
    assert aws.fake.requests[-1]["instance_market_options"] == "spot"
    assert {m.hourly_usd for m in spot.members()} == {29.9}, "each member bills the zone's spot price"
    for member in spot.members():
        aws.provider.terminate(member)


def test_a_type_without_efa_launches_with_the_ssh_group_and_every_member_is_reached(aws: AWS) -> None:
    node = aws.provider.launch_cluster(aws.offer("c5.large"), 2, "bc-c5", "camp-a")
    sent = aws.fake.requests[-1]
    assert not sent["nics"] and sent["security_group_ids"], "no EFA: plain launch, one public IP each"
    for rank, member in enumerate(node.members()):
        result = aws.provider.transport(member).run(f"echo rank{rank}")
        assert (result.code, result.out.strip()) == (0, f"rank{rank}")
    group_id = sent["security_group_ids"][0]
    rules = aws.client().describe_security_groups(GroupIds=[group_id])["SecurityGroups"][0]["IpPermissions"]
    assert any(r["IpProtocol"] == "-1" and [p["GroupId"] for p in r.get("UserIdGroupPairs", [])] == [group_id]
               for r in rules), "members reach each other on every port (rendezvous, NCCL)"
    for member in node.members():
        aws.provider.terminate(member)


def test_no_capacity_for_the_cluster_leaves_nothing_running_and_no_placement_group(aws: AWS) -> None:
    offer = aws.offer("p5.48xlarge")
    aws.fake.refuse("InsufficientInstanceCapacity")
    with pytest.raises(NoCapacity, match="InsufficientInstanceCapacity"):
        aws.provider.launch_cluster(offer, 2, "bc-full", "camp-a")
    assert aws.fake.live() == [] and aws.fake.instances == {}
    assert aws.fake.placement.groups == {}, "the attempt's placement group is deleted with the failed launch"
    assert aws.client().describe_addresses()["Addresses"] == [], "and the Elastic IPs reserved for it released"


def test_a_failure_after_the_launch_terminates_every_member(aws: AWS, monkeypatch: pytest.MonkeyPatch) -> None:
    original = EC2.call

    def call(self: EC2, what: str, method: str, **kwargs: Any) -> dict[str, Any]:
        if method == "create_tags" and any(t["Value"] == "1" for t in kwargs["Tags"]):
            raise AWSError("aws could not tag a cluster member in us-east-1 (InternalError): boom", "InternalError")
        return original(self, what, method, **kwargs)

    monkeypatch.setattr(EC2, "call", call)
    with pytest.raises(AWSError, match="boom"):
        aws.provider.launch_cluster(aws.offer("c5.large"), 3, "bc-half", "camp-a")
    assert len(aws.fake.instances) == 3
    assert aws.fake.live() == [], "all or nothing: the members already launched are terminated"


def test_an_efa_member_gets_an_elastic_ip_released_at_terminate(aws: AWS) -> None:
    node = aws.provider.launch_cluster(aws.offer("p5.48xlarge"), 2, "bc-eip", "camp-a")
    for member in node.members():  # EC2 gives no public IP to an instance with several interfaces
        aws.instance(member.node_id).nics[0].public_ip = None
    peer = node.peers[0]
    transport = aws.provider.transport(peer)
    (address,) = aws.client().describe_addresses(Filters=[{"Name": "tag:benchctl:token", "Values": ["bc-eip-n1"]}])[
        "Addresses"]
    assert transport.endpoint.host == address["PublicIp"]
    assert address.get("AssociationId"), "associated with the member's primary interface"
    assert address["NetworkInterfaceId"] == aws.instance(peer.node_id).nics[0].id
    for member in node.members():
        aws.provider.terminate(member)
    assert aws.client().describe_addresses()["Addresses"] == []


def test_a_cluster_past_the_elastic_ip_quota_is_refused_before_any_instance_bills(aws: AWS) -> None:
    """Each p5 member needs an Elastic IP (several network cards: no public IP); the region allows 5
    by default. A 6-node cluster is refused before the launch, in one line naming the quota, and
    leaves no instance, no address and no placement group."""
    offer = aws.offer("p5.48xlarge")
    with pytest.raises(ProviderError) as caught:
        aws.provider.launch_cluster(offer, 6, "bc-six", "camp-a")
    message = str(caught.value)
    assert not isinstance(caught.value, NoCapacity), "no zone and no wait helps: a quota"
    assert '"EC2-VPC Elastic IPs" (L-0263D0A3)' in message and "AddressLimitExceeded; 5 allowed, 0 in use" in message
    assert "a cluster of 6 p5.48xlarge needs 6 Elastic IPs in us-east-1" in message
    assert "request an increase in Service Quotas or run fewer nodes" in message and "\n" not in message
    assert aws.fake.requests == [] and aws.fake.instances == {}, "nothing launched, nothing bills"
    assert aws.client().describe_addresses()["Addresses"] == [], "the addresses it got are released"
    assert aws.fake.placement.groups == {}


def test_addresses_held_elsewhere_count_and_are_left_alone(aws: AWS) -> None:
    client = aws.client()
    theirs = [client.allocate_address(Domain="vpc")["AllocationId"] for _ in range(4)]
    with pytest.raises(ProviderError, match=r"AddressLimitExceeded; 5 allowed, 4 in use\): request an increase"):
        aws.provider.launch_cluster(aws.offer("p5.48xlarge"), 2, "bc-two", "camp-a")
    assert sorted(a["AllocationId"] for a in client.describe_addresses()["Addresses"]) == sorted(theirs)
    assert aws.fake.instances == {}
    for allocation in theirs:
        client.release_address(AllocationId=allocation)
    node = aws.provider.launch_cluster(aws.offer("p5.48xlarge"), 2, "bc-two", "camp-a")
    tagged = {t["Value"] for a in client.describe_addresses()["Addresses"] for t in a["Tags"]
              if t["Key"] == "benchctl:token"}
    assert tagged == {"bc-two", "bc-two-n1"}, "one per member, allocated before the launch"
    for member in node.members():
        aws.provider.terminate(member)
    assert client.describe_addresses()["Addresses"] == []


def test_owned_sweeps_a_placement_group_and_an_elastic_ip_a_crash_left(aws: AWS,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    node = aws.provider.launch_cluster(aws.offer("p5.48xlarge"), 2, "bc-crash", "camp-a")
    aws.instance(node.peers[0].node_id).nics[0].public_ip = None
    aws.provider.transport(node.peers[0])  # its Elastic IP
    ids = [m.node_id for m in node.members()]
    aws.client().terminate_instances(InstanceIds=ids)  # the controller died before it could clean up
    client = aws.client()
    addresses = client.describe_addresses()["Addresses"]
    assert len(addresses) == 2, "one per member, allocated before the launch"
    for address in addresses:  # as EC2 does when the instance ends
        if address.get("AssociationId"):
            client.disassociate_address(AssociationId=address["AssociationId"])
    group = aws_cluster.group_name("camp-a", "bc-crash")
    assert aws.provider.owned("camp-a") == []
    assert ("us-east-1", group) in aws.fake.placement.groups, "too young to sweep: a launch may be under way"
    monkeypatch.setattr(aws_cluster, "SWEEP_GRACE_S", 0.0)
    assert aws.provider.owned("camp-a") == []
    assert ("us-east-1", group) not in aws.fake.placement.groups
    assert client.describe_addresses()["Addresses"] == []


def test_members_are_nodes_of_their_own(aws: AWS) -> None:
    node = aws.provider.launch_cluster(aws.offer("c5.large"), 2, "bc-own", "camp-a")
    peer = Node.from_dict(node.to_dict()).peers[0]  # as the store keeps it
    aws.provider.terminate(peer)
    assert aws.provider.status(peer) is NodeState.TERMINATED
    assert aws.provider.status(node) is NodeState.RUNNING, "ending one member ends only that instance"
    aws.provider.terminate(node)


def test_credentials_without_placement_group_rights_still_list_owned_nodes(aws: AWS,
                                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    node = aws.provider.launch(aws.offer("c5.large"), "bc-one", "camp-a")
    original = EC2.call

    def call(self: EC2, what: str, method: str, **kwargs: Any) -> dict[str, Any]:
        if method == "describe_placement_groups":
            raise AWSError("aws refused to list the campaign's placement groups (UnauthorizedOperation)",
                           "UnauthorizedOperation")
        return original(self, what, method, **kwargs)

    monkeypatch.setattr(EC2, "call", call)
    assert [n.token for n in aws.provider.owned("camp-a")] == ["bc-one"], "the sweep is housekeeping"
    aws.provider.terminate(node)


BLOCK = "cr-0123456789abcdef0"
BLOCK_RATE = 31.464
"""USD per p5.48xlarge-hour in the block quote below (an example figure, not AWS's current one)."""


def _reserved(aws: AWS, rid: str, nodes: int = 1, itype: str = "p5.48xlarge") -> list[Offer]:
    return aws.provider.offers(OfferRequest(gpu="", count=INSTANCES[itype].count, market="on-demand",
                                            instance_type=itype, extra={"capacity_reservation": rid, "nodes": nodes}))


def test_a_capacity_block_cluster_launches_into_the_block_at_its_quoted_rate(aws: AWS) -> None:
    aws.fake.reservations.add(BLOCK, "p5.48xlarge", "us-east-1d", 2, kind="capacity-block",
                              start="2026-11-23T11:30:00Z", end="2026-11-24T11:30:00Z")
    aws.fake.reservations.offerings.append({
        "CapacityBlockOfferingId": "cb-0123456789abcdefg", "InstanceType": "p5.48xlarge",
        "AvailabilityZone": "us-east-1a", "InstanceCount": 2, "CapacityBlockDurationHours": 24,
        "UpfrontFee": f"{BLOCK_RATE * 2 * 24:.3f}", "CurrencyCode": "USD", "Tenancy": "default"})
    (offer,) = _reserved(aws, BLOCK, nodes=2)
    assert offer.details["zone"] == "us-east-1d", "the block's zone, whatever the open pool offers"
    assert offer.hourly_usd == pytest.approx(BLOCK_RATE), "upfront fee / (instances × hours), per instance"
    assert offer.details["price_source"].startswith("capacity block quote")
    node = aws.provider.launch_cluster(offer, 2, "bc-block", "camp-a")
    assert aws.fake.requests[-1]["instance_market_options"] == "capacity-block"
    assert sorted(i.id for i in aws.fake.reservations.members[BLOCK]) == sorted(m.node_id for m in node.members())
    assert aws.fake.placement.groups == {}, "AWS places a block's instances together; no group of ours"
    assert [m.hourly_usd for m in node.members()] == [pytest.approx(BLOCK_RATE)] * 2
    assert _reserved(aws, BLOCK, nodes=2) == [], "the block is in use"
    for member in node.members():
        aws.provider.terminate(member)
    assert len(_reserved(aws, BLOCK, nodes=2)) == 1, "its slots come back when the instances end"


def test_the_fake_refuses_a_block_launched_without_its_market_type_as_ec2_does(aws: AWS) -> None:
    from botocore.exceptions import ClientError

    aws.fake.reservations.add(BLOCK, "c5.large", "us-east-1a", 1, kind="capacity-block")
    with pytest.raises(ClientError, match=r"InvalidParameterValue.*The market type \(purchasing\) option is not valid"):
        aws.client().run_instances(ImageId=aws.fake.images["us-east-1"][0], InstanceType="c5.large", MinCount=1,
                                   MaxCount=1, CapacityReservationSpecification={
                                       "CapacityReservationTarget": {"CapacityReservationId": BLOCK}})
    assert aws.fake.instances == {}


def test_an_on_demand_reservation_bills_the_on_demand_rate_and_a_full_one_offers_nothing(aws: AWS) -> None:
    aws.fake.reservations.add("cr-00000000000000001", "c5.large", "us-east-1c", 1)
    (offer,) = _reserved(aws, "cr-00000000000000001", itype="c5.large")
    assert (offer.hourly_usd, offer.details["zone"]) == (pytest.approx(0.085), "us-east-1c")
    assert offer.details["price_source"].startswith("on-demand rate")
    node = aws.provider.launch(offer, "bc-odcr", "camp-a")
    assert aws.fake.requests[-1]["instance_market_options"] == {}, "an on-demand reservation has no market type"
    assert [i.id for i in aws.fake.reservations.members["cr-00000000000000001"]] == [node.node_id]
    assert _reserved(aws, "cr-00000000000000001", itype="c5.large") == []
    aws.provider.terminate(node)


@pytest.mark.parametrize(("reservation", "message"), [
    (None, "no capacity reservation cr-00000000000000002 in us-east-1: check the cell's capacity_reservation and "
     "region"),
    ({"instance_type": "p4d.24xlarge"}, "is for p4d.24xlarge, not p5.48xlarge: set the cell's instance_type"),
    ({"state": "scheduled", "start": "2026-12-01T11:30:00Z"}, "starts at 2026-12-01 11:30:00+00:00: run the campaign "
     "once it is active"),
    ({"state": "expired"}, "is expired: name an active one"),
])
def test_a_reservation_the_cell_cannot_use_is_a_clear_error(aws: AWS, reservation: dict[str, str] | None,
                                                             message: str) -> None:
    if reservation is not None:
        kind = reservation.pop("instance_type", "p5.48xlarge")
        aws.fake.reservations.add("cr-00000000000000002", kind, "us-east-1a", 2, kind="capacity-block", **reservation)
    with pytest.raises(ProviderError, match=re.escape(message)):
        _reserved(aws, "cr-00000000000000002", nodes=2)

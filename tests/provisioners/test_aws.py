"""The aws provider through boto3 against moto's EC2 (tests/fakes/aws_fake.py), on 127.0.0.1."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest

from benchctl.engine.providers import Providers
from benchctl.errors import ProviderUnavailable
from benchctl.provisioners.aws import resources as aws_setup
from benchctl.provisioners.aws.provider import AWSProvider, AWSSettings, instance_state
from benchctl.provisioners.base import NoCapacity, Node, NodeState, OfferRequest, ProviderError
from tests.fakes.aws_fake import FakeAWS, running_fake_aws

CIDR = "10.1.2.3/32"


@dataclass
class AWS:
    fake: FakeAWS
    provider: AWSProvider
    root: Path

    def client(self) -> Any:
        import boto3

        return boto3.client("ec2", region_name="us-east-1")


@pytest.fixture
def aws(tmp_path: Path) -> Iterator[AWS]:
    fake = FakeAWS(tmp_path / "authorized_keys", tmp_path / "work")
    with running_fake_aws(fake):
        provider = AWSProvider(tmp_path / "aws", AWSSettings(ssh_cidr=CIDR, ssh_port=2222, disk_gb=120))
        yield AWS(fake, provider, tmp_path / "aws")
        if fake.live():  # what a test launched and left: the provider must find and end it (a scan of every region)
            for node in provider.owned("camp-a") + provider.owned("camp-b"):
                provider.terminate(node)
        assert fake.live() == [], "an instance was left running in moto"


def _spot(aws: AWS, itype: str = "c5.large") -> OfferRequest:
    return OfferRequest(gpu="", count=1, market="spot", instance_type=itype)


def test_spot_offers_are_per_zone_at_the_newest_price_cheapest_first(aws: AWS) -> None:
    offers = aws.provider.offers(_spot(aws))
    assert [(o.details["zone"], o.hourly_usd) for o in offers] == [
        ("us-east-1b", 0.033), ("us-east-1a", 0.041), ("us-east-1c", 0.052)], "stale 99.0 rows are ignored"
    assert {(o.gpu, o.count, o.vcpus, o.region, o.market) for o in offers} == {("cpu", 1, 2, "us-east-1", "spot")}


def test_on_demand_is_the_table_price_and_gpu_count_names_the_type(aws: AWS) -> None:
    on_demand = aws.provider.offers(OfferRequest(gpu="", count=1, market="on-demand", instance_type="c5.large"))[0]
    assert on_demand.hourly_usd == pytest.approx(0.085)
    by_gpu = aws.provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="spot"))
    assert [(o.details["instance_type"], o.hourly_usd, o.vcpus) for o in by_gpu] == [
        ("p5.48xlarge", 29.9, 192), ("p5.48xlarge", 31.4, 192)]
    assert aws.provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="spot", min_vcpus=256)) == []


def test_an_instance_type_outside_the_table_is_a_clear_error(aws: AWS) -> None:
    with pytest.raises(ProviderError, match=r"'m7i.large' is not in benchctl's table \(known: c5.large, "):
        aws.provider.offers(_spot(aws, "m7i.large"))


def test_a_spot_launch_sends_what_ec2_needs(aws: AWS) -> None:
    offer = aws.provider.offers(_spot(aws))[0]
    node = aws.provider.launch(offer, "bc-token1", "camp-a")
    sent = aws.fake.requests[-1]
    assert sent["client_token"] == "bc-token1"
    assert sent["instance_initiated_shutdown_behavior"] == "terminate"
    assert sent["instance_market_options"] == "spot"
    assert sent["placement"] == "us-east-1b", "placed in the offer's zone"
    assert sent["tags"]["instance"] == {"benchctl:campaign": "camp-a", "benchctl:token": "bc-token1",
                                        "Name": "camp-a--bc-token1"}
    ec2 = aws.client()
    (instance,) = ec2.describe_instances(InstanceIds=[node.node_id])["Reservations"][0]["Instances"]
    assert instance["ImageId"] == aws.fake.images["us-east-1"][-1], "the newest Deep Learning AMI"
    assert instance["KeyName"] == "benchctl-camp-a"
    assert instance["InstanceLifecycle"] == "spot"
    attribute = ec2.describe_instance_attribute(InstanceId=node.node_id, Attribute="instanceInitiatedShutdownBehavior")
    assert attribute["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
    (key,) = ec2.describe_key_pairs(KeyNames=["benchctl-camp-a"])["KeyPairs"]
    public = (aws.root / "keys" / "camp-a.pub").read_text().split()[1]
    assert public in aws.fake.authorized_keys.read_text(), "the imported campaign key reached the node"
    assert key["KeyType"] == "ed25519"
    (group,) = ec2.describe_security_groups(GroupNames=["benchctl-ssh"])["SecurityGroups"]
    assert [g["GroupId"] for g in instance["SecurityGroups"]] == [group["GroupId"]]
    (vpc,) = ec2.describe_vpcs(Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]
    assert group["VpcId"] == vpc["VpcId"] == instance["VpcId"]
    assert [(p["IpProtocol"], p["FromPort"], p["ToPort"], [r["CidrIp"] for r in p["IpRanges"]])
            for p in group["IpPermissions"]] == [("tcp", 2222, 2222, [CIDR])]
    volumes = ec2.describe_volumes(Filters=[{"Name": "attachment.instance-id", "Values": [node.node_id]}])["Volumes"]
    assert [v["Size"] for v in volumes] == [120]
    assert node.details | {"launched_at": 0} == {"instance_id": node.node_id, "region": "us-east-1",
                                                  "zone": "us-east-1b", "launched_at": 0}
    assert (node.host, node.hourly_usd) == (node.node_id, 0.033)
    second = aws.provider.launch(offer, "bc-token2", "camp-a")  # key pair and group already there: reused
    assert second.node_id != node.node_id
    assert len(ec2.describe_security_groups(GroupNames=["benchctl-ssh"])["SecurityGroups"]) == 1


def test_an_on_demand_launch_has_no_market_options_and_the_table_price(aws: AWS) -> None:
    offer = aws.provider.offers(OfferRequest(gpu="", count=1, market="on-demand", instance_type="c5.large"))[0]
    node = aws.provider.launch(offer, "bc-od", "camp-a")
    assert aws.fake.requests[-1]["instance_market_options"] == {}
    assert aws.fake.requests[-1]["placement"] == "us-east-1a"
    assert node.hourly_usd == pytest.approx(0.085)
    (instance,) = aws.client().describe_instances(InstanceIds=[node.node_id])["Reservations"][0]["Instances"]
    assert "InstanceLifecycle" not in instance


def test_the_client_token_makes_a_repeated_launch_the_same_instance(aws: AWS) -> None:
    offer = aws.provider.offers(_spot(aws))[0]
    first = aws.provider.launch(offer, "bc-again", "camp-a")
    again = aws.provider.launch(offer, "bc-again", "camp-a")  # a controller that crashed mid-launch retries
    assert again.node_id == first.node_id
    assert aws.fake.live() == [first.node_id]


def test_on_demand_offers_are_one_per_zone_that_offers_the_type(aws: AWS) -> None:
    offers = aws.provider.offers(OfferRequest(gpu="", count=1, market="on-demand", instance_type="c5.large"))
    assert [(o.offer_id, o.details["zone"], o.hourly_usd) for o in offers] == [
        (f"c5.large|us-east-1{z}", f"us-east-1{z}", 0.085) for z in "abcdf"], "moto's offerings: no 1e"


@pytest.mark.parametrize(("market", "code"), [("spot", "InsufficientInstanceCapacity"),
                                              ("spot", "UnfulfillableCapacity"),
                                              ("on-demand", "InsufficientInstanceCapacity")])
def test_no_capacity_in_a_zone_is_sent_once_and_the_next_try_goes_to_another_zone(aws: AWS, market: str,
                                                                                 code: str) -> None:
    request = OfferRequest(gpu="", count=1, market=market, instance_type="c5.large")
    first = aws.provider.offers(request)[0]
    aws.fake.refuse(code, first.details["zone"])
    with pytest.raises(NoCapacity, match=rf"aws has no capacity to launch a {market} c5.large in "
                                         rf"{first.details['zone']} in us-east-1 now \({code}: "):
        aws.provider.launch(first, "bc-full", "camp-a")
    assert aws.fake.refused == [(first.details["zone"], code)], "one request: botocore must not re-send it there"
    offers = aws.provider.offers(request)
    assert offers[0].details["zone"] != first.details["zone"] and offers[-1].offer_id == first.offer_id
    node = aws.provider.launch(offers[0], "bc-next", "camp-a")
    assert node.details["zone"] == aws.fake.requests[-1]["placement"] == offers[0].details["zone"]
    assert aws.fake.live() == [node.node_id]


@pytest.mark.parametrize(("market", "code", "quota"), [
    ("on-demand", "VcpuLimitExceeded", "Running On-Demand Standard (A, C, D, H, I, M, R, T, Z) instances"),
    ("spot", "VcpuLimitExceeded", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"),
    ("spot", "MaxSpotInstanceCountExceeded", "All Standard (A, C, D, H, I, M, R, T, Z) Spot Instance Requests"),
])
def test_a_quota_is_not_capacity_and_names_the_quota_to_raise(aws: AWS, market: str, code: str, quota: str) -> None:
    aws.fake.refuse(code)
    offer = aws.provider.offers(OfferRequest(gpu="", count=1, market=market, instance_type="c5.large"))[0]
    with pytest.raises(ProviderError) as caught:
        aws.provider.launch(offer, "bc-quota", "camp-a")
    assert not isinstance(caught.value, NoCapacity), "another zone or a wait will not help"
    assert f'({code}): the account\'s quota "{quota}" in us-east-1 is used up; raise it in Service Quotas' in str(
        caught.value)
    assert "\n" not in str(caught.value) and len(aws.fake.refused) == 1


def test_gpu_quotas_are_named_by_their_class() -> None:
    from benchctl.provisioners.aws.instances import vcpu_quota

    assert vcpu_quota("p5.48xlarge", "on-demand") == "Running On-Demand P instances"
    assert vcpu_quota("p4d.24xlarge", "spot") == "All P Spot Instance Requests"
    assert vcpu_quota("g6e.xlarge", "spot") == "All G and VT Spot Instance Requests"


@pytest.mark.parametrize(("state", "reason", "expected"), [
    ("pending", None, NodeState.STARTING),
    ("running", None, NodeState.RUNNING),
    ("shutting-down", "Server.SpotInstanceTermination", NodeState.PREEMPTED),
    ("terminated", "Server.SpotInstanceTermination", NodeState.PREEMPTED),
    ("stopped", "Server.SpotInstanceShutdown", NodeState.PREEMPTED),
    ("terminated", "Client.UserInitiatedShutdown", NodeState.TERMINATED),
    ("terminated", "Client.InstanceInitiatedShutdown", NodeState.TERMINATED),
    ("stopping", None, NodeState.TERMINATED),
    ("rebooting", None, NodeState.UNKNOWN),
])
def test_every_state_and_reason_is_mapped(state: str, reason: str | None, expected: NodeState) -> None:
    instance = {"State": {"Name": state}, **({"StateReason": {"Code": reason}} if reason else {})}
    assert instance_state(instance) is expected
    assert instance_state(None) is NodeState.TERMINATED


def test_status_reads_running_preempted_and_terminated_from_ec2(aws: AWS) -> None:
    offer = aws.provider.offers(_spot(aws))[0]
    spot, other = (aws.provider.launch(offer, f"bc-s{i}", "camp-a") for i in range(2))
    assert aws.provider.status(spot) is NodeState.RUNNING
    aws.fake.spot_terminate(spot.node_id)
    assert aws.provider.status(spot) is NodeState.PREEMPTED
    aws.provider.terminate(other)
    assert aws.provider.status(other) is NodeState.TERMINATED
    gone = Node(provider="aws", node_id="i-0123456789abcdef0", token="t", campaign_tag="camp-a", offer=offer,
                details={"region": "us-east-1", "launched_at": 0})
    assert aws.provider.status(gone) is NodeState.TERMINATED
    just_launched = Node(**{**gone.__dict__, "details": {"region": "us-east-1", "launched_at": 1e12}})
    assert aws.provider.status(just_launched) is NodeState.STARTING, "EC2's reads lag a new id for a moment"


REAL_TERMINATED = {  # a real terminated instance as describe-instances printed it, trimmed to what is read:
    # github.com/lostsnow/devops-cli, aws/data/sample/ec2/describe-instances.md
    "InstanceId": "i-xxxx", "LaunchTime": "2020-03-05T01:59:12.000Z", "State": {"Code": 48, "Name": "terminated"},
    "StateTransitionReason": "User initiated (2020-03-05 04:45:19 GMT)",
    "StateReason": {"Code": "Client.UserInitiatedShutdown",
                    "Message": "Client.UserInitiatedShutdown: User initiated shutdown"}}


def test_billing_ends_when_ec2_says_not_when_the_controller_looks() -> None:
    from benchctl.provisioners.aws.provider import billing_ended

    assert billing_ended(REAL_TERMINATED) == datetime(2020, 3, 5, 4, 45, 19, tzinfo=timezone.utc).timestamp()
    shutting = {**REAL_TERMINATED, "State": {"Code": 32, "Name": "shutting-down"}}
    assert billing_ended(shutting) == billing_ended(REAL_TERMINATED), "shutting-down is not billed (EC2 lifecycle)"
    assert billing_ended({**REAL_TERMINATED, "State": {"Code": 16, "Name": "running"}}) is None
    assert billing_ended({**REAL_TERMINATED, "StateTransitionReason": ""}) is None, "the API: may be empty"
    assert billing_ended(None) is None


def test_a_reclaimed_spot_node_ended_when_ec2_ended_it(aws: AWS) -> None:
    """The controller that looks hours later (laptop closed) closes the attempt at EC2's time, not its own."""
    offer = aws.provider.offers(_spot(aws))[0]
    node = aws.provider.launch(offer, "bc-ended", "camp-a")
    assert aws.provider.ended_at(node) is None, "still running"
    before = int(time.time())
    aws.fake.spot_terminate(node.node_id)
    ended = aws.provider.ended_at(node)
    assert ended is not None and before <= ended <= time.time()


def test_terminate_is_idempotent_and_owned_lists_the_campaigns_live_nodes(aws: AWS) -> None:
    offer = aws.provider.offers(_spot(aws))[0]
    a1, a2 = (aws.provider.launch(offer, f"bc-a{i}", "camp-a") for i in range(2))
    b = aws.provider.launch(offer, "bc-b", "camp-b")
    assert sorted((n.node_id, n.token) for n in aws.provider.owned("camp-a")) == sorted(
        [(a1.node_id, "bc-a0"), (a2.node_id, "bc-a1")])
    assert {n.details["region"] for n in aws.provider.owned("camp-a")} == {"us-east-1"}
    aws.provider.terminate(a1)
    aws.provider.terminate(a1)
    aws.provider.terminate(Node(**{**a1.__dict__, "node_id": "i-0123456789abcdef0"}))
    assert [n.node_id for n in aws.provider.owned("camp-a")] == [a2.node_id]
    assert [n.node_id for n in aws.provider.owned("camp-b")] == [b.node_id]


def test_owned_finds_a_node_in_a_region_no_setting_names(aws: AWS) -> None:
    west = OfferRequest(gpu="", count=1, market="on-demand", instance_type="c5.large", region="us-west-2")
    offer = aws.provider.offers(west)[0]
    node = aws.provider.launch(offer, "bc-west", "camp-a")
    after_crash = AWSProvider(aws.root, AWSSettings(region="us-east-1"))  # a new controller, default region
    assert [(n.node_id, n.token, n.details["region"]) for n in after_crash.owned("camp-a")] == [
        (node.node_id, "bc-west", "us-west-2")]
    assert after_crash.status(after_crash.owned("camp-a")[0]) is NodeState.RUNNING
    after_crash.terminate(after_crash.owned("camp-a")[0])
    assert after_crash.owned("camp-a") == []


@pytest.mark.parametrize(("code", "wording"), [
    ("UnauthorizedOperation", "aws refused to launch an instance in us-east-1 (UnauthorizedOperation: no): check "
                              "the credentials (set AWS_ACCESS_KEY_ID"),
    ("VcpuLimitExceeded", "aws refused to launch an instance in us-east-1: an account quota is reached "
                          "(VcpuLimitExceeded: no); raise it in Service Quotas"),
    ("InsufficientInstanceCapacity", "aws has no capacity to launch an instance in us-east-1 now "
                                     "(InsufficientInstanceCapacity: no)"),
    ("InvalidParameterValue", "aws could not launch an instance in us-east-1 (InvalidParameterValue): no"),
])
def test_api_errors_say_what_to_do(code: str, wording: str) -> None:
    from botocore.exceptions import ClientError

    from benchctl.provisioners.aws.api import _client_error

    error = _client_error("launch an instance", "us-east-1",
                          ClientError({"Error": {"Code": code, "Message": "no"}}, "RunInstances"))
    assert wording in str(error) and error.code == code


@pytest.mark.parametrize(("request_kw", "problem"), [
    ({"region": "us_east_1"}, "cellA: aws has no region 'us_east_1' (e.g. us-east-1, us-west-2, eu-west-1); "
                              "fix `region`"),
    ({"region": "us-east-9"}, "cellA: aws has no region 'us-east-9'"),
    ({"instance_type": "p9.48xlarge"}, "cellA: "),
])
def test_cells_aws_cannot_serve_are_refused_offline(aws: AWS, request_kw: dict[str, str], problem: str) -> None:
    request = OfferRequest(**{"gpu": "", "count": 8, "market": "spot", "instance_type": "p5.48xlarge",
                              "label": "cellA", **request_kw})  # type: ignore[arg-type]
    with pytest.raises(ProviderError) as caught:
        aws.provider.validate(request)
    assert str(caught.value).startswith(problem), caught.value
    aws.provider.validate(OfferRequest(gpu="", count=8, market="spot", instance_type="p5.48xlarge",
                                       region="eu-west-1", label="ok"))


def test_a_malformed_region_is_a_provider_error_not_a_crash(aws: AWS) -> None:
    with pytest.raises(ProviderError, match=r"cannot make an EC2 client for region 'us_east_1'.*fix `region`"):
        aws.provider.ec2("us_east_1")


def test_the_transport_is_ssh_to_the_public_ip_as_the_configured_user(aws: AWS) -> None:
    node = aws.provider.launch(aws.provider.offers(_spot(aws))[0], "bc-ssh", "camp-a")
    endpoint = aws.provider.transport(node).endpoint
    assert (endpoint.host, endpoint.port, endpoint.user, endpoint.workdir) == ("127.0.0.1", 2222, "ubuntu", "benchctl")
    assert endpoint.python == "/opt/pytorch/bin/python", "the Deep Learning AMI keeps PyTorch there"
    assert endpoint.key == str(aws.root / "keys" / "camp-a")
    assert aws.provider.idle_shutdown_command(node) == "sudo shutdown -h now"


def test_images_that_cannot_be_found_are_clear_errors(aws: AWS, tmp_path: Path) -> None:
    offer = aws.provider.offers(_spot(aws))[0]
    configured = AWSProvider(tmp_path / "c", AWSSettings(ssh_cidr=CIDR, ami="ami-12345678"))
    with pytest.raises(ProviderError, match=r"could not read the configured AMI in us-east-1 \(InvalidAMIID"):
        configured.launch(offer, "bc-x", "camp-a")
    unmatched = AWSProvider(tmp_path / "n", AWSSettings(ssh_cidr=CIDR, ami_name="No Such AMI *"))
    with pytest.raises(ProviderError, match=r"found no AMI named 'No Such AMI \*' owned by amazon .* "
                                            r"set providers.aws.ami to"):
        unmatched.launch(offer, "bc-y", "camp-a")
    assert aws.fake.live() == []


def test_without_ssh_cidr_an_unreachable_ip_lookup_names_the_setting(aws: AWS, tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(aws_setup, "CHECKIP_URL", f"http://127.0.0.1:{_closed_port()}")
    provider = AWSProvider(tmp_path / "p", AWSSettings())
    with pytest.raises(ProviderError, match=r"set providers\.aws\.ssh_cidr"):
        provider.launch(provider.offers(_spot(aws))[0], "bc-z", "camp-a")
    assert aws.fake.live() == []


def test_an_unreachable_api_is_retried_then_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "a")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "b")
    monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{_closed_port()}")
    provider = AWSProvider(tmp_path, AWSSettings(), api_attempts=2, read_timeout_s=2)
    with pytest.raises(ProviderError, match=r"aws API unavailable in us-east-1 while trying to read spot prices "
                                            r"\(retried\): EndpointConnectionError"):
        provider.offers(_spot_request())


def test_missing_credentials_are_a_one_line_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
                 "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI",
                 "AWS_WEB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")  # no instance-role lookup over the network
    with pytest.raises(ProviderUnavailable) as caught:
        Providers(tmp_path).get("aws")
    assert str(caught.value) == ("aws: no credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
                                 "AWS_PROFILE, or add a profile to ~/.aws/credentials (`aws configure`)")


def _spot_request() -> OfferRequest:
    return OfferRequest(gpu="", count=1, market="spot", instance_type="c5.large")


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])

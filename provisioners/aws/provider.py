"""The ``aws`` provider: EC2 instances through boto3 (extra ``benchctl[aws]``).

- Offers: the cell's instance type from ``aws_instances`` (by name, or by gpu + count), in the
  cell's region (else ``providers.aws.region``), one offer per availability zone (its own
  ``offer_id``, so a zone refused for capacity is skipped while the cell tries the next one).
  On-demand: the zones ``describe_instance_type_offerings`` lists for the type, at the region's
  price from AWS's price list, read once per region and type (``aws.prices``; where that read
  fails, the table's us-east-1 list price, which ``details["price_source"]`` and ``plan_notes``
  say is not the region's). Spot: the zones with a ``describe_spot_price_history`` price
  (Linux/UNIX), at the latest one, cheapest first. A zone that refused a launch for capacity in
  the last ``SHORT_ZONE_S`` is listed last, so the next try goes to another zone whoever picks the
  offer. ``min_vcpus`` above
  the type's vCPUs: no offer.
- Launch: ``run_instances`` with ``ClientToken`` = the attempt token (a retried launch after a
  crash gets the same instance, not a second one), the AMI, the campaign's key pair, the SSH
  security group (``aws_setup``), tags ``benchctl:campaign`` / ``benchctl:token`` / ``Name``,
  ``InstanceInitiatedShutdownBehavior=terminate`` (a node that powers itself off stops billing),
  a gp3 root volume of ``disk_gb``, placed in the offer's zone, and for spot ``InstanceMarketOptions``
  (one-time, terminate on interruption). Billed price: the zone's spot price read right after
  the launch (the offer's if that read fails), or the offer's price on-demand.
- Launch errors: the request is sent once per try (botocore would re-send a capacity refusal, an
  HTTP 500, to the same zone); a throttled, 5xx or unreachable API is tried again with the same
  ``ClientToken`` up to ``api_attempts`` tries. No capacity in the zone (``aws_api.CAPACITY_CODES``)
  → ``NoCapacity``: the cell moves to the next zone's offer and backs off. A quota
  (``VcpuLimitExceeded``…) → a ``ProviderError`` naming the Service Quotas entry to raise (no zone
  or wait helps).
- Capacity reservations (a cell's ``capacity_reservation``): one offer, in the reservation's zone, at
  the price AWS bills for it; the launch targets it (a Capacity Block with its own market type) and
  makes no placement group (``aws.reservations``).
- Clusters (``launch_cluster``, cells with ``nodes`` > 1): one ``run_instances`` of MinCount =
  MaxCount = N (EC2 launches all or none) in a cluster placement group made for the attempt, with
  one EFA per network card on EFA types; members retagged with their token and node rank; the
  rendezvous is node 0's private IP. Placement groups and Elastic IPs: ``aws.cluster``.
- Status from ``describe_instances``: pending → starting; running → running; shutting-down,
  terminated, stopping or stopped → preempted when the state reason is a spot interruption
  (``Server.SpotInstanceTermination``, ``Server.SpotInstanceShutdown``), else terminated; no such
  instance → terminated, except in the first two minutes after launch (EC2's reads are
  eventually consistent: a new id can be unknown for a moment) → starting; anything else → unknown.
- Billing end (``ended_at``): EC2 stops billing an instance's usage once it is shutting down
  (docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-lifecycle.html: shutting-down and
  terminated "Not billed"); the time it began is in its ``StateTransitionReason``, "User initiated
  (2020-03-05 04:45:19 GMT)" for a terminate (a real one: github.com/lostsnow/devops-cli,
  aws/data/sample/ec2/describe-instances.md), "Service initiated (…)" for EC2's own, a spot reclaim.
  No such time (the field "might be an empty string", per the API), or EC2 no longer lists the
  instance (about an hour after its end): None, and the caller closes the attempt at its own now.
- SSH: ``ssh_user`` (default ``ubuntu``) at the public IP, port ``ssh_port``, the campaign key.
- Owned: instances tagged with the campaign in a live state (pending, running, stopping,
  stopped), in every region the account has enabled (a node launched just before a crash is found
  whatever region its cell named).
- Terminate: ``terminate_instances``; an instance that does not exist is success.
"""

from __future__ import annotations

import contextlib
import ipaddress
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator

from benchctl.provisioners.aws import cluster as aws_cluster
from benchctl.provisioners.aws import reservations
from benchctl.provisioners.aws import resources as aws_setup
from benchctl.provisioners.aws.api import AUTH_CODES, EC2, AWSError, AWSQuotaExceeded, AWSUnavailable, session
from benchctl.provisioners.aws.instances import INSTANCES, InstanceKind, UnknownInstance, resolve, vcpu_quota
from benchctl.provisioners.aws.prices import PRICING_REGION, OnDemandPrices
from benchctl.provisioners.base import (
    NoCapacity,
    Node,
    NodeGone,
    NodeState,
    Offer,
    OfferRequest,
    Provider,
    ProviderError,
    ProviderSettings,
    member_token,
)
from benchctl.provisioners.ssh_keys import campaign_key
from benchctl.provisioners.ssh_transport import SSHEndpoint, SSHTransport

CAMPAIGN_TAG = "benchctl:campaign"
TOKEN_TAG = "benchctl:token"
LIVE_STATES = ("pending", "running", "stopping", "stopped")
SPOT_REASONS = ("Server.SpotInstanceTermination", "Server.SpotInstanceShutdown")
ENDED_STATES = ("shutting-down", "terminated")
TRANSITION_TIME = re.compile(r"\((\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}) (?:GMT|UTC)\)")
"""The time in a ``StateTransitionReason`` such as "User initiated (2020-03-05 04:45:19 GMT)" (moto writes UTC)."""
UNKNOWN_GRACE_S = 120.0
SHORT_ZONE_S = 600.0
"""How long a zone that refused a launch for capacity is offered last (the next try goes elsewhere)."""


SECURITY_GROUP = "benchctl-ssh"
"""The security group our instances share: SSH in from ``ssh_cidr``."""


class AWSSettings(ProviderSettings):
    """The campaign's ``providers.aws``."""

    region: str = Field(default="us-east-1", min_length=1, description="for cells that name no region")
    ami: str | None = Field(default=None, description="an image id; default: the newest AMI matching ami_name")
    ami_name: str = Field(default="Deep Learning OSS Nvidia Driver AMI GPU PyTorch * (Ubuntu *) *", min_length=1)
    ami_owner: str = Field(default="amazon", min_length=1)
    ssh_user: str = Field(default="ubuntu", min_length=1)
    ssh_port: int = Field(default=22, ge=1, le=65535)
    ssh_cidr: str | None = Field(default=None, description="who may SSH in; default: this machine's public IP")
    disk_gb: int = Field(default=200, ge=8)
    python: str = Field(default="/opt/pytorch/bin/python", description="the instance's interpreter with PyTorch "
                        "(the Deep Learning AMI's; the campaign's `image` does not apply to aws)")
    workdir: str = Field(default="benchctl", min_length=1)

    @field_validator("ssh_cidr")
    @classmethod
    def _cidr(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                ipaddress.ip_network(value, strict=False)
            except ValueError:
                raise ValueError(f"{value!r} is not an address range; give one like 203.0.113.7/32") from None
        return value


class AWSProvider(Provider):
    name = "aws"
    multi_node_refusal = None  # N instances in a cluster placement group (launch_cluster)

    def __init__(self, root: Path, settings: AWSSettings | None = None, read_timeout_s: float = 30.0,
                 api_attempts: int = 5) -> None:
        self.session = session()
        self.root = root
        self.settings = settings or AWSSettings()
        self.read_timeout_s, self.api_attempts = read_timeout_s, api_attempts
        self._clients: dict[str, EC2] = {}
        self._lock = threading.Lock()
        self._endpoints: dict[str, SSHEndpoint] = {}
        self._short: dict[tuple[str, str, str], float] = {}
        """(region, instance type, zone) → until when that zone is listed last (it had no capacity)."""
        self.on_demand = OnDemandPrices(lambda: self.api(PRICING_REGION, "pricing"))

    def ec2(self, region: str) -> EC2:
        return self.api(region)

    def api(self, region: str, service: str = "ec2") -> EC2:
        key = region if service == "ec2" else f"{service}:{region}"
        with self._lock:  # a boto3 session is not thread-safe; the clients it makes are
            if key not in self._clients:
                self._clients[key] = EC2(self.session, region, self.read_timeout_s, self.api_attempts, service)
            return self._clients[key]

    def spot_prices(self, region: str, instance_type: str) -> dict[str, float]:
        """Availability zone → the latest Linux/UNIX spot price of ``instance_type`` there."""
        rows = self.ec2(region).call("read spot prices", "describe_spot_price_history", InstanceTypes=[instance_type],
                                     ProductDescriptions=["Linux/UNIX"], StartTime=datetime.now(timezone.utc))
        latest: dict[str, tuple[datetime, float]] = {}
        for row in rows.get("SpotPriceHistory") or []:
            zone, stamp = str(row["AvailabilityZone"]), row["Timestamp"]
            if zone not in latest or stamp > latest[zone][0]:
                latest[zone] = (stamp, float(row["SpotPrice"]))
        return {zone: price for zone, (_, price) in latest.items()}

    def zones(self, region: str, instance_type: str) -> list[str]:
        """The availability zones of ``region`` that offer ``instance_type``, by name."""
        rows = self.ec2(region).call("list the zones offering the instance type", "describe_instance_type_offerings",
                                     LocationType="availability-zone",
                                     Filters=[{"Name": "instance-type", "Values": [instance_type]}])
        return sorted({str(row["Location"]) for row in rows.get("InstanceTypeOfferings") or []})

    # -- Provider ---------------------------------------------------------------------------------
    def validate(self, request: OfferRequest) -> None:
        """Offline: the instance type is in the table and the region is one botocore knows."""
        try:
            resolve(request.instance_type, request.gpu or None, request.count)
        except UnknownInstance as exc:
            raise ProviderError(f"{request.label}: {exc}") from None
        region = request.region or self.settings.region
        known = {r for partition in self.session.get_available_partitions()
                 for r in self.session.get_available_regions("ec2", partition_name=partition)}
        if known and region not in known:
            raise ProviderError(f"{request.label}: aws has no region {region!r} (e.g. us-east-1, us-west-2, "
                                "eu-west-1); fix `region`")

    def offers(self, request: OfferRequest) -> list[Offer]:
        try:
            kind = resolve(request.instance_type, request.gpu or None, request.count)
        except UnknownInstance as exc:
            raise ProviderError(str(exc)) from None
        if request.min_vcpus and request.min_vcpus > kind.vcpus:
            return []
        region = request.region or self.settings.region
        if request.extra.get("capacity_reservation"):
            return self._reserved_offers(request, kind, region)
        source: dict[str, str] = {}
        if request.market == "spot":
            prices = list(self.spot_prices(region, kind.instance_type).items())
        else:
            zones = self.zones(region, kind.instance_type)
            on_demand = self.on_demand.get(region, kind) if zones else None
            prices = [(zone, on_demand.usd) for zone in zones if on_demand]
            source = {"price_source": on_demand.source} if on_demand else {}
        now = time.monotonic()
        prices.sort(key=lambda z: (self._short.get((region, kind.instance_type, z[0]), 0.0) > now, z[1], z[0]))
        return [Offer(provider=self.name, offer_id=f"{kind.instance_type}|{zone}", gpu=kind.gpu,
                      count=kind.count, vcpus=kind.vcpus, region=region, hourly_usd=price, market=request.market,
                      details={"instance_type": kind.instance_type, "zone": zone, **source}, fabric=kind.fabric)
                for zone, price in prices]

    def _reserved_offers(self, request: OfferRequest, kind: InstanceKind, region: str) -> list[Offer]:
        """The one offer of the cell's capacity reservation, when it can take the cell now (``aws.reservations``)."""
        ec2 = self.ec2(region)
        reservation = reservations.read(ec2, str(request.extra["capacity_reservation"]))
        if not reservations.usable(reservation, kind.instance_type, int(request.extra.get("nodes") or 1)):
            return []
        on_demand = self.on_demand.get(region, kind)  # AWS bills an On-Demand reservation at the region's rate
        price, source = reservations.price(ec2, reservation, on_demand.usd, on_demand.source)
        zone, rid = str(reservation["AvailabilityZone"]), str(reservation["CapacityReservationId"])
        return [Offer(provider=self.name, offer_id=f"{kind.instance_type}|{zone}|{rid}",
                      gpu=kind.gpu, count=kind.count, vcpus=kind.vcpus, region=region, hourly_usd=price,
                      market=request.market, details={
                          "instance_type": kind.instance_type, "zone": zone, "price_source": source,
                          "reservation": {k: str(reservation[k]) for k in ("CapacityReservationId", "AvailabilityZone",
                                          "ReservationType", "PlacementGroupArn") if reservation.get(k)}})]

    def launch(self, offer: Offer, token: str, campaign_tag: str) -> Node:
        ec2, params = self._params(offer, token, campaign_tag)
        (instance,) = self._launched(ec2, params, offer)
        return self._node(offer, instance, token, campaign_tag, self._billed(offer, instance))

    def launch_cluster(self, offer: Offer, nodes: int, token: str, campaign_tag: str) -> Node:
        """``nodes`` instances of the offer in one ``run_instances`` (MinCount = MaxCount = nodes: EC2
        launches all or none) in a cluster placement group, with EFA where the type has it and then
        an Elastic IP per member allocated before the launch (see ``aws.cluster``); member ``i`` is
        retagged with ``member_token(token, i)`` and its node rank, in EC2's launch order
        (``AmiLaunchIndex``). Any failure after the launch terminates them all."""
        ec2, params = self._params(offer, token, campaign_tag)
        group = aws_cluster.group_name(campaign_tag, token)
        tags = [*params["TagSpecifications"][0]["Tags"], {"Key": aws_cluster.GROUP_TAG, "Value": group}]
        params.update(MinCount=nodes, MaxCount=nodes, TagSpecifications=[{"ResourceType": "instance", "Tags": tags}])
        if not offer.details.get("reservation"):  # a reservation's instances are placed by it (aws.reservations)
            aws_cluster.create_group(ec2, group, [t for t in tags if t["Key"] != "Name"])
            params["Placement"] = {**params.get("Placement", {}), "GroupName": group}
        cards = INSTANCES[offer.details["instance_type"]].efa_interfaces
        try:
            aws_setup.within_group(ec2, params["SecurityGroupIds"][0])
            if cards:  # the interfaces carry the subnet and the group (EC2 takes them there, not beside)
                aws_cluster.reserve_addresses(ec2, [
                    [*_tags(campaign_tag, member_token(token, rank)), {"Key": aws_cluster.GROUP_TAG, "Value": group}]
                    for rank in range(nodes)], TOKEN_TAG, f"a cluster of {nodes} {params['InstanceType']}")
                subnet = aws_setup.default_subnet(ec2, str(offer.details["zone"]))
                params["NetworkInterfaces"] = aws_cluster.efa_interfaces(cards, subnet,
                                                                         params.pop("SecurityGroupIds")[0])
            instances = sorted(self._launched(ec2, params, offer), key=lambda i: int(i.get("AmiLaunchIndex") or 0))
        except BaseException:
            with contextlib.suppress(Exception):  # the launch's own failure is what the caller must see
                aws_cluster.release_addresses(ec2, aws_cluster.GROUP_TAG, group)
            with contextlib.suppress(Exception):
                aws_cluster.delete_group(ec2, group)
            raise
        members, price = [], offer.hourly_usd
        try:
            price = self._billed(offer, instances[0])
            for rank, instance in enumerate(instances):
                member = member_token(token, rank)
                ec2.call("tag a cluster member", "create_tags", Resources=[instance["InstanceId"]], Tags=[
                    {"Key": TOKEN_TAG, "Value": member}, {"Key": aws_cluster.RANK_TAG, "Value": str(rank)},
                    {"Key": "Name", "Value": f"{campaign_tag}--{member}"}])
                members.append(self._node(offer, instance, member, campaign_tag, price, {
                    "node_rank": rank, "placement_group": group, "efa_interfaces": cards,
                    "private_ip": str(instance.get("PrivateIpAddress") or "")}))
        except BaseException:
            for instance in instances:
                with contextlib.suppress(Exception):
                    self.terminate(self._node(offer, instance, token, campaign_tag, price, {"placement_group": group}))
            with contextlib.suppress(Exception):
                aws_cluster.release_addresses(ec2, aws_cluster.GROUP_TAG, group)
            raise
        return replace(members[0], peers=tuple(members[1:]))

    def _params(self, offer: Offer, token: str, campaign_tag: str) -> tuple[EC2, dict[str, Any]]:
        """The region's client and ``run_instances``' parameters for one instance of ``offer``."""
        s = self.settings
        ec2 = self.ec2(offer.region)
        _, public = campaign_key(self.root / "keys", campaign_tag)
        key_name = aws_setup.key_pair(ec2, campaign_tag, public)
        group_id = aws_setup.ssh_group(ec2, SECURITY_GROUP, s.ssh_port, s.ssh_cidr or aws_setup.caller_cidr())
        image_id, root_device = aws_setup.image(ec2, s.ami, s.ami_name, s.ami_owner)
        params: dict[str, Any] = {
            "ImageId": image_id, "InstanceType": offer.details["instance_type"], "MinCount": 1, "MaxCount": 1,
            "ClientToken": token, "KeyName": key_name, "SecurityGroupIds": [group_id],
            "InstanceInitiatedShutdownBehavior": "terminate",
            "TagSpecifications": [{"ResourceType": "instance", "Tags": _tags(campaign_tag, token)}],
            "BlockDeviceMappings": [{"DeviceName": root_device, "Ebs": {"VolumeSize": s.disk_gb, "VolumeType": "gp3",
                                                                         "DeleteOnTermination": True}}]}
        if offer.details.get("zone"):
            params["Placement"] = {"AvailabilityZone": offer.details["zone"]}
        if offer.details.get("reservation"):
            params.update(reservations.launch_params(offer.details["reservation"]))
        elif offer.market == "spot":
            params["InstanceMarketOptions"] = {"MarketType": "spot", "SpotOptions": {
                "SpotInstanceType": "one-time", "InstanceInterruptionBehavior": "terminate"}}
        return ec2, params

    def _launched(self, ec2: EC2, params: dict[str, Any], offer: Offer) -> list[dict[str, Any]]:
        """The instances ``run_instances`` started; a zone that had no capacity is offered last for a while."""
        try:
            return list(self._run_instances(ec2, params, offer.market)["Instances"])
        except NoCapacity:
            with self._lock:
                self._short[(offer.region, offer.details["instance_type"], str(offer.details.get("zone") or ""))] = (
                    time.monotonic() + SHORT_ZONE_S)
            raise

    def _billed(self, offer: Offer, instance: dict[str, Any]) -> float:
        """What one instance bills per hour: the zone's spot price read now (the offer's if that read fails)."""
        price = offer.hourly_usd
        if offer.market == "spot":
            with contextlib.suppress(ProviderError):  # the node runs: keep the offer's price, never lose the node
                prices = self.spot_prices(offer.region, offer.details["instance_type"])
                price = prices.get(_zone(offer, instance), price)
        return price

    def _node(self, offer: Offer, instance: dict[str, Any], token: str, campaign_tag: str, price: float,
              more: dict[str, Any] | None = None) -> Node:
        instance_id = str(instance["InstanceId"])
        return Node(provider=self.name, node_id=instance_id, token=token, campaign_tag=campaign_tag, offer=offer,
                    details={"instance_id": instance_id, "region": offer.region, "zone": _zone(offer, instance),
                             "launched_at": time.time(), **(more or {})},
                    hourly_usd=price, host=instance_id)

    def rendezvous_address(self, node: Node) -> str:
        """Node 0's private IP (the members share the placement group's subnet and security group)."""
        address = node.details.get("private_ip") or (self._instance(node) or {}).get("PrivateIpAddress")
        if not address:
            raise ProviderError(f"aws instance {node.node_id} has no private IP yet")
        return str(address)

    def _run_instances(self, ec2: EC2, params: dict[str, Any], market: str) -> dict[str, Any]:
        """``run_instances`` (see the module doc: launch errors)."""
        where = f"launch a {market} {params['InstanceType']} in {params.get('Placement', {}).get('AvailabilityZone')}"
        for attempt in range(1, self.api_attempts + 1):
            try:
                return ec2.call_once(where, "run_instances", **params)
            except AWSUnavailable:
                if attempt == self.api_attempts:
                    raise
                time.sleep(min(20.0, 2.0 ** (attempt - 1)))  # same ClientToken: never a second instance
            except AWSQuotaExceeded as exc:
                raise AWSQuotaExceeded(f"aws refused to {where} ({exc.code}): the account's quota "
                                       f"\"{vcpu_quota(params['InstanceType'], market)}\" in {ec2.region} is used "
                                       "up; raise it in Service Quotas (service ec2) or end other instances",
                                       exc.code) from None
        raise AssertionError("unreachable")

    def _instance(self, node: Node) -> dict[str, Any] | None:
        try:
            answer = self.ec2(_region(node, self.settings)).call("read an instance", "describe_instances",
                                                                 InstanceIds=[node.node_id])
        except NodeGone:
            return None
        found = [i for r in answer.get("Reservations") or [] for i in r.get("Instances") or []]
        return found[0] if found else None

    def status(self, node: Node) -> NodeState:
        instance = self._instance(node)
        if instance is None and time.time() - float(node.details.get("launched_at") or 0) < UNKNOWN_GRACE_S:
            return NodeState.STARTING
        return instance_state(instance)

    def ended_at(self, node: Node) -> float | None:
        """When EC2 stopped billing the instance (see the module doc: billing end); None where it does not say."""
        return billing_ended(self._instance(node))

    def transport(self, node: Node) -> SSHTransport:
        endpoint = self._endpoints.get(node.node_id)
        if endpoint is None:
            instance = self._instance(node) or {}
            address = instance.get("PublicIpAddress")
            if not address and node.details.get("efa_interfaces") and instance_state(instance) is NodeState.RUNNING:
                address = aws_cluster.public_address(self.ec2(_region(node, self.settings)), instance,
                                                     _tags(node.campaign_tag, node.token), TOKEN_TAG, node.token)
            if not address:
                raise ProviderError(f"aws instance {node.node_id} has no public IP yet")
            private, _ = campaign_key(self.root / "keys", node.campaign_tag)
            s = self.settings
            endpoint = SSHEndpoint(host=str(address), port=s.ssh_port, user=s.ssh_user, key=str(private),
                                   workdir=s.workdir, python=s.python)
            self._endpoints[node.node_id] = endpoint
        return SSHTransport(endpoint, self.root / "known_hosts" / node.node_id, node.token)

    def terminate(self, node: Node) -> None:
        """End the instance; a cluster member's Elastic IP is released, and its placement group deleted
        once no member is left in it (EC2 refuses while members shut down: ``owned`` sweeps it later)."""
        ec2 = self.ec2(_region(node, self.settings))
        with contextlib.suppress(NodeGone):
            ec2.call("terminate an instance", "terminate_instances", InstanceIds=[node.node_id])
        self._endpoints.pop(node.node_id, None)
        group = node.details.get("placement_group")
        if group:
            aws_cluster.release_addresses(ec2, TOKEN_TAG, node.token)
            aws_cluster.delete_group(ec2, str(group))

    def owned(self, campaign_tag: str) -> list[Node]:
        home = self.settings.region
        regions = [str(r["RegionName"]) for r in self.ec2(home).call("list regions", "describe_regions")["Regions"]]
        with ThreadPoolExecutor(max_workers=8) as pool:
            found = pool.map(lambda region: self._owned_in(region, campaign_tag, region == home), regions)
            return [node for nodes in found for node in nodes]

    def _owned_in(self, region: str, campaign_tag: str, home: bool) -> list[Node]:
        try:
            pages = self.ec2(region).pages("list instances", "describe_instances", Filters=[
                {"Name": f"tag:{CAMPAIGN_TAG}", "Values": [campaign_tag]},
                {"Name": "instance-state-name", "Values": list(LIVE_STATES)}])
        except AWSError as exc:
            if home or exc.code not in AUTH_CODES:
                raise
            return []  # a region these credentials may not use holds none of our nodes
        nodes, groups = [], set()
        for instance in (i for page in pages for r in page.get("Reservations") or [] for i in r.get("Instances") or []):
            tags = {t["Key"]: t["Value"] for t in instance.get("Tags") or []}
            group = tags.get(aws_cluster.GROUP_TAG)
            groups.add(group)
            cluster = {"placement_group": group, "node_rank": int(tags.get(aws_cluster.RANK_TAG) or 0)} if group else {}
            offer = Offer(provider=self.name, offer_id=str(instance.get("InstanceType") or ""), gpu="", count=0,
                          vcpus=0, region=region, hourly_usd=0.0, market=str(instance.get("InstanceLifecycle") or ""))
            nodes.append(Node(provider=self.name, node_id=str(instance["InstanceId"]), token=tags.get(TOKEN_TAG, ""),
                              campaign_tag=campaign_tag, offer=offer,
                              details={"instance_id": instance["InstanceId"], "region": region, **cluster}))
        try:
            aws_cluster.sweep(self.ec2(region), campaign_tag, CAMPAIGN_TAG, {g for g in groups if g})
        except AWSError as exc:
            if exc.code not in AUTH_CODES:
                raise  # credentials without the placement group / Elastic IP permissions made none to sweep
        return nodes

    def plan_notes(self) -> list[str]:
        """The on-demand prices that are the table's us-east-1 list price, not their region's."""
        return self.on_demand.fallbacks()

    def spot_notice(self, node: Node) -> bool:
        # EC2 posts spot/instance-action in the instance metadata ~2 minutes before it reclaims a spot node.
        return node.offer.market == "spot"

    def idle_shutdown_command(self, node: Node) -> str | None:
        # Launched with InstanceInitiatedShutdownBehavior=terminate: powering off ends the instance and its bill.
        return "sudo shutdown -h now"


def _tags(campaign_tag: str, token: str) -> list[dict[str, str]]:
    return [{"Key": CAMPAIGN_TAG, "Value": campaign_tag}, {"Key": TOKEN_TAG, "Value": token},
            {"Key": "Name", "Value": f"{campaign_tag}--{token}"}]


def _zone(offer: Offer, instance: dict[str, Any]) -> str:
    return str((instance.get("Placement") or {}).get("AvailabilityZone") or offer.details.get("zone") or "")


def _region(node: Node, settings: AWSSettings) -> str:
    return str(node.details.get("region") or node.offer.region or settings.region)


def instance_state(instance: dict[str, Any] | None) -> NodeState:
    """An instance's state (see the module doc; the grace after launch is the caller's)."""
    if instance is None:
        return NodeState.TERMINATED
    state = (instance.get("State") or {}).get("Name")
    if state == "pending":
        return NodeState.STARTING
    if state == "running":
        return NodeState.RUNNING
    if state in ("shutting-down", "terminated", "stopping", "stopped"):
        reason = str((instance.get("StateReason") or {}).get("Code") or "")
        return NodeState.PREEMPTED if reason in SPOT_REASONS else NodeState.TERMINATED
    return NodeState.UNKNOWN


def billing_ended(instance: dict[str, Any] | None) -> float | None:
    """Unix time at which a shutting-down or terminated instance stopped billing, from its
    ``StateTransitionReason``; None for a live instance, an unknown one, or a reason without a time."""
    if instance is None or (instance.get("State") or {}).get("Name") not in ENDED_STATES:
        return None
    found = TRANSITION_TIME.search(str(instance.get("StateTransitionReason") or ""))
    if found is None:
        return None
    return datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S").replace(tzinfo=timezone.utc).timestamp()

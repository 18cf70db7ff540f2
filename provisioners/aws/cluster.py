"""What an EC2 cluster (several instances rented as one unit) needs besides its instances: a
cluster placement group, EFA network interfaces, an Elastic IP per instance that has several
interfaces, and the sweep of what a cluster leaves behind.

- Placement group ``benchctl-<campaign tag>--<token>`` (strategy ``cluster``: one zone, close
  together, docs.aws.amazon.com/AWSEC2/latest/UserGuide/placement-strategies.html), created per
  attempt and tagged like the instances; "already exists" is success (a launch retried after a
  crash). It is deleted when the last member is terminated; EC2 refuses that while members are
  still shutting down (``InvalidPlacementGroup.InUse``), so ``sweep`` (run by ``owned``, hence by
  ``run``'s orphan sweep and ``down``) deletes the campaign's groups that no live instance uses,
  once older than ``SWEEP_GRACE_S`` (tag ``benchctl:created``): a group another cell just made for
  its launch is not yet used by any instance, and stays.
- EFA: on types with several network cards (``InstanceKind.efa_interfaces``: p5/p5e 32, p5en 16,
  p4d/p4de 4), one EFA per card: the primary interface (card 0, device 0) an EFA with ENA (it
  carries SSH and the rendezvous), every other card an EFA-only interface at device index 1, as
  AWS documents for multi-card types (docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html).
  The interfaces sit in the zone's default subnet with the SSH group, which also lets all traffic
  in and out between its own members (EFA requires it: .../UserGuide/efa-start.html).
- Public address: EC2 assigns no public IPv4 to an instance launched with several network
  interfaces ("The associatePublicIPAddress parameter cannot be specified when launching with
  multiple network interfaces", quoted in SkyPilot's sky/provision/aws/instance.py
  ``_create_instances``), so such a member gets an Elastic IP, tagged with its token and the
  cluster's placement group. They are allocated BEFORE the launch (``reserve_addresses``): the
  region's Elastic IP quota ("EC2-VPC Elastic IPs", code L-0263D0A3, 5 by default) is then met
  before any instance bills, not after the cluster booted. EC2 refuses an allocation past the quota
  with ``AddressLimitExceeded`` ("The maximum number of addresses has been reached.", HTTP 400, as
  seen in github.com/opstrace/opstrace/issues/273 and openshift/managed-notifications#15): every
  address of the attempt is released and one ``AWSQuotaExceeded`` line names the quota, the limit
  (``describe_account_attributes`` ``vpc-max-elastic-ips``) and what to do. An address is associated
  with its member's primary interface when the member is first reached (it is running then), and
  released when the member is terminated, all of the attempt's (tag ``GROUP_TAG``) when its launch
  fails, or by ``sweep`` when unassociated and past the grace.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from typing import Any

from benchctl.provisioners.aws.api import EC2, AWSError, AWSQuotaExceeded

GROUP_TAG = "benchctl:placement-group"
RANK_TAG = "benchctl:node-rank"
CREATED_TAG = "benchctl:created"
SWEEP_GRACE_S = 600.0
"""A placement group or Elastic IP younger than this is never swept (its launch may be under way)."""
ADDRESS_QUOTA = '"EC2-VPC Elastic IPs" (L-0263D0A3)'
"""The Service Quotas entry (service ec2, per region) that caps a region's Elastic IPs."""
GONE_CODES = frozenset({"InvalidPlacementGroup.Unknown", "InvalidAllocationID.NotFound",
                        "InvalidAssociationID.NotFound", "InvalidAddress.NotFound"})


def group_name(campaign_tag: str, token: str) -> str:
    return f"benchctl-{campaign_tag}--{token}"


def create_group(ec2: EC2, name: str, tags: list[dict[str, str]]) -> None:
    """A cluster placement group ``name`` exists after this call."""
    try:
        ec2.call("create the cluster's placement group", "create_placement_group", GroupName=name,
                 Strategy="cluster", TagSpecifications=[{"ResourceType": "placement-group", "Tags": _stamped(tags)}])
    except AWSError as exc:
        if exc.code != "InvalidPlacementGroup.Duplicate":
            raise


def delete_group(ec2: EC2, name: str) -> bool:
    """Delete the group; False when EC2 refuses because instances still use it (``sweep`` retries)."""
    try:
        ec2.call("delete the cluster's placement group", "delete_placement_group", GroupName=name)
    except AWSError as exc:
        if exc.code == "InvalidPlacementGroup.InUse":
            return False
        if exc.code not in GONE_CODES:
            raise
    return True


def efa_interfaces(cards: int, subnet_id: str, group_id: str) -> list[dict[str, Any]]:
    """One EFA per network card (see the module doc), for ``run_instances``' ``NetworkInterfaces``."""
    common = {"SubnetId": subnet_id, "Groups": [group_id], "DeleteOnTermination": True}
    primary = {"NetworkCardIndex": 0, "DeviceIndex": 0, "InterfaceType": "efa", **common}
    return [primary, *({"NetworkCardIndex": card, "DeviceIndex": 1, "InterfaceType": "efa-only", **common}
                       for card in range(1, cards))]


def public_address(ec2: EC2, instance: dict[str, Any], tags: list[dict[str, str]], token_tag: str,
                   token: str) -> str:
    """The Elastic IP of the member tagged ``token_tag`` = ``token`` (allocated with ``tags``), associated
    with the instance's primary interface if it is not yet."""
    found = _addresses(ec2, f"tag:{token_tag}", token)
    address = found[0] if found else ec2.call(
        "allocate an Elastic IP for a cluster member", "allocate_address", Domain="vpc",
        TagSpecifications=[{"ResourceType": "elastic-ip", "Tags": _stamped(tags)}])
    if not address.get("AssociationId"):
        primary = next(n for n in instance.get("NetworkInterfaces") or []
                       if (n.get("Attachment") or {}).get("DeviceIndex") == 0)
        ec2.call("associate an Elastic IP with a cluster member", "associate_address",
                 AllocationId=address["AllocationId"], NetworkInterfaceId=primary["NetworkInterfaceId"])
    return str(address["PublicIp"])


def reserve_addresses(ec2: EC2, members: list[list[dict[str, str]]], token_tag: str, what: str) -> None:
    """One Elastic IP per member (``members``: each member's tags, its token under ``token_tag``),
    allocated now unless the member has one already (a launch retried after a crash). Past the
    region's quota: every address allocated here is released and ``AWSQuotaExceeded`` says so in one
    line (``what``: the cluster, e.g. "a cluster of 8 p5.48xlarge")."""
    made: list[str] = []
    for tags in members:
        token = next(t["Value"] for t in tags if t["Key"] == token_tag)
        if _addresses(ec2, f"tag:{token_tag}", token):
            continue
        try:
            made.append(str(ec2.call("allocate an Elastic IP for a cluster member", "allocate_address", Domain="vpc",
                                     TagSpecifications=[{"ResourceType": "elastic-ip",
                                                         "Tags": _stamped(tags)}])["AllocationId"]))
        except AWSError as exc:
            for allocation in made:
                with _gone_ok():
                    ec2.call("release a member's Elastic IP", "release_address", AllocationId=allocation)
            if exc.code != "AddressLimitExceeded":
                raise
            raise AWSQuotaExceeded(
                f"aws: {what} needs {len(members)} Elastic IPs in {ec2.region} (one per node: EC2 gives no public IP "
                f"to an instance with several network cards) and the quota {ADDRESS_QUOTA} is reached "
                f"(AddressLimitExceeded{_limit(ec2)}): request an increase in Service Quotas or run fewer nodes; "
                "nothing was launched", exc.code) from None


def _limit(ec2: EC2) -> str:
    """The quota message's tail "; N allowed, M in use" ('' when the account's figures cannot be read)."""
    try:
        attributes = ec2.call("read the Elastic IP limit", "describe_account_attributes",
                              AttributeNames=["vpc-max-elastic-ips"]).get("AccountAttributes") or []
        limit = next(str(v["AttributeValue"]) for a in attributes if a.get("AttributeName") == "vpc-max-elastic-ips"
                     for v in a.get("AttributeValues") or [])
        used = len(ec2.call("count the region's Elastic IPs", "describe_addresses").get("Addresses") or [])
    except (AWSError, StopIteration, KeyError):
        return ""
    return f"; {limit} allowed, {used} in use"


def release_addresses(ec2: EC2, tag: str, value: str, swept: bool = False) -> None:
    """Release the Elastic IPs tagged ``tag`` = ``value`` (disassociated first); ``swept``: only
    those nothing holds that are past the grace."""
    for address in _addresses(ec2, f"tag:{tag}", value):
        if swept and (address.get("AssociationId") or _young(address)):
            continue
        if address.get("AssociationId"):
            with _gone_ok():
                ec2.call("disassociate a member's Elastic IP", "disassociate_address",
                         AssociationId=address["AssociationId"])
        with _gone_ok():
            ec2.call("release a member's Elastic IP", "release_address", AllocationId=address["AllocationId"])


def sweep(ec2: EC2, campaign_tag: str, tag: str, in_use: set[str]) -> None:
    """Delete the campaign's placement groups (``tag`` = campaign tag) that no live instance uses
    (``in_use``: their names), and release its Elastic IPs that nothing holds, past the grace."""
    groups = ec2.call("list the campaign's placement groups", "describe_placement_groups",
                      Filters=[{"Name": f"tag:{tag}", "Values": [campaign_tag]}]).get("PlacementGroups") or []
    for group in groups:
        if group.get("GroupName") not in in_use and group.get("State") not in ("deleting", "deleted") \
                and not _young(group):
            delete_group(ec2, str(group["GroupName"]))
    release_addresses(ec2, tag, campaign_tag, swept=True)


def _stamped(tags: list[dict[str, str]]) -> list[dict[str, str]]:
    return [*tags, {"Key": CREATED_TAG, "Value": str(int(time.time()))}]


def _young(resource: dict[str, Any]) -> bool:
    """Made less than ``SWEEP_GRACE_S`` ago (or with no readable stamp: left alone, never guessed old)."""
    stamp = next((t.get("Value") for t in resource.get("Tags") or [] if t.get("Key") == CREATED_TAG), None)
    try:
        return time.time() - float(stamp or "") < SWEEP_GRACE_S
    except ValueError:
        return True


def _addresses(ec2: EC2, name: str, value: str) -> list[dict[str, Any]]:
    return list(ec2.call("list Elastic IPs", "describe_addresses",
                         Filters=[{"Name": name, "Values": [value]}]).get("Addresses") or [])


@contextlib.contextmanager
def _gone_ok() -> Iterator[None]:
    try:
        yield
    except AWSError as exc:
        if exc.code not in GONE_CODES:
            raise

"""What an EC2 launch needs besides the instance: the campaign's key pair, an SSH security group,
an AMI.

- Key pair ``benchctl-<campaign tag>``: the campaign's public key, imported once per region
  ("already exists" is success).
- Security group (default ``benchctl-ssh``, in the default VPC; none is an error saying how to
  make one): created when missing; ingress
  tcp/<ssh port> from ``ssh_cidr``, else from the caller's public IP (/32) asked of
  ``checkip.amazonaws.com`` with a short timeout; a rule already present is success.
- A cluster's members (``within_group``): the group lets all traffic in and out between its own
  members (torch.distributed's rendezvous, NCCL; EFA requires it).
- Subnet (``default_subnet``): the default VPC's default subnet of a zone, where a cluster's EFA
  interfaces are made (an interface needs its subnet named).
- AMI: the configured id, else the newest available image whose name matches the pattern and
  whose owner is the configured one (default: Amazon's Deep Learning AMI with PyTorch on Ubuntu).
"""

from __future__ import annotations

import ipaddress
import urllib.request

from benchctl.provisioners.aws.api import EC2, AWSError
from benchctl.provisioners.base import ProviderError

CHECKIP_URL = "https://checkip.amazonaws.com"


def key_pair(ec2: EC2, campaign_tag: str, public_key: str) -> str:
    """The key pair's name, imported into ``ec2``'s region if it is not there yet."""
    name = f"benchctl-{campaign_tag}"
    try:
        ec2.call("import the campaign's SSH key", "import_key_pair", KeyName=name,
                 PublicKeyMaterial=public_key.encode())
    except AWSError as exc:
        if exc.code != "InvalidKeyPair.Duplicate":
            raise
    return name


def caller_cidr(url: str | None = None, timeout_s: float = 5.0) -> str:
    """This machine's public address as a /32 (/128), asked of ``url`` (default CHECKIP_URL)."""
    url = url or CHECKIP_URL
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as answer:
            address = ipaddress.ip_address(answer.read(64).decode().strip())
    except (OSError, ValueError) as exc:
        raise ProviderError(f"aws: could not find this machine's public IP at {url} to allow SSH from it ({exc}); "
                            "set providers.aws.ssh_cidr (e.g. 203.0.113.7/32)") from exc
    return f"{address}/{32 if address.version == 4 else 128}"


def ssh_group(ec2: EC2, name: str, port: int, cidr: str) -> str:
    """The group's id (in the region's default VPC, where instances launched without a subnet go);
    it allows tcp/``port`` from ``cidr`` after this call."""
    vpcs = ec2.call("find the default VPC", "describe_vpcs",
                    Filters=[{"Name": "is-default", "Values": ["true"]}])["Vpcs"]
    if not vpcs:
        raise ProviderError(f"aws: {ec2.region} has no default VPC for benchctl's instances; create one "
                            f"(`aws ec2 create-default-vpc --region {ec2.region}`)")
    vpc_id = str(vpcs[0]["VpcId"])
    found = ec2.call("find the SSH security group", "describe_security_groups",
                     Filters=[{"Name": "group-name", "Values": [name]}, {"Name": "vpc-id", "Values": [vpc_id]}],
                     )["SecurityGroups"]
    if found:
        group_id = str(found[0]["GroupId"])
    else:
        try:
            group_id = str(ec2.call("create the SSH security group", "create_security_group", GroupName=name,
                                    VpcId=vpc_id, Description="benchctl: SSH to benchmark nodes")["GroupId"])
        except AWSError as exc:
            if exc.code != "InvalidGroup.Duplicate":
                raise
            return ssh_group(ec2, name, port, cidr)  # another cell made it first
    v6 = ":" in cidr
    ranges = {"Ipv6Ranges": [{"CidrIpv6": cidr}]} if v6 else {"IpRanges": [{"CidrIp": cidr}]}
    try:
        ec2.call("allow SSH in the security group", "authorize_security_group_ingress", GroupId=group_id,
                 IpPermissions=[{"IpProtocol": "tcp", "FromPort": port, "ToPort": port, **ranges}])
    except AWSError as exc:
        if exc.code != "InvalidPermission.Duplicate":
            raise
    return group_id


def within_group(ec2: EC2, group_id: str) -> None:
    """After this call the group allows every protocol in and out between its members."""
    rule = [{"IpProtocol": "-1", "UserIdGroupPairs": [{"GroupId": group_id}]}]
    for direction in ("ingress", "egress"):
        try:
            ec2.call(f"allow traffic between cluster members ({direction})",
                     f"authorize_security_group_{direction}", GroupId=group_id, IpPermissions=rule)
        except AWSError as exc:
            if exc.code != "InvalidPermission.Duplicate":
                raise


def default_subnet(ec2: EC2, zone: str) -> str:
    """The id of the default subnet of ``zone`` (ProviderError saying how to make one when missing)."""
    found = ec2.call("find the zone's default subnet", "describe_subnets",
                     Filters=[{"Name": "default-for-az", "Values": ["true"]},
                              {"Name": "availability-zone", "Values": [zone]}])["Subnets"]
    if not found:
        raise ProviderError(f"aws: {zone} has no default subnet for a cluster's network interfaces; create one "
                            f"(`aws ec2 create-default-subnet --availability-zone {zone}`)")
    return str(found[0]["SubnetId"])


def image(ec2: EC2, ami: str | None, name_pattern: str, owner: str) -> tuple[str, str]:
    """(image id, root device name) of the configured AMI or the newest match of the pattern."""
    if ami:
        images = ec2.call("read the configured AMI", "describe_images", ImageIds=[ami])["Images"]
        where = f"AMI {ami} (providers.aws.ami)"
    else:
        images = ec2.call("look up the AMI", "describe_images", Owners=[owner],
                          Filters=[{"Name": "name", "Values": [name_pattern]},
                                   {"Name": "state", "Values": ["available"]}])["Images"]
        where = f"AMI named {name_pattern!r} owned by {owner} (providers.aws.ami_name / ami_owner)"
    if not images:
        raise ProviderError(f"aws: found no {where} in {ec2.region}; set providers.aws.ami to an image id of that "
                            "region")
    newest = max(images, key=lambda i: str(i.get("CreationDate") or ""))
    return str(newest["ImageId"]), str(newest.get("RootDeviceName") or "/dev/sda1")

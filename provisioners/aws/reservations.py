"""Capacity Reservations and Capacity Blocks for ML: a cell that names one (``capacity_reservation:
cr-…``) launches into it instead of the open on-demand pool (where a multi-node p5 in a cluster
placement group mostly meets ``InsufficientInstanceCapacity``).

- Read with ``describe_capacity_reservations``: an unknown id, a reservation of another instance
  type, or one that is over (expired, cancelled, failed…) is a ``ProviderError`` saying what to fix;
  a Capacity Block not started yet (``scheduled``) names its start. Active with fewer
  ``AvailableInstanceCount`` than the cell's nodes: no offer now (instances that just ended in it
  give their slots back after a few minutes, docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html).
- Launch (``launch_params``): ``CapacityReservationSpecification.CapacityReservationTarget`` with the
  id, placed in the reservation's zone; a Capacity Block (``ReservationType`` ``capacity-block``)
  also needs ``InstanceMarketOptions.MarketType`` ``capacity-block``: without it EC2 refuses with
  "The market type (purchasing) option is not valid" (SkyPilot sets it the same way,
  sky/provision/aws/instance.py; the requirement is in AWS's EKS and PCS Capacity Block guides).
- Placement: no placement group of ours. A Capacity Block's instances are placed together by AWS
  (API_CapacityBlock: "automatically placed close together inside Amazon EC2 UltraClusters"); an
  On-Demand Capacity Reservation made in a cluster placement group (``PlacementGroupArn``) launches
  into that group (AWS recommends reserving in the group: UserGuide/limitations-placement-groups.html);
  one made outside any group is used as it is.
- Price per instance-hour (what the attempt records and cost-to-train uses):
  - On-Demand Capacity Reservation: AWS bills the reservation at the on-demand rate whether it is
    used or not, and an instance running in it adds nothing
    (UserGuide/capacity-reservations-pricing-billing.html): the region's on-demand price
    (``aws.prices``, else the table's us-east-1 list price, as the source says).
  - Capacity Block: paid upfront at purchase, for the block's instances × hours. No API returns the
    fee of a purchased block (neither ``CapacityReservation`` nor ``CapacityBlock`` in botocore's
    EC2 model has a price), so the price is AWS's current quote for a block of the same type,
    count and duration: ``describe_capacity_block_offerings``' ``UpfrontFee`` /
    (``InstanceCount`` × ``CapacityBlockDurationHours``), the cheapest such offering. No quote: the
    region's on-demand price. ``details["price_source"]`` says which, so a reader can check it against
    the bill. The budget counts the block's hours as they are used, not the prepaid fee.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from benchctl.provisioners.aws.api import EC2, AWSError
from benchctl.provisioners.base import ProviderError

BLOCK = "capacity-block"
OVER = frozenset({"expired", "cancelled", "failed", "payment-failed", "unsupported", "cancelling", "unavailable"})


def read(ec2: EC2, reservation_id: str) -> dict[str, Any]:
    """The reservation as ``describe_capacity_reservations`` answers it (ProviderError when unknown)."""
    try:
        found = ec2.call("read the cell's capacity reservation", "describe_capacity_reservations",
                         CapacityReservationIds=[reservation_id]).get("CapacityReservations") or []
    except AWSError as exc:
        if not exc.code.startswith("InvalidCapacityReservationId"):
            raise
        found = []
    if not found:
        raise ProviderError(f"aws: no capacity reservation {reservation_id} in {ec2.region}: check the cell's "
                            "capacity_reservation and region (a reservation belongs to one region)")
    return dict(found[0])


def usable(reservation: dict[str, Any], instance_type: str, nodes: int) -> bool:
    """Whether ``nodes`` instances of ``instance_type`` can launch into it now (ProviderError when never)."""
    rid, state = reservation["CapacityReservationId"], str(reservation.get("State") or "")
    kind = str(reservation.get("InstanceType") or "")
    if kind != instance_type:
        raise ProviderError(f"aws: capacity reservation {rid} is for {kind}, not {instance_type}: set the cell's "
                            f"instance_type to {kind} or name another reservation")
    if state in OVER:
        raise ProviderError(f"aws: capacity reservation {rid} is {state}: name an active one")
    if state == "scheduled":
        raise ProviderError(f"aws: capacity reservation {rid} starts at {reservation.get('StartDate')}: run the "
                            "campaign once it is active")
    if int(reservation.get("TotalInstanceCount") or 0) < nodes:
        raise ProviderError(f"aws: capacity reservation {rid} holds {reservation.get('TotalInstanceCount')} "
                            f"instances, fewer than the cell's {nodes} nodes")
    return state == "active" and int(reservation.get("AvailableInstanceCount") or 0) >= nodes


def price(ec2: EC2, reservation: dict[str, Any], on_demand_usd: float, on_demand_source: str) -> tuple[float, str]:
    """(USD per instance-hour, where that figure comes from): see the module doc. ``on_demand_usd``: the
    region's on-demand price of the type (``aws.prices``; ``on_demand_source`` says where it is from)."""
    if reservation.get("ReservationType") != BLOCK:
        return on_demand_usd, ("on-demand rate (AWS bills a capacity reservation at it, used or not): "
                               f"{on_demand_source}")
    start, end = reservation.get("StartDate"), reservation.get("EndDate")
    hours = round((_utc(end) - _utc(start)).total_seconds() / 3600) if start and end else 0
    count = int(reservation.get("TotalInstanceCount") or 0)
    quotes = []
    if hours and count:
        try:
            offerings = ec2.call("quote a capacity block like the cell's", "describe_capacity_block_offerings",
                                 InstanceType=reservation["InstanceType"], InstanceCount=count,
                                 CapacityDurationHours=hours).get("CapacityBlockOfferings") or []
        except AWSError:
            offerings = []
        quotes = [float(o["UpfrontFee"]) / (int(o["InstanceCount"]) * int(o["CapacityBlockDurationHours"]))
                  for o in offerings if o.get("UpfrontFee") and o.get("InstanceCount")
                  and o.get("CapacityBlockDurationHours")]
    if not quotes:
        return on_demand_usd, f"on-demand price (AWS quotes no capacity block like this one now): {on_demand_source}"
    return min(quotes), (f"capacity block quote: upfront fee / ({count} instances × {hours} h) for a block like "
                         "this one now (a purchased block's fee is not readable through the API)")


def launch_params(reservation: dict[str, Any]) -> dict[str, Any]:
    """What ``run_instances`` needs to launch into the reservation (see the module doc)."""
    params: dict[str, Any] = {
        "CapacityReservationSpecification": {"CapacityReservationTarget": {
            "CapacityReservationId": reservation["CapacityReservationId"]}},
        "Placement": {"AvailabilityZone": reservation["AvailabilityZone"]}}
    group = str(reservation.get("PlacementGroupArn") or "")
    if group:
        params["Placement"]["GroupName"] = group.rsplit("/", 1)[-1]
    if reservation.get("ReservationType") == BLOCK:
        params["InstanceMarketOptions"] = {"MarketType": BLOCK}
    return params


def _utc(stamp: Any) -> datetime:
    value = stamp if isinstance(stamp, datetime) else datetime.fromisoformat(str(stamp))
    return value if value.tzinfo else value.replace(tzinfo=timezone.utc)

"""EC2 Capacity Reservations and Capacity Blocks for the moto fake (``aws_fake``): moto 5.2 serves
neither (no ``DescribeCapacityReservations`` in ``moto/ec2/responses``) and launches any
``InstanceMarketOptions`` as spot, so these are served here in the shapes of botocore's EC2 model
(``CapacityReservation``, ``CapacityBlockOffering``):

- ``DescribeCapacityReservations`` by ``CapacityReservationIds``; an unknown id →
  ``InvalidCapacityReservationId.NotFound`` (the code terraform-provider-aws's
  ``resourceAwsEc2CapacityReservationRead`` tests for on that call).
- ``DescribeCapacityBlockOfferings`` by ``InstanceType``, ``InstanceCount`` and
  ``CapacityDurationHours``: the offerings in ``offerings``.
- ``RunInstances`` with ``CapacityReservationSpecification.CapacityReservationTarget``:
  - a Capacity Block (``ReservationType`` ``capacity-block``) without ``InstanceMarketOptions.MarketType``
    ``capacity-block`` → ``InvalidParameterValue`` "The market type (purchasing) option is not valid."
    (the refusal quoted by users who launched into blocks without it, e.g. the EKS launch template
    notes and run-instances walkthroughs found on GitHub, 2026);
  - a reservation not active (a block before its start) → ``InsufficientInstanceCapacity``, HTTP 500
    (AWS's EC2 Fleet Capacity Block tutorial: a launch before the start date gets an insufficient
    capacity error);
  - fewer available instances than ``MinCount`` → ``ReservationCapacityExceeded`` (listed in
    docs.aws.amazon.com/AWSEC2/latest/APIReference/errors-overview.html; its message here is ours);
  - else moto launches, the reservation's ``AvailableInstanceCount`` drops by the count (and comes
    back when they are terminated), and block instances read ``InstanceLifecycle`` ``capacity-block``
    (botocore's ``InstanceLifecycleType``), not moto's ``spot``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

from tests.fakes.aws_placement import _error


@dataclass
class Reservations:
    reservations: dict[str, dict[str, Any]] = field(default_factory=dict)
    """id → the reservation as DescribeCapacityReservations answers it (``AvailableInstanceCount`` derived)."""
    offerings: list[dict[str, Any]] = field(default_factory=list)
    members: dict[str, list[Any]] = field(default_factory=dict)
    """id → moto's instances launched into it."""
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, rid: str, instance_type: str, zone: str, count: int, kind: str = "default",
            state: str = "active", start: str = "2026-11-23T11:30:00Z", end: str = "2026-11-25T11:30:00Z",
            group_arn: str | None = None) -> None:
        """A reservation of ``count`` × ``instance_type`` in ``zone`` (``kind``: default or capacity-block)."""
        row = {"CapacityReservationId": rid, "InstanceType": instance_type, "AvailabilityZone": zone,
               "InstancePlatform": "Linux/UNIX", "Tenancy": "default", "TotalInstanceCount": count,
               "State": state, "StartDate": start, "EndDate": end, "InstanceMatchCriteria": "targeted",
               "ReservationType": kind}
        if group_arn:
            row["PlacementGroupArn"] = group_arn
        with self.lock:
            self.reservations[rid] = row

    def available(self, rid: str) -> int:
        live = [i for i in self.members.get(rid, []) if i.state != "terminated"]
        return int(self.reservations[rid]["TotalInstanceCount"]) - len(live)


@contextmanager
def serving_reservations(state: Reservations) -> Iterator[Reservations]:
    """Patch moto's EC2 responses with capacity reservations (see the module doc) while it runs."""
    from moto.core.responses import ActionResult
    from moto.ec2.responses import EC2Response
    from moto.ec2.responses.instances import InstanceResponse

    def describe_capacity_reservations(response: Any) -> Any:
        ids = response._get_param("CapacityReservationIds", [])
        with state.lock:
            unknown = [rid for rid in ids if rid not in state.reservations]
            if unknown:
                return _error("InvalidCapacityReservationId.NotFound",
                              f"The capacity reservation ID '{unknown[0]}' does not exist")
            rows = [{**row, "AvailableInstanceCount": state.available(rid)}
                    for rid, row in state.reservations.items() if not ids or rid in ids]
        return ActionResult({"CapacityReservations": rows})

    def describe_capacity_block_offerings(response: Any) -> Any:
        wanted = {"InstanceType": response._get_param("InstanceType"),
                  "InstanceCount": response._get_int_param("InstanceCount"),
                  "CapacityBlockDurationHours": response._get_int_param("CapacityDurationHours")}
        found = [o for o in state.offerings if all(v is None or o[k] == v for k, v in wanted.items())]
        return ActionResult({"CapacityBlockOfferings": found})

    original_run = InstanceResponse.run_instances

    def run_instances(response: Any) -> Any:
        rid = response._get_param("CapacityReservationSpecification.CapacityReservationTarget.CapacityReservationId")
        market = response._get_param("InstanceMarketOptions.MarketType")
        if not rid:
            return original_run(response)
        count = response._get_int_param("MinCount") or 1
        with state.lock:
            row = state.reservations.get(rid)
            if row is None:
                return _error("InvalidCapacityReservationId.NotFound",
                              f"The capacity reservation ID '{rid}' does not exist")
            block = row["ReservationType"] == "capacity-block"
            if block != (market == "capacity-block"):
                return _error("InvalidParameterValue", "The market type (purchasing) option is not valid.")
            if row["State"] != "active":
                return _error("InsufficientInstanceCapacity", "There is no capacity in the reservation yet.", 500)
            if state.available(rid) < count:
                return _error("ReservationCapacityExceeded", f"The reservation {rid} has fewer than {count} "
                              "instances available.")
            answer = original_run(response)
            if isinstance(answer, ActionResult):
                for instance in answer.result.instances:
                    if block:
                        instance.lifecycle = "capacity-block"
                    state.members.setdefault(rid, []).append(instance)
            return answer

    with mock.patch.multiple(EC2Response, create=True, describe_capacity_reservations=describe_capacity_reservations,
                             describe_capacity_block_offerings=describe_capacity_block_offerings), \
            mock.patch.object(InstanceResponse, "run_instances", run_instances):
        yield state

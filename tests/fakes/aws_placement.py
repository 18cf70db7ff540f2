"""EC2 placement groups for the moto fake (``aws_fake``): moto 5.2 has none (no
``CreatePlacementGroup`` in ``moto/ec2/responses``), so these three calls are served here, in
the shapes of the EC2 API reference (docs.aws.amazon.com/AWSEC2/latest/APIReference/):

- ``CreatePlacementGroup`` (``GroupName``, ``Strategy``, ``TagSpecifications``): a name already
  used → ``InvalidPlacementGroup.Duplicate``;
- ``DescribePlacementGroups`` with ``tag:<key>`` filters (and ``GroupNames``);
- ``DeletePlacementGroup``: unknown → ``InvalidPlacementGroup.Unknown``; while an instance
  launched into it is not terminated → ``InvalidPlacementGroup.InUse`` (EC2 refuses to delete a
  group in use);
- ``RunInstances`` with ``Placement.GroupName`` that does not exist → ``InvalidPlacementGroup.Unknown``;
  the launched instances are remembered as the group's (``members``).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

ERROR_XML = ('<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error><Code>{code}</Code>'
             '<Message>{message}</Message></Error></Errors><RequestID>{request}</RequestID></Response>')


@dataclass
class PlacementGroups:
    groups: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    """(region, name) → the group as DescribePlacementGroups answers it."""
    members: dict[tuple[str, str], list[Any]] = field(default_factory=dict)
    """(region, name) → moto's instances launched into it."""
    deleted: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))

    def live_members(self, region: str, name: str) -> list[Any]:
        return [i for i in self.members.get((region, name), []) if i.state != "terminated"]


def _error(code: str, message: str, status: int = 400) -> tuple[str, dict[str, int]]:
    return ERROR_XML.format(code=code, message=message, request="11111111-2222-3333-4444-555555555555"), \
        {"status": status}


@contextmanager
def serving_placement_groups(state: PlacementGroups) -> Iterator[PlacementGroups]:
    """Patch moto's EC2 responses with placement groups (see the module doc) while it runs."""
    from moto.core.responses import ActionResult
    from moto.ec2.responses import EC2Response
    from moto.ec2.responses.instances import InstanceResponse

    def create_placement_group(response: Any) -> Any:
        name, region = str(response._get_param("GroupName")), response.region
        tags = [{"Key": k, "Value": v} for k, v in
                response._parse_tag_specification("placement-group").get("placement-group", {}).items()]
        with state.lock:
            if (region, name) in state.groups:
                return _error("InvalidPlacementGroup.Duplicate", f"The Placement Group '{name}' already exists.")
            group = {"GroupName": name, "State": "available", "Strategy": str(response._get_param("Strategy")),
                     "GroupId": f"pg-{next(state._ids):017x}", "Tags": tags}
            state.groups[(region, name)] = group
        return ActionResult({"PlacementGroup": group})

    def describe_placement_groups(response: Any) -> Any:
        filters = response._filters_from_querystring()
        names = set(response._get_param("GroupNames", []))
        with state.lock:
            found = [g for (region, name), g in state.groups.items()
                     if region == response.region and (not names or name in names)
                     and all(any(t["Key"] == key[4:] and t["Value"] in values for t in g["Tags"])
                             for key, values in filters.items() if key.startswith("tag:"))]
        return ActionResult({"PlacementGroups": found})

    def delete_placement_group(response: Any) -> Any:
        name, region = str(response._get_param("GroupName")), response.region
        with state.lock:
            if (region, name) not in state.groups:
                return _error("InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown.")
            if state.live_members(region, name):
                return _error("InvalidPlacementGroup.InUse", f"The placement group '{name}' is in use and may "
                              "not be deleted.")
            del state.groups[(region, name)]
            state.deleted.append(name)
        return ActionResult({})

    original_run = InstanceResponse.run_instances

    def run_instances(response: Any) -> Any:
        name = response._get_param("Placement.GroupName")
        if name and (response.region, name) not in state.groups:
            return _error("InvalidPlacementGroup.Unknown", f"The Placement Group '{name}' is unknown.")
        answer = original_run(response)
        if name and isinstance(answer, ActionResult):
            with state.lock:
                state.members.setdefault((response.region, name), []).extend(answer.result.instances)
        return answer

    with mock.patch.multiple(EC2Response, create=True, create_placement_group=create_placement_group,
                             describe_placement_groups=describe_placement_groups,
                             delete_placement_group=delete_placement_group), \
            mock.patch.object(InstanceResponse, "run_instances", run_instances):
        yield state

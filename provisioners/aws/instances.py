"""The EC2 instance types the ``aws`` provider rents, and how a cell names one.

A cell names an instance type (``instance_type: p5.48xlarge``), or a GPU and count that this table
maps to exactly one type (``gpu: H100_SXM, count: 8``); both may be given when they agree. A type
outside the table is refused with the list of known ones: benchctl needs its GPU, count and
on-demand price, and never guesses them. Plain data, no SDK: the campaign spec checks cells with it.

On-demand prices are Linux list prices in us-east-1 from the EC2 on-demand pricing page
(aws.amazon.com/ec2/pricing/on-demand), after AWS's June 2025 P4/P5 price cut, written down from
that page's figures as known in 2026 and NOT re-read from it (this project builds offline): check
them before trusting an on-demand ranking. Other regions
cost more or less; spot prices are read from the API at offer and launch time, not from here.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceKind:
    instance_type: str
    gpu: str
    """As the project names GPUs (``payload.node.gpu_models``: ``H100_SXM``, ``H200``), ``cpu`` for a CPU-only type."""
    count: int
    """GPUs on the instance (1 for a CPU-only type: one payload process)."""
    vcpus: int
    on_demand_usd: float
    """us-east-1 Linux list price per hour (see the module doc)."""
    efa_interfaces: int = 0
    """EFA interfaces a cluster member gets, one per network card (0: no EFA). AWS's maximum per
    type (``describe-instance-types``' ``EfaInfo.MaximumEfaInterfaces``): 32 on p5/p5e (32 network
    cards, docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html), 16 on p5en, 4 on
    p4d/p4de (4 network cards)."""

    @property
    def fabric(self) -> str:
        """What the type sells between nodes, in ``payload.node.fabric_checks.FabricExpect.parse``'s words:
        its EFA devices (the fabric preflight expects them all), or ``none``."""
        return f"efa {self.efa_interfaces}" if self.efa_interfaces else "none"


INSTANCES = {k.instance_type: k for k in (
    InstanceKind("p5.48xlarge", "H100_SXM", 8, 192, 55.04, efa_interfaces=32),
    InstanceKind("p5e.48xlarge", "H200", 8, 192, 61.05, efa_interfaces=32),
    InstanceKind("p5en.48xlarge", "H200", 8, 192, 63.30, efa_interfaces=16),
    InstanceKind("p4d.24xlarge", "A100_SXM", 8, 96, 21.96, efa_interfaces=4),
    InstanceKind("p4de.24xlarge", "A100_SXM", 8, 96, 27.45, efa_interfaces=4),
    # CPU-only types: a cheap smoke test of the AWS path (launch, SSH, payload on CPU, spot, resume).
    InstanceKind("c5.large", "cpu", 1, 2, 0.085),
    InstanceKind("c5.xlarge", "cpu", 1, 4, 0.17),
)}


class UnknownInstance(ValueError):
    """A cell names an instance type, or a GPU and count, that the table does not hold."""


def resolve(instance_type: str | None, gpu: str | None, count: int | None) -> InstanceKind:
    """The table entry a cell names (see the module doc); UnknownInstance says what to write instead."""
    known = ", ".join(sorted(INSTANCES))
    if instance_type is not None:
        kind = INSTANCES.get(instance_type)
        if kind is None:
            raise UnknownInstance(f"aws instance type {instance_type!r} is not in benchctl's table (known: {known}); "
                                  "use one of them")
        if (gpu is not None and gpu != kind.gpu) or (count is not None and count != kind.count):
            raise UnknownInstance(f"{instance_type} has {kind.count}× {kind.gpu}, not {count or kind.count}× "
                                  f"{gpu or kind.gpu}; fix gpu/count or drop them")
        return kind
    matches = [k for k in INSTANCES.values() if k.gpu == gpu and k.count == count]
    if not matches:
        raise UnknownInstance(f"no aws instance type has {count}× {gpu} (known types: {known}); "
                              "set instance_type or another gpu/count")
    if len(matches) > 1:
        names = ", ".join(k.instance_type for k in matches)
        raise UnknownInstance(f"{count}× {gpu} is more than one aws instance type ({names}); set instance_type")
    return matches[0]


QUOTA_CLASSES = {"p": "P", "g": "G and VT", "vt": "G and VT", "f": "F", "inf": "Inf", "trn": "Trn", "dl": "DL",
                 "x": "X"}
"""Instance family prefix → the vCPU quota class EC2 counts it in (any other family: Standard)."""


def vcpu_quota(instance_type: str, market: str) -> str:
    """The Service Quotas name (service ``ec2``, per region) whose vCPU limit a launch of
    ``instance_type`` counts against, e.g. "Running On-Demand P instances" or "All P Spot Instance
    Requests" (names as the Service Quotas console and ``get-service-quota`` show them)."""
    family = instance_type.split(".", 1)[0]
    prefix = next((p for p in sorted(QUOTA_CLASSES, key=len, reverse=True) if family.startswith(p)), "")
    name = QUOTA_CLASSES.get(prefix, "Standard (A, C, D, H, I, M, R, T, Z)")
    return f"All {name} Spot Instance Requests" if market == "spot" else f"Running On-Demand {name} instances"

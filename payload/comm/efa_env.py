"""The environment NCCL needs on an AWS EFA node, set by the payload itself (stdlib only).

On a Deep Learning AMI, NCCL reaches EFA through the aws-ofi-nccl plugin, which it finds on
``LD_LIBRARY_PATH`` together with libfabric. The AMI arranges that for interactive login shells;
the controller starts the payload with a plain SSH command, which is not a login shell and reads no
``/etc/profile.d``. Without the paths NCCL silently falls back to its socket transport on an EFA
instance (NVIDIA-NeMo/RL pull request 2359, "add AWS EFA/OFI library paths to LD_LIBRARY_PATH":
the plugin was not found and p5en/p4d ran on sockets). So, when the job's fabric is EFA
(``job.fabric`` ``efa N``), the runner adds to its own environment, which every rank, probe and
command it starts inherits (``efa_environment``; the one place):

- ``FI_PROVIDER=efa``, unless the node or the cell set it: aws-ofi-nccl takes the libfabric provider
  it names (github.com/aws/aws-ofi-nccl wiki, "Environment Variables"), so NCCL cannot end up on
  libfabric's TCP provider; AWS's own multi-node runs on the DLAMI pass the EFA environment to every
  rank with mpirun's full path (docs.aws.amazon.com/dlami/latest/devguide/tutorial-efa-using.html);
- ``LD_LIBRARY_PATH`` led by those of ``EFA_LIBRARY_DIRS`` that exist on the node and are not on it
  yet: aws-ofi-nccl where the EFA installer and today's DLAMIs put it (``/opt/amazon/ofi-nccl/lib``),
  where other builds do (``/opt/amazon/aws-ofi-nccl/lib``, ``/opt/aws-ofi-nccl/lib``; aws-ofi-nccl's
  README builds with ``--prefix`` of one's choice), then libfabric's (``/opt/amazon/efa/lib``,
  ``lib64``). A cell's own ``env`` still overrides all of it (the ranks get ``job.env`` last).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

EFA_LIBRARY_DIRS = ("/opt/amazon/ofi-nccl/lib", "/opt/amazon/aws-ofi-nccl/lib", "/opt/aws-ofi-nccl/lib",
                    "/opt/amazon/efa/lib", "/opt/amazon/efa/lib64")


def efa_fabric(fabric: str | None) -> bool:
    """``fabric`` (``job.fabric``'s words) sells EFA."""
    return bool(fabric) and str(fabric).split()[0].lower() == "efa"


def efa_environment(fabric: str | None, env: Mapping[str, str],
                    exists: Callable[[str], bool] = os.path.isdir) -> dict[str, str]:
    """What to set in ``env`` (the node's) for EFA (see the module doc); {} on another fabric."""
    if not efa_fabric(fabric):
        return {}
    added: dict[str, str] = {}
    if not env.get("FI_PROVIDER"):
        added["FI_PROVIDER"] = "efa"
    present = [p for p in env.get("LD_LIBRARY_PATH", "").split(":") if p]
    lead = [d for d in EFA_LIBRARY_DIRS if d not in present and exists(d)]
    if lead:
        added["LD_LIBRARY_PATH"] = ":".join([*lead, *present])
    return added

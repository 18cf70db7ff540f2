"""The idle shutdown of a node that can destroy itself (Vast.ai, RunPod): the payload's
``python -m payload self-destroy`` (``payload/self_destroy.py``), with the node's id and the API's
address from here and the key from the container's own environment on the node, at that moment.

The command names no key: it sits in ``job.json``, and the controller's key never goes to a node.
"""

from __future__ import annotations

import shlex

CONTAINER_ENVIRON = "/proc/1/environ"
"""Where the node reads its container's environment: PID 1's, which an SSH session lacks."""


def self_destroy_command(python: str, provider: str, node_id: str, api: str,
                         environ: str = CONTAINER_ENVIRON) -> str:
    """The shell command, run in the attempt's directory (where ``payload/`` is) by ``python``."""
    words = ["-m", "payload", "self-destroy", provider, node_id, "--api", api, "--environ", environ]
    return " ".join([python, *(shlex.quote(w) for w in words)])

"""The idle shutdown of a node that can destroy itself (Vast.ai, RunPod): the payload's
``python -m payload self-destroy`` (``payload/self_destroy.py``), with the node's id and the API's
address from here and the key from the container's own environment on the node, at that moment.

The command names no key: it sits in ``job.json``, and the controller's key never goes to a node.
Its ``python`` runs with the container's PATH (``container_env``), as the payload's does.
"""

from __future__ import annotations

import shlex

from benchctl.provisioners.container_env import CONTAINER_ENVIRON, container_python


def self_destroy_command(python: str, provider: str, node_id: str, api: str,
                         environ: str = CONTAINER_ENVIRON) -> str:
    """The shell command, run in the attempt's directory (where ``payload/`` is) by ``python``."""
    words = ["-m", "payload", "self-destroy", provider, node_id, "--api", api, "--environ", environ]
    return " ".join([container_python(python, environ), *(shlex.quote(w) for w in words)])

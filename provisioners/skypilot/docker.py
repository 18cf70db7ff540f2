"""SSH into the container of a SkyPilot cluster launched with ``image_id: docker:<image>``.

On a VM cloud SkyPilot runs the image as a container on each VM, sharing the VM's network
(``--net=host``), with its own sshd on port ``DOCKER_SSH_PORT`` that authorizes the VM's keys
(sky/provision/docker_utils.py ``initialize``, SkyPilot 0.14.1). The handle's IPs, ports and
``ssh_user`` are the VM's; the container's user is the handle's ``docker_user``. SkyPilot's own
ssh config reaches the container as ``docker_user`` at localhost:``DOCKER_SSH_PORT`` with a
ProxyCommand ``ssh … -W %h:%p <ssh_user>@<VM ip>`` (sky/utils/cluster_utils.py
``SSHConfigHelper.add_cluster``); ``write_config`` writes the same for one node, with our own
key and host-key pinning for the hop to the VM.

The image's environment (``PATH`` to its Python, CUDA variables) is written to
/etc/profile.d/container_env_var.sh (docker_utils ``SETUP_ENV_VARS_CMD``), which only a login
shell reads; SkyPilot runs its own commands through ``/bin/bash --login -c``
(sky/utils/command_runner.py). ``login_python`` starts the payload's interpreter the same way.
"""

from __future__ import annotations

import shlex
from pathlib import Path

DOCKER_SSH_PORT = 10022
"""The container's sshd port on its VM (sky/skylet/constants.py ``DEFAULT_DOCKER_PORT``)."""
ALIAS = "container"
"""The host alias in a node's config file (one file per node)."""


def write_config(path: Path, vm_host: str, vm_port: int, vm_user: str, docker_user: str, key: Path,
                 vm_known_hosts: Path, docker_port: int = DOCKER_SSH_PORT) -> None:
    """An ssh config at ``path`` defining ``ALIAS``: the container, through the VM at ``vm_user@vm_host:vm_port``."""
    hop = ["ssh", "-i", str(key), "-p", str(vm_port), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
           "-o", "StrictHostKeyChecking=accept-new", "-o", f"UserKnownHostsFile={vm_known_hosts}",
           "-o", "GlobalKnownHostsFile=/dev/null", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=15",
           "-o", "LogLevel=ERROR", "-W", "%h:%p", f"{vm_user}@{vm_host}"]
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    path.write_text(f"Host {ALIAS}\n  HostName localhost\n  Port {docker_port}\n  User {docker_user}\n"
                    f"  ProxyCommand {shlex.join(hop)}\n")


EXEC_ARGS = shlex.quote('exec "$0" "$@"')
"""``bash -c`` runs its first argument as ``$0``, the rest as ``$@``."""


def login_python(python: str) -> str:
    """``python`` run from a login shell, so that it sees the image's environment."""
    return f"/bin/bash --login -c {EXEC_ARGS} {python}"

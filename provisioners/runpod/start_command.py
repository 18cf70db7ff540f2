"""The pod's start command: it puts the campaign's key in the container's ``authorized_keys``, then
hands over to the image's own start.

Why not the environment alone: RunPod documents ``SSH_PUBLIC_KEY`` as overriding the account's keys
"for authentication when connecting using the basic terminal method" (its proxied ssh.runpod.io;
docs.runpod.io/pods/configuration/override-public-keys), not for the container's own sshd, and the
``/start.sh`` of RunPod's images (runpod/containers, container-template/start.sh, ``setup_ssh``)
authorizes ``$PUBLIC_KEY`` only, which RunPod fills from the account's keys, and starts sshd only
when that is set. So, as SkyPilot (sky/provision/runpod/utils.py, ``launch``) and dstack
(core/backends/runpod/compute.py, ``_get_docker_args``) do, the key goes in through the pod's start
command: GraphQL's ``dockerArgs`` (the runpod SDK's ``generate_pod_deployment_mutation``; REST v1
calls it ``dockerStartCmd``, REST v2 ``args``), which replaces the image's CMD. Its form is RunPod's
documented one: the default is ``bash -c '/start.sh'`` (docs.runpod.io/pods/templates/overview,
"Customizing Container Start Command").

``docker_args`` is ``bash -c 'echo <base64> | base64 -d > FILE; exec bash FILE'``, as SkyPilot does:
the script travels base64-encoded, so nothing in it is read by RunPod's or the container's shell
before it runs, and the key in it is a single-quoted shell word. The script (``start_script``):

1. appends the key to ``~/.ssh/authorized_keys`` unless it is there (``~/.ssh`` 0700, the file
   0600: what sshd's StrictModes accepts);
2. sets ``PUBLIC_KEY`` to the key when RunPod left it empty (``/start.sh`` starts sshd only then);
3. execs ``/start.sh`` where the image has one (RunPod's images: it starts sshd and keeps the
   container alive);
4. else installs openssh-server with apt-get where the image has no sshd (the command RunPod's docs
   give custom templates, docs.runpod.io/pods/configuration/use-ssh), makes the missing host keys
   and ``/run/sshd``, starts sshd and sleeps.

Only the public key goes in; nothing here takes a secret.
"""

from __future__ import annotations

import base64
import re
import shlex

SCRIPT_PATH = "/tmp/benchctl-start.sh"
"""Where the container writes the decoded script before running it."""

_KEY = re.compile(r"(?:ssh|ecdsa|sk)-[a-z0-9.@-]+ [A-Za-z0-9+/]+=*(?: [^\x00-\x1f\x7f]*)?")
"""An OpenSSH public key line (type, base64 blob, optional comment) without control characters."""


def key_line(public_key: str) -> str:
    """``public_key`` as one ``authorized_keys`` line: its whitespace (a newline in the comment
    included) collapsed to single spaces, so it cannot add a line of its own. ValueError when it is
    not an OpenSSH public key."""
    line = " ".join(public_key.split())
    if not _KEY.fullmatch(line):
        raise ValueError(f"not an OpenSSH public key line: {public_key[:40]!r}")
    return line


def start_script(public_key: str) -> str:
    """The shell script the pod runs first (see the module doc)."""
    key = shlex.quote(key_line(public_key))
    return f"""\
key={key}
(
    umask 077
    mkdir -p ~/.ssh && chmod 700 ~/.ssh
    touch ~/.ssh/authorized_keys
    grep -qxF -e "$key" ~/.ssh/authorized_keys || printf '\\n%s\\n' "$key" >> ~/.ssh/authorized_keys
    chmod 600 ~/.ssh/authorized_keys
)
export PUBLIC_KEY="${{PUBLIC_KEY:-$key}}"
if [ -x /start.sh ]; then
    exec /start.sh
fi
sshd=$(command -v sshd || echo /usr/sbin/sshd)
if [ ! -x "$sshd" ] && command -v apt-get >/dev/null 2>&1; then
    apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y openssh-server
    sshd=$(command -v sshd || echo /usr/sbin/sshd)
fi
if [ -x "$sshd" ]; then
    mkdir -p /run/sshd
    ssh-keygen -A
    "$sshd"
else
    echo "benchctl: this image has no sshd and no apt-get to install it: benchctl cannot reach it" >&2
fi
exec sleep infinity
"""


def docker_args(public_key: str) -> str:
    """The pod's ``dockerArgs``: ``start_script`` base64-encoded in RunPod's ``bash -c '...'`` form."""
    encoded = base64.b64encode(start_script(public_key).encode()).decode()
    return f"bash -c 'echo {encoded} | base64 -d > {SCRIPT_PATH}; exec bash {SCRIPT_PATH}'"

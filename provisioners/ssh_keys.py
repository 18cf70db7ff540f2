"""The campaign's SSH key pair, handed to rented nodes at launch.

One ed25519 pair per campaign tag under ``<root>/<tag>`` (private key mode 0600, made with
``ssh-keygen``); the public half goes to the provider (RunPod: the pod's start command; a Vast.ai
instance's ssh key), the private half never leaves this machine.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
from pathlib import Path

from benchctl.provisioners.base import ProviderError


def campaign_key(root: Path, campaign_tag: str) -> tuple[Path, str]:
    """(private key path, public key line) of the campaign, made on first use."""
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    private = root / campaign_tag
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two cells (threads or controllers) launching at once make one key
        if not private.exists() or not Path(f"{private}.pub").exists():
            private.unlink(missing_ok=True)
            try:
                subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", campaign_tag, "-f",
                                str(private)], check=True, capture_output=True, timeout=30)
            except (OSError, subprocess.CalledProcessError) as exc:
                raise ProviderError(f"could not make the campaign's SSH key with ssh-keygen: {exc}; install the "
                                    "OpenSSH client") from exc
    os.chmod(private, 0o600)
    return private, Path(f"{private}.pub").read_text().strip()

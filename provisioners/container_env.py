"""What a command started over SSH in a rented container lacks: the container's own environment.

Vast.ai and RunPod run an image as a container and give SSH into it. sshd starts every session
with its own default ``PATH`` (``/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin``),
not the image's ``ENV PATH``, and what the providers add for logins (Vast's ``.bashrc``,
RunPod's ``/etc/rp_environment``) is read by interactive shells only. An image whose Python is
elsewhere then has no ``python3`` in the non-interactive session the payload starts in:
pytorch/pytorch's images (Vast's default here) keep it in ``/opt/conda/bin``. Others met it on
these clouds: OneTrainer's vast.ai support (Nerogar/OneTrainer#807: "on vast.ai, python is
missing" from PATH, CUDA on RunPod), dstack#763 (Vast's ``.bashrc`` overrides PATH).

The container's PID 1 was started with the image's environment (``/proc/1/environ``, readable by
root in the container). ``container_python`` runs the interpreter with that ``PATH`` ahead of the
session's; where the file cannot be read, or holds no PATH, the session's PATH is left as it is
(never an empty element, which would search the current directory). The value is read as data:
what it holds is never run by the shell.
"""

from __future__ import annotations

import shlex

CONTAINER_ENVIRON = "/proc/1/environ"
"""Where the node reads its container's environment: PID 1's, which an SSH session lacks."""


def container_path(environ: str = CONTAINER_ENVIRON) -> str:
    """A shell word: the container's PATH and a ``:`` when it has one, else nothing (see the module doc)."""
    read = (f"tr '\\000' '\\n' < {shlex.quote(environ)} 2>/dev/null | sed -n 's/^PATH=\\(..*\\)$/\\1:/p' "
            "| head -n 1")
    return f'"$({read})"'


def container_python(python: str, environ: str = CONTAINER_ENVIRON) -> str:
    """``python`` (the provider's setting, a shell command) run with the container's PATH first."""
    return f'PATH={container_path(environ)}"$PATH" {python}'

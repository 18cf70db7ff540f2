"""A RunPod pod's container, as far as SSH goes: its start command runs in real bash, and what it
leaves in root's ``~/.ssh/authorized_keys`` counts only if sshd was started.

The container's ``/`` is a directory of the test's (``root``), and nothing runs on this machine's own
paths: bash is a wrapper that takes every absolute path in the script it runs (a word starting with
``/``, ``/dev/`` aside) under ``root``; ``PATH`` holds the container's ``/usr/bin`` and ``/usr/sbin``
only, with a few of this machine's tools (``TOOLS``) and stand-ins for what would act on the machine
(``sshd``, ``ssh-keygen``, ``service``, ``apt-get``, ``sleep``: they record, and ``sleep`` returns).
The stand-in sshd starts only as the real one does: with ``/run/sshd`` (its privilege separation
directory) and a host key, else it fails.

Images (sources in tests/fakes/README.md, RunPod, "Keys"):
- RunPod's own (a name starting ``runpod/``): ``CMD ["/start.sh"]``, openssh-server, and a
  ``/start.sh`` that does what the SSH part of RunPod's does (``setup_ssh``): when ``PUBLIC_KEY`` is
  set, it appends it to ``~/.ssh/authorized_keys``, makes ``~/.ssh`` 0700, makes host keys and starts
  sshd (``service ssh start``); then it sleeps. Nothing in it reads ``SSH_PUBLIC_KEY``.
- any other image: openssh-server and apt-get, no ``/start.sh``, and a CMD that does nothing for
  SSH; ``no_sshd`` takes openssh-server out (apt-get installs it), ``no_apt`` apt-get.
``dockerArgs``, when set, replaces the image's CMD: split into words as a shell does (RunPod's
documented form is ``bash -c '...'``) and run.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

TOOLS = ("base64", "cat", "chmod", "env", "grep", "head", "id", "mkdir", "rm", "tail", "touch", "tr")
"""This machine's tools the container has (they act only on the paths they are given)."""
ABSOLUTE = re.compile(r"(?:^|(?<=[\s'\"=<>|;&(:]))/(?!dev/)", re.M)
"""Where an absolute path starts in a script (base64 text starts with no ``/`` here: the scripts run
begin with a letter)."""


@dataclass(frozen=True)
class Booted:
    keys: list[str]
    """The lines of root's authorized_keys that the running sshd accepts (none when it is not running)."""
    sshd: bool
    log: str
    """The container's output (stdout and stderr) and the stand-ins' records."""


def boot(root: Path, image: str, docker_args: str | None, env: dict[str, str], no_sshd: bool = False,
         no_apt: bool = False) -> Booted:
    """Make the container under ``root`` and run its start command to the end (``sleep`` returns)."""
    runpod_image = image.startswith("runpod/")
    _make_root(root, sshd=not no_sshd, apt=not no_apt, start_sh=runpod_image)
    argv = shlex.split(docker_args) if docker_args else (["/start.sh"] if runpod_image else ["sleep", "infinity"])
    path = ":".join(str(root / d) for d in ("usr/local/sbin", "usr/local/bin", "usr/sbin", "usr/bin", "sbin", "bin"))
    program = argv[0] if "/" in argv[0] else shutil.which(argv[0], path=path)
    with (root / "container.log").open("ab") as log:
        if program is None:
            log.write(f"docker: {argv[0]!r}: executable file not found in $PATH\n".encode())
        else:
            subprocess.run([_mapped(root, program), *argv[1:]], cwd=root, stdout=log, stderr=log, timeout=60,
                           env={**env, "HOME": str(root / "root"), "PATH": path})
    sshd = (root / "run/sshd.pid").exists()
    return Booted(keys=_accepted_keys(root / "root") if sshd else [], sshd=sshd,
                  log=(root / "container.log").read_text(errors="replace"))


def _mapped(root: Path, program: str) -> str:
    return str(root) + program if program.startswith("/") and not program.startswith(str(root)) else program


def _accepted_keys(home: Path) -> list[str]:
    """The key lines sshd reads from ``home/.ssh/authorized_keys``: none when StrictModes refuses it
    (the home, ``.ssh`` or the file writable by group or others)."""
    keys = home / ".ssh" / "authorized_keys"
    if not keys.exists() or any(p.stat().st_mode & 0o022 for p in (home, keys.parent, keys)):
        return []
    return [line for line in keys.read_text().splitlines() if line.strip() and not line.startswith("#")]


def _make_root(root: Path, sshd: bool, apt: bool, start_sh: bool) -> None:
    for d in ("usr/bin", "usr/sbin", "tmp", "run", "etc/ssh", "root"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "root").chmod(0o700)
    for tool in TOOLS:
        found = shutil.which(tool)
        if found:
            (root / "usr/bin" / tool).symlink_to(found)
    record = f'PATH=/usr/bin:/bin\necho "[$(basename "$0")] $*" >> {root}/container.log'
    stubs = {
        "usr/bin/bash": f"""#!{sys.executable} -I
import re, subprocess, sys
ABSOLUTE = re.compile({ABSOLUTE.pattern!r}, re.M)
root = {str(root)!r}
args = sys.argv[1:]
if args[:1] == ["-c"]:
    script, rest = args[1], args[2:]
else:
    name = args[0] if args[0].startswith(root) or not args[0].startswith("/") else root + args[0]
    script, rest = open(name).read(), [name, *args[1:]]
sys.exit(subprocess.call(["/bin/bash", "-c", ABSOLUTE.sub(root + "/", script), *(rest or ["bash"])]))
""",
        "usr/bin/sleep": f"#!/bin/sh\n{record}\n",
        "usr/sbin/service": f"#!/bin/sh\n{record}\n[ \"$1 $2\" = 'ssh start' ] || exit 1\n"
                            f"mkdir -p {root}/run/sshd\nexec {root}/usr/sbin/sshd\n",
    }
    if sshd:
        stubs.update(_openssh(root, record))
    if apt:
        install = "".join(f"cat > {root}/{path} <<'EOF'\n{text}EOF\nchmod +x {root}/{path}\n"
                          for path, text in _openssh(root, record).items())
        stubs["usr/bin/apt-get"] = (f"#!/bin/sh\n{record}\ncase \"$*\" in *'install'*openssh-server*)\n"
                                    f"{install};; esac\n")
    if start_sh:
        stubs["start.sh"] = """#!/bin/bash
set -e
if [[ $PUBLIC_KEY ]]; then
    mkdir -p ~/.ssh
    echo "$PUBLIC_KEY" >> ~/.ssh/authorized_keys
    chmod 700 -R ~/.ssh
    ssh-keygen -A
    service ssh start
fi
sleep infinity
"""
    for path, text in stubs.items():
        (root / path).write_text(text)
        (root / path).chmod(0o755)


def _openssh(root: Path, record: str) -> dict[str, str]:
    """openssh-server's sshd and ssh-keygen, as stand-ins."""
    return {
        "usr/sbin/sshd": f"""#!/bin/sh
{record}
[ -d {root}/run/sshd ] || {{ echo "Missing privilege separation directory: /run/sshd" >&2; exit 255; }}
ls {root}/etc/ssh/ssh_host_*_key >/dev/null 2>&1 || {{ echo "sshd: no hostkeys available -- exiting." >&2; exit 1; }}
echo $$ > {root}/run/sshd.pid
""",
        "usr/bin/ssh-keygen": f"""#!/bin/sh
{record}
[ "$1" = -A ] && for t in rsa ecdsa ed25519; do : > {root}/etc/ssh/ssh_host_${{t}}_key; done
exit 0
""",
    }



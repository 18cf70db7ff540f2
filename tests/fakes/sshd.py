"""A real OpenSSH server on 127.0.0.1 for the tests: its own host key, one client key, any port.
Started again on the same ``root`` and ``port`` it is the same machine back (its keys are kept);
stopped, it goes with its connections, as a machine powered off does."""

from __future__ import annotations

import contextlib
import getpass
import os
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

SSHD = "/usr/sbin/sshd"


@dataclass(frozen=True)
class SSHServer:
    host: str
    port: int
    user: str
    key: Path
    """The client's private key (its public half is authorized)."""
    root: Path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _keygen(path: Path) -> None:
    if path.exists():  # the same machine started again keeps its keys
        return
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@contextmanager
def running_sshd(root: Path, client_key: Path | None = None, extra_config: str = "",
                 port: int | None = None) -> Iterator[SSHServer]:
    """Start sshd (``-D``: in the foreground, ours to stop) and wait until it accepts connections.
    ``extra_config``: more sshd_config lines (e.g. a ``ForceCommand`` that plays a hostile node);
    ``port``: a given one (the same machine back), else a free one. At the end its sessions are
    ended too (a client's master connection goes, as from a machine powered off)."""
    if not Path(SSHD).exists():
        raise RuntimeError(f"{SSHD} is missing: install openssh-server (scripts/test.sh does)")
    root.mkdir(parents=True, exist_ok=True)
    Path("/run/sshd").mkdir(parents=True, exist_ok=True)
    _keygen(root / "host_ed25519")
    if client_key is None:
        client_key = root / "client_ed25519"
        _keygen(client_key)
    (root / "authorized_keys").write_text(Path(f"{client_key}.pub").read_text())
    port = port or _free_port()
    config = root / "sshd_config"
    config.write_text(f"""\
Port {port}
ListenAddress 127.0.0.1
HostKey {root / 'host_ed25519'}
AuthorizedKeysFile {root / 'authorized_keys'}
PidFile {root / 'sshd.pid'}
StrictModes no
UsePAM no
PasswordAuthentication no
KbdInteractiveAuthentication no
PubkeyAuthentication yes
PermitRootLogin prohibit-password
MaxSessions 100
MaxStartups 100
LogLevel ERROR
{extra_config}""")
    proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stdout=subprocess.DEVNULL,
                            stderr=(root / "sshd.log").open("wb"))
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                raise RuntimeError(f"sshd did not start: {(root / 'sshd.log').read_text()}") from None
            time.sleep(0.05)
    try:
        yield SSHServer(host="127.0.0.1", port=port, user=getpass.getuser(), key=client_key, root=root)
    finally:
        sessions = _children(proc.pid)
        proc.terminate()
        proc.wait(timeout=10)
        for pid in sessions:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _children(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (sshd's sessions, one per connection)."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[1]) == pid:
                found.append(int(stat.parent.name))
    return found

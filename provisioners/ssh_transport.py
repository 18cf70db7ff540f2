"""Transport over the system OpenSSH client.

- One multiplexed connection per node (``ControlMaster=auto``, a socket per node token in a short
  per-user temp dir, ``ControlPersist`` 120 s, closed at terminate), ``BatchMode`` (never a
  password prompt).
- Host keys pinned per node: ``StrictHostKeyChecking=accept-new`` with a known_hosts file of the
  node's own, so the key seen at the first connect is stored and every later connect must match.
- Uploads are a tar stream over the SSH pipe (no rsync on the node); downloads come back the same
  way and are unpacked by ``safe_tar`` (a rented node is not trusted).
- A download is not failed by GNU tar's exit status 1 when all tar said is that files changed
  while it read them (``TAR_FILES_DIFFER``): a payload's straggler may still write; what tar
  read is kept, and each such file is reported (``refused_members``).
- Every transfer has a deadline (``transfer_deadline``): past it the ssh client is killed and
  ``TransferTimeout`` raised; ``get`` kills it too once extraction ends.
- ``read_from`` is ``tail -c +N`` (``| head -c LIMIT``); every call has a timeout; ssh's own failure (exit 255: refused,
  unreachable, reset) is retried with backoff, bounded, because a booting node refuses for a while.
- ``start`` runs the command under ``setsid nohup`` (it survives a dropped connection), once per
  directory however often the launch is sent (a guard on the node), and appends its process group
  id to ``.benchctl/<token>.pids`` under the work dir, so ``kill_all`` ends exactly our processes
  (that group and its session; what left both, the payload's runner ends: ``payload.reaper``);
  the group adds its id to ``.benchctl/<token>.ended`` when its command ends, so ``vanished``
  tells a group that ended from one killed with the machine.
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import os
import re
import shlex
import signal
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO

from tenacity import retry, retry_if_exception_type, stop_after_attempt, stop_after_delay, wait_exponential

from benchctl.provisioners.base import CommandResult, ProviderError, Transport
from benchctl.provisioners.node_records import file_name
from benchctl.provisioners.refusals import MAX_LISTED
from benchctl.provisioners.safe_tar import extract_stream
from benchctl.provisioners.transfer_deadline import Deadline, killed_at

SSH_FAILED = 255
STARTED = ".benchctl-started"
"""Made in a ``start``'s directory by the launch that started its command (the guard, see ``start``)."""
EXIT_GRACE_S = 10.0
"""How long ``get`` waits for ssh to exit once the archive was read, before it kills it."""
TAR_FILES_DIFFER = 1
"""GNU tar's exit status 1, "Some files differ": with ``--create``, files changed while they were
archived, and the archive holds them as read (GNU tar manual, "Synopsis", exit codes:
https://www.gnu.org/software/tar/manual/html_node/Synopsis.html; src/create.c sets it for the
warnings ``FILE_CHANGED``). Any other tar (busybox) uses 1 for every error, so it counts as a
warning only when every line tar wrote to stderr is one of these."""
FILE_CHANGED = ("file changed as we read it", "file shrank by", "file removed before we read it")
MAX_STDERR_BYTES = 1 << 20


class SSHUnreachable(ProviderError):
    """ssh itself failed (connection refused, timed out, reset): worth a retry."""


class SSHTimeout(ProviderError):
    """The command did not finish within its timeout (ssh was killed)."""


@dataclass(frozen=True)
class SSHEndpoint:
    """Where and how to log in. ``workdir``: the node's base directory for our files (relative paths
    are under the login's home). ``config_file``: an ssh config file that defines ``host`` as an
    alias (its HostName, Port, User, IdentityFile, ProxyCommand); ``port`` and ``user`` are then
    the file's, and our host-key pinning and connection options still override it."""

    host: str
    port: int = 22
    user: str = "root"
    key: str | None = None
    workdir: str = "benchctl"
    python: str = "python3"
    config_file: str | None = None


def name_problem(what: str, value: str) -> str | None:
    """Why ``value`` cannot be an ssh destination's ``what`` (host, user), or None. A value starting
    with ``-`` is read by ssh as an option (OpenSSH 9.2 here ran the command of a user
    ``-oProxyCommand=…`` on this machine); whitespace and control characters are no part of a name."""
    if not value:
        return f"the ssh {what} is empty"
    if value.startswith("-"):
        return f"the ssh {what} {value!r} starts with '-' (ssh would read it as an option)"
    if any(c.isspace() or not c.isprintable() for c in value):
        return f"the ssh {what} {value!r} holds a space or a control character"
    return None


_LABEL = re.compile(r"(?!-)[A-Za-z0-9_-]{1,63}(?<!-)")


def host_problem(host: str) -> str | None:
    """Why ``host`` is no ssh host, or None: a host is a DNS name (dot-separated labels of letters,
    digits, ``-`` and ``_``, none starting or ending with ``-``; at most 253 characters; dotted digits
    only as an IPv4 address), an IPv4 address, or an IPv6 address written bare (a ``%zone`` allowed).
    Anything else (``/``, ``@``, ``:port``, brackets, quotes, …) is no address ssh should be given."""
    problem = name_problem("host", host)
    if problem is not None:
        return problem
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            return (f"the ssh host {host!r} is not an IPv6 address (write one bare, without brackets or a port: "
                    "the port is the node's `port`)")
        return None
    labels = (host[:-1] if host.endswith(".") else host).split(".")
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        return (f"the ssh host {host!r} is not a DNS name, an IPv4 or an IPv6 address (a name is letters, digits, "
                "'-' and '_' in dot-separated labels)")
    if all(label.isdigit() for label in labels):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return f"the ssh host {host!r} is not an IPv4 address (four numbers 0-255)"
    return None


def endpoint_problem(host: str, user: str) -> str | None:
    return host_problem(host) or name_problem("user", user)


def control_dir() -> Path:
    """Short, private: a unix socket path must stay under ~100 characters."""
    path = Path(tempfile.gettempdir()) / f"bcm-{os.getuid()}"
    path.mkdir(mode=0o700, exist_ok=True)
    return path


class SSHTransport(Transport):
    def __init__(self, endpoint: SSHEndpoint, known_hosts: Path, token: str, connect_timeout_s: float = 10.0,
                 retry_for_s: float = 60.0) -> None:
        self.endpoint = endpoint
        self.known_hosts = known_hosts
        self.token = token
        self.connect_timeout_s = connect_timeout_s
        self.retry_for_s = retry_for_s
        self.received_bytes = 0
        self.python = endpoint.python
        self.refused: list[str] = []
        """Members of downloaded archives that were refused (unsafe or over the size cap)."""

    # -- the ssh command ------------------------------------------------------------------------
    def ssh_args(self) -> list[str]:
        e = self.endpoint
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        where = ["-F", e.config_file] if e.config_file else ["-p", str(e.port)]
        args = ["ssh", *where, "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=accept-new",
                "-o", f"UserKnownHostsFile={self.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
                "-o", "HashKnownHosts=no",
                "-o", f"ConnectTimeout={int(self.connect_timeout_s)}", "-o", "ServerAliveInterval=15",
                "-o", "ServerAliveCountMax=4", "-o", "ControlMaster=auto",
                "-o", f"ControlPath={self.control_path()}", "-o", "ControlPersist=120", "-o", "LogLevel=ERROR"]
        if e.key:
            args += ["-i", str(Path(e.key).expanduser()), "-o", "IdentitiesOnly=yes"]
        problem = endpoint_problem(e.host, e.user)
        if problem is not None:
            raise ProviderError(f"{problem}: not given to ssh; fix the node's address")
        return [*args, "--", e.host if e.config_file else f"{e.user}@{e.host}"]  # "--": the destination is no option

    def control_path(self) -> str:
        """One master connection per node (token) and endpoint: a rented node's address may be reused
        by another node later, which must never ride on this node's connection."""
        return f"{control_dir()}/{hashlib.sha256(self.token.encode()).hexdigest()[:10]}-%C"

    def close(self) -> None:
        """Stop the node's master connection (nothing to do if none runs, or for an address ssh is never given)."""
        if endpoint_problem(self.endpoint.host, self.endpoint.user) is not None:
            return
        args = self.ssh_args()
        subprocess.run([*args[:-2], "-O", "exit", *args[-2:]], capture_output=True, timeout=10)

    def _where(self) -> str:
        """How messages name the node: the alias of a config file, else user@host:port."""
        e = self.endpoint
        return f"{e.host} (in {e.config_file})" if e.config_file else f"{e.user}@{e.host}:{e.port}"

    def _base(self) -> str:
        """The work dir as a shell word (``$HOME`` expanded on the node for relative ones)."""
        workdir = self.endpoint.workdir
        return shlex.quote(workdir) if workdir.startswith("/") else f'"$HOME"/{shlex.quote(workdir)}'

    def _in_base(self, cmd: str) -> str:
        return f"mkdir -p {self._base()} && cd {self._base()} && {cmd}"

    def _call(self, remote: str, timeout: float,
              stdin: bytes | BinaryIO | None = None) -> subprocess.CompletedProcess[bytes]:
        """``remote`` over ssh, retried while ssh cannot connect; ``stdin``: bytes, or a file read from its
        start on each try (the kernel copies it: none of it passes through this process's memory)."""
        @retry(retry=retry_if_exception_type(SSHUnreachable), reraise=True,
               stop=stop_after_attempt(6) | stop_after_delay(self.retry_for_s),
               wait=wait_exponential(multiplier=0.5, max=8))
        def once() -> subprocess.CompletedProcess[bytes]:
            if isinstance(stdin, bytes) or stdin is None:
                feed: dict[str, Any] = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
            else:
                stdin.seek(0)
                feed = {"stdin": stdin}
            try:
                proc = subprocess.run([*self.ssh_args(), remote], capture_output=True, timeout=timeout, **feed)
            except subprocess.TimeoutExpired as exc:
                raise SSHTimeout(f"ssh {self.endpoint.host}: timed out after {timeout:.0f} s") from exc
            if proc.returncode == SSH_FAILED and b"host key verification failed" in proc.stderr.lower():
                raise ProviderError(f"the host key of {self._where()} is not the one seen "
                                    f"at the first connect (pinned in {self.known_hosts}): the node may have been "
                                    "replaced or intercepted; check it, then remove that file to trust it again")
            if proc.returncode == SSH_FAILED and _is_ssh_error(proc.stderr):
                raise SSHUnreachable(f"ssh {self._where()} failed: "
                                     f"{proc.stderr.decode(errors='replace').strip()[-300:]}")
            return proc

        return once()

    # -- Transport ------------------------------------------------------------------------------
    def run(self, cmd: str, timeout: float = 60.0) -> CommandResult:
        proc = self._call(self._in_base(cmd), timeout)
        return CommandResult(proc.returncode, proc.stdout.decode(errors="replace"),
                             proc.stderr.decode(errors="replace"))

    def _ours(self, suffix: str) -> str:
        """``.benchctl/<token>.<suffix>`` as a shell word, relative to the work dir."""
        return f".benchctl/{shlex.quote(file_name(self.token))}.{suffix}"

    def start(self, cmd: str, cwd: str) -> None:
        """Start ``cmd`` detached in ``cwd``, at most once per ``cwd``: the launch makes
        ``cwd/STARTED`` first (``mkdir`` is atomic) and starts nothing when it exists. ssh exits 255
        when the connection drops even after the node ran the launch, and ``_call`` retries that:
        the retry, or any later start in that directory, must not start the payload again."""
        pids = self._ours("pids")
        ended = f"{self._base()}/{self._ours('ended')}"
        script = f"{cmd}\nstatus=$?; echo $$ >> {ended}; exit $status"
        detached = f"setsid nohup sh -c {shlex.quote(script)} </dev/null >/dev/null 2>&1"
        launch = (f"mkdir -p .benchctl && cd {shlex.quote(cwd)} && if mkdir {STARTED} 2>/dev/null; then "
                  f"({detached} & echo $! >> {self._base()}/{pids}); fi")
        result = self.run(launch, timeout=30)
        if result.code != 0:
            raise ProviderError(f"could not start {cmd!r} on {self.endpoint.host}: {result.err.strip()}")

    def kill_all(self) -> None:
        """End every process group and session this transport's token started (TERM, then KILL;
        ``pkill -s`` where the node has procps). The payload's runner ends, on TERM, whatever it
        started that left both (``payload.reaper``)."""
        pids = self._ours("pids")
        each = "for p in $(cat {pids}); do kill -{sig} -$p 2>/dev/null; pkill -{sig} -s $p 2>/dev/null; done"
        script = (f"test -f {pids} || exit 0; {each.format(pids=pids, sig='TERM')}; "
                  f"sleep 2; {each.format(pids=pids, sig='KILL')}; "
                  f"rm -f {pids} {self._ours('ended')}; exit 0")
        result = self.run(script, timeout=30)
        if result.code != 0:
            raise ProviderError(f"could not stop our processes on {self.endpoint.host}: {result.err.strip()}")

    def vanished(self) -> list[str]:
        """The process groups ``start`` began that are gone without their command having ended:
        killed with everything else on the machine (it restarted, or was taken back). A group is
        gone when its leader (the ``sh`` we started) is no process, or a zombie no one reaps. Each is
        named by its pid as the node's pids file holds it, read as text: a word the node wrote over
        it (5,000 digits, which Python will not even convert to int) is no process of ours, so it is
        gone too, and named shortened. The file is read up to 4 KiB (it holds a pid per start)."""
        pids, ended = self._ours("pids"), self._ours("ended")
        script = (f"test -f {pids} || exit 0; for p in $(head -c 4096 {pids}); do "
                  f"case \"$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null)\" in ''|Z|X) "
                  f"grep -qx \"$p\" {ended} 2>/dev/null || echo $p;; esac; done; exit 0")
        result = self.run(script, timeout=30)
        if result.code != 0:
            raise ProviderError(f"could not list our processes on {self.endpoint.host}: {result.err.strip()}")
        return [word if len(word) <= 20 else f"{word[:17]}..." for word in result.out.split() if word.isdigit()]

    def put(self, local_dir: str, remote_dir: str, timeout: float | Deadline = 300.0) -> None:
        """The stage is tarred into a temporary file that ssh reads as its stdin: what is shipped (the
        payload, compile caches of up to 512 MiB each) never sits in this process's memory."""
        deadline = Deadline.of(timeout)
        quoted = shlex.quote(remote_dir)
        with tempfile.TemporaryFile() as archive:
            with tarfile.open(fileobj=archive, mode="w") as tar:
                for path in sorted(Path(local_dir).iterdir()):
                    tar.add(path, arcname=path.name)
            try:
                proc = self._call(self._in_base(f"mkdir -p {quoted} && tar -C {quoted} -xf -"),
                                  timeout=max(deadline.remaining(), 0.001), stdin=archive)
            except SSHTimeout as exc:
                raise deadline.timeout(f"upload to {self.endpoint.host}:{remote_dir}") from exc
        if proc.returncode != 0:
            raise ProviderError(f"upload to {self.endpoint.host}:{remote_dir} failed: "
                                f"{proc.stderr.decode(errors='replace').strip()}")

    def get(self, remote_path: str, local_dir: str, timeout: float | Deadline = 600.0) -> None:
        """The remote ``tar`` streams into ``safe_tar``; the ssh client is killed when the deadline
        passes, and in any case once extraction ends (a node may keep sending after what was read)."""
        deadline = Deadline.of(timeout)
        what = f"download of {self.endpoint.host}:{remote_path}"
        parent, name = os.path.split(remote_path.rstrip("/"))
        remote = self._in_base(f"test -e {shlex.quote(remote_path)} || exit 0; "
                               f"tar -C {shlex.quote(parent or '.')} -cf - {shlex.quote(name)}")
        deadline.check(what)
        # stderr goes to a file: a pipe can stay open in ssh's master connection after the client is killed
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen([*self.ssh_args(), remote], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                    stderr=err)
            assert proc.stdout is not None
            try:
                with killed_at(deadline, proc):
                    try:
                        report = extract_stream(proc.stdout, Path(local_dir),
                                                max(0, self.max_artifact_bytes - self.received_bytes))
                    except Exception as exc:  # a stream cut at the deadline breaks the archive, whatever reads it
                        if deadline.expired():
                            raise deadline.timeout(what) from exc
                        if isinstance(exc, ProviderError):  # safe_tar refused the stream
                            raise ProviderError(f"{what} stopped: {exc}") from exc
                        if isinstance(exc, tarfile.TarError | OSError):
                            raise ProviderError(f"{what} is not a tar: {exc}") from exc
                        raise
                    with contextlib.suppress(subprocess.TimeoutExpired):  # a node that keeps sending is cut off
                        proc.wait(timeout=min(deadline.remaining(), EXIT_GRACE_S))
            finally:
                proc.stdout.close()
            self.refused += report.refused
            self.received_bytes += report.bytes
            if deadline.expired() and proc.returncode != 0:
                raise deadline.timeout(what)
            changed = _files_changed(err) if proc.returncode == TAR_FILES_DIFFER else None
            if changed is not None:
                self.refused += [f"{line}; kept as tar read it" for line in changed[:MAX_LISTED]]
            elif proc.returncode not in (0, -signal.SIGKILL):
                raise ProviderError(f"{what} failed: {_tail(err)}")

    def refused_members(self) -> list[str]:
        return list(self.refused)

    def read_from(self, remote_file: str, offset: int, timeout: float | Deadline = 60.0,
                  limit: int | None = None) -> bytes:
        deadline = Deadline.of(timeout)
        quoted = shlex.quote(remote_file)
        head = "" if limit is None else f" | head -c {int(limit)}"
        try:
            proc = self._call(self._in_base(f"test -f {quoted} || exit 0; tail -c +{int(offset) + 1} {quoted}{head}"),
                              timeout=max(deadline.remaining(), 0.001))
        except SSHTimeout as exc:
            raise deadline.timeout(f"reading {self.endpoint.host}:{remote_file}") from exc
        if proc.returncode != 0:
            raise ProviderError(f"reading {self.endpoint.host}:{remote_file} failed: "
                                f"{proc.stderr.decode(errors='replace').strip()}")
        return proc.stdout if limit is None else proc.stdout[:limit]


def _tail(file: IO[bytes], keep: int = 300) -> str:
    """The last ``keep`` characters of what was written to ``file``."""
    size = file.seek(0, os.SEEK_END)
    file.seek(max(0, size - 4 * keep))
    return file.read().decode(errors="replace").strip()[-keep:]


def _files_changed(file: IO[bytes]) -> list[str] | None:
    """The lines of what was written to ``file`` (tar's stderr) when each is a GNU tar warning that a
    file changed while it was read (``FILE_CHANGED``), without the ``tar: `` prefix; else None."""
    size = file.seek(0, os.SEEK_END)
    if size > MAX_STDERR_BYTES:
        return None
    file.seek(0)
    lines = [line.strip() for line in file.read().decode(errors="replace").splitlines() if line.strip()]
    if not lines or not all(any(w in line.lower() for w in FILE_CHANGED) for line in lines):
        return None
    return [line.removeprefix("tar: ") for line in lines]


def _is_ssh_error(stderr: bytes) -> bool:
    """Exit 255 comes from ssh itself (not the remote command) when it says so on stderr."""
    text = stderr.decode(errors="replace").lower()
    return any(s in text for s in ("connection refused", "timed out", "connection reset", "no route to host",
                                   "could not resolve", "connection closed", "broken pipe", "kex_exchange",
                                   "network is unreachable", "lost connection", "mux_client"))

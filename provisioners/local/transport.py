"""Transport to a local node: commands carry the node's marker, files live under its home.

Files come back through ``local_copy`` (no link followed either way, the size cap, the deadline);
reads are bounded by ``limit``; any OSError of the node's files is a ProviderError.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

from benchctl.provisioners.base import CommandResult, ProviderError, Transport
from benchctl.provisioners.local.file_copy import copy_out
from benchctl.provisioners.local.processes import MARKER, node_env, process_alive
from benchctl.provisioners.transfer_deadline import Deadline


class LocalTransport(Transport):
    """Runs ``sh -c`` commands with cwd = the node's home, each in its own session (out of reach of
    the controller's Ctrl-C) and carrying the node's marker, so terminating the node ends
    everything started through this transport."""

    def __init__(self, home: Path, token: str, leader_pid: int, env: dict[str, str] | None = None,
                 python: str = sys.executable) -> None:
        self.python = python
        self.home = home
        self.token = token
        self.leader_pid = leader_pid
        self.env = env or {}
        """Extra environment of every command (the node's injected faults)."""
        self.received_bytes = 0
        self.refused: list[str] = []

    def _path(self, remote: str) -> Path:
        try:
            path = (self.home / remote).resolve()
        except (OSError, RuntimeError) as exc:  # a link loop, a name too long
            raise ProviderError(f"path {remote!r} on the local node cannot be resolved: {exc}") from exc
        if not path.is_relative_to(self.home.resolve()):
            raise ProviderError(f"path {remote!r} leaves the node's home")
        return path

    def run(self, cmd: str, timeout: float = 60.0) -> CommandResult:
        if not process_alive(self.leader_pid, self.token):
            raise ProviderError(f"the local node {self.token} is gone; it cannot run commands")
        try:
            proc = subprocess.run(["sh", "-c", cmd], cwd=self.home, capture_output=True, text=True, timeout=timeout,
                                  start_new_session=True, env={**node_env(self.token), **self.env, MARKER: self.token},
                                  stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise ProviderError(f"command timed out after {timeout:.0f}s on the local node: {cmd}") from exc
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)

    def start(self, cmd: str, cwd: str) -> None:
        # The shell backgrounds the command and exits at once; the command is reparented to init
        # and keeps the node's marker.
        wrapped = f"cd {_quote(str(self._path(cwd)))} && nohup sh -c {_quote(cmd)} >/dev/null 2>&1 &"
        result = self.run(wrapped, timeout=30)
        if result.code != 0:
            raise ProviderError(f"could not start {cmd!r} on the local node: {result.err.strip()}")

    def put(self, local_dir: str, remote_dir: str, timeout: float | Deadline = 300.0) -> None:
        deadline = Deadline.of(timeout)
        try:
            shutil.copytree(local_dir, self._path(remote_dir), dirs_exist_ok=True, symlinks=True,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        except OSError as exc:
            raise ProviderError(f"upload to the local node's {remote_dir} failed: {exc}") from exc
        deadline.check(f"upload to the local node's {remote_dir}")

    def get(self, remote_path: str, local_dir: str, timeout: float | Deadline = 600.0) -> None:
        try:
            report = copy_out(self.home, remote_path, Path(local_dir),
                              max(0, self.max_artifact_bytes - self.received_bytes), Deadline.of(timeout))
        except ValueError as exc:
            raise ProviderError(str(exc)) from exc
        except OSError as exc:
            raise ProviderError(f"download of the local node's {remote_path} failed: {exc}") from exc
        self.refused += report.refused
        self.received_bytes += report.bytes

    def refused_members(self) -> list[str]:
        return list(self.refused)

    def read_from(self, remote_file: str, offset: int, timeout: float | Deadline = 60.0,
                  limit: int | None = None) -> bytes:
        path = self._path(remote_file)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO must not stall us
        except FileNotFoundError:
            return b""
        except OSError as exc:
            raise ProviderError(f"reading the local node's {remote_file} failed: {exc}") from exc
        with os.fdopen(fd, "rb") as handle:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ProviderError(f"the local node's {remote_file} is not a regular file")
            try:
                handle.seek(offset)
                return handle.read(-1 if limit is None else limit)
            except OSError as exc:
                raise ProviderError(f"reading the local node's {remote_file} failed: {exc}") from exc


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)

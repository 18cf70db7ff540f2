"""Transport to a local node: commands carry the node's marker, files live under its home."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

from provisioners.base import CommandResult, ProviderError, Transport
from provisioners.local_processes import node_env, process_alive


class LocalTransport(Transport):
    """Runs ``sh -c`` commands with cwd = the node's home, each in its own session (out of reach of
    the controller's Ctrl-C) and carrying the node's marker, so terminating the node ends
    everything started through this transport."""

    python = sys.executable

    def __init__(self, home: Path, token: str, leader_pid: int, env: dict[str, str] | None = None) -> None:
        self.home = home
        self.token = token
        self.leader_pid = leader_pid
        self.env = env or {}
        """Extra environment of every command (the node's injected faults)."""

    def _path(self, remote: str) -> Path:
        path = (self.home / remote).resolve()
        if not path.is_relative_to(self.home.resolve()):
            raise ProviderError(f"path {remote!r} leaves the node's home")
        return path

    def run(self, cmd: str, timeout: float = 60.0) -> CommandResult:
        if not process_alive(self.leader_pid, self.token):
            raise ProviderError(f"the local node {self.token} is gone; it cannot run commands")
        try:
            proc = subprocess.run(["sh", "-c", cmd], cwd=self.home, capture_output=True, text=True, timeout=timeout,
                                  start_new_session=True, env={**node_env(self.token), **self.env},
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

    def put(self, local_dir: str, remote_dir: str) -> None:
        shutil.copytree(local_dir, self._path(remote_dir), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))

    def get(self, remote_path: str, local_dir: str) -> None:
        source = self._path(remote_path)
        target = Path(local_dir) / source.name
        Path(local_dir).mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, dirs_exist_ok=True)
        elif source.exists():
            shutil.copy2(source, target)

    def read_from(self, remote_file: str, offset: int) -> bytes:
        try:
            with self._path(remote_file).open("rb") as handle:
                handle.seek(offset)
                return handle.read()
        except FileNotFoundError:
            return b""


def _quote(text: str) -> str:
    import shlex

    return shlex.quote(text)

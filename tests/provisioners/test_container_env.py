"""The payload's interpreter found on the container's PATH from a bare SSH session
(``provisioners.container_env``), in sh and bash, whatever PID 1's environment holds."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from benchctl.provisioners.container_env import container_python
from tests.provisioners.conftest import IMAGE_PYTHON, image_environ

SESSION_PATH = "/usr/bin:/bin"
"""What an SSH session's PATH holds here (sshd's default, less the sbin folders)."""
PYTHON = shlex.quote(sys.executable)
"""An interpreter by its full path: the tests of PATH itself need no look-up."""
PRINT_PATH = "-c 'import os; print(os.environ[\"PATH\"])'"


def _session(shell: str, command: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["env", "-i", f"PATH={SESSION_PATH}", shell, "-c", command], cwd=cwd, capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("shell", ["sh", "bash"])
def test_an_interpreter_only_on_the_images_path_runs_and_the_sessions_path_follows(tmp_path: Path,
                                                                                  shell: str) -> None:
    environ = tmp_path / "environ"
    environ.write_bytes(image_environ(tmp_path, b"HOME=/root\0CONTAINER_API_KEY=k\0"))
    bare = _session(shell, f"{IMAGE_PYTHON} {PRINT_PATH}", tmp_path)
    assert bare.returncode == 127, "the bare name is not found from the session: what the fix is for"
    ran = _session(shell, f"{container_python(IMAGE_PYTHON, str(environ))} {PRINT_PATH}", tmp_path)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == f"{tmp_path}/opt-conda/bin:/usr/bin:/bin:{SESSION_PATH}"


@pytest.mark.parametrize("environ", [None, b"HOME=/root\0", b"PATH=\0HOME=/root\0", b"\xff\xfe", b""])
def test_without_a_container_path_the_sessions_path_stays_as_it_is(tmp_path: Path, environ: bytes | None) -> None:
    # no file (not root, not Linux), no PATH, an empty PATH, bytes that are no environment: never an
    # empty element (which would search the current directory)
    path = tmp_path / "environ"
    if environ is not None:
        path.write_bytes(environ)
    ran = _session("sh", f"{container_python(PYTHON, str(path))} {PRINT_PATH}", tmp_path)
    assert (ran.returncode, ran.stdout.strip()) == (0, SESSION_PATH), ran.stderr


def test_a_hostile_path_is_data_not_commands(tmp_path: Path) -> None:
    # a stranger's image sets PID 1's PATH: nothing in it runs in the payload's shell
    path = tmp_path / "environ"
    value = '/x";touch q1;": $(touch q2) `touch q3` \\"; touch q4'
    path.write_bytes(f"PATH={value}\0".encode())
    ran = _session("sh", f"{container_python(PYTHON, str(path))} {PRINT_PATH}", tmp_path)
    assert (ran.returncode, ran.stdout.strip()) == (0, f"{value}:{SESSION_PATH}"), ran.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["environ"], "nothing was created"


def test_an_environ_path_with_a_quote_is_one_shell_word(tmp_path: Path) -> None:
    odd = tmp_path / "it's here"
    odd.mkdir()
    (odd / "PATH=x").write_bytes(b"PATH=/opt/conda/bin\0")
    ran = _session("sh", f"{container_python(PYTHON, str(odd / 'PATH=x'))} {PRINT_PATH}", tmp_path)
    assert (ran.returncode, ran.stdout.strip()) == (0, f"/opt/conda/bin:{SESSION_PATH}"), ran.stderr

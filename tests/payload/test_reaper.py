"""The runner's reaper (issue 31 item 7): whatever a process below it does to detach (``nohup … &``,
a double fork, ``setsid``, an environment without the node's marker), it ends with the runner:
at the runner's end, and when the runner gets SIGTERM. Each case runs in a process of its own
(never the test's: the reaper ends every descendant), and checks /proc with a bounded wait."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from tests.conftest import REPO

DETACHING = [
    "nohup sh -c 'echo > started.{n}; exec sleep {m}' >/dev/null 2>&1 &",
    "setsid sh -c 'echo > started.{n}; exec sleep {m}' &",
    "sh -c \"sh -c 'echo > started.{n}; exec sleep {m}' &\" &",  # a double fork: the middle shell exits
    "(unset BENCHCTL_LOCAL_NODE; setsid nohup sh -c 'echo > started.{n}; exec sleep {m}' >/dev/null 2>&1 &)",
]


def markers() -> list[str]:
    """Unique sleep lengths, one per way of detaching: /proc finds each process by its command line."""
    base = uuid.uuid4().int % 10**6 + 1000
    return [f"{base + i}.{i + 1}" for i in range(len(DETACHING))]


def detaching_command(marks: list[str]) -> str:
    """Start every process of ``DETACHING``, then wait until each has started (its ``started.N`` file)."""
    starts = "\n".join(line.format(n=i, m=m) for i, (line, m) in enumerate(zip(DETACHING, marks, strict=True)))
    waits = " || ".join(f"[ ! -e started.{i} ]" for i in range(len(marks)))
    return f"{starts}\nwhile {waits}; do sleep 0.05; done"


def running(marks: list[str]) -> list[str]:
    """The ``sleep <mark>`` processes alive now (zombies left out)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
            state = (cmdline.parent / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X") and words[:1] == [b"sleep"] and len(words) > 1 and words[1].decode() in marks:
            found.append(words[1].decode())
    return found


def none_left(marks: list[str], within_s: float = 15.0) -> list[str]:
    """Wait (bounded) until no ``sleep <mark>`` runs; what still runs then (empty: none)."""
    deadline = time.monotonic() + within_s
    while (left := running(marks)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def kill_left(marks: list[str]) -> None:
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            words = cmdline.read_bytes().split(b"\0")
            if words[:1] == [b"sleep"] and len(words) > 1 and words[1].decode() in marks:
                os.kill(int(cmdline.parent.name), signal.SIGKILL)
        except (OSError, ValueError):
            continue


RUNNER = """\
import subprocess, sys, time
from payload.reaper import adopt_orphans, end_all_on_sigterm, end_descendants
assert adopt_orphans()
end_all_on_sigterm()
subprocess.run(["sh", "-c", sys.argv[1]], check=True)
print("started", flush=True)
sys.stdin.readline()  # the test has seen every detached process running
if sys.argv[2] == "end":
    end_descendants()
else:
    time.sleep(600)
"""


@pytest.mark.parametrize("how", ["end", "sigterm"])
def test_no_detached_process_outlives_the_runner(tmp_path: Path, how: str) -> None:
    marks = markers()
    env = {"PYTHONPATH": str(REPO), "PATH": os.environ["PATH"], "BENCHCTL_LOCAL_NODE": "tok"}
    proc = subprocess.Popen([sys.executable, "-c", RUNNER, detaching_command(marks), how], cwd=tmp_path, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "started\n"
        assert sorted(running(marks)) == sorted(marks), "every detached process runs once the command returned"
        assert proc.stdin is not None
        proc.stdin.write("go\n")
        proc.stdin.flush()
        if how == "sigterm":
            proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == (0 if how == "end" else 128 + signal.SIGTERM)
        assert none_left(marks) == []
    finally:
        proc.kill()
        kill_left(marks)

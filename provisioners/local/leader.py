"""The leader process of a local node that is to be preempted (fault injection).

``python -m benchctl.provisioners.local.leader NODE_DIR TOKEN [--home HOME] [--after-s S] [--at-step K]``
waits until ``S`` seconds have passed or ``K`` timed profile samples appear in an ``events.jsonl``
under ``HOME`` (default: the node's home; a cluster's worker watches node 0's, which writes the
samples), then writes ``NODE_DIR/ended_at`` and kills every process of the node, itself
last: the node vanishes the way a reclaimed spot node does, without our ``terminate``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import time
from pathlib import Path

from benchctl.provisioners.local.processes import node_processes


def timed_samples(home: Path) -> int:
    """Timed (non-warmup) profile samples written under ``home`` so far."""
    count = 0
    for path in home.rglob("events.jsonl"):
        with contextlib.suppress(OSError):
            for line in path.read_text().splitlines():
                if '"sample"' not in line:
                    continue
                with contextlib.suppress(ValueError):
                    event = json.loads(line)
                    count += event.get("phase") == "profile" and not event.get("warmup")
    return count


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="local_leader")
    parser.add_argument("node_dir", type=Path)
    parser.add_argument("token")
    parser.add_argument("--home", type=Path)
    parser.add_argument("--after-s", type=float)
    parser.add_argument("--at-step", type=int)
    args = parser.parse_args(argv)
    start = time.monotonic()
    while True:
        time.sleep(0.1)
        if args.after_s is not None and time.monotonic() - start >= args.after_s:
            break
        if args.at_step is not None and timed_samples(args.home or args.node_dir / "home") >= args.at_step:
            break
    (args.node_dir / "ended_at").write_text(repr(time.time()))
    me = os.getpid()
    for _ in range(50):  # a process may start while we kill: scan until only the leader is left
        others = [pid for pid in node_processes(args.token) if pid != me]
        if not others:
            break
        for pid in others:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


if __name__ == "__main__":
    main()

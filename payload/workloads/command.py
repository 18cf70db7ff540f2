"""The command phase: run the user's own command (their training script) on the node.

The command runs with ``sh -c`` in ``work/`` (the campaign's ``payload.command.upload`` directory,
shipped with the payload) or the attempt directory, with the cell's environment plus
``BENCHCTL_METRICS`` (a file: each JSON object the command appends as a line becomes a ``sample``
event of phase ``command``, streamed while it runs), ``BENCHCTL_CELL``, ``BENCHCTL_GPU`` and the
cluster (``cluster_env``), so that one ``torchrun`` line spans every node. stdout, stderr and the
metrics file come back as artifacts. A non-zero exit fails the phase with the tail of stderr as
the reason.

Across nodes every node runs the command (as every node runs each phase), each with its own
``BENCHCTL_NODE_RANK``; they meet at ``BENCHCTL_MASTER_ADDR:BENCHCTL_MASTER_PORT``, node 0's
address and ``master_port - 1``: the payload's own rendezvous take ``master_port``, ``+ 1`` … (one
per set of ranks), so the command's port is never one of theirs.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from ..events import EventLog
from ..job import Job

RESERVED = ("t", "kind", "phase")


class CommandFailed(RuntimeError):
    pass


def cluster_env(job: Job) -> dict[str, str]:
    """The cluster as the command sees it: ``BENCHCTL_NODES``, ``BENCHCTL_NODE_RANK``,
    ``BENCHCTL_GPUS_PER_NODE`` (``count``), ``BENCHCTL_WORLD_SIZE`` (every rank of every node,
    nodes × count: ``count`` on one node), ``BENCHCTL_MASTER_ADDR`` and ``BENCHCTL_MASTER_PORT``
    (across nodes node 0's address and ``master_port - 1``; on one node 127.0.0.1 and a port free
    now). Raises ValueError for a cluster job without its rendezvous."""
    if job.nodes > 1:
        if not job.master_addr or job.master_port <= 1:
            raise ValueError(f"job.json: {job.nodes} nodes need master_addr and master_port (node 0's rendezvous)")
        addr, port = job.master_addr, job.master_port - 1
    else:
        addr, port = "127.0.0.1", _free_port()
    return {"BENCHCTL_NODES": str(job.nodes), "BENCHCTL_NODE_RANK": str(job.node_rank),
            "BENCHCTL_GPUS_PER_NODE": str(job.count), "BENCHCTL_WORLD_SIZE": str(job.nodes * job.count),
            "BENCHCTL_MASTER_ADDR": addr, "BENCHCTL_MASTER_PORT": str(port)}


def _free_port() -> int:
    """A TCP port nothing listens on now, on 127.0.0.1 (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _forward_metrics(metrics: Path, offset: int, log: EventLog) -> tuple[int, int, int]:
    """Emit the complete lines appended since ``offset``; return (new offset, samples, bad lines)."""
    with metrics.open("rb") as handle:
        handle.seek(offset)
        data = handle.read()
    end = data.rfind(b"\n") + 1
    good = bad = 0
    for raw in data[:end].splitlines():
        try:
            metric = json.loads(raw)
        except ValueError:
            metric = None
        if not isinstance(metric, dict):
            bad += raw.strip() != b""
            continue
        log.emit("sample", phase="command", **{(f"user_{k}" if k in RESERVED else k): v for k, v in metric.items()})
        good += 1
    return offset + end, good, bad


def run_command(job: Job, job_path: Path, log: EventLog) -> dict[str, Any]:
    cfg = job.command
    if cfg is None:
        raise ValueError("job.json has no command section")
    workdir = job_path.parent
    artifacts = workdir / "artifacts"
    metrics, stdout, stderr = artifacts / "metrics.jsonl", artifacts / "command.stdout", artifacts / "command.stderr"
    metrics.touch()
    env = {**os.environ, **job.env, "BENCHCTL_METRICS": str(metrics), "BENCHCTL_CELL": job.cell,
           "BENCHCTL_GPU": job.gpu, **cluster_env(job)}
    cwd = workdir / "work" if (workdir / "work").is_dir() else workdir
    deadline = time.monotonic() + cfg.timeout_minutes * 60
    offset = samples = bad = 0
    with stdout.open("wb") as out, stderr.open("wb") as err:
        proc = subprocess.Popen(["sh", "-c", cfg.run], cwd=cwd, env=env, stdout=out, stderr=err,
                                stdin=subprocess.DEVNULL)
        while proc.poll() is None:
            offset, good, wrong = _forward_metrics(metrics, offset, log)
            samples, bad = samples + good, bad + wrong
            if time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                raise CommandFailed(f"the command ran past payload.command.timeout_minutes ({cfg.timeout_minutes})")
            time.sleep(0.2)
    offset, good, wrong = _forward_metrics(metrics, offset, log)
    samples, bad = samples + good, bad + wrong
    for path in (stdout, stderr, metrics):
        log.emit("artifact", phase="command", name=path.name, path=f"artifacts/{path.name}", bytes=path.stat().st_size)
    if proc.returncode != 0:
        tail = " | ".join(stderr.read_text(errors="replace").strip().splitlines()[-5:]) or "(stderr is empty)"
        raise CommandFailed(f"the command exited with code {proc.returncode}: {tail}")
    return {"exit_code": 0, "metric_samples": samples, "unparseable_metric_lines": bad}

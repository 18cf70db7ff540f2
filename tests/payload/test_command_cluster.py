"""The command phase across nodes: the cluster in the command's environment, and a real torchrun
line spanning two CPU "nodes" (two runners on this machine)."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import pytest

from benchctl.payload.job import Job
from benchctl.payload.workloads.command import cluster_env
from tests.payload.test_multi_node_runner import _job, events, finish, free_port, start


def _plain_job(**overrides: Any) -> Job:
    raw: dict[str, Any] = {"campaign": "t", "cell": "c", "attempt": 1, "token": "tok", "gpu": "cpu", "count": 2,
                           "phases": ["command"]}
    return Job.from_dict({**raw, **overrides})


def test_one_node_keeps_its_world_size_and_gets_a_free_local_rendezvous() -> None:
    env = cluster_env(_plain_job(count=4))
    port = int(env.pop("BENCHCTL_MASTER_PORT"))
    assert env == {"BENCHCTL_NODES": "1", "BENCHCTL_NODE_RANK": "0", "BENCHCTL_GPUS_PER_NODE": "4",
                   "BENCHCTL_WORLD_SIZE": "4", "BENCHCTL_MASTER_ADDR": "127.0.0.1"}
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # free: nothing holds it


def test_a_cluster_node_gets_the_cluster_and_a_port_none_of_the_payloads_rendezvous_take() -> None:
    env = cluster_env(_plain_job(count=8, nodes=4, node_rank=2, master_addr="10.0.0.5", master_port=23456))
    assert env == {"BENCHCTL_NODES": "4", "BENCHCTL_NODE_RANK": "2", "BENCHCTL_GPUS_PER_NODE": "8",
                   "BENCHCTL_WORLD_SIZE": "32", "BENCHCTL_MASTER_ADDR": "10.0.0.5", "BENCHCTL_MASTER_PORT": "23455"}
    assert int(env["BENCHCTL_MASTER_PORT"]) not in range(23456, 23456 + 100), "the payload's ranks meet at +0, +1 …"


@pytest.mark.parametrize("missing", [{"master_addr": ""}, {"master_port": 0}])
def test_a_cluster_job_without_its_rendezvous_is_refused(missing: dict[str, Any]) -> None:
    job = _plain_job(**{"nodes": 2, "node_rank": 1, "master_addr": "10.0.0.5", "master_port": 23456, **missing})
    with pytest.raises(ValueError, match="need master_addr and master_port"):
        cluster_env(job)


ALLREDUCE = """\
import json, os
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
value = torch.tensor([float(dist.get_rank())])
dist.all_reduce(value)
if dist.get_rank() == 0:
    with open(os.environ["BENCHCTL_METRICS"], "a") as metrics:
        metrics.write(json.dumps({"world_size": dist.get_world_size(), "sum": value.item(),
                                  "bench_world_size": int(os.environ["BENCHCTL_WORLD_SIZE"])}) + "\\n")
line = f"node {os.environ['BENCHCTL_NODE_RANK']} rank {dist.get_rank()} local {os.environ['LOCAL_RANK']}\\n"
os.write(1, line.encode())  # one write: the node's ranks share the command's stdout
dist.destroy_process_group()
"""
TORCHRUN = (f"{sys.executable} -m torch.distributed.run --nnodes $BENCHCTL_NODES --node-rank $BENCHCTL_NODE_RANK "
            "--master-addr $BENCHCTL_MASTER_ADDR --master-port $BENCHCTL_MASTER_PORT "
            "--nproc-per-node $BENCHCTL_GPUS_PER_NODE allreduce.py")


@pytest.mark.slow
def test_one_torchrun_line_spans_both_nodes_after_the_payloads_own_ranks(tmp_path: Path) -> None:
    port = free_port() + 1  # the command meets one below: free a moment ago
    tiny = {"ops": ["all_reduce"], "min_bytes": 8, "max_bytes": 64, "factor": 8, "warmup_iters": 1, "iters": 1}
    procs, dirs = [], []
    for rank in (0, 1):
        workdir = tmp_path / f"node{rank}"
        (workdir / "work").mkdir(parents=True)
        (workdir / "work" / "allreduce.py").write_text(ALLREDUCE)
        dirs.append(workdir)
        job = _job(rank, port, count=1, phases=["collectives", "command"], collectives=tiny,
                   command={"run": TORCHRUN, "timeout_minutes": 3})
        procs.append(start(workdir, job))
    codes = finish(procs, timeout=240)
    logs = [(d / "payload.log").read_text()[-2000:] + (d / "artifacts" / "command.stderr").read_text()[-2000:]
            if (d / "artifacts" / "command.stderr").is_file() else "" for d in dirs]
    assert codes == [0, 0], logs
    head = [e for e in events(dirs[0]) if e["kind"] == "sample" and e["phase"] == "command"]
    assert [(s["world_size"], s["sum"], s["bench_world_size"]) for s in head] == [(2, 1.0, 2)], "0+1 over 2×1"
    printed = sorted(line for d in dirs for line in (d / "artifacts" / "command.stdout").read_text().splitlines())
    assert printed == ["node 0 rank 0 local 0", "node 1 rank 1 local 0"]

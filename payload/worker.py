"""``python -m payload worker``: one rank of the attempt's distributed phases.

The runner starts these processes (``comm.ranks``); each joins the process group and runs the
phases it is named, calling each phase's rank function (the collectives sweep, the preflight
probes, the profile). This module sits above both: the phases import ``comm.group``, never this.
"""

from __future__ import annotations

import gc
import json
import os
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .comm.group import DEFAULT_TIMEOUT_S, backend_for, group_options, release_subgroups, set_collective_timeout
from .comm.ranks import done_file, result_file
from .events import EventLog
from .job import Job

PARENT_POLL_S = 0.5


def follow_parent(poll_s: float = PARENT_POLL_S) -> threading.Thread:
    """End this process (exit code 1) soon after the process that started it is gone. Across
    nodes a rank orphaned by its runner's death would go on with the other nodes' ranks (until
    its stdin ends with the phase); ended, its peers' collectives fail at once instead."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        print(f"pid {os.getpid()}: the runner (pid {parent}) is gone; leaving", flush=True)
        os._exit(1)

    thread = threading.Thread(target=watch, name="follow-parent", daemon=True)
    thread.start()
    return thread


RankFunction = Callable[[Job, int, int, EventLog | None], "dict[str, Any] | None"]
"""A distributed phase on one rank: (job, global rank, world size, events on global rank 0 else
None) → None, or a JSON-able dict the runner gets back (``Ranks.run``)."""


def _rank_functions() -> dict[str, RankFunction]:
    from .comm.collectives import collectives_rank
    from .node.facts_capture import torch_facts_rank
    from .node.probes import allreduce_rank, cluster_rank
    from .workloads.profile import profile_rank

    return {"profile": profile_rank, "collectives": collectives_rank, "preflight_allreduce": allreduce_rank,
            "preflight_cluster": cluster_rank, "preflight_torch": torch_facts_rank}


def run_worker(job_path: str, phase: str | None, rank: int, world_size: int, rendezvous: str,
               timeout_s: float = DEFAULT_TIMEOUT_S, local_rank: int | None = None,
               init: str | None = None) -> int:
    """Entry point of one rank (``rank`` global, ``local_rank`` its GPU, the rank itself by
    default): join the group at ``init`` (an ``init_method``; the FileStore at ``rendezvous`` by
    default; collectives time out after ``timeout_s``), run ``phase`` or, without one, each phase
    named on a line of stdin until its end, writing what the phase returned to ``result_file``
    and appending each finished phase's name to ``done_file``; leave the group. An exception ends
    the process (the runner reads its log's tail)."""
    import torch
    import torch.distributed as dist

    rank_functions = _rank_functions()
    job = Job.load(job_path)
    logs = Path(job_path).parent / "artifacts" / "logs"
    if job.nodes > 1:
        follow_parent()
    backend = backend_for(job)
    local_rank = rank if local_rank is None else local_rank
    if backend == "nccl":
        torch.cuda.set_device(local_rank)  # the GPU index on this node, never the global rank
    set_collective_timeout(timeout_s)
    dist.init_process_group(backend, init_method=init or f"file://{rendezvous}", rank=rank, world_size=world_size,
                            **group_options(backend, local_rank, timeout_s))
    print(f"rank {rank} pid {os.getpid()}: joined the {backend} group of {world_size}", flush=True)
    events = EventLog(Path(job_path).parent / "events.jsonl") if rank == 0 else None
    try:
        names: Iterable[str] = [phase] if phase else (line.strip() for line in sys.stdin)
        for name in names:
            if not name:
                continue
            print(f"rank {rank} pid {os.getpid()}: phase {name}", flush=True)
            if name == "profile" and release_subgroups():
                print(f"rank {rank} pid {os.getpid()}: destroyed the collectives' subgroups", flush=True)
            seen = {key: os.environ.get(key) for key in job.env}
            (logs / f"{name}-rank{rank}.env.json").write_text(json.dumps(seen))
            result = rank_functions[name](job, rank, world_size, events)
            if result is not None:
                result_file(rendezvous, rank, name).write_text(json.dumps(result))
            gc.collect()  # the phase's tensors, before the next phase allocates its own
            if backend == "nccl":
                torch.cuda.empty_cache()
            with done_file(rendezvous, rank).open("a") as done:
                done.write(f"{name}\n")
    finally:
        if events is not None:
            events.close()
        release_subgroups()
        dist.destroy_process_group()
    return 0

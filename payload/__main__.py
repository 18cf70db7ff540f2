"""``python -m payload run job.json`` (the runner; every process it started ends before it does:
``reaper``), ``python -m payload worker ...`` (one rank, for the attempt's distributed phases) and
``python -m payload self-destroy ...`` (the node ends its own bill: ``self_destroy``).

A rank of the attempt (no ``--phase``) that finished leaves with ``os._exit`` once its group is
destroyed and its output flushed: the interpreter's teardown of torch costs about 0.4 s of CPU per
rank (CUDA's more on a GPU), billed for nothing. A rank started for one phase exits normally: that
is the profile under nsys, whose report is written by the profiled process's exit handlers."""

from __future__ import annotations

import argparse
import os
import sys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m payload")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run the phases of a job.json, writing events.jsonl beside it")
    run.add_argument("job", help="path to job.json")
    worker = sub.add_parser("worker", help="one rank of the distributed phases (started by the runner)")
    worker.add_argument("job")
    worker.add_argument("--phase", help="run this phase and leave (default: each phase named on a line of stdin)")
    worker.add_argument("--rank", type=int, required=True, help="global rank")
    worker.add_argument("--local-rank", type=int, help="rank on this node, the GPU index (default: --rank)")
    worker.add_argument("--init-method", help="torch.distributed init_method (default: the --rendezvous FileStore)")
    worker.add_argument("--world-size", type=int, required=True)
    worker.add_argument("--rendezvous", required=True,
                        help="file path for the FileStore (one node) and the rank's done and result files")
    worker.add_argument("--timeout-s", type=float, default=600.0, help="collective timeout (the phase's budget)")
    destroy = sub.add_parser("self-destroy", help="destroy this node with the key the provider put in its container "
                             "(the dead-man switch's idle shutdown on Vast.ai and RunPod)")
    destroy.add_argument("provider", choices=["vastai", "runpod"])
    destroy.add_argument("node_id", help="the instance or pod id the controller rented")
    destroy.add_argument("--api", required=True, help="the provider API's base URL")
    destroy.add_argument("--environ", default="/proc/1/environ",
                         help="where the container's own environment is read (default: PID 1's)")
    args = parser.parse_args(argv)

    if args.command == "self-destroy":
        from .self_destroy import self_destroy

        return self_destroy(args.provider, args.node_id, args.api, args.environ)
    if args.command == "run":  # no process it starts outlives it, however it detaches (``reaper``)
        from .reaper import adopt_orphans, end_all_on_sigterm, end_descendants
        from .runner import run_job

        adopt_orphans()
        end_all_on_sigterm()
        try:
            return run_job(args.job)
        finally:
            end_descendants()
    from .worker import run_worker

    code = run_worker(args.job, args.phase, args.rank, args.world_size, args.rendezvous, args.timeout_s,
                      local_rank=args.local_rank, init=args.init_method)
    if args.phase is None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(main())

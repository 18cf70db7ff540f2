"""``python -m payload run job.json``: run the job's pending phases, writing events.jsonl beside it.

Exit codes: 0 every phase done, 3 preflight says the node is bad, 4 the dead-man switch stopped it
(``payload.deadman``), 5 a worker node could not reach node 0's rendezvous port (before any phase:
``payload.comm.ranks.probe_rendezvous``; no node is bad), 1 any other error. The last
event is always ``done`` with the exit code (unless the process is killed).

Across nodes (``job.nodes`` > 1) the controller starts this runner on every node with the same
job but the node's own ``node_rank``; each runs the same phases in the same order on its
``count`` local ranks of the one world (``payload.comm.ranks``), writes its own events.jsonl and
exit code; only node 0's events carry samples (global rank 0). A preflight error that names a
node carries ``bad_node_rank``; one about the fabric between nodes has ``bad_node: true`` alone.
A peer node that dies makes this one fail (its ranks' collectives error or time out), not hang.

The distributed phases (preflight's all_reduce on GPUs, collectives, profile) run on one set of
rank processes for the whole attempt (``payload.comm.ranks.Ranks``), started by the first of them
and closed before a phase that starts its own processes on the GPUs (command, the profile under
nsys) and before ``done``; the runner emits ``phase_start``/``phase_end``/``error``/``done`` as
each phase begins and ends, rank 0 the samples.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
import traceback
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

from .comm.collectives import run_collectives
from .comm.efa_env import efa_environment
from .comm.p2p import run_p2p
from .comm.ranks import Layout, Ranks, RendezvousUnreachable, hold_rendezvous, launch, probe_rendezvous
from .deadman import start_deadman
from .events import EventLog
from .job import EXIT_BAD_NODE, EXIT_ERROR, EXIT_OK, EXIT_RENDEZVOUS, PHASES, Job
from .node.preflight import BadNode, run_preflight
from .spot_notice import NOTICE_FILE_ENV, SpotWatch, noticed, wait_for_reclaim
from .workloads.command import run_command
from .workloads.profile import grad_accum_steps, summarize

PhaseFn = Callable[[Job, Path, EventLog], dict[str, Any]]


def _profile(job: Job, job_path: Path, log: EventLog, ranks: Ranks) -> dict[str, Any]:
    if job.profile:  # a batch that does not divide fails here, before ranks start for it
        grad_accum_steps(job.profile, Layout.of(job).world_size)
    nsys = shutil.which("nsys") if job.profile and job.profile.nsys else None
    if nsys:  # nsys wraps whole processes: the profile gets ranks of its own
        ranks.close()
        launch(job_path, "profile", job.count, wrapper=nsys_wrapper(nsys, job_path))
    else:
        ranks.run("profile")
    summary = summarize(log.path)
    if job.profile and job.profile.nsys and not nsys:
        summary["nsys"] = "requested, but nsys is not on the node's PATH: profiled without it"
    for report in sorted((job_path.parent / "artifacts").glob("nsys-profile-rank*.nsys-rep")):
        log.emit("artifact", phase="profile", name=report.name, path=f"artifacts/{report.name}",
                 bytes=report.stat().st_size)
    return summary


def nsys_wrapper(nsys: str, job_path: Path) -> Callable[[int], list[str]]:
    """The command prefix that runs one rank under Nsight Systems, its report under artifacts/."""
    def prefix(rank: int) -> list[str]:
        output = job_path.parent / "artifacts" / f"nsys-profile-rank{rank}"
        return [nsys, "profile", "--force-overwrite=true", "--trace=cuda,nvtx,osrt", "-o", str(output)]

    return prefix


def run_job(job_file: str | Path) -> int:
    job_path = Path(job_file).resolve()
    workdir = job_path.parent
    (workdir / "artifacts").mkdir(exist_ok=True)
    job = Job.load(job_path)
    os.environ.update(efa_environment(job.fabric, os.environ))  # every rank, probe and command starts from here
    with EventLog(workdir / "events.jsonl") as log:
        if job.max_idle_minutes is not None:
            start_deadman(workdir, job.max_idle_minutes, log, job.idle_shutdown)
        watch = SpotWatch(workdir).start() if job.spot_notice else None
        if watch is not None:
            os.environ[NOTICE_FILE_ENV] = str(watch.path)  # the ranks, started from here, look for it there
        ranks = Ranks(job_path, job.count)
        try:
            code = _rendezvous(job, log) or _run_phases(job, job_path, log, ranks, watch)
        finally:
            ranks.close()
            if watch is not None:
                watch.stop()
        log.emit("done", exit_code=code)
    return code


def _rendezvous(job: Job, log: EventLog) -> int | None:
    """Across nodes, before any phase: node 0 answers on its rendezvous port, the others probe it.
    EXIT_RENDEZVOUS (with an error event and the reason on stderr, for ``payload.log``) when this
    worker cannot reach it; None otherwise."""
    hold_rendezvous(job)
    try:
        probe_rendezvous(job)
    except RendezvousUnreachable as exc:
        print(exc, file=sys.stderr, flush=True)
        log.emit("error", message=str(exc), rendezvous_unreachable=job.node_rank)
        return EXIT_RENDEZVOUS
    return None


def _run_phases(job: Job, job_path: Path, log: EventLog, ranks: Ranks, watch: SpotWatch | None = None) -> int:
    """Run the pending phases in order, each framed by phase_start/phase_end or ended by an error
    event; return the exit code. After a spot interruption notice (``watch``) no phase starts, and
    the profile it cut short does not end: ``preempt_notice`` instead, then the payload waits for the
    node's end."""
    phases: dict[str, PhaseFn] = {
        "preflight": partial(run_preflight, ranks=ranks),
        "p2p": run_p2p,
        "collectives": partial(run_collectives, ranks=ranks),
        "profile": partial(_profile, ranks=ranks),
        "command": run_command,
    }
    for phase in job.pending_phases():
        if phase not in PHASES:
            log.emit("error", phase=phase, message=f"unknown phase {phase!r}; known: {', '.join(PHASES)}")
            return EXIT_ERROR
        if phase == "command":  # the user's command may want the GPUs the ranks hold
            ranks.close()
        if watch is not None and (notice := noticed(watch.path)) is not None:
            return _preempted(log, ranks, phase, notice, 0)
        log.emit("phase_start", phase=phase)
        start = time.perf_counter()
        try:
            summary = phases[phase](job, job_path, log)
        except BadNode as exc:  # across nodes, the node it names (none: the fabric)
            named = {} if exc.node_rank is None else {"bad_node_rank": exc.node_rank}
            log.emit("error", phase=phase, message=str(exc), bad_node=True, **named)
            return EXIT_BAD_NODE
        except Exception as exc:  # the controller needs the reason, whatever it is
            log.emit("error", phase=phase, message=f"{type(exc).__name__}: {exc}",
                     traceback=traceback.format_exc(limit=5))
            return EXIT_ERROR
        if watch is not None and phase == "profile" and _cut_short(job, summary) \
                and (notice := noticed(watch.path)) is not None:  # what it measured is in events.jsonl
            return _preempted(log, ranks, phase, notice, int(summary.get("timed_steps") or 0))
        log.emit("phase_end", phase=phase, elapsed_s=round(time.perf_counter() - start, 6), summary=summary)
    return EXIT_OK


def _cut_short(job: Job, summary: dict[str, Any]) -> bool:
    """The profile stopped before its remaining timed steps were all measured."""
    remaining = max(0, job.profile.steps - job.profile_steps_done) if job.profile else 0
    return int(summary.get("timed_steps") or 0) < remaining


def _preempted(log: EventLog, ranks: Ranks, phase: str, notice: dict[str, Any], timed_steps: int) -> int:
    """``preempt_notice``, then idle until EC2 ends the node (the controller reads the preemption
    from the provider); an error if it never comes."""
    log.emit("preempt_notice", phase=phase, action=notice.get("action"), notice_time=notice.get("time"),
             timed_steps=timed_steps)
    ranks.close()
    wait_for_reclaim()
    log.emit("error", phase=phase, message=f"spot interruption notice for {notice.get('time')}, but the node "
             "was not reclaimed")
    return EXIT_ERROR

"""The scheduler: run every unfinished cell of a campaign concurrently, then report.

``terminate_orphans`` (called before anything else by run and resume, complete campaigns too)
terminates and reports nodes that carry the campaign's tag but belong to no open attempt: they
would bill with nobody watching. A cell runs only under this controller's lease on it: a cell
another live controller holds (a second ``run`` of the same campaign in the same store: another
checkout, another terminal) is waited for once the free cells are done, its lease asked again
every status interval: a cell that controller gave back (finished, stopped, ``benchctl down``) is
left as it is; one whose holder is gone with the lease (died) is run here. A provider's
``max_parallel_nodes`` caps how many of its cells run at once. Ctrl-C sets the shared stop flag:
cells stop launching, terminate their nodes and record ``cancelled``; cells waited for are left to
their controller.
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

from benchctl.engine.cell_runner import CellRunner
from benchctl.engine.cell_states import FINISHED, CellState
from benchctl.engine.run_context import RunContext
from benchctl.provisioners.base import of_attempt
from benchctl.store import queries as q


@dataclass(frozen=True)
class RunSummary:
    ran: int
    states: dict[str, str]
    held_elsewhere: dict[str, str]
    """Cells skipped because another controller holds their lease: key → holder."""

    @property
    def complete(self) -> bool:
        return all(state == CellState.DONE.value for state in self.states.values())


def pending_cells(ctx: RunContext) -> list[int]:
    """Unfinished cells of the campaign file as it is now; cells removed from the file keep their
    history in the store but do not run."""
    in_file = {cell.key for cell in ctx.campaign.cells}
    return [c.id for c in q.cells(ctx.engine, ctx.campaign_id)
            if c.state != CellState.DONE.value and c.id and c.key in in_file]


def terminate_orphans(ctx: RunContext) -> list[str]:
    """Terminate the campaign's nodes that no open attempt knows about; return their ids.

    The nodes are listed before the open attempts are read: an attempt row is committed before its
    launch, so a node another controller is launching right now always finds its attempt."""
    gone = []
    for name in sorted({cell.provider for cell in ctx.campaign.cells}):
        provider = ctx.providers.get(name)
        nodes = provider.owned(ctx.campaign_tag)
        if not nodes:
            continue
        open_tokens = [a.token for a in q.campaign_attempts(ctx.engine, ctx.campaign_id) if a.open]
        for node in nodes:  # a cluster's members carry their own tokens (``member_token``)
            if not any(of_attempt(node.token, token) for token in open_tokens):
                provider.terminate(node)
                ctx.log(f"terminated {name} node {node.node_id}: it carried this campaign's tag but no "
                        "open attempt knew it")
                gone.append(node.node_id)
    return gone


def connections_for(concurrency: int) -> int:
    """The store connections a controller running ``concurrency`` cells at once uses at the same time:
    one per cell thread, plus the lease renewal thread, the progress view and the main thread. A
    cell's budget watcher (``Budget.watch``) reads between its cell's sessions, seldom beside them:
    the pool's overflow covers it. The CLI sizes the store's pool with it (``CliState.connections``)."""
    return max(1, concurrency) + 3


def run_campaign(ctx: RunContext, concurrency: int) -> RunSummary:
    todo = pending_cells(ctx)
    held: dict[int, tuple[str, str]] = {}
    """Cells another controller holds: cell id → (key, holder)."""
    if todo:
        limits: dict[str, threading.BoundedSemaphore] = {
            name: threading.BoundedSemaphore(limit)
            for name in {str(c.provider) for c in ctx.campaign.cells}
            if (limit := ctx.providers.get(name).max_parallel_nodes) is not None}
        with ThreadPoolExecutor(max_workers=max(1, concurrency), thread_name_prefix="cell") as pool:
            futures = [pool.submit(_run_one, ctx, cell_id, limits, held) for cell_id in todo]
            _wait(ctx, futures)
            if held and not ctx.stop.is_set():
                _wait_for_held(ctx, pool, limits, held)
    in_file = {cell.key for cell in ctx.campaign.cells}
    states = {c.key: c.state for c in q.cells(ctx.engine, ctx.campaign_id) if c.key in in_file}
    return RunSummary(ran=len(todo) - len(held), states=states,
                      held_elsewhere={key: holder for key, holder in held.values()})


def _wait_for_held(ctx: RunContext, pool: ThreadPoolExecutor, limits: dict[str, threading.BoundedSemaphore],
                   held: dict[int, tuple[str, str]]) -> None:
    """Ask for the leases of the cells another controller holds every status interval, until none
    is held (each is then finished, or run here) or Ctrl-C (which leaves them to their controller)."""
    from benchctl.engine.lease import holder as describe

    owners = "; ".join(describe(owner).describe() for owner in sorted({owner for _, owner in held.values()}))
    ctx.log(f"waiting for {len(held)} cell(s) that another controller ({owners}) runs in this store "
            f"({ctx.engine.url.render_as_string(hide_password=True)}): this run goes on when they end. Ctrl-C "
            "stops waiting and leaves them to it; to run this campaign apart, give this checkout its own "
            "BENCHCTL_HOME (or --db)")
    try:
        while held:
            if ctx.stop.wait(ctx.status_interval_s):
                return
            _wait(ctx, [pool.submit(_run_one, ctx, cell_id, limits, held, True) for cell_id in list(held)])
    except KeyboardInterrupt:
        if not ctx.stop.is_set():  # else _wait said it, and stopped what ran here
            ctx.stop.set()
            ctx.log("interrupted: stopped waiting; the other controller goes on with its cells")
        raise


def _run_one(ctx: RunContext, cell_id: int, limits: dict[str, threading.BoundedSemaphore],
             held: dict[int, tuple[str, str]], waited: bool = False) -> None:
    """Run the cell under this controller's lease. Held by another controller: noted in ``held``
    (said once, not again while ``waited``). ``waited``: after waiting for that controller, the cell
    runs here only when it is gone with the lease (died, or its lease expired) and left the cell
    unfinished; a lease it gave back, or a cell it finished, is left as it is."""
    key = str(cell_id)
    try:
        runner = CellRunner(ctx, cell_id)
        key = runner.key
        holder = ctx.leases.take_over(cell_id) if waited else ctx.leases.take(cell_id)
        if holder == "":  # given back: its controller finished or stopped it (or `benchctl down`)
            held.pop(cell_id, None)
            return
        if holder is not None:
            if not waited:
                from benchctl.engine.lease import holder as describe

                who = describe(holder)
                ctx.log(f"{key}: waiting: controller {who.host} pid {who.pid} is running it")
            held[cell_id] = (key, holder)
            return
        held.pop(cell_id, None)
        try:
            if waited and CellState(q.cell(ctx.engine, cell_id).state) in FINISHED:
                return  # the other controller finished it: its outcome stands
            limit = limits.get(runner.spec.provider)
            if limit is not None:
                while not limit.acquire(timeout=0.2):
                    if ctx.stop.is_set():
                        return
            try:
                runner.run()
            finally:
                if limit is not None:
                    limit.release()
        finally:
            ctx.leases.give_back(cell_id)
    except Exception as exc:
        # A bug or a store failure: the attempt's own ``finally`` already terminated its node.
        ctx.log(f"{key}: controller error: {type(exc).__name__}: {exc}")
        if not ctx.leases.lost(cell_id):
            q.set_cell_state(ctx.engine, cell_id, CellState.FAILED.value, f"controller error: {exc}")


def _wait(ctx: RunContext, futures: list[Future[None]]) -> None:
    """Wait for the cells; on the first Ctrl-C ask them to stop and keep waiting for their cleanup."""
    done = threading.Event()
    remaining = len(futures)
    lock = threading.Lock()

    def finished(_: Future[None]) -> None:
        nonlocal remaining
        with lock:
            remaining -= 1
            if remaining == 0:
                done.set()

    for future in futures:
        future.add_done_callback(finished)
    try:
        while not done.wait(0.2):
            pass
    except KeyboardInterrupt:
        ctx.stop.set()
        ctx.log("interrupted: terminating this campaign's nodes (Ctrl-C again to exit at once)")
        try:
            done.wait()
        except KeyboardInterrupt:
            ctx.log("exiting now; `benchctl resume` terminates what still runs")
            ctx.hard_exit()
            os._exit(130)
        raise

"""Run a measurement in a spawned child process that exits when it is done.

The CUDA contexts a measurement creates and the memory torch's caching allocator keeps (≈3.3 GiB
per GPU after the preflight probes and the p2p matrix) live as long as the process does; run in
the runner, they would stay alive on every GPU through the profile. A child that exits frees
them, and one that hangs can be killed at a deadline (a thread cannot be).
"""

from __future__ import annotations

import multiprocessing
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

Report = Callable[[Any], None]


def _main(conn: Connection, target: Callable[..., None], args: tuple[Any, ...]) -> None:
    try:
        target(lambda value: conn.send(("value", value)), *args)
        conn.send(("done", None))
    except BaseException as exc:  # the parent reports it
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def run_in_child(target: Callable[..., None], args: tuple[Any, ...] = (),
                 deadline: float | None = None) -> tuple[list[Any], str | None]:
    """Call ``target(report, *args)`` in a spawned process; ``report(value)`` sends a picklable
    value back. ``target`` must be importable (a module-level function).

    Returns ``(values reported, None)`` when ``target`` returned, or ``(values reported so far,
    reason)``: ``"timed out"`` when the child was still running at ``deadline`` (a
    ``time.monotonic()`` value; it is killed), ``"<Exception>: <message>"`` when ``target`` raised,
    or the exit code when the child died without a word."""
    context = multiprocessing.get_context("spawn")
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(target=_main, args=(sender, target, args), daemon=True)
    child.start()
    sender.close()
    values: list[Any] = []
    reason: str | None = None
    try:
        while True:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not receiver.poll(wait):
                reason = "timed out"
                break
            try:
                kind, value = receiver.recv()
            except EOFError:
                child.join()
                reason = f"the child process exited with code {child.exitcode} before it finished"
                break
            if kind == "value":
                values.append(value)
            else:
                reason = value if kind == "error" else None
                break
    finally:
        receiver.close()
        if child.is_alive():
            child.join(timeout=5 if reason is None else 0)
        if child.is_alive():
            child.kill()
        child.join()
    return values, reason

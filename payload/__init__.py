"""The payload: what runs on a rented node.

Python >= 3.10 standard library plus torch (imported lazily) only. It never imports benchctl,
store or provisioners, because it is copied to a bare node. The controller may import its pure
modules (``job``, ``stats``, ``workloads.presets``, ``node.thresholds`` …) so that one definition
serves both sides.

At the top, the runner and its protocol (``__main__``, ``runner``, ``worker``, ``job``, ``events``,
the dead-man switch, the reaper); below it ``node`` (facts, checks, preflight), ``workloads`` (the
profile and command phases) and ``comm`` (ranks, process group, collectives, p2p). They import one another
without a cycle (an import-linter contract in pyproject.toml).
"""

PROTOCOL_VERSION = 1

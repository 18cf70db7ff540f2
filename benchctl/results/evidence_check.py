"""Whether a cell's stored events may make a result, and which phases its attempts really finished.

A node is a stranger's machine, and a broken node is as dangerous as a hostile one: what it wrote
is evidence, not truth. ``refusal`` says why a cell's samples break the record rules
(``benchctl.results.evidence_rules``) for its campaign, naming the first bad one (``attempt 2 line
14: 'step_time_s' is -5 s, outside …``): a sample of a phase the campaign does not run, a value no
command could store or print, a profile sample that is no plausible step or lies outside the
profile's timed steps, more samples in one attempt than the profile has steps, a preflight
observation of the wrong type, or a profile that never finished with every timed step measured.
``phases_done`` says which phases count as finished: only those an attempt framed with its own
``phase_start`` and ``phase_end`` around the phase's samples (a forged ``phase_end`` finishes nothing).
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from sqlalchemy.engine import Engine

from benchctl.campaign.spec import CampaignSpec
from benchctl.results.evidence_rules import step_time_problem, timed_sample_problem, value_problem
from benchctl.store import queries as q
from benchctl.store.models import Event

SAMPLED = ("preflight", "p2p", "collectives")
"""Phases that always record samples between their start and end (``command``'s metrics are optional;
the profile's are counted across attempts: a node that replaces one preempted after its last timed
step measures none, and with ``warmup_steps: 0`` writes no sample at all)."""
_NUMBER = (int, float)
OBSERVED: dict[str, dict[str, tuple[type, ...]]] = {
    "topology": {"class": (str,), "nvlink_width": (int,)},
    "cpu": {"vcpus": (int,)},
    "numa": {"numa_nodes": (int,), "gpu_numa": (dict,)},
    "fabric_hca": {"nics": (list,), "link_layer": (str,), "rates_gbps": (list,), "active_at_rate": (int,)},
    "fabric_efa": {"count": (int,)},
    "fabric_gdr": {"gdrdma_channels": (int,)},
    "inter_node_busbw": {"busbw_gbps": _NUMBER},
    "fabric_transport": {"fabric": (str,)},
}
"""Preflight observations a result reads (``cell_evidence.node_facts``), by check name: where the
observation is a mapping, each field absent, null or of these types (as ``payload.node.checks``,
``payload.node.fabric_checks`` and ``payload.node.cluster_checks`` write them)."""
_ITEMS: dict[tuple[str, str], tuple[type, ...]] = {("numa", "gpu_numa"): (int, type(None)),
                                                   ("fabric_hca", "rates_gbps"): _NUMBER}
"""The types of the items of the list or mapping fields above."""


@dataclass(frozen=True)
class _Sample:
    where: str
    attempt_id: int
    phase: str | None
    data: Any


def _samples(engine: Engine, cell_id: int) -> list[_Sample]:
    numbers = {a.id: a.number for a in q.attempts(engine, cell_id)}
    return [_Sample(_where(numbers, event), event.attempt_id, event.phase, _loads(event.data_json))
            for event in q.events(engine, cell_id, kind="sample")]


def _where(numbers: dict[int | None, int], event: Event) -> str:
    return f"attempt {numbers.get(event.attempt_id, '?')} line {event.line + 1}"


def _loads(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def refusal(engine: Engine, cell_id: int, spec: CampaignSpec) -> str | None:
    """Why the cell's stored samples may not make a result; None when they may (or there are none)."""
    samples = _samples(engine, cell_id)
    profile = spec.payload.profile
    per_attempt: dict[tuple[int, bool], int] = defaultdict(int)
    for sample in samples:
        problem = _sample_problem(sample, spec)
        if problem:
            return f"{sample.where}: {problem}"
        if sample.phase == "profile":
            warmup = bool(sample.data.get("warmup"))
            per_attempt[(sample.attempt_id, warmup)] += 1
            most = profile.warmup_steps if warmup else profile.steps
            if per_attempt[(sample.attempt_id, warmup)] > most:
                kind = "warmup" if warmup else "timed"
                return f"{sample.where}: more {kind} samples in one attempt than the profile's {most} {kind} steps"
    if "profile" in spec.payload.phases:
        measured = _timed_indexes(samples, profile.steps)
        if len(measured) < profile.steps:
            return f"the profile measured {len(measured)} of its {profile.steps} timed steps{_refused(engine, cell_id)}"
    return None


def _refused(engine: Engine, cell_id: int) -> str:
    """``; attempt N line L: why`` of the cell's first line refused at ingestion (``event_sync``), if any."""
    numbers = {a.id: a.number for a in q.attempts(engine, cell_id)}
    for event in q.events(engine, cell_id, kind="error"):
        data = _loads(event.data_json)
        if isinstance(data, dict) and data.get("malformed_event"):
            message = str(data.get("message"))
            return f"; {_where(numbers, event)}: {message if len(message) <= 160 else message[:157] + '...'}"
    return ""


def _sample_problem(sample: _Sample, spec: CampaignSpec) -> str | None:
    if sample.phase not in spec.payload.phases:
        return (f"a {sample.phase} sample, but the campaign runs no {sample.phase} phase" if sample.phase
                else "a sample of no phase")
    if not isinstance(sample.data, dict):
        return "a sample that is not a JSON object"
    if sample.phase == "profile" and not sample.data.get("warmup"):
        return timed_sample_problem(sample.data, spec.payload.profile.steps)
    if sample.phase == "preflight":
        return value_problem(sample.data) or observed_problem(sample.data)
    if sample.phase == "command" and "step_time_s" in sample.data:
        problem = step_time_problem(sample.data["step_time_s"])
        if problem:
            return f"'step_time_s' {problem}"
    return value_problem(sample.data)


def observed_problem(check: dict[str, Any]) -> str | None:
    """Why a preflight check's ``observed`` is not as the payload writes it (``OBSERVED``); None if it is."""
    name = check.get("name")
    if not isinstance(name, str) or name not in OBSERVED:
        return None
    fields = OBSERVED[name]
    observed = check.get("observed")
    if not isinstance(observed, dict):
        return None  # a skipped check's note ("cpu cell"), or nothing: no facts are read from it
    for field, types in fields.items():
        value = observed.get(field)
        if value is None:
            continue
        items = list(value.values()) if isinstance(value, dict) else value if isinstance(value, list) else []
        if not _is(value, types) or not all(_is(item, _ITEMS.get((name, field), (object,))) for item in items):
            return f"preflight {name!r} observed {field!r} of the wrong type"
    return None


def _is(value: Any, types: tuple[type, ...]) -> bool:
    return isinstance(value, types) and not (isinstance(value, bool) and bool not in types)


def _timed_indexes(samples: list[_Sample], steps: int) -> set[int]:
    return {s.data["timed_index"] for s in samples
            if s.phase == "profile" and isinstance(s.data, dict) and not s.data.get("warmup")
            and timed_sample_problem(s.data, steps) is None}


def phases_done(engine: Engine, cell_id: int, spec: CampaignSpec) -> set[str]:
    """The phases some attempt finished: its own ``phase_start`` then ``phase_end`` of the phase, with
    the phase's samples between them (``SAMPLED``); the profile also needs every one of its timed
    steps measured (by this attempt or earlier ones: a preempted profile continues on a new node)."""
    events = q.events(engine, cell_id)
    finished = set(_finished_by(events))
    if "profile" in finished:
        steps = spec.payload.profile.steps
        samples = [_Sample("", e.attempt_id, e.phase, _loads(e.data_json))
                   for e in events if e.kind == "sample" and e.phase == "profile"]
        if len(_timed_indexes(samples, steps)) < steps:
            finished.discard("profile")
    return finished & set(spec.payload.phases)


def command_attempt(engine: Engine, cell_id: int) -> int | None:
    """The last attempt that finished the command phase (framed it, as ``phases_done`` counts); None if none.
    Its samples are the command's step times: a command stopped on a node (preempted) starts over on the next."""
    attempts = _finished_by(q.events(engine, cell_id)).get("command", [])
    return attempts[-1] if attempts else None


def _finished_by(events: list[Event]) -> dict[str, list[int]]:
    """For each phase, the attempts (in event order) that framed it with their own ``phase_start``
    and ``phase_end``, with its samples between them where the phase always records some (``SAMPLED``)."""
    open_phase: dict[int, str | None] = {}
    counted: dict[int, int] = defaultdict(int)
    finished: dict[str, list[int]] = defaultdict(list)
    for event in events:
        attempt = event.attempt_id
        if event.kind == "phase_start":
            open_phase[attempt], counted[attempt] = event.phase, 0
        elif event.kind == "sample" and event.phase is not None and event.phase == open_phase.get(attempt):
            counted[attempt] += 1
        elif event.kind == "phase_end" and event.phase is not None and event.phase == open_phase.get(attempt):
            if counted[attempt] or event.phase not in SAMPLED:
                finished[event.phase].append(attempt)
            open_phase[attempt] = None
    return finished

"""A cell's Result from its stored events: median and p10–p90 of the timed profile steps, and
cost-to-train at the billed price of the attempts that measured them.

A preempted cell's timed steps come from several nodes of the same configuration: each sample
carries ``timed_index`` (unique across the cell's attempts), the first recorded copy of an index
counts, and the price is the attempts' billed prices weighted by the samples each measured. An
attempt's price is that of everything it rented: for a cell of ``nodes`` > 1, the node's × nodes.
The result also says how those steps computed (``precision``, ``compiled``, ``attention``,
``host_data``, as the samples recorded them; several values, e.g. from nodes with different images,
are joined with ``+``), and how steady they were: ``drift`` (``payload.stats.drift`` of the step
times in timed-index order: last-quarter ÷ first-quarter median − 1; None under 4 steps) and
``settle_steps``/``settle_s`` (the unrecorded steps each attempt ran until its clocks settled, as
its samples say, summed over the attempts whose steps were timed).

A campaign without the profile phase that runs ``command`` is priced from the command's own
metrics: each sample of the last attempt that finished the command phase (``command_attempt``)
carrying ``step_time_s`` (and no true ``warmup``) is one timed step, at that attempt's price, over
the target's steps (``target.steps``, ``tokens / tokens_per_step``, or the nanochat target's).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy.engine import Engine

from benchctl.campaign.spec import CampaignSpec
from benchctl.payload.stats import drift, median, percentile
from benchctl.results.cell_evidence import allreduce_busbw, cell_flags, node_facts
from benchctl.results.cost import cost_to_train
from benchctl.results.evidence_check import command_attempt, phases_done, refusal
from benchctl.results.evidence_rules import NO_RESULT, Measured, timed_sample_problem
from benchctl.results.step_split import step_split
from benchctl.store import queries as q
from benchctl.store.models import Result


@dataclass(frozen=True)
class TimedSample:
    attempt_id: int
    timed_index: int
    step_time_s: float


def timed_profile_events(engine: Engine, cell_id: int) -> list[tuple[int, dict[str, Any]]]:
    """(attempt id, sample data) of the cell's timed profile steps, one per ``timed_index`` (its first
    recorded copy), in index order."""
    return first_timed((event.attempt_id, json.loads(event.data_json))
                       for event in q.events(engine, cell_id, kind="sample", phase="profile"))


def first_timed(samples: Iterable[tuple[int, dict[str, Any]]]) -> list[tuple[int, dict[str, Any]]]:
    """``timed_profile_events`` of a cell's profile samples, (attempt id, data) in attempt and line
    order (the report reads them for many cells at once)."""
    seen: dict[int, tuple[int, dict[str, Any]]] = {}
    for attempt_id, data in samples:
        if not isinstance(data, dict) or data.get("warmup") or timed_sample_problem(data):
            continue  # a warmup step, or no step (what is wrong with it: evidence_check.refusal)
        seen.setdefault(int(data["timed_index"]), (attempt_id, data))
    return [seen[i] for i in sorted(seen)]


def timed_samples(engine: Engine, cell_id: int) -> list[TimedSample]:
    """The cell's timed profile steps, one per ``timed_index``, in index order."""
    return [TimedSample(attempt_id, int(data["timed_index"]), float(data["step_time_s"]))
            for attempt_id, data in timed_profile_events(engine, cell_id)]


def _how_computed(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """precision, compiled, attention and host_data of the timed samples (None where none recorded it)."""
    how: dict[str, Any] = {}
    for name in ("precision", "attention", "host_data"):
        values = sorted({str(s[name]) for s in samples if s.get(name) is not None})
        how[name] = "+".join(values) if values else None
    compiled = [bool(s["compiled"]) for s in samples if s.get("compiled") is not None]
    how["compiled"] = all(compiled) if compiled else None
    return how


def _steadiness(samples: list[TimedSample], timed: list[dict[str, Any]]) -> dict[str, Any]:
    """drift of the step times (in index order), settle steps and seconds summed over the attempts
    that timed them (each attempt's first sample that says; None where none did)."""
    settle: dict[int, tuple[int, float]] = {}
    for sample, data in zip(samples, timed, strict=True):
        if sample.attempt_id not in settle and isinstance(data.get("settle_steps"), int):
            settle[sample.attempt_id] = (data["settle_steps"], float(data.get("settle_s") or 0.0))
    moved = drift([s.step_time_s for s in samples])
    return {"drift": moved["drift"] if moved else None,
            "settle_steps": sum(n for n, _ in settle.values()) if settle else None,
            "settle_s": round(sum(t for _, t in settle.values()), 3) if settle else None}


def command_steps(engine: Engine, cell_id: int, attempt_id: int) -> list[dict[str, Any]]:
    """The command's timed steps: ``attempt_id``'s command samples that carry ``step_time_s`` and are
    no warm-up, in line order (``evidence_check.refusal`` has refused a cell with an implausible one)."""
    samples = (json.loads(e.data_json) for e in q.events(engine, cell_id, kind="sample", phase="command")
               if e.attempt_id == attempt_id)
    return [data for data in samples if isinstance(data, dict) and "step_time_s" in data and not data.get("warmup")]


@dataclass(frozen=True)
class NoResult:
    """The cell's evidence may not rank: ``why`` names the first bad record (``evidence_check``)."""

    why: str


def save_cell_result(engine: Engine, cell_id: int, spec: CampaignSpec) -> str | None:
    """Compute and store the cell's result; where its evidence is refused, remove any result it had
    and return ``no result: why`` (for the cell's reason, which status, leaderboard and report show)."""
    outcome = compute_result(engine, cell_id, spec)
    if isinstance(outcome, Result):
        q.save_result(engine, outcome)
    elif isinstance(outcome, NoResult):
        q.delete_result(engine, cell_id)
        return f"{NO_RESULT}{outcome.why}"
    return None


def compute_result(engine: Engine, cell_id: int, spec: CampaignSpec) -> Result | NoResult | None:
    """The cell's result; ``NoResult`` when its samples break the record rules
    (``evidence_check.refusal``: the campaign's profile unfinished included) or its figures leave
    the bounds every result meets (``evidence_rules.Measured``); None when the campaign runs no profile
    (or no attempt framed the profile it measured, as a cell of a campaign without one)."""
    why = refusal(engine, cell_id, spec)
    if why:
        return NoResult(why)
    if "profile" not in spec.payload.phases and "command" in spec.payload.phases:
        attempt = command_attempt(engine, cell_id)
        timed = command_steps(engine, cell_id, attempt) if attempt is not None else []
        samples = [TimedSample(attempt or 0, i, float(data["step_time_s"])) for i, data in enumerate(timed)]
    elif "profile" not in phases_done(engine, cell_id, spec):
        return NoResult("no attempt finished the profile phase") if "profile" in spec.payload.phases else None
    else:
        samples = timed_samples(engine, cell_id)
        # the same timed steps as the step time (one per timed index, as the report draws them)
        timed = [data for _, data in timed_profile_events(engine, cell_id)]
    if not samples:
        return None
    prices = {a.id: a.hourly_usd or 0.0 for a in q.attempts(engine, cell_id)}
    hourly = sum(prices[s.attempt_id] for s in samples) / len(samples)
    times = [s.step_time_s for s in samples]
    cell = q.cell(engine, cell_id)
    cost = cost_to_train(median(times), spec.target.train_steps(), hourly)
    split = step_split(timed)
    facts = node_facts(engine, cell_id)
    busbw = allreduce_busbw(engine, cell_id)
    result = Result(
        cell_id=cell_id, step_time_ms=cost.step_time_s * 1000, step_time_p10_ms=percentile(times, 10) * 1000,
        step_time_p90_ms=percentile(times, 90) * 1000, timed_steps=len(times), hourly_usd=cost.hourly_usd,
        market=cell.market, target_steps=cost.target_steps, train_hours=cost.train_hours,
        cost_to_train_usd=cost.cost_usd, computed_at=time.time(), model=spec.target_label(),
        interconnect=facts.interconnect, vcpus=facts.vcpus, numa=facts.numa,
        optimizer_ms=split.optimizer_s * 1000 if split else None,
        optimizer_share=split.optimizer_share if split else None, comm_share=split.comm_share if split else None,
        busbw_gbps=busbw[0] if busbw else None, busbw_bytes=busbw[1] if busbw else None,
        flags_json=json.dumps(cell_flags(engine, cell_id)), **_how_computed(timed), **_steadiness(samples, timed))
    why = out_of_bounds(result)
    return NoResult(why) if why else result


def out_of_bounds(result: Result) -> str | None:
    """Which figure of ``result`` leaves the bounds an imported record must meet too (``Measured``)."""
    try:
        Measured.model_validate({name: getattr(result, name) for name in Measured.model_fields})
    except ValidationError as exc:
        error = exc.errors()[0]
        return f"{'.'.join(map(str, error['loc']))} {error['input']!r}: {error['msg']}"
    return None

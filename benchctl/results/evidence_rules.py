"""The rules a measurement meets before it is stored or ranked: one definition for the records
``benchctl import`` reads (``benchctl.results.records``) and for what a node writes (its event lines,
``benchctl.engine.event_sync``; its samples, ``benchctl.results.cell_result``).

Neither source is trusted. Every value must be storable and readable back by any command: integers
within 64 bits (the store's columns; Python refuses to print one over 4,300 digits), text that
encodes as UTF-8 (a lone surrogate, ``"\\ud800"`` in JSON, fails the database's insert and
every print) and holds no NUL (PostgreSQL refuses it). What a result is computed from must also be
physically plausible (``MIN_STEP_S``, ``MAX_STEP_S``, ``MAX_EVENT_T``) and finite. A non-finite
float elsewhere is no such danger, and an honest node writes one (``loss: NaN`` of a diverged
step, whose time is still a measurement): it is kept.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from benchctl.campaign.source_limits import INT_MAX  # the largest integer stored (a 64-bit column)

MIN_STEP_S = 1e-5
"""The shortest optimizer step believed (10 µs). A training step launches dozens of kernels (forward,
backward, optimizer) at microseconds of launch latency each, and ends at a barrier: no step of any
model benchctl profiles takes less. A node that says ``1e-12`` would rank first at $0.00."""
MAX_STEP_S = 86_400.0
"""The longest optimizer step believed (one day). The slowest step measured here is about 1.3 s
(docs/measurements; REFERENCE.md); a step of a day would hold a node for days per profile. A node
that says ``1e12`` would price a training run at trillions of dollars."""
MAX_EVENT_T = 253_402_300_799.0
"""The latest event time (unix seconds) a command can show: 9999-12-31T23:59:59Z, the end of the
calendar Python's ``datetime`` knows (``t: 1e308`` made ``logs`` raise)."""
MAX_NUMBER = 1e6
NO_RESULT = "no result: "
"""How a done cell's reason starts when its evidence was refused (``cell_result.save_cell_result``)."""
"""Bound of the bandwidths (GB/s) and prices ($/hr) a record may state."""


def int_problem(value: int) -> str | None:
    return None if -INT_MAX - 1 <= value <= INT_MAX else "is an integer outside 64 bits"


def text_problem(value: str) -> str | None:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return "holds text that is not UTF-8 (a lone surrogate)"
    return "holds a NUL character" if "\0" in value else None


def value_problem(value: Any) -> str | None:
    """What makes a JSON value (a node's event, a record) unstorable or unreadable, naming where
    (``'step_time_s' is an integer outside 64 bits``); None when every key and value is fine."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:  # no recursion: a value nested as deep as the parser allows must not raise here
        where, item = stack.pop()
        problem = None
        if isinstance(item, bool | float) or item is None:
            continue
        if isinstance(item, int):
            problem = int_problem(item)
        elif isinstance(item, str):
            problem = text_problem(item)
        elif isinstance(item, dict):
            for key, inner in item.items():
                key_problem = text_problem(key) if isinstance(key, str) else "has a key that is not text"
                if key_problem:
                    return f"{_name(where) or 'the event'}: a key {key_problem}"
                stack.append((key if not where else f"{where}.{key}", inner))
        elif isinstance(item, list):
            stack.extend((f"{where}[{i}]", inner) for i, inner in enumerate(item))
        else:
            problem = f"is a {type(item).__name__}, not a JSON value"
        if problem:
            return f"{_name(where) or 'the value'} {problem}"
    return None


def _name(where: str) -> str:
    shown = where if len(where) <= 60 else where[:57] + "..."
    return repr(shown) if where else ""


def step_time_problem(seconds: Any) -> str | None:
    """Why ``seconds`` is no step time a result may be computed from: not a finite number, or not
    within [``MIN_STEP_S``, ``MAX_STEP_S``]; None when it is one."""
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        return f"is {type(seconds).__name__}, not a number of seconds"
    if isinstance(seconds, int) and int_problem(seconds):
        return "is an integer outside 64 bits"
    if not math.isfinite(seconds):
        return "is not a finite number"
    if not MIN_STEP_S <= seconds <= MAX_STEP_S:
        return f"is {seconds:g} s, outside the plausible {MIN_STEP_S:g} to {MAX_STEP_S:g} s of a training step"
    return None


def timed_sample_problem(data: dict[str, Any], steps: int | None = None) -> str | None:
    """Why a timed profile sample (``payload.workloads.profile``'s, ``warmup`` false) is no step a result may
    be computed from: its ``timed_index`` is no integer in [0, ``steps``) (any size ≥ 0 when
    ``steps`` is None), its ``step_time_s`` breaks ``step_time_problem``, or a value of it is not
    storable (``value_problem``); None when it is one."""
    index = data.get("timed_index")
    if isinstance(index, bool) or not isinstance(index, int) or index < 0 or int_problem(index):
        return f"'timed_index' {_shown(index)} is not a step number ≥ 0"
    if steps is not None and index >= steps:
        return f"'timed_index' {index} is outside the profile's {steps} timed steps"
    problem = step_time_problem(data.get("step_time_s"))
    if problem:
        return f"'step_time_s' {problem}"
    return value_problem(data)


def _shown(value: Any) -> str:
    text = repr(value) if not isinstance(value, int) or not int_problem(value) else "(over 64 bits)"
    return text if len(text) <= 30 else text[:27] + "..."


def event_time_problem(t: Any) -> str | None:
    """Why an event's ``t`` is no time a command can show; None when it is one."""
    if isinstance(t, bool) or not isinstance(t, int | float):
        return "'t' is not a finite number"
    try:
        if not math.isfinite(t):
            return "'t' is not a finite number"
    except OverflowError:  # an int too large for a float
        return "'t' is not a finite number"
    return None if 0 <= t <= MAX_EVENT_T else "'t' is not a unix time between 1970 and 9999"


_MIN_MS, _MAX_MS = MIN_STEP_S * 1000, MAX_STEP_S * 1000
_HOW = r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$"
"""precision / attention / host_data: a name, or names joined with ``+`` (a cell measured on differing nodes)."""


class Measured(BaseModel):
    """What a result states beside its price, with the bounds both an imported record and a
    computed result must meet (``benchctl.results.records.Record`` extends it; ``cell_result``
    checks a cell's computed figures with it before they rank)."""

    model_config = ConfigDict(allow_inf_nan=False)

    step_time_ms: float = Field(ge=_MIN_MS, le=_MAX_MS)
    step_time_p10_ms: float | None = Field(default=None, ge=_MIN_MS, le=_MAX_MS)
    step_time_p90_ms: float | None = Field(default=None, ge=_MIN_MS, le=_MAX_MS)
    interconnect: str | None = Field(default=None, max_length=200)
    vcpus: int | None = Field(default=None, ge=1, le=1_000_000)
    numa: str | None = Field(default=None, max_length=200)
    optimizer_ms: float | None = Field(default=None, ge=0, le=_MAX_MS)
    optimizer_share: float | None = Field(default=None, ge=0, le=1)
    comm_share: float | None = Field(default=None, ge=0, le=1)
    busbw_gbps: float | None = Field(default=None, ge=0, le=MAX_NUMBER)
    busbw_bytes: int | None = Field(default=None, ge=1, le=INT_MAX)
    timed_steps: int | None = Field(default=None, ge=1, le=INT_MAX)
    precision: str | None = Field(default=None, pattern=_HOW, max_length=64)
    compiled: bool | None = None
    attention: str | None = Field(default=None, pattern=_HOW, max_length=64)
    host_data: str | None = Field(default=None, pattern=_HOW, max_length=64)
    drift: float | None = Field(default=None, gt=-1, le=MAX_NUMBER)
    """Last-quarter ÷ first-quarter median step time − 1 (a step time is positive: above −1)."""
    settle_steps: int | None = Field(default=None, ge=0, le=INT_MAX)
    settle_s: float | None = Field(default=None, ge=0, le=MAX_NUMBER)

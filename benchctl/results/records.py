"""Result records taken elsewhere: read, checked and priced for ``benchctl import``.

A records file is JSON or YAML: a list of records (``leaderboard --format json`` emits one) or a
single record. A record needs ``provider, gpu, count, market, hourly_usd, step_time_ms`` and a
``target: {model, target_param_data_ratio, total_batch_size[, vocab_size]}`` or ``target_steps``.
It may carry the leaderboard's evidence columns (interconnect, vcpus, numa, optimizer_ms,
optimizer_share, comm_share, busbw_gbps, busbw_bytes, flags, env, model, precision, compiled,
attention, host_data, timed_steps, drift, settle_steps, settle_s) and its cell key
(``cell``) and campaign (``campaign``: where the record goes unless ``import --campaign`` says).
What the leaderboard derives (rank, train hours, costs, status) is accepted and recomputed:
train_hours = step_time × target_steps / 3600, cost = train_hours × hourly_usd.
Leaderboard rows without a result (no step time) are skipped. Problems raise SpecError with the
file and line. The file is untrusted: at most 4 MiB and 10,000 records, numbers finite and within
the bounds a result computed from a node's samples meets too (``evidence_rules.Measured``: step
times of 10 µs to a day, no negative bandwidths), text UTF-8, campaign names as in campaign files.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from benchctl.campaign.cell_key import CellKey
from benchctl.campaign.source_limits import INT_MAX, Limits, Path_, format_path, line_of, read_capped
from benchctl.campaign.target import MAX_NODES, MAX_TARGET_STEPS, Target, check_campaign_name
from benchctl.errors import SpecError
from benchctl.results.cost import cost_to_train, steps_for
from benchctl.results.evidence_rules import MAX_NUMBER, Measured, value_problem
from benchctl.store.imports import CellResult

_NAME = r"^[A-Za-z0-9][A-Za-z0-9_.-]*$"
MAX_RECORDS = 10_000
LIMITS = Limits(max_bytes=4 * 1024**2, max_values=1_000_000)
DERIVED = ("rank", "campaign", "train_hours", "cost_to_train_usd", "status", "spot_usd_per_hour",
           "on_demand_usd_per_hour", "cost_spot_usd", "cost_on_demand_usd", "no_result")


_STORABLE = (float, bool, type(None), BaseModel)
"""Values ``value_problem`` always passes (a nested model's fields were checked as its own)."""


def _plainly_storable(value: Any) -> bool:
    """A value ``value_problem`` passes, told without its walk (ASCII text holds no lone surrogate)."""
    kind = type(value)
    return (isinstance(value, _STORABLE) or (kind is str and value.isascii() and "\0" not in value)
            or (kind is int and -INT_MAX - 1 <= value <= INT_MAX) or (kind in (dict, list) and not value))


class Record(Measured):
    """A result record: the measured figures and their bounds (``Measured``, shared with the results
    benchctl computes from a node's samples), the configuration, the price and the target."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    provider: str = Field(pattern=_NAME, max_length=100)
    gpu: str = Field(pattern=_NAME, max_length=100)
    count: int = Field(ge=1, le=1_000_000)
    nodes: int = Field(default=1, ge=1, le=MAX_NODES)
    """Nodes of ``count`` GPUs each, rented as one unit; ``hourly_usd`` is the price of all of them."""
    market: Literal["spot", "on-demand"]
    hourly_usd: float = Field(ge=0, le=MAX_NUMBER)
    target: Target | None = None
    target_steps: int | None = Field(default=None, ge=1, le=MAX_TARGET_STEPS)
    model: str | None = None
    cell: str | None = Field(default=None, min_length=1, max_length=1000)
    region: str | None = None
    env: dict[str, str] = Field(default_factory=dict)
    flags: list[str] = Field(default_factory=list)
    # what the leaderboard derives: accepted, then recomputed
    rank: int | None = None
    campaign: str | None = None
    train_hours: float | None = None
    cost_to_train_usd: float | None = None
    status: str | None = None
    no_result: str | None = None
    spot_usd_per_hour: float | None = None
    on_demand_usd_per_hour: float | None = None
    cost_spot_usd: float | None = None
    cost_on_demand_usd: float | None = None

    @field_validator("campaign")
    @classmethod
    def _campaign_name(cls, name: str | None) -> str | None:
        return name if name is None else check_campaign_name(name)

    @model_validator(mode="after")
    def _target(self) -> Record:
        if self.target is None and self.target_steps is None:
            raise ValueError("give target: {model, target_param_data_ratio, total_batch_size} or target_steps")
        if self.target is not None:
            steps = steps_for(self.target.model, self.target.target_param_data_ratio, self.target.total_batch_size,
                              self.target.vocab_size)
            if self.target_steps is not None and self.target_steps != steps:
                raise ValueError(f"target_steps {self.target_steps} disagrees with target, which gives {steps}; "
                                 "keep one of them")
            if not 1 <= steps <= MAX_TARGET_STEPS:
                raise ValueError(f"target gives {steps:,} steps; a target trains for 1 to {MAX_TARGET_STEPS:,} steps")
            self.target_steps = steps
            if self.model is not None and self.model != self.target.model:
                raise ValueError(f"model {self.model!r} disagrees with target.model {self.target.model!r}")
            self.model = self.target.model
        return self

    def key(self) -> str:
        """``cell`` when given, else ``provider:GPUxN:market[:region=…][:nodes=…][:env=…]`` like a campaign's
        cells (``nodes`` only above one node)."""
        if self.cell:
            return self.cell
        named: list[tuple[str, object]] = [("region", self.region)] if self.region else []
        if self.nodes > 1:
            named.append(("nodes", self.nodes))
        return str(CellKey.build(self.provider, f"{self.gpu}x{self.count}", self.market, named, self.env))


class _CheckedRecord(Record):
    """A ``Record`` whose every value is also checked storable (``value_problem``). A file read as
    plain ASCII JSON without escapes needs no such check: the JSON path already bounded its integers
    and refused non-finite floats, and its text can hold no lone surrogate and no NUL."""

    @field_validator("*")
    @classmethod
    def _storable(cls, value: Any) -> Any:
        if _plainly_storable(value):  # every field of every record comes here: most without value_problem's walk
            return value
        problem = value_problem(value)  # e.g. a lone surrogate in env
        if problem:
            raise ValueError(problem)
        return value


def read_records(path: Path, own_campaign: bool = True) -> tuple[list[CellResult], int]:
    """The file's records, priced, and how many result-less leaderboard rows were skipped.
    ``own_campaign`` False: every record's ``campaign`` is None (``import --campaign`` puts them in
    one), though the file's check for a cell given twice still tells the campaigns it names apart.

    An export (plain JSON, within the limits as ``_export`` tells from the text) is read once and
    checked record by record; anything else, and any export in which a problem shows, is read again
    the general way (``_load``), which alone names problems: the two ways accept the same files."""
    file = str(path)
    try:
        text = read_capped(path, file, LIMITS.max_bytes, "a records file")
    except UnicodeDecodeError as exc:
        raise SpecError(file, None, "", f"not UTF-8 text (byte {exc.start}); a records file is JSON or YAML") from None
    model = Record if text.isascii() and "\\u" not in text else _CheckedRecord
    data = _export(text)
    if data is not _NOT_PLAIN:
        try:
            return _records(data, _lines_of(text, file), file, model, own_campaign, sure=False)
        except _Unsure:
            pass
    data, lines = _load(text, file)
    if not isinstance(lines, _LinesOnDemand):
        model = _CheckedRecord
    return _records(data, lines, file, model, own_campaign, sure=True)


class _Unsure(Exception):
    """The quick read of an export met something the general read must look at (and name)."""


def _records(data: Any, lines: Mapping[Path_, int], file: str, model: type[Record], own_campaign: bool,
             sure: bool) -> tuple[list[CellResult], int]:
    """``read_records`` of the file's loaded ``data``; ``sure`` False: raise _Unsure at any problem
    instead of naming it, and check what ``_export`` left to this: floats finite and nesting within
    the limits (``Record`` refuses a record that holds an infinite float, ``allow_inf_nan=False``,
    or nests deeper than three levels; ``_plain_row`` checks a row it skips)."""
    items = data if isinstance(data, list) else [data]
    if len(items) > MAX_RECORDS:
        if not sure:
            raise _Unsure
        raise SpecError(file, None, "", f"{len(items):,} records, over the {MAX_RECORDS:,} one file may hold; "
                        "split it into several files")
    found: list[tuple[str | None, CellResult, Path_]] = []
    skipped = 0
    for index, raw in enumerate(items):
        at: Path_ = (index,) if isinstance(data, list) else ()
        if not isinstance(raw, dict):
            if not sure:
                raise _Unsure
            raise SpecError(file, line_of(lines, at), format_path(at), "a record is a mapping with provider, gpu, "
                            "count, market, hourly_usd, step_time_ms and target (see docs/leaderboard.md)")
        if raw.get("step_time_ms") is None and raw.get("status") is not None:
            if not sure and not _plain_row(raw):
                raise _Unsure
            skipped += 1  # a leaderboard row of a cell that has no result
            continue
        try:
            record = model.model_validate(raw)
        except ValidationError as exc:
            if not sure:
                raise _Unsure from None
            error = exc.errors()[0]
            sub = (*at, *error["loc"])
            raise SpecError(file, line_of(lines, sub), format_path(sub), str(error["msg"]).removeprefix(
                "Value error, ")) from None
        found.append((record.campaign, _priced(record, own_campaign), at))
    keys = Counter((campaign, item.key) for campaign, item, _ in found)
    for campaign, item, at in found:
        if keys[(campaign, item.key)] > 1:
            if not sure:
                raise _Unsure
            raise SpecError(file, line_of(lines, at), "", f"two records for the cell {item.key!r}; keep one, or tell "
                            "them apart with `cell`")
    return [item for _, item, _ in found], skipped


def _plain_row(row: dict[str, Any]) -> bool:
    """Each value of ``row`` a scalar or a list or map of scalars (nested well within ``LIMITS``), no
    float infinite."""
    for value in row.values():
        inner = value.values() if isinstance(value, dict) else value if isinstance(value, list) else (value,)
        if any(isinstance(item, dict | list) or (type(item) is float and not math.isfinite(item)) for item in inner):
            return False
    return True


_NEEDS = "a records file holds a list of result records (see docs/leaderboard.md)"
_PLAIN_SCALARS = (str, bool, type(None))
"""JSON scalars load_yaml reads as the same value whatever they hold."""


def load_yaml(text: str, file: str, needs: str, limits: Limits) -> tuple[Any, dict[Path_, int]]:
    """``campaign.yaml_source.load_yaml``, imported at the first call: PyYAML loads only for a file that
    is not a plain JSON export, or to name the line of a problem."""
    from benchctl.campaign.yaml_source import load_yaml as load

    return load(text, file, needs, limits)


def _load(text: str, file: str) -> tuple[Any, Mapping[Path_, int]]:
    """``load_yaml``'s answer, faster for an export: a text that is plain JSON within ``LIMITS``
    (no duplicate key, NaN/Infinity, out-of-range integer or non-finite float) is read by the json
    module, and ``load_yaml`` runs only if a line is asked for (to name an error). Anything else,
    including every file load_yaml would refuse, goes through load_yaml, which says what is wrong."""
    data = _plain_json(text)
    if data is _NOT_PLAIN:
        return load_yaml(text, file, needs=_NEEDS, limits=LIMITS)
    return data, _lines_of(text, file)


def _lines_of(text: str, file: str) -> _LinesOnDemand:
    return _LinesOnDemand(lambda: load_yaml(text, file, needs=_NEEDS, limits=LIMITS)[1])


_NOT_PLAIN = object()


def _export(text: str) -> Any:
    """``_plain_json(text)`` without its walk over every value: its integers are checked as the
    parser makes them (``_plain_int``), its values are at most one per ``,`` ``:`` ``[`` ``{`` of the
    text plus one; its floats (``1e999`` parses as inf) and its depth are left to ``_records``.
    ``_NOT_PLAIN`` where any of these does not hold."""
    if not text.lstrip().startswith(("[", "{")) or 1 + sum(map(text.count, ",:[{")) > LIMITS.max_values:
        return _NOT_PLAIN
    try:
        return json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys, parse_int=_plain_int)
    except (ValueError, RecursionError):
        return _NOT_PLAIN


def _plain_int(digits: str) -> int:
    value = int(digits)
    if not -INT_MAX - 1 <= value <= INT_MAX:
        raise ValueError(digits)  # load_yaml names it
    return value


def _plain_json(text: str) -> Any:
    if not text.lstrip().startswith(("[", "{")):
        return _NOT_PLAIN
    try:
        data = json.loads(text, parse_constant=_no_constant, object_pairs_hook=_unique_keys)
    except (ValueError, RecursionError):
        return _NOT_PLAIN
    values, stack = 0, [(data, 0)]
    while stack:  # containers only: their scalars are checked in place (an export holds ~40 per record)
        value, depth = stack.pop()
        values += 1
        if depth > LIMITS.max_depth:
            return _NOT_PLAIN
        if isinstance(value, dict):
            values += len(value)  # keys count too: never fewer than load_yaml counts
            items: Any = value.values()
        elif isinstance(value, list):
            items = value
        elif _plain_scalar(value):
            continue
        else:
            return _NOT_PLAIN
        deep = depth + 1 > LIMITS.max_depth
        for item in items:
            if isinstance(item, dict | list):
                stack.append((item, depth + 1))
            elif deep or not (isinstance(item, _PLAIN_SCALARS) or _plain_scalar(item)):
                return _NOT_PLAIN
            else:
                values += 1
        if values > LIMITS.max_values:
            return _NOT_PLAIN
    return data


def _plain_scalar(value: Any) -> bool:
    """A JSON scalar that load_yaml reads as the same value: text, true/false/null, an integer
    within 64 bits, a finite float."""
    if isinstance(value, _PLAIN_SCALARS):
        return True
    if isinstance(value, int):
        return -INT_MAX - 1 <= value <= INT_MAX
    return isinstance(value, float) and math.isfinite(value)


def _no_constant(name: str) -> Any:
    raise ValueError(name)  # NaN, Infinity: load_yaml names the line


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result = dict(pairs)
    if len(result) != len(pairs):
        raise ValueError("duplicate key")  # load_yaml names both lines
    return result


class _LinesOnDemand(Mapping[Path_, int]):
    """``load_yaml``'s line map, computed the first time it is read."""

    def __init__(self, compute: Callable[[], dict[Path_, int]]) -> None:
        self._compute: Callable[[], dict[Path_, int]] | None = compute
        self._lines: dict[Path_, int] = {}

    def _get(self) -> dict[Path_, int]:
        if self._compute is not None:
            self._lines, self._compute = self._compute(), None
        return self._lines

    def __getitem__(self, path: Path_) -> int:
        return self._get()[path]

    def __iter__(self) -> Iterator[Path_]:
        return iter(self._get())

    def __len__(self) -> int:
        return len(self._get())


def _priced(record: Record, own_campaign: bool = True) -> CellResult:
    assert record.target_steps is not None
    cost = cost_to_train(record.step_time_ms / 1000, record.target_steps, record.hourly_usd)
    config = record.model_dump_json(exclude_none=True, exclude=_DERIVED)
    result = {"step_time_ms": record.step_time_ms,
              "step_time_p10_ms": record.step_time_p10_ms or record.step_time_ms,
              "step_time_p90_ms": record.step_time_p90_ms or record.step_time_ms,
              "timed_steps": record.timed_steps or 0, "hourly_usd": record.hourly_usd, "market": record.market,
              "target_steps": cost.target_steps, "train_hours": cost.train_hours,
              "cost_to_train_usd": cost.cost_usd, "model": record.model, "interconnect": record.interconnect,
              "vcpus": record.vcpus, "numa": record.numa, "optimizer_ms": record.optimizer_ms,
              "optimizer_share": record.optimizer_share, "comm_share": record.comm_share,
              "busbw_gbps": record.busbw_gbps, "busbw_bytes": record.busbw_bytes,
              "flags_json": json.dumps(sorted(record.flags)) if record.flags else "[]", "precision": record.precision,
              "compiled": record.compiled, "attention": record.attention, "host_data": record.host_data,
              "drift": record.drift, "settle_steps": record.settle_steps, "settle_s": record.settle_s}
    return CellResult(key=record.key(), provider=record.provider, gpu=record.gpu, count=record.count,
                      market=record.market, config_json=config, result=result,
                      campaign=record.campaign if own_campaign else None)


_DERIVED = set(DERIVED)

"""A measured campaign keeps its workload: ``run`` refuses a file whose workload changed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from benchctl.campaign.spec import Campaign, Target
from benchctl.errors import UsageError

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from benchctl.store.models import Campaign as CampaignRow

WORKLOAD_TARGET = ("model", "total_batch_size", "vocab_size")
"""The target fields that change what a step computes (the model's size, the tokens per step). The
rest of ``target`` (``target_param_data_ratio``) only multiplies a measured step time."""


def refuse_other_measurement(engine: Engine, row: CampaignRow, old: Campaign, campaign: Campaign) -> None:
    """UsageError when campaign ``row`` (stored as ``old``) has attempts and ``campaign`` changed its
    workload (the payload section, or a target field in ``WORKLOAD_TARGET``): its stored step times
    would be priced as another workload's. One line names the first change, old → new, and the way out."""
    from benchctl.store import queries as q

    if not any(q.attempts(engine, c.id or 0) for c in q.cells(engine, row.id or 0)):
        return
    changes = _changes(workload(old), workload(campaign), "target")
    what = "workload"
    if not changes:
        changes, what = _changes(old.spec.payload.model_dump(), campaign.spec.payload.model_dump(), "payload"), \
            "payload section"
    if changes:
        path, before, after = changes[0]
        raise UsageError(f"campaign {row.name!r} was measured with a different {what}: {path} {before} → {after}; "
                         "its stored step times would be priced as another workload's. Give the campaign a new "
                         f"name to measure the new one, or restore {path}: {before} (only "
                         "target.target_param_data_ratio and prices may change on a measured campaign)")


def workload(campaign: Campaign) -> dict[str, Any]:
    """The ``WORKLOAD_TARGET`` fields as the payload runs them (an unset vocab_size is the preset's)."""
    from benchctl.payload.workloads.presets import model_dims

    if not isinstance(campaign.spec.target, Target):  # steps or tokens: a command's own workload, priced only
        return {}
    target = campaign.spec.target.model_dump()
    return {key: target[key] for key in WORKLOAD_TARGET} | {
        "vocab_size": model_dims(campaign.spec.target.model, campaign.spec.target.vocab_size).vocab_size}


def _changes(old: Any, new: Any, path: str) -> list[tuple[str, str, str]]:
    """(dotted path, old, new) of every leaf that differs between two dumped models."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [change for key in (*old, *(k for k in new if k not in old))
                for change in _changes(old.get(key), new.get(key), f"{path}.{key}")]
    return [] if old == new else [(path, _shown(old), _shown(new))]


def _shown(value: Any) -> str:
    """``value`` on one short line (a command may span lines)."""
    text = "(unset)" if value is None else " ".join(str(value).split())
    return text if len(text) <= 60 else text[:57] + "..."

"""Calibration points from the store: every cell with a result (measured by a campaign, or imported)
whose GPU model is known becomes a compute point (nanochat presets, the campaign's tokens per step
and sequence length) and, where it measured all_reduce busbw at a large size, a busbw point for its
GPU model and interconnect class. Stored, not a file edit: each new result refines the next prediction.
"""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from benchctl.payload.node.gpu_models import BF16_PEAK_FLOPS
from benchctl.payload.workloads.presets import UnknownPreset
from benchctl.predict.calibration import MIN_BUSBW_BYTES, BusbwPoint, ComputePoint
from benchctl.predict.workload import nanochat
from benchctl.store.models import Campaign, Cell, Result


def interconnect_class(label: str | None) -> str | None:
    """``nvswitch_mesh NV18 + IB 8×400G …`` → ``nvswitch_mesh`` (the class preflight saw)."""
    return label.split()[0] if label else None


def _spec_numbers(spec_json: str) -> tuple[int | None, int]:
    """(tokens per step, sequence length) of a campaign spec (an imported one may give neither)."""
    try:
        spec = json.loads(spec_json)
    except ValueError:
        return None, 2048
    target = spec.get("target") or {}
    profile = (spec.get("payload") or {}).get("profile") or {}
    tokens = target.get("total_batch_size")
    return (int(tokens) if isinstance(tokens, int) else None), int(profile.get("sequence_len") or 2048)


def store_points(engine: Engine) -> tuple[list[ComputePoint], list[BusbwPoint]]:
    camp, cell, result = (sa.inspect(m).local_table for m in (Campaign, Cell, Result))
    query = (sa.select(camp.c.name, camp.c.kind, camp.c.spec_json, cell.c.key, cell.c.gpu, cell.c.count,
                       cell.c.config_json, result.c.model, result.c.step_time_ms, result.c.optimizer_ms,
                       result.c.precision, result.c.attention, result.c.interconnect, result.c.busbw_gbps,
                       result.c.busbw_bytes)
             .select_from(result).join(cell, cell.c.id == result.c.cell_id)
             .join(camp, camp.c.id == cell.c.campaign_id))
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    compute, busbw = [], []
    for row in rows:
        if row.gpu not in BF16_PEAK_FLOPS:
            continue
        kind = "imported" if row.kind == "imported" else "measured"
        origin = f"{row.name}/{row.key}"
        source = f"{kind} in this store: {origin}"
        nodes = _nodes(row.config_json)
        world = int(row._mapping["count"]) * nodes  # Row.count is tuple.count
        wire = interconnect_class(row.interconnect)
        if wire and row.busbw_gbps and (row.busbw_bytes or 0) >= MIN_BUSBW_BYTES:
            busbw.append(BusbwPoint(row.gpu, wire, nodes, float(row.busbw_gbps), kind, source, origin))
        tokens, seq_len = _spec_numbers(row.spec_json)
        tokens = tokens or _config_tokens(row.config_json)  # an imported record's own target
        if not row.model or tokens is None or not row.step_time_ms:
            continue
        try:
            work = nanochat(row.model, world, tokens, seq_len,
                            attention="sdpa" if row.attention == "sdpa" else "fa3")
        except UnknownPreset:
            continue
        fwd_bwd = row.step_time_ms - row.optimizer_ms if row.optimizer_ms else None
        compute.append(ComputePoint(row.gpu, row.precision or "bf16", work, float(row.step_time_ms), fwd_bwd,
                                    row.optimizer_ms if world == 1 else None, kind, source, wire, origin))
    return compute, busbw


def _config_tokens(config_json: str) -> int | None:
    try:
        target = (json.loads(config_json) or {}).get("target") or {}
    except (ValueError, AttributeError):
        return None
    tokens = target.get("total_batch_size") if isinstance(target, dict) else None
    return tokens if isinstance(tokens, int) and tokens > 0 else None


def _nodes(config_json: str) -> int:
    try:
        config: Any = json.loads(config_json)
    except ValueError:
        return 1
    nodes = config.get("nodes") if isinstance(config, dict) else None
    return int(nodes) if isinstance(nodes, int) and nodes >= 1 else 1

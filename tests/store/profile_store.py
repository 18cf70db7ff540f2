"""A store holding one cell whose one attempt recorded a profile's timed samples (no run needed)."""

from __future__ import annotations

import sqlalchemy as sa

from benchctl.store import queries as q
from benchctl.store.database import open_store


def store_with_samples(url: str, samples: list[dict[str, object]], campaign: str) -> tuple[sa.Engine, int]:
    """(engine, cell id): campaign ``campaign``'s one local CPU cell, its attempt's profile phase
    holding one timed sample (0.5 s) per dict of ``samples`` (merged into the sample)."""
    engine = open_store(url)
    campaign_id, _ = q.upsert_campaign(engine, campaign, "{}", "/tmp/c.yaml", 5.0, [q.NewCell(
        key="local:cpux1:on-demand", provider="local", gpu="cpu", count=1, market="on-demand", config_json="{}")])
    (cell,) = q.cells(engine, campaign_id)
    assert cell.id is not None
    attempt = q.new_attempt(engine, cell.id, token="tok", provider="local", market="on-demand", remote_dir="x",
                            hourly_usd=0.5, host="localhost")
    assert attempt.id is not None
    events = [{"t": 1.0, "kind": "phase_start", "phase": "profile"},
              *({"t": 2.0 + i, "kind": "sample", "phase": "profile", "warmup": False, "timed_index": i,
                 "step_time_s": 0.5, **s} for i, s in enumerate(samples)),
              {"t": 9.0, "kind": "phase_end", "phase": "profile"}]
    q.record_events(engine, attempt.id, events, read_from=0, new_offset=1)
    return engine, cell.id

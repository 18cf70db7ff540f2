"""Tables. Times are unix seconds (float); JSON blobs are text.

The schema these classes describe must equal what ``benchctl.store.migrations`` builds (a test compares
them); change both together, with a new migration.
"""

from __future__ import annotations

from sqlalchemy import BigInteger
from sqlmodel import Field, SQLModel, UniqueConstraint


class Campaign(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    name: str = Field(unique=True)
    uid: str = Field(default="", sa_column_kwargs={"server_default": ""})
    """Random per campaign (empty for campaigns made before schema v3); part of its nodes' tag."""
    spec_json: str
    source_path: str
    budget_usd: float
    created_at: float
    updated_at: float
    kind: str = Field(default="run", sa_column_kwargs={"server_default": "run"})
    """``run``: benchctl ran it; ``imported``: ``benchctl import`` made it (never resumed)."""


class Cell(SQLModel, table=True):
    __table_args__ = (UniqueConstraint("campaign_id", "key"),)
    id: int | None = Field(default=None, primary_key=True)
    campaign_id: int = Field(foreign_key="campaign.id", index=True)
    key: str
    provider: str
    gpu: str
    count: int
    market: str
    config_json: str
    state: str
    reason: str | None = None
    created_at: float
    updated_at: float
    lease_owner: str | None = None
    """The controller running this cell (``host/pid/start``), while ``lease_expires_at`` is ahead."""
    lease_expires_at: float | None = None


class Attempt(SQLModel, table=True):
    """One rented node for one cell. Written before the provider is asked for the node."""

    id: int | None = Field(default=None, primary_key=True)
    cell_id: int = Field(foreign_key="cell.id", index=True)
    number: int
    token: str = Field(unique=True)
    provider: str
    node_json: str | None = None
    hourly_usd: float | None = None
    market: str
    host: str | None = None
    open: bool = True
    outcome: str | None = None
    detail: str | None = None
    launched_at: float | None = None
    terminated_at: float | None = None
    cost_usd: float | None = None
    remote_dir: str
    events_offset: int = 0
    events_lines: int = 0


class Event(SQLModel, table=True):
    """One line of an attempt's events.jsonl; ``line`` is its 0-based line number (the event's id)."""

    __table_args__ = (UniqueConstraint("attempt_id", "line"),)
    id: int | None = Field(default=None, primary_key=True)
    attempt_id: int = Field(foreign_key="attempt.id", index=True)
    cell_id: int = Field(foreign_key="cell.id", index=True)
    line: int
    t: float
    kind: str
    phase: str | None = None
    data_json: str


class Result(SQLModel, table=True):
    """A cell's measured outcome and its cost-to-train, with every input of the arithmetic."""

    id: int | None = Field(default=None, primary_key=True)
    cell_id: int = Field(foreign_key="cell.id", unique=True)
    step_time_ms: float
    step_time_p10_ms: float
    step_time_p90_ms: float
    timed_steps: int
    hourly_usd: float
    market: str
    target_steps: int
    train_hours: float
    cost_to_train_usd: float
    computed_at: float
    model: str | None = None
    """The target model (None for an imported record that gave target_steps only)."""
    interconnect: str | None = None
    """The GPU interconnect class preflight saw (e.g. NVSwitch), None where it does not apply."""
    vcpus: int | None = None
    numa: str | None = None
    """NUMA layout, e.g. ``1 node`` or ``2 nodes, GPUs split 0+1``."""
    optimizer_ms: float | None = None
    optimizer_share: float | None = None
    comm_share: float | None = None
    busbw_gbps: float | None = None
    """all_reduce bus bandwidth at the largest size measured (``busbw_bytes``)."""
    busbw_bytes: int | None = Field(default=None, sa_type=BigInteger)
    flags_json: str | None = None
    """The cell's flags when the result was computed (None: computed before schema v6)."""
    precision: str | None = None
    """How the timed steps computed: ``bf16`` (autocast on GPU), ``f32`` (CPU), ``fp8`` (an imported record
    may say so); None where the samples did not say (before schema v7)."""
    compiled: bool | None = None
    """Whether the model ran ``torch.compile``d (None: not recorded)."""
    attention: str | None = None
    """The attention kernel: ``flash_attn3`` | ``flash_attn`` | ``sdpa`` (None: not recorded)."""
    host_data: str | None = None
    """Where the profile's batches came from: ``synthetic`` | ``tokenize`` (on the host; None: not recorded)."""
    drift: float | None = None
    """The timed steps' last-quarter median ÷ first-quarter median − 1 (``payload.stats.drift``; +0.03:
    the steps ended 3 % slower than they began); None with fewer than 4 timed steps or before schema v9."""
    settle_steps: int | None = None
    """Unrecorded steps run after the warm-up until the clocks settled, summed over the attempts that
    timed the steps (``payload.stats.settled``; 0: none, as on CPU); None where not recorded."""
    settle_s: float | None = None
    """The seconds those settle steps took (None where not recorded)."""


class Artifact(SQLModel, table=True):
    id: int | None = Field(default=None, primary_key=True)
    attempt_id: int = Field(foreign_key="attempt.id", index=True)
    cell_id: int = Field(foreign_key="cell.id", index=True)
    name: str
    remote_path: str
    local_path: str | None = None
    bytes: int | None = None
    sha256: str | None = None

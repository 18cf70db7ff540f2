"""Campaign files: YAML → validated pydantic models → the list of cells.

``load_campaign(path)`` reads a file, validates it and expands its matrix: a matrix entry whose
field holds a list becomes the cross product of its values. Every cell gets a stable ``key``
from its coordinates, so running the same file again continues the same campaign. Any problem
raises SpecError naming the file, the line and the field.
"""

from __future__ import annotations

import difflib
import itertools
import math
import os
import re
import stat
import types
import typing
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    PrivateAttr,
    Tag,
    ValidationError,
    create_model,
    field_validator,
    model_validator,
)

from benchctl.campaign.cell_key import CellKey
from benchctl.campaign.source_limits import Path_, format_path, line_of, read_capped
from benchctl.campaign.target import (  # re-exported: benchctl import loads only campaign/target.py
    MAX_NODES,
    MAX_TARGET_STEPS,
    Target,
    _Strict,
    check_campaign_name,
)
from benchctl.campaign.yaml_source import CAMPAIGN_LIMITS, load_yaml
from benchctl.errors import SpecError
from benchctl.payload.comm.collective_math import parse_bytes
from benchctl.payload.env_policy import SECRET_NAME as _SECRET_NAME
from benchctl.payload.job import PHASES, CollectivesConfig, CommandConfig, ProfileConfig
from benchctl.payload.node.fabric_checks import FabricExpect
from benchctl.payload.node.gpu_models import canonical as canonical_gpu
from benchctl.payload.node.gpu_models import unknown_model
from benchctl.payload.node.thresholds import resolve as resolve_thresholds
from benchctl.provisioners.aws.instances import INSTANCES as AWS_INSTANCES
from benchctl.provisioners.aws.instances import UnknownInstance
from benchctl.provisioners.aws.instances import resolve as resolve_aws_instance
from benchctl.provisioners.base import ProviderSettings
from benchctl.provisioners.registry import PROVIDERS

Market = Literal["spot", "on-demand"]
HostData = Literal["synthetic", "tokenize"]
"""``payload.job.HOST_DATA`` (a test keeps them equal)."""
PRICED_BY_USER = tuple(name for name, entry in PROVIDERS.items() if entry.priced_by_user)
"""Providers whose price the cell states (nobody bills it). ``ssh`` nodes state theirs in
``providers.ssh.nodes``; the others bill their own."""
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MAX_CELLS = 10_000
MAX_ARTIFACT_GB = 1000
"""What one attempt may bring home at most (GB): a bound on a number that could only fail once the node
was rented (``1e300`` overflowed the byte count); far above any profile's traces."""


def _no_nul(value: str, what: str) -> str:
    """``value``, unless it holds a NUL: no environment value or command line can (the node's exec refuses it)."""
    if "\0" in value:
        raise ValueError(f"the value of {what} holds a NUL character, which no environment variable or command "
                         "can hold; remove it")
    return value


def upload_problem(folder: Path, upload: str) -> str | None:
    """What is wrong with ``payload.command.upload`` (``upload``) for a campaign file in ``folder``,
    or None. It must be a directory inside ``folder``, reached and holding no symlink: everything
    under it is shipped to rented nodes, so it must not reach outside what the campaign's folder holds."""
    if Path(upload).is_absolute():
        return f"{upload} is an absolute path; give a directory relative to the campaign file's folder"
    base = folder.resolve()
    target = base / upload
    if not target.resolve().is_relative_to(base):
        return f"{upload} is outside the campaign file's folder ({base}); move the directory under it"
    for step in (target, *target.parents):
        if step == base or not step.is_relative_to(base):
            break
        if step.is_symlink():
            return f"{step} is a symlink; upload directories hold no symlinks (copy the files in instead)"
    if not target.is_dir():
        return f"{target} is not a directory; give a directory relative to the campaign file"
    for root, dirs, files in os.walk(target):
        for entry in (*dirs, *files):
            if os.path.islink(os.path.join(root, entry)):
                return (f"{os.path.join(root, entry)} is a symlink; upload directories hold no symlinks "
                        "(copy the files in instead)")
        for entry in files:  # a FIFO would stall the upload on a rented node; a device or socket cannot be sent
            if not stat.S_ISREG(os.lstat(os.path.join(root, entry)).st_mode):
                return (f"{os.path.join(root, entry)} is not a regular file (a FIFO, socket or device); upload "
                        "directories hold files and folders only: remove it")
    return None


class WorkloadTarget(_Strict):
    """The target of any workload, priced from its ``command`` phase's own step times
    (``step_time_s`` metrics): ``steps`` optimizer steps, or ``tokens`` at ``tokens_per_step``."""

    name: str | None = Field(default=None, min_length=1, max_length=100, description="what the leaderboard ranks "
                             "it as (its model column); default: the campaign's name")
    steps: int | None = Field(default=None, ge=1, le=MAX_TARGET_STEPS)
    tokens: int | None = Field(default=None, ge=1, le=2**62)
    tokens_per_step: int | None = Field(default=None, ge=1, le=2**62)

    _name = field_validator("name")(lambda value: value if value is None else _no_nul(value, "target.name"))

    @model_validator(mode="after")
    def _one_form(self) -> WorkloadTarget:
        if (self.steps is None) == (self.tokens is None and self.tokens_per_step is None):
            raise ValueError("give target.steps, or target.tokens and target.tokens_per_step (not both forms)")
        if self.steps is None and (self.tokens is None or self.tokens_per_step is None):
            raise ValueError("target.tokens and target.tokens_per_step go together: give both")
        if not 1 <= self.train_steps() <= MAX_TARGET_STEPS:
            raise ValueError(f"tokens / tokens_per_step makes {self.train_steps():,} steps; a target trains for "
                             f"1 to {MAX_TARGET_STEPS:,} steps")
        return self

    def train_steps(self) -> int:
        """``steps``, or floor(tokens / tokens_per_step)."""
        return self.steps if self.steps is not None else (self.tokens or 0) // (self.tokens_per_step or 1)


def _target_kind(raw: Any) -> str:
    """``workload`` for a target that gives steps or tokens and no model, else ``nanochat`` (also asked
    of a model when pydantic serializes one)."""
    if isinstance(raw, WorkloadTarget):
        return "workload"
    if isinstance(raw, dict) and "model" not in raw and {"steps", "tokens", "tokens_per_step"} & set(raw):
        return "workload"
    return "nanochat"


class Defaults(_Strict):
    market: Market = "on-demand"
    image: str | None = None
    max_attempts: int = Field(default=3, ge=1)


class ProfileSpec(_Strict):
    model: str | None = Field(default=None, description="defaults to target.model; must equal it")
    device_batch_size: int = Field(default=32, ge=1)
    sequence_len: int = Field(default=2048, ge=1)
    warmup_steps: int = Field(default=3, ge=0)
    steps: int = Field(default=10, ge=1)
    phase_timing: bool = Field(default=True, description="time forward/backward and the optimizer's phases")
    nsys: bool = Field(default=False, description="run the ranks under Nsight Systems when nsys is on the PATH")
    compile: bool = Field(default=True, description="torch.compile the model and optimizer updates on GPU")
    host_data: HostData = Field(default="synthetic", description="tokenize: every micro-step's batch is made by "
                                "tokenizing text on the node's CPUs, as upstream's loader "
                                "(payload.workloads.host_data)")
    precision: Literal["fp8", "bf16"] | None = Field(
        default=None, description="matmul precision; default as the d26 record: fp8 on GPUs with fp8 tensor cores "
        "(compute capability 8.9+: H100, H200, L4, L40S), else bf16 (payload.workloads.fp8)")
    attention: Literal["flash_attn3", "flash_attn", "flex", "sdpa"] | None = Field(
        default=None, description="pin the attention kernel (a like-with-like comparison); default: the fastest "
        "the node has, FA3, FA2, compiled flex_attention, SDPA (payload.workloads.attention); a node without "
        "the pinned one fails its profile")


CollectiveOp = Literal["all_reduce", "all_gather", "reduce_scatter", "broadcast", "alltoall"]


def _default_ops() -> list[CollectiveOp]:
    return ["all_reduce", "all_gather", "reduce_scatter"]


class CollectivesSpec(_Strict):
    ops: list[CollectiveOp] = Field(default_factory=_default_ops, min_length=1)
    min_bytes: int = Field(default=8, ge=1)
    max_bytes: int = Field(default=256 * 1024**2, ge=1)
    factor: int = Field(default=2, ge=2)
    warmup_iters: int = Field(default=5, ge=0)
    iters: int = Field(default=20, ge=1)

    @field_validator("min_bytes", "max_bytes", mode="before")
    @classmethod
    def _size(cls, value: Any) -> Any:
        if isinstance(value, str):
            try:
                return parse_bytes(value)
            except ValueError as exc:
                raise ValueError(str(exc)) from None
        return value

    @model_validator(mode="after")
    def _ordered(self) -> CollectivesSpec:
        if self.min_bytes > self.max_bytes:
            raise ValueError(f"min_bytes ({self.min_bytes}) is above max_bytes ({self.max_bytes}); swap them")
        return self


class PreflightSpec(_Strict):
    thresholds: dict[str, float] = Field(default_factory=dict, description="overrides of payload/node/thresholds.py")

    @field_validator("thresholds")
    @classmethod
    def _known(cls, value: dict[str, float]) -> dict[str, float]:
        resolve_thresholds(value)
        return value


class CommandSpec(_Strict):
    run: str = Field(min_length=1, description="shell command run on the node (sh -c)")
    upload: str | None = Field(default=None, description="local directory shipped as the command's work dir")
    timeout_minutes: float = Field(default=60, gt=0)

    _run = field_validator("run")(lambda value: _no_nul(value, "command.run"))


class PayloadSpec(_Strict):
    phases: list[str] = Field(default_factory=lambda: ["preflight", "profile"], min_length=1)
    profile: ProfileSpec = ProfileSpec()
    collectives: CollectivesSpec = CollectivesSpec()
    command: CommandSpec | None = None
    preflight: PreflightSpec = PreflightSpec()
    timeout_minutes: float = Field(default=120, gt=0, description="an attempt's payload is stopped after this")

    @field_validator("phases")
    @classmethod
    def _known_phases(cls, phases: list[str]) -> list[str]:
        unknown = [p for p in phases if p not in PHASES]
        if unknown:
            raise ValueError(f"unknown phase {unknown[0]!r}; known phases: {', '.join(PHASES)}")
        if len(set(phases)) != len(phases):
            raise ValueError("a phase is listed twice; list each once")
        return phases

    @model_validator(mode="after")
    def _command_given(self) -> PayloadSpec:
        if "command" in self.phases and self.command is None:
            raise ValueError("the command phase needs payload.command with at least `run: <shell command>`")
        return self


class _ProviderSections(_Strict):
    """Provider settings that live in the campaign (never credentials: those stay in each provider's
    place): one optional section per provider that takes settings, built from the provider table."""

    def section(self, name: str) -> ProviderSettings | None:
        """``providers.<name>`` as the campaign states it; None when it does not."""
        value = getattr(self, name, None)
        return value if isinstance(value, ProviderSettings) else None


if TYPE_CHECKING:  # mypy cannot read a Literal or a model built from the table; pydantic validates with them
    ProviderName = str
    ProvidersSpec = _ProviderSections
else:
    ProviderName = Literal[tuple(PROVIDERS)]
    ProvidersSpec = create_model("ProvidersSpec", __base__=_ProviderSections, __doc__=_ProviderSections.__doc__,
                                 **{name: (entry.settings | None, None) for name, entry in PROVIDERS.items()
                                    if entry.settings is not None})


class CampaignSpec(_Strict):
    name: str
    budget_usd: float = Field(gt=0)
    max_idle_minutes: float = Field(default=15, gt=0, description="dead-man switch: a payload whose controller "
                                    "stopped sending heartbeats this long stops itself (and its node, where the "
                                    "provider allows)")
    max_artifact_gb: float = Field(default=2, gt=0, le=MAX_ARTIFACT_GB,
                                   description="what one attempt may bring back from its node")
    target: Annotated[Annotated[Target, Tag("nanochat")] | Annotated[WorkloadTarget, Tag("workload")],
                      Discriminator(_target_kind)]
    defaults: Defaults = Defaults()
    payload: PayloadSpec = PayloadSpec()
    providers: ProvidersSpec = ProvidersSpec()
    matrix: list[dict[str, Any]] = Field(min_length=1)

    _name = field_validator("name")(check_campaign_name)

    @property
    def nanochat_target(self) -> Target:
        """The target as a nanochat model (what the profile phase measures); a steps/tokens target
        (``WorkloadTarget``) raises ValueError: such a campaign runs no profile (``_workload_phases``)."""
        if not isinstance(self.target, Target):
            raise ValueError("this campaign's target gives steps or tokens, not a nanochat model")
        return self.target

    def target_label(self) -> str:
        """What results are ranked as: the nanochat model, or a workload target's name (the campaign's)."""
        return self.target.model if isinstance(self.target, Target) else self.target.name or self.name

    @model_validator(mode="after")
    def _workload_phases(self) -> CampaignSpec:
        if isinstance(self.target, WorkloadTarget):
            if "profile" in self.payload.phases:
                raise ValueError("a target of steps or tokens prices the command phase's own step times; the "
                                 "profile phase measures a nanochat model (target.model): remove profile from "
                                 "payload.phases, or give target.model")
            if "command" not in self.payload.phases:
                raise ValueError("a target of steps or tokens is priced from the command phase's step_time_s "
                                 "metrics: add command to payload.phases (and payload.command.run)")
        return self


class LocalFaults(_Strict):
    """Faults the local provider injects into the first ``hosts`` of its virtual hosts (with
    ``node_ranks``, into ``local-<rank>`` for each rank: a cluster's worker alone)."""

    cuda_init: Literal["error", "hang"] | None = None
    numa: Literal["split"] | None = None
    shm_mb: int | None = Field(default=None, ge=1)
    env: dict[str, str] = Field(default_factory=dict)
    hosts: int = Field(default=1, ge=1)
    node_ranks: list[Annotated[int, Field(ge=0)]] | None = Field(
        default=None, min_length=1, description="a cluster's cell: fault the hosts these node ranks take in a "
        "cluster on the first hosts (local-<rank>); `hosts` is then unused")
    preempt_after_s: float | None = Field(default=None, gt=0, description="preempt the node this long after launch")
    preempt_at_step: int | None = Field(default=None, ge=0,
                                        description="preempt the node once it recorded this many timed profile steps")
    preemptions: int = Field(default=1, ge=1, description="how many launches of the cell are preempted")
    seed: int | None = Field(default=None, description="draw each preempt_after_s uniformly in ×[0.5, 1.5]")

    _env = field_validator("env")(lambda env: {name: _no_nul(value, name) for name, value in env.items()})


class CellSpec(_Strict):
    """One cell: one node configuration to rent and measure."""

    provider: ProviderName
    gpu: str | None = None
    count: int | None = Field(default=None, ge=1, description="GPUs per node")
    nodes: int = Field(default=1, ge=1, le=MAX_NODES, description="nodes rented as one unit and run as one attempt "
                       "(count stays GPUs per node)")
    market: Market
    cloud: str | None = Field(default=None, min_length=1, description="skypilot only: the cloud SkyPilot rents from")
    region: str | None = None
    instance_type: str | None = None
    capacity_reservation: str | None = Field(
        default=None, pattern=r"^cr-[0-9a-f]{8,17}$", description="aws only: launch into this Capacity Reservation "
        "or Capacity Block (its id, cr-…), priced as AWS bills it (docs/providers.md#aws)")
    min_vcpus: int | None = Field(default=None, ge=1)
    image: str | None = Field(default=None, description="set in the matrix entry; defaults.image applies otherwise")
    max_attempts: int = Field(ge=1)
    price_usd_per_hour: float | None = Field(default=None, ge=0)
    env: dict[str, str] = Field(default_factory=dict, description="environment for every rank, e.g. NCCL_ALGO")
    faults: LocalFaults | None = Field(default=None, description="local provider only: faults to inject")
    fabric: str | None = Field(default=None, description="what the nodes' network between them was sold as "
                               "(ib 8x400, roce 16x200, efa 32, none); default: what the provider's offer says")

    @field_validator("fabric")
    @classmethod
    def _fabric(cls, value: str | None) -> str | None:
        return None if value is None else str(FabricExpect.parse(value))  # FabricError is a ValueError

    @field_validator("gpu")
    @classmethod
    def _gpu(cls, value: str | None) -> str | None:
        """One vocabulary end to end (``payload.node.gpu_models``): an alias becomes the model's name,
        a name no node-side check knows is refused with the names to use."""
        if value is None:
            return None
        model = canonical_gpu(value)
        if model is None:
            raise ValueError(unknown_model(value))
        return model

    @field_validator("env", mode="before")
    @classmethod
    def _env(cls, value: Any) -> Any:
        if not isinstance(value, dict):
            return value
        env = {}
        for name, setting in value.items():
            if not isinstance(name, str) or not _ENV_NAME.match(name):
                raise ValueError(f"{name!r} is not an environment variable name")
            if name.upper().startswith("BENCHCTL_"):  # the node's marker, the metrics file, the rendezvous
                raise ValueError(f"the name {name}: BENCHCTL_* names are benchctl's own (set on the node by "
                                 "benchctl); give the variable another name")
            if _SECRET_NAME.search(name):
                raise ValueError(f"{name} looks like a secret; campaign env is stored in the database and job.json, "
                                 "so keep secrets out of it")
            if isinstance(setting, dict | list) or setting is None:
                raise ValueError(f"{name}: give a plain value (a string or a number)")
            env[name] = _no_nul(str(setting).lower() if isinstance(setting, bool) else str(setting), name)
        return env

    @model_validator(mode="before")
    @classmethod
    def _aws_count(cls, raw: Any) -> Any:
        """An aws cell that names only its instance type runs one process per GPU of that type."""
        if isinstance(raw, dict) and raw.get("provider") == "aws" and raw.get("count") is None:
            named = raw.get("instance_type")
            kind = AWS_INSTANCES.get(named) if isinstance(named, str) else None
            if kind is not None:
                return {**raw, "count": kind.count}
        return raw

    @model_validator(mode="after")
    def _consistent(self) -> CellSpec:
        if self.provider == "aws":
            try:
                resolve_aws_instance(self.instance_type, self.gpu, self.count)
            except UnknownInstance as exc:
                raise ValueError(str(exc)) from None
        if self.instance_type is None and (self.gpu is None or self.count is None):
            raise ValueError("a cell needs gpu and count (e.g. gpu: H100_SXM, count: 8; gpu: cpu on the local "
                             "provider), or an instance_type")
        if self.provider in PRICED_BY_USER and self.price_usd_per_hour is None:
            raise ValueError(f"{self.provider} cells need price_usd_per_hour (nobody bills them, so the "
                             "campaign states the price used for cost-to-train)")
        if self.provider == "skypilot" and self.cloud is None:
            raise ValueError("skypilot cells need cloud: the cloud SkyPilot rents from (e.g. cloud: lambda)")
        if self.cloud is not None and self.provider != "skypilot":
            raise ValueError("cloud is for skypilot cells (the cloud SkyPilot rents from); remove it from this cell")
        if self.capacity_reservation is not None and (self.provider != "aws" or self.market != "on-demand"):
            raise ValueError("capacity_reservation is for aws on-demand cells (a reservation or Capacity Block is "
                             "not spot capacity): set market: on-demand, or remove it")
        if self.faults is not None and self.provider != "local":
            raise ValueError("faults are injected by the local provider only; remove them from this cell")
        if self.faults is not None and self.faults.node_ranks is not None:
            self._check_fault_ranks(self.faults)
        if self.provider not in PRICED_BY_USER and self.price_usd_per_hour is not None:
            where = ("each node's price_usd_per_hour in providers.ssh.nodes" if self.provider == "ssh"
                     else "its own price")
            raise ValueError(f"price_usd_per_hour is for local cells; {self.provider} uses {where}: remove it")
        return self

    def _check_fault_ranks(self, faults: LocalFaults) -> None:
        ranks = faults.node_ranks or []
        if self.nodes == 1 or any(rank >= self.nodes for rank in ranks):
            raise ValueError(f"faults.node_ranks {ranks}: name node ranks of this cell's cluster (0 … {self.nodes - 1}"
                             f"{'; the cell has one node: use faults.hosts' if self.nodes == 1 else ''})")
        if faults.preempt_after_s is not None or faults.preempt_at_step is not None:
            raise ValueError("faults.node_ranks is for preflight faults; a cluster's preemption already hits node "
                             "rank 1: remove node_ranks")

    _key_tag: str | None = PrivateAttr(default=None)
    """Set by ``_expand`` when this cell's key would collide with another cell's (``cell_key``)."""

    def _coordinates(self) -> tuple[str, list[tuple[str, object]]]:
        shape = f"{self.gpu}x{self.count}" if self.gpu else str(self.instance_type)
        named: list[tuple[str, object]] = [("instance_type", self.instance_type)] if self.gpu and self.instance_type \
            else []
        named += [(name, getattr(self, name)) for name in ("cloud", "region", "min_vcpus", "image",
                                                           "capacity_reservation") if getattr(self, name) is not None]
        if self.nodes > 1:  # a 1-node cell keeps the key it had before cells could have nodes
            named.append(("nodes", self.nodes))
        return shape, named

    @property
    def key(self) -> str:
        """Stable identity from the coordinates (not from settings like price or max_attempts)."""
        shape, named = self._coordinates()
        return str(CellKey.build(self.provider, shape, self.market, named, self.env, self._key_tag))

    def exact_tag(self) -> str:
        """A hash of the exact coordinates, the market left out (``CellKey.exact_tag``)."""
        shape, named = self._coordinates()
        return CellKey.exact_tag(self.provider, shape, named, self.env)

    @property
    def world_size(self) -> int:
        return self.count or 1


class Campaign(BaseModel):
    """A validated campaign file and its expanded cells."""

    model_config = ConfigDict(frozen=True)
    spec: CampaignSpec
    cells: list[CellSpec]
    source: str

    def image(self, cell: CellSpec) -> str | None:
        """The image a cell's node runs: the matrix entry's, else defaults.image."""
        return cell.image or self.spec.defaults.image

    def collectives_config(self) -> CollectivesConfig:
        c = self.spec.payload.collectives
        return CollectivesConfig(ops=list(c.ops), min_bytes=c.min_bytes, max_bytes=c.max_bytes, factor=c.factor,
                                 warmup_iters=c.warmup_iters, iters=c.iters)

    def command_config(self) -> CommandConfig | None:
        c = self.spec.payload.command
        return CommandConfig(run=c.run, timeout_minutes=c.timeout_minutes) if c else None

    def command_upload(self) -> Path | None:
        """The command's upload directory, relative to the campaign file (``upload_problem`` checked it)."""
        c = self.spec.payload.command
        return Path(self.source).parent / c.upload if c and c.upload else None

    def profile_config(self, cell: CellSpec) -> ProfileConfig | None:
        """The profile as job.json carries it; None for a steps/tokens target (it runs no profile)."""
        if not isinstance(self.spec.target, Target):
            return None
        p, t = self.spec.payload.profile, self.spec.target
        return ProfileConfig(model=t.model, device_batch_size=p.device_batch_size, sequence_len=p.sequence_len,
                             total_batch_size=t.total_batch_size, warmup_steps=p.warmup_steps, steps=p.steps,
                             vocab_size=t.vocab_size, phase_timing=p.phase_timing, nsys=p.nsys,
                             compile=p.compile, host_data=p.host_data, precision=p.precision,
                             attention=p.attention)


def load_campaign(path: str | Path) -> Campaign:
    file = str(path)
    try:
        text = read_capped(Path(path), file, CAMPAIGN_LIMITS.max_bytes, "a campaign file")
    except FileNotFoundError:
        raise SpecError(file, None, "", f"no such file; {_close_file(Path(path)) or 'check the path'}") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise SpecError(file, None, "", f"cannot read the file ({exc.__class__.__name__}); "
                        "give a readable YAML file") from None
    return parse_campaign(text, file)


def _close_file(path: Path) -> str:
    """``did you mean NAME?`` naming the file beside ``path`` whose name is closest to its name
    (a typo'd campaign file), or nothing."""
    import difflib

    try:
        beside = [p.name for p in path.parent.iterdir() if p.is_file()]
    except OSError:
        return ""
    match = difflib.get_close_matches(path.name, beside, n=1, cutoff=0.6)
    return f"did you mean {path.parent / match[0]}?" if match else ""


def parse_campaign(text: str, file: str) -> Campaign:
    data, lines = load_yaml(text, file)
    if not isinstance(data, dict):
        raise SpecError(file, 1, "", "a campaign file must be a mapping with name, budget_usd, target, matrix")
    try:
        spec = CampaignSpec.model_validate(data)
    except ValidationError as exc:
        raise _spec_error(exc, file, lines, _untagged, CampaignSpec) from None
    target = spec.target
    steps = target.train_steps()
    where_target: Path_ = ("target", "target_param_data_ratio")
    if isinstance(target, WorkloadTarget):
        pass  # its own validator bounds its steps
    elif steps < 1:
        raise SpecError(file, line_of(lines, where_target), format_path(where_target),
                        "this target trains for less than one step (ratio × scaling params < total_batch_size); "
                        "raise the ratio or lower total_batch_size")
    if steps > MAX_TARGET_STEPS:
        raise SpecError(file, line_of(lines, where_target), format_path(where_target),
                        f"this target trains for {steps:,} steps, over {MAX_TARGET_STEPS:,}; lower the ratio or "
                        "raise total_batch_size")
    profiled = spec.payload.profile.model
    if profiled is not None and isinstance(target, Target) and profiled != target.model:
        path: Path_ = ("payload", "profile", "model")
        raise SpecError(file, line_of(lines, path), format_path(path),
                        f"{profiled!r} differs from target.model {target.model!r}: cost-to-train multiplies "
                        "the profiled step time by the target's step count, so they must be the same model; "
                        "drop payload.profile.model")
    cells = _expand(spec, data["matrix"], file, lines)
    if spec.providers.section("ssh") is None and any(c.provider == "ssh" for c in cells):
        index = next(i for i, e in enumerate(data["matrix"])
                     if "ssh" in (e.get("provider") if isinstance(e.get("provider"), list) else [e.get("provider")]))
        where_ssh: Path_ = ("matrix", index)
        raise SpecError(file, line_of(lines, where_ssh), format_path(where_ssh),
                        "ssh cells need the machines to use: add providers.ssh.nodes (host, user, gpu, count, "
                        "price_usd_per_hour for each)")
    campaign = Campaign(spec=spec, cells=cells, source=str(Path(file).resolve()) if Path(file).exists() else file)
    command = spec.payload.command
    if command is not None and command.upload is not None:
        problem = upload_problem(Path(campaign.source).parent, command.upload)
        if problem is not None:
            where: Path_ = ("payload", "command", "upload")
            raise SpecError(file, line_of(lines, where), format_path(where), problem)
    return campaign


def _untagged(loc: tuple[Any, ...]) -> Path_:
    """An error's YAML path: the target's union tag (``target.workload.steps``) is no key of the file."""
    return (loc[0], *loc[2:]) if loc[:1] == ("target",) and loc[1:2] in (("nanochat",), ("workload",)) else loc


def _expand(spec: CampaignSpec, matrix: list[dict[str, Any]], file: str, lines: dict[Path_, int]) -> list[CellSpec]:
    sizes = [math.prod(len(v) for v in entry.values() if isinstance(v, list)) for entry in matrix]
    if sum(sizes) > MAX_CELLS:
        widest = sizes.index(max(sizes))
        raise SpecError(file, line_of(lines, ("matrix", widest)), format_path(("matrix", widest)),
                        f"the matrix expands to {sum(sizes):,} cells, over the {MAX_CELLS:,} a campaign may hold; "
                        "split it into several campaigns")
    cells: list[CellSpec] = []
    seen: dict[tuple[str, str], str] = {}
    for i, entry in enumerate(matrix):
        lists = {k: v for k, v in entry.items() if isinstance(v, list)}
        for name, values in lists.items():
            if not values:
                raise SpecError(file, line_of(lines, ("matrix", i, name)), format_path(("matrix", i, name)),
                                "empty list: give at least one value")
        for choice in itertools.product(*(enumerate(v) for v in lists.values())):
            picked = dict(zip(lists, choice, strict=True))
            raw = {**entry, **{name: value for name, (_, value) in picked.items()}}
            raw.setdefault("market", spec.defaults.market)
            raw.setdefault("max_attempts", spec.defaults.max_attempts)

            def to_path(loc: tuple[Any, ...], i: int = i, picked: dict[str, Any] = picked) -> Path_:
                base: Path_ = ("matrix", i, *loc)
                return (*base, picked[loc[0]][0]) if loc and loc[0] in picked else base

            try:
                cell = CellSpec.model_validate(raw)
            except ValidationError as exc:
                raise _spec_error(exc, file, lines, to_path, CellSpec) from None
            where = format_path(("matrix", i))
            exact = (cell.exact_tag(), cell.market)
            if exact in seen:
                raise SpecError(file, line_of(lines, ("matrix", i)), where,
                                f"repeats cell {cell.key} of {seen[exact]}; remove one of them")
            seen[exact] = where
            _check_batch(spec, cell, file, lines, to_path(("count",)))
            cells.append(cell)
    _tag_colliding_keys(cells)
    return cells


def _tag_colliding_keys(cells: list[CellSpec]) -> None:
    """Cells whose keys (less the market) are one text for different coordinates get ``id=<hash>``
    (``cell_key``); every other key stays as it was."""
    tags: dict[str, set[str]] = {}
    for cell in cells:
        tags.setdefault(CellKey.parse(cell.key).without_market(), set()).add(cell.exact_tag())
    for cell in [c for c in cells if len(tags[CellKey.parse(c.key).without_market()]) > 1]:
        cell._key_tag = cell.exact_tag()


def _check_batch(spec: CampaignSpec, cell: CellSpec, file: str, lines: dict[Path_, int], path: Path_) -> None:
    p = spec.payload.profile
    per_step = p.device_batch_size * p.sequence_len * cell.world_size * cell.nodes  # every rank of every node
    names, factors = (" × nodes", f" × {cell.nodes}") if cell.nodes > 1 else ("", "")
    if "profile" in spec.payload.phases and spec.nanochat_target.total_batch_size % per_step:
        raise SpecError(file, line_of(lines, path), format_path(path),
                        f"target.total_batch_size {spec.nanochat_target.total_batch_size} is not a multiple of "
                        f"device_batch_size × sequence_len × count{names} = {p.device_batch_size} × "
                        f"{p.sequence_len} × {cell.world_size}{factors} = {per_step}; change one of them")


def _spec_error(exc: ValidationError, file: str, lines: dict[Path_, int], to_path: Any,
                model: type[BaseModel]) -> SpecError:
    """The first validation error as a SpecError; the others are appended, one per line. ``model``:
    what was validated (an unknown key's message suggests the nearest key it has there)."""
    errors = []
    for err in exc.errors():
        path = to_path(tuple(err["loc"]))
        problem = _problem(err)
        if err["type"] == "extra_forbidden" and err["loc"] and isinstance(err["loc"][-1], str):
            close = difflib.get_close_matches(err["loc"][-1], _keys_at(model, tuple(err["loc"][:-1])), n=1)
            if close:
                problem = problem.replace("unknown key;", f"unknown key (did you mean {close[0]!r}?);")
        errors.append(SpecError(file, line_of(lines, path), format_path(path), problem))
    first = errors[0]
    if len(errors) > 1:
        first.args = ("\n".join(str(e) for e in errors),)
    return first


def _keys_at(model: type[BaseModel], loc: tuple[Any, ...]) -> list[str]:
    """The keys the models at ``loc`` (a pydantic error location below ``model``) accept: field
    names and aliases, through optionals, unions, lists and dicts. Parts that name no field (a union
    member's tag) are passed over."""
    def members(kind: Any) -> list[Any]:
        if typing.get_origin(kind) in (typing.Union, types.UnionType, typing.Annotated):
            args = typing.get_args(kind)
            return [m for arg in (args[:1] if typing.get_origin(kind) is typing.Annotated else args)
                    for m in members(arg)]
        return [kind]

    kinds: list[Any] = [model]
    for part in loc:
        found = []
        for kind in (m for k in kinds for m in members(k)):
            origin, args = typing.get_origin(kind), typing.get_args(kind)
            if isinstance(part, str) and isinstance(kind, type) and issubclass(kind, BaseModel):
                fields = {f.alias or n: f for n, f in kind.model_fields.items()} | kind.model_fields
                if part in fields:
                    found.append(fields[part].annotation)
            elif isinstance(part, int) and origin in (list, tuple) and args:
                found.append(args[0])
            elif origin is dict and len(args) == 2:
                found.append(args[1])
        kinds = found or kinds
    keys = []
    for kind in (m for k in kinds for m in members(k)):
        if isinstance(kind, type) and issubclass(kind, BaseModel):
            keys += [f.alias or n for n, f in kind.model_fields.items()]
    return keys


def _problem(err: Any) -> str:
    kind = err["type"]
    if kind == "extra_forbidden":
        return "unknown key; remove it or check its spelling (docs/campaign-reference.md lists every key)"
    if kind == "missing":
        return "missing required key; add it"
    message = str(err["msg"]).removeprefix("Value error, ")
    if kind in ("literal_error", "enum"):  # name what was written, not only what is allowed
        written = repr(err.get("input"))
        message += f", not {written if len(written) <= 60 else written[:57] + '...'}"
    return message[0].lower() + message[1:] if message else kind

"""A provider out of capacity at launch (``NoCapacity``): the cell backs off, moves to the next
offer, asks for offers again once every offer refused, and never uses up ``max_attempts`` on it;
it gives up after the capacity wait with the reason. One cell run in-process on local nodes whose
provider refuses chosen launches, with millisecond back-offs."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

from benchctl.campaign.spec import parse_campaign
from benchctl.cli.run import register_campaign
from benchctl.engine.budget import Budget
from benchctl.engine.capacity import CapacityPolicy, CapacityWait
from benchctl.engine.cell_runner import CellRunner
from benchctl.engine.cell_states import CellState
from benchctl.engine.lease import Leases
from benchctl.engine.providers import Providers
from benchctl.engine.run_context import RunContext
from benchctl.provisioners.base import NoCapacity, Node, Offer, Unavailable
from benchctl.provisioners.local.provider import LocalProvider
from benchctl.store import queries as q
from benchctl.store.database import open_store

CAMPAIGN = """\
name: full
budget_usd: 5
target: {model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}
defaults: {market: on-demand, max_attempts: 1}
payload:
  phases: [command]
  command: {run: "true"}
matrix:
  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}
"""
FAST = CapacityPolicy(first_s=0.01, max_s=0.04, hold_s=60.0, give_up_after_s=60.0)


class RefusingProvider(LocalProvider):
    """Local nodes, but ``refuse(offer, launches so far)`` decides which launches raise ``error``."""

    def __init__(self, root: Path, refuse: Callable[[Offer, int], bool], error: type[Exception] = NoCapacity) -> None:
        super().__init__(root)
        self.refuse, self.error = refuse, error
        self.launches: list[str] = []
        self.queries = 0

    def offers(self, request):  # type: ignore[no-untyped-def]
        self.queries += 1
        return super().offers(request)

    def launch(self, offer: Offer, token: str, campaign_tag: str) -> Node:
        self.launches.append(offer.host)
        if self.refuse(offer, len(self.launches)):
            raise self.error(f"{offer.host}: There are no longer any instances available with the requested "
                             "specifications")
        return super().launch(offer, token, campaign_tag)


class RecordingStop(threading.Event):
    """The stop flag, recording every wait asked of it."""

    def __init__(self) -> None:
        super().__init__()
        self.waits: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.waits.append(timeout or 0.0)
        return super().wait(timeout)


def _run(tmp_path: Path, provider: LocalProvider, policy: CapacityPolicy = FAST,
         stop: threading.Event | None = None) -> tuple[CellState, RunContext, int]:
    engine = open_store(f"sqlite:///{tmp_path / 'benchctl.db'}")
    campaign = parse_campaign(CAMPAIGN, "full.yaml")
    row = register_campaign(engine, campaign, "full.yaml")
    assert row.id is not None
    providers = Providers(tmp_path)
    providers._made["local"] = provider
    leases = Leases(engine, 60.0)
    ctx = RunContext(engine=engine, campaign=campaign, campaign_id=row.id, campaign_uid=row.uid, providers=providers,
                     artifacts_dir=tmp_path / "artifacts", leases=leases, budget=Budget(engine, row.id, 5.0, 60.0),
                     stop=stop or RecordingStop(), poll_interval_s=0.05, status_interval_s=0.2, log=lambda _: None)
    ctx.capacity = policy
    (cell,) = q.cells(engine, row.id)
    assert cell.id is not None
    assert leases.take(cell.id) is None
    try:
        return CellRunner(ctx, cell.id).run(), ctx, cell.id
    finally:
        leases.close()


def test_capacity_refusals_move_to_the_next_offer_without_using_attempts(tmp_path: Path) -> None:
    provider = RefusingProvider(tmp_path / "nodes", lambda offer, _: offer.host in ("local-0", "local-1"))
    state, ctx, cell_id = _run(tmp_path, provider)
    assert state is CellState.DONE, q.cell(ctx.engine, cell_id).reason
    assert provider.launches == ["local-0", "local-1", "local-2"], "a refused offer is not retried at once"
    attempts = q.attempts(ctx.engine, cell_id)
    assert [(a.host, a.outcome) for a in attempts] == [
        ("local-0", "launch_failed"), ("local-1", "launch_failed"), ("local-2", "done")]
    assert "no longer any instances" in (attempts[0].detail or "")
    assert isinstance(ctx.stop, RecordingStop)
    assert ctx.stop.waits[:2] == [0.01, 0.02], "a bounded exponential back-off after each refusal"


def test_every_offer_refused_backs_off_asks_again_and_launches_when_capacity_returns(tmp_path: Path) -> None:
    provider = RefusingProvider(tmp_path / "nodes", lambda _, launches: launches <= 5)
    state, ctx, cell_id = _run(tmp_path, provider)
    assert state is CellState.DONE, q.cell(ctx.engine, cell_id).reason
    assert provider.launches == ["local-0", "local-1", "local-2", "local-3", "local-0", "local-1"]
    assert isinstance(ctx.stop, RecordingStop)
    assert ctx.stop.waits[:6] == [0.01, 0.02, 0.04, 0.04, 0.04, 0.04], "capped at max_s"


def test_capacity_wait_is_bounded_and_the_reason_says_so(tmp_path: Path) -> None:
    provider = RefusingProvider(tmp_path / "nodes", lambda *_: True)
    policy = CapacityPolicy(first_s=0.01, max_s=0.02, hold_s=60.0, give_up_after_s=0.5)
    started = time.monotonic()
    state, ctx, cell_id = _run(tmp_path, provider, policy)
    assert state is CellState.FAILED
    assert time.monotonic() - started < 60  # the 0.5 s capacity wait, not the default 30 min
    reason = q.cell(ctx.engine, cell_id).reason or ""
    assert reason.startswith("no capacity: local refused every launch for capacity"), reason
    assert "benchctl resume" in reason
    attempts = q.attempts(ctx.engine, cell_id)
    assert len(attempts) > 4, "refusals do not use up max_attempts (1 here)"
    assert {a.outcome for a in attempts} == {"launch_failed"} and not any(a.open for a in attempts)
    assert provider.queries > len(attempts), "offers are asked for again after every refusal"


def test_ctrl_c_ends_a_capacity_back_off_at_once(tmp_path: Path) -> None:
    stop = RecordingStop()

    def refuse_and_interrupt_soon(_: Offer, launches: int) -> bool:
        if launches == 1:
            threading.Timer(0.5, stop.set).start()  # Ctrl-C, while the back-off runs
        return True

    provider = RefusingProvider(tmp_path / "nodes", refuse_and_interrupt_soon)
    started = time.monotonic()
    state, _, _ = _run(tmp_path, provider, CapacityPolicy(first_s=300.0, max_s=300.0), stop)
    assert state is CellState.CANCELLED
    assert time.monotonic() - started < 60  # not the 300 s back-off, nor the default 30 min wait
    assert stop.waits == [300.0]


def test_other_launch_errors_still_use_up_max_attempts(tmp_path: Path) -> None:
    provider = RefusingProvider(tmp_path / "nodes", lambda *_: True, error=Unavailable)
    state, ctx, cell_id = _run(tmp_path, provider)
    assert state is CellState.FAILED
    assert provider.launches == ["local-0"]
    assert (q.cell(ctx.engine, cell_id).reason or "").startswith("1 attempts used (max_attempts); last: launch failed")


def test_capacity_wait_holds_refused_offers_for_hold_s_only() -> None:
    now = [0.0]
    wait = CapacityWait(CapacityPolicy(first_s=1.0, max_s=4.0, hold_s=10.0, give_up_after_s=30.0), lambda: now[0])
    offers = [Offer("p", f"o{i}", "H100", 8, 1, "r", 1.0, "spot", host=f"h{i}") for i in range(2)]
    assert [wait.refused(offers[0]), wait.refused(offers[1])] == [1.0, 2.0]
    assert wait.available(offers) == []
    now[0] = 10.5
    assert wait.available(offers) == offers
    assert not wait.exhausted()
    now[0] = 30.0
    assert wait.exhausted()
    wait.launched()
    assert not wait.exhausted() and wait.refused(offers[0]) == 1.0


class LateRefusingProvider(LocalProvider):
    """Local nodes whose first ``refusals`` launches return and are then found out of capacity
    while the driver waits for them (SkyPilot's way: its launch is a request, failover inside it)."""

    def __init__(self, root: Path, refusals: int) -> None:
        super().__init__(root)
        self.refusals = refusals
        self.refused: list[str] = []

    def status(self, node: Node):  # type: ignore[no-untyped-def]
        if len(self.refused) < self.refusals and node.node_id not in self.refused:
            self.refused.append(node.node_id)
        if node.node_id in self.refused:
            raise NoCapacity(f"{node.node_id}: ResourcesUnavailableError: no zone had the instance type")
        return super().status(node)


def test_capacity_found_while_waiting_for_the_node_is_not_a_try_and_the_node_goes(tmp_path: Path) -> None:
    provider = LateRefusingProvider(tmp_path / "nodes", refusals=2)
    state, ctx, cell_id = _run(tmp_path, provider)
    assert state is CellState.DONE, q.cell(ctx.engine, cell_id).reason
    attempts = q.attempts(ctx.engine, cell_id)
    assert [a.outcome for a in attempts] == ["launch_failed", "launch_failed", "done"], "max_attempts is 1"
    assert "no capacity" in (attempts[0].detail or "") and not any(a.open for a in attempts)
    assert provider.owned(ctx.campaign_tag) == [], "the refused nodes were taken down"
    assert isinstance(ctx.stop, RecordingStop) and ctx.stop.waits[:2] == [0.01, 0.02]


def test_capacity_found_late_still_gives_up_after_the_capacity_wait(tmp_path: Path) -> None:
    provider = LateRefusingProvider(tmp_path / "nodes", refusals=10_000)
    policy = CapacityPolicy(first_s=0.01, max_s=0.02, hold_s=0.0, give_up_after_s=0.5)
    state, ctx, cell_id = _run(tmp_path, provider, policy)
    assert state is CellState.FAILED
    assert (q.cell(ctx.engine, cell_id).reason or "").startswith("no capacity: local refused every launch")

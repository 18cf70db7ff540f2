"""A campaign with SkyPilot cells, end to end: the controller runs in this process with the provider
registry building the skypilot provider on the SDK stand-in (a subprocess could not reach it);
the payload runs over real SSH through each cluster's host alias to the test sshd. The spot
cluster is reclaimed mid-profile; the cell continues on a new cluster and ends with exactly the
profile's timed samples; no cluster is left up."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from benchctl.store import queries as q
from tests.cloud_checks import measuring
from tests.fakes.skypilot_standin import SkyPilotStandIn
from tests.fakes.sshd import running_sshd
from tests.local_campaign import home_store, wait_for

pytestmark = pytest.mark.slow

STEPS = 80
"""The spot cluster is reclaimed once it has measured a timed step: ≥ 1.5 s of profile left for that."""
CAMPAIGN = """\
name: skyrun
budget_usd: 5
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
defaults: {{market: on-demand, max_attempts: 3}}
payload:
  phases: [preflight, profile]
  profile: {{device_batch_size: 2, sequence_len: 32, warmup_steps: 1, steps: {steps}}}
providers:
  skypilot: {{python: "{python}", workdir: "{work}", autodown_idle_minutes: 20}}
matrix:
  - {{provider: skypilot, cloud: gcp, gpu: cpu, count: 1, market: [spot, on-demand]}}
"""
SPOT = "skypilot:cpux1:spot:cloud=gcp"
ON_DEMAND = "skypilot:cpux1:on-demand:cloud=gcp"


@pytest.fixture
def sky(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[SkyPilotStandIn]:
    from dataclasses import replace

    from benchctl.provisioners.registry import PROVIDERS
    from benchctl.provisioners.skypilot.provider import SkyPilotProvider, SkyPilotSettings

    monkeypatch.setenv("HOME", str(tmp_path / "user"))  # SkyPilot keeps a user hash under ~/.sky
    with running_sshd(tmp_path / "sshd") as sshd:
        # autodown_idle_minutes 20 of 1 s: SkyPilot's autodown fires 20 s after the last renewal
        standin = SkyPilotStandIn(sshd, tmp_path / "standin", workdir=tmp_path / "work", boot_s=0.5, minute_s=1.0)

        def make(home: Path, settings: SkyPilotSettings | None) -> SkyPilotProvider:
            assert settings is not None, "the campaign's providers.skypilot reaches the provider"
            provider = SkyPilotProvider(home / "skypilot", settings, client=standin)
            provider.minute_s = standin.minute_s
            return provider

        monkeypatch.setitem(PROVIDERS, "skypilot", replace(PROVIDERS["skypilot"], make=make))
        yield standin
        assert standin.inventory() == [], "a cluster was left up"


def test_a_spot_cluster_reclaimed_mid_profile_is_resumed_on_a_new_one(home: Path, tmp_path: Path, sky: SkyPilotStandIn,
                                                                      standin_python: Path) -> None:
    from benchctl.cli.main import main

    path = tmp_path / "skyrun.yaml"
    path.write_text(CAMPAIGN.format(steps=STEPS, python=standin_python, work=tmp_path / "work"))
    sky.lands_in = ("us-west-3", 0.09)  # every launch fails over to a dearer region than the catalog's 0.07 / 0.2
    preempted: list[str] = []
    failures: list[BaseException] = []

    def reclaim() -> None:
        try:
            wait_for(lambda: measuring(tmp_path / "work", "skyrun", SPOT), timeout=180)
            (cluster,) = [e["cluster"] for e in sky.launched if e["use_spot"]]
            sky.preempt(cluster)
            preempted.append(cluster)
        except BaseException as exc:  # reported by the test thread
            failures.append(exc)

    watcher = threading.Thread(target=reclaim, daemon=True)
    watcher.start()
    try:
        main(["run", str(path), "--poll-interval", "0.2", "--status-interval", "1"])
    except SystemExit as exc:
        assert exc.code in (0, None), f"benchctl run exited {exc.code}"
    watcher.join(timeout=10)
    assert failures == [] and len(preempted) == 1, f"the spot cluster was never reclaimed mid-profile: {failures}"

    engine = home_store(home)
    (campaign,) = q.campaigns(engine)
    cells = {c.key: c for c in q.cells(engine, campaign.id or 0)}
    assert {k: c.state for k, c in cells.items()} == {SPOT: "done", ON_DEMAND: "done"}
    spot = q.attempts(engine, cells[SPOT].id or 0)
    assert [a.outcome for a in spot] == ["preempted", "done"]
    assert all(a.hourly_usd == pytest.approx(0.09) for a in spot), "priced as launched where it landed (the handle)"
    assert sky.autodowned == [], "the controller kept every cluster it watched from SkyPilot's autodown"
    (on_demand,) = q.attempts(engine, cells[ON_DEMAND].id or 0)
    assert (on_demand.outcome, on_demand.hourly_usd) == ("done", pytest.approx(0.09))
    timed = sorted(json.loads(e.data_json)["timed_index"]
                   for e in q.events(engine, cells[SPOT].id or 0, kind="sample", phase="profile")
                   if not json.loads(e.data_json)["warmup"])
    assert timed == list(range(STEPS)), "every timed step exactly once across the two clusters"
    launches = [(e["use_spot"], e["instance_type"], e["autodown_idle_minutes"]) for e in sky.launched]
    assert sorted(launches) == [(False, "n2-standard-2", 20), (True, "n2-standard-2", 20), (True, "n2-standard-2", 20)]
    assert len({e["cluster"] for e in sky.launched}) == 3, "a new cluster for the new attempt"
    assert sky.inventory() == [], "every cluster was taken down"

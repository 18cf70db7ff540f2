"""A campaign through RunPod and Vast.ai (their real SDKs against the local fakes, nodes on a real
sshd), ssh and local at once: a Vast.ai bid outbid through the fake's API and resumed on a new
node (RunPod rents no spot pods: its cells are on-demand), nothing left billing, and a canary API key that reaches
nothing benchctl writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchctl.store import queries as q
from tests.cloud_checks import CANARY, assert_canary_nowhere, measuring
from tests.conftest import REPO
from tests.fakes.runpod_fake import FakeRunPod, running_fake_runpod
from tests.fakes.sshd import SSHServer, running_sshd
from tests.fakes.vastai_fake import FakeVast, running_fake_vast
from tests.local_campaign import home_store, no_live_nodes, wait_for

pytestmark = pytest.mark.slow

STEPS = 80
"""A node is reclaimed once it has measured a timed step: ≥ 1.5 s of profile left for that."""
CAMPAIGN = """\
name: cloudy
budget_usd: 5
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
defaults: {{market: on-demand, max_attempts: 3, image: "example/pytorch:cpu"}}
payload:
  phases: [preflight, profile]
  profile: {{device_batch_size: 2, sequence_len: 32, warmup_steps: 1, steps: {steps}}}
providers:
  local: {{python: "{python}"}}
  runpod: {{python: "{python}", workdir: "{pods}"}}
  vastai: {{python: "{python}", workdir: "{vast}"}}
  ssh:
    nodes:
      - {{name: box, host: {host}, port: {port}, user: {user}, key: "{key}", gpu: cpu, count: 1,
         price_usd_per_hour: 0.3, python: "{python}", workdir: "{work}/box"}}
matrix:
  - {{provider: runpod, gpu: cpu, count: 2}}
  - {{provider: vastai, gpu: cpu, count: 1, market: spot}}
  - {{provider: ssh, gpu: cpu, count: 1}}
  - {{provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.2}}
"""


@dataclass
class Clouds:
    sshd: SSHServer
    runpod: FakeRunPod
    runpod_url: str
    vast: FakeVast
    vast_url: str


@pytest.fixture
def clouds(tmp_path: Path) -> Iterator[Clouds]:
    with running_sshd(tmp_path / "sshd") as sshd:
        keys = sshd.root / "authorized_keys"
        runpod = FakeRunPod(CANARY, ssh_port=sshd.port, authorized_keys=keys, workdir=tmp_path / "pods", boot_s=0.5)
        vast = FakeVast(CANARY, ssh_port=sshd.port, authorized_keys=keys, workdir=tmp_path / "vast", boot_s=0.5)
        with running_fake_runpod(runpod) as runpod_url, running_fake_vast(vast) as vast_url:
            yield Clouds(sshd, runpod, runpod_url, vast, vast_url)
        assert runpod.inventory() == [] and vast.inventory() == [], "a node was left billing at a fake"


def _env(home: Path, clouds: Clouds) -> dict[str, str]:
    env = {**os.environ, "BENCHCTL_HOME": str(home), "RUNPOD_API_BASE_URL": clouds.runpod_url,
           "VAST_URL": clouds.vast_url, "RUNPOD_API_KEY": CANARY, "VAST_API_KEY": CANARY,
           "AWS_SECRET_ACCESS_KEY": CANARY}
    env.pop("BENCHCTL_DB", None)
    return env


def test_runpod_vastai_ssh_and_local_cells_with_preempted_spot_nodes(home: Path, tmp_path: Path,
                                                                      clouds: Clouds, standin_python: Path) -> None:
    sshd = clouds.sshd
    path = tmp_path / "cloudy.yaml"
    path.write_text(CAMPAIGN.format(steps=STEPS, python=standin_python, pods=tmp_path / "pods", vast=tmp_path / "vast",
                                    host=sshd.host, port=sshd.port, user=sshd.user, key=sshd.key,
                                    work=tmp_path / "machines"))
    proc = subprocess.Popen([sys.executable, "-m", "benchctl", "run", str(path), "--poll-interval", "0.2",
                             "--status-interval", "1"], cwd=REPO, env=_env(home, clouds), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: measuring(tmp_path / "vast", "cloudy", "vastai:cpux1:spot"), timeout=120)
        with clouds.vast.lock:
            (instance_id,) = [i for i, v in clouds.vast.instances.items() if v["is_bid"]]
        clouds.vast.outbid(instance_id)  # someone outbids our Vast.ai instance
    except AssertionError:
        proc.kill()
        raise AssertionError(f"a spot node never profiled: {proc.communicate()[1][-3000:]}") from None
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    engine = home_store(home)
    (campaign,) = q.campaigns(engine)
    cells = {c.key: c for c in q.cells(engine, campaign.id or 0)}
    assert {c.state for c in cells.values()} == {"done"}
    on_demand = q.attempts(engine, cells["runpod:cpux2:on-demand"].id or 0)
    assert [(a.outcome, a.hourly_usd) for a in on_demand] == [("done", pytest.approx(0.2))]
    outbid = q.attempts(engine, cells["vastai:cpux1:spot"].id or 0)
    assert [a.outcome for a in outbid] == ["preempted", "done"]
    assert {a.host for a in outbid} <= {"601", "602"}, "Vast.ai machine ids are the attempts' hosts"
    for key in ("vastai:cpux1:spot",):
        timed = sorted(json.loads(e.data_json)["timed_index"]
                       for e in q.events(engine, cells[key].id or 0, kind="sample", phase="profile")
                       if not json.loads(e.data_json)["warmup"])
        assert timed == list(range(STEPS)), key
    assert clouds.runpod.inventory() == [] and clouds.vast.inventory() == [], "nothing left billing"
    no_live_nodes(home)
    time.sleep(0.5)
    assert_canary_nowhere(out + err, [home, tmp_path / "pods", tmp_path / "vast", tmp_path / "machines"])


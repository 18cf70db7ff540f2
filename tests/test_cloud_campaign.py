"""A campaign through RunPod (the real SDK against the local fake, pods on a real sshd), ssh and
local at once: a spot pod preempted through the fake's API and resumed on a new pod, nothing left
billing, and a canary API key that reaches nothing benchctl writes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from store import queries as q
from tests.conftest import REPO
from tests.fakes.runpod_fake import FakeRunPod, running_fake_runpod
from tests.fakes.sshd import SSHServer, running_sshd
from tests.local_campaign import home_store, no_live_nodes, wait_for

CANARY = "canary-9f3b7e1d-secret"

CAMPAIGN = """\
name: cloudy
budget_usd: 5
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
defaults: {{market: on-demand, max_attempts: 3, image: "example/pytorch:cpu"}}
payload:
  phases: [preflight, profile]
  profile: {{device_batch_size: 2, sequence_len: 32, warmup_steps: 1, steps: 150}}
providers:
  runpod: {{python: "{python}", workdir: "{pods}"}}
  ssh:
    nodes:
      - {{name: box, host: {host}, port: {port}, user: {user}, key: "{key}", gpu: cpu, count: 1,
         price_usd_per_hour: 0.3, python: "{python}", workdir: "{work}/box"}}
matrix:
  - {{provider: runpod, gpu: cpu, count: 1, market: spot}}
  - {{provider: runpod, gpu: cpu, count: 2}}
  - {{provider: ssh, gpu: cpu, count: 1}}
  - {{provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.2}}
"""


@pytest.fixture
def clouds(tmp_path: Path) -> Iterator[tuple[SSHServer, FakeRunPod, str]]:
    with running_sshd(tmp_path / "sshd") as sshd:
        fake = FakeRunPod(CANARY, ssh_port=sshd.port, authorized_keys=sshd.root / "authorized_keys",
                          workdir=tmp_path / "pods", boot_s=0.5)
        with running_fake_runpod(fake) as url:
            yield sshd, fake, url


def _env(home: Path, url: str) -> dict[str, str]:
    env = {**os.environ, "BENCHCTL_HOME": str(home), "RUNPOD_API_BASE_URL": url, "RUNPOD_API_KEY": CANARY,
           "VAST_API_KEY": CANARY, "AWS_SECRET_ACCESS_KEY": CANARY}
    env.pop("BENCHCTL_DB", None)
    return env


def _spot_pod_profiling(home: Path) -> str | None:
    if not (home / "benchctl.db").exists():
        return None
    engine = home_store(home)
    for campaign in q.campaigns(engine):
        for cell in q.cells(engine, campaign.id or 0):
            if cell.key != "runpod:cpux1:spot":
                continue
            samples = {e.attempt_id for e in q.events(engine, cell.id or 0, kind="sample", phase="profile")}
            for attempt in q.attempts(engine, cell.id or 0):
                if attempt.open and attempt.node_json and attempt.id in samples:
                    return str(json.loads(attempt.node_json)["node_id"])
    return None


def test_runpod_ssh_and_local_cells_with_a_preempted_spot_pod(home: Path, tmp_path: Path, clouds) -> None:
    sshd, fake, url = clouds
    path = tmp_path / "cloudy.yaml"
    path.write_text(CAMPAIGN.format(python=sys.executable, pods=tmp_path / "pods", host=sshd.host, port=sshd.port,
                                    user=sshd.user, key=sshd.key, work=tmp_path / "machines"))
    proc = subprocess.Popen([sys.executable, "-m", "benchctl", "run", str(path), "--poll-interval", "0.2",
                             "--status-interval", "1"], cwd=REPO, env=_env(home, url), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        pod_id = wait_for(lambda: _spot_pod_profiling(home), timeout=120)
    except AssertionError:
        proc.kill()
        raise AssertionError(f"the spot pod never profiled: {proc.communicate()[1][-3000:]}") from None
    fake.preempt(str(pod_id))  # RunPod evicts the spot pod
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    engine = home_store(home)
    (campaign,) = q.campaigns(engine)
    cells = {c.key: c for c in q.cells(engine, campaign.id or 0)}
    assert {c.state for c in cells.values()} == {"done"}
    spot = q.attempts(engine, cells["runpod:cpux1:spot"].id or 0)
    assert [a.outcome for a in spot] == ["preempted", "done"]
    assert all(a.hourly_usd == pytest.approx(0.06) for a in spot), "billed at the pod's costPerHr (the bid)"
    on_demand = q.attempts(engine, cells["runpod:cpux2:on-demand"].id or 0)
    assert [(a.outcome, a.hourly_usd) for a in on_demand] == [("done", pytest.approx(0.2))]
    timed = sorted(json.loads(e.data_json)["timed_index"]
                   for e in q.events(engine, cells["runpod:cpux1:spot"].id or 0, kind="sample", phase="profile")
                   if not json.loads(e.data_json)["warmup"])
    assert timed == list(range(150))
    assert fake.inventory() == [], "no pod left billing"
    no_live_nodes(home)
    time.sleep(0.5)
    _assert_canary_nowhere(home, tmp_path, out + err)


def _assert_canary_nowhere(home: Path, tmp_path: Path, output: str) -> None:
    assert CANARY not in output, "not in the controller's output"
    leaks = []
    for root in (home, tmp_path / "pods", tmp_path / "machines"):
        for path in root.rglob("*"):
            if path.is_file() and CANARY.encode() in path.read_bytes():
                leaks.append(str(path))
    assert leaks == [], "the key reached files benchctl wrote (database, events, job.json, logs, artifacts)"
    checked = {p.name for p in home.rglob("*") if p.is_file()} | {p.name for p in (tmp_path / "pods").rglob("*")}
    assert {"benchctl.db", "job.json", "events.jsonl", "payload.log"} <= checked, "the places a leak would be exist"

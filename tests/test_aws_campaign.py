"""A campaign on AWS end to end: boto3 against moto's EC2, the node's SSH on a real sshd. The spot
instance is reclaimed mid-profile (state reason Server.SpotInstanceTermination), the cell resumes
on a new instance and finishes with exactly its timed steps; no instance is left running in moto,
and a canary AWS secret reaches nothing benchctl or the nodes wrote. Then the same with what EC2
really does first: the cheapest zone has no capacity (the launch goes to the next zone), and the
node's metadata posts the two-minute interruption notice before the reclaim (the payload stops at a
step boundary and nothing it measured is lost)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchctl.payload.spot_notice import ENDPOINT_ENV
from benchctl.store import queries as q
from tests.cloud_checks import CANARY, assert_canary_nowhere, measuring
from tests.conftest import REPO
from tests.fakes.aws_fake import FakeAWS, FakeIMDS, running_fake_aws, running_fake_imds
from tests.fakes.eviction import kill_container
from tests.fakes.sshd import SSHServer, running_sshd
from tests.local_campaign import home_store, wait_for

pytestmark = pytest.mark.slow

STEPS = 80
"""The spot instance is reclaimed once it has measured a timed step: ≥ 1.5 s of profile left for that."""
NOTICE_STEPS = 400
"""Long enough that the node's watch (it polls every 5 s, as AWS advises) sees the notice mid-profile: 8 s of
the stand-in's 20 ms steps."""
CAMPAIGN = """\
name: ec2
budget_usd: 5
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
defaults: {{market: spot, max_attempts: 3}}
payload:
  phases: [preflight, profile]
  profile: {{device_batch_size: 2, sequence_len: 32, warmup_steps: 1, steps: {steps}}}
providers:
  aws: {{region: us-east-1, ssh_user: {user}, ssh_port: {port}, ssh_cidr: 127.0.0.1/32, python: "{python}",
         workdir: "{work}"}}
matrix:
  - {{provider: aws, instance_type: c5.large}}
"""
KEY = "aws:c5.large:spot"


@dataclass
class Cloud:
    sshd: SSHServer
    fake: FakeAWS


@pytest.fixture
def cloud(tmp_path: Path) -> Iterator[Cloud]:
    with running_sshd(tmp_path / "sshd") as sshd:
        fake = FakeAWS(sshd.root / "authorized_keys", tmp_path / "nodes")
        try:
            with running_fake_aws(fake):
                yield Cloud(sshd, fake)
                assert fake.live() == [], "an instance was left running in moto"
        finally:
            for token in fake.tokens.values():  # whatever happened, no payload outlives the test
                kill_container(fake.workdir, token)


def test_a_spot_instance_reclaimed_mid_profile_resumes_on_a_new_one(home: Path, tmp_path: Path, cloud: Cloud,
                                                                    standin_python: Path) -> None:
    sshd, fake = cloud.sshd, cloud.fake
    path = tmp_path / "ec2.yaml"
    path.write_text(CAMPAIGN.format(steps=STEPS, user=sshd.user, port=sshd.port, python=standin_python,
                                    work=fake.workdir))
    env = {**os.environ, "BENCHCTL_HOME": str(home), "AWS_SECRET_ACCESS_KEY": CANARY}
    env.pop("BENCHCTL_DB", None)
    proc = subprocess.Popen([sys.executable, "-m", "benchctl", "run", str(path), "--poll-interval", "0.2",
                             "--status-interval", "1"], cwd=REPO, env=env, text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    try:
        wait_for(lambda: measuring(fake.workdir, "ec2", KEY), timeout=180)
        (first,) = fake.live()
        fake.spot_terminate(first)  # EC2 reclaims the spot instance mid-profile
    except AssertionError:
        proc.kill()
        raise AssertionError(f"the spot instance never profiled: {proc.communicate()[1][-3000:]}") from None
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    engine = home_store(home)
    (campaign,) = q.campaigns(engine)
    (cell,) = q.cells(engine, campaign.id or 0)
    assert (cell.key, cell.state) == (KEY, "done")
    attempts = q.attempts(engine, cell.id or 0)
    assert [a.outcome for a in attempts] == ["preempted", "done"]
    assert attempts[0].host == first and attempts[1].host not in ("", first), "a new instance"
    assert all(a.hourly_usd == pytest.approx(0.033) for a in attempts), "the cheapest zone's spot price at launch"
    assert len(fake.instances) == 2 and all(r["instance_market_options"] == "spot" for r in fake.requests)
    timed = sorted(json.loads(e.data_json)["timed_index"]
                   for e in q.events(engine, cell.id or 0, kind="sample", phase="profile")
                   if not json.loads(e.data_json)["warmup"])
    assert timed == list(range(STEPS)), "exactly the campaign's timed steps, none lost or doubled"
    assert fake.live() == [], "nothing left running"
    assert_canary_nowhere(out + err, [home, fake.workdir])


def test_no_capacity_moves_zone_and_the_spot_notice_loses_nothing(home: Path, tmp_path: Path,
                                                                  standin_python: Path) -> None:
    imds = FakeIMDS()
    with ExitStack() as stack:
        url = stack.enter_context(running_fake_imds(imds))
        # the node's metadata endpoint, in the environment of every session on the node
        sshd = stack.enter_context(running_sshd(tmp_path / "sshd", extra_config=f"SetEnv {ENDPOINT_ENV}={url}"))
        fake = FakeAWS(sshd.root / "authorized_keys", tmp_path / "nodes")
        stack.callback(lambda: [kill_container(fake.workdir, t) for t in list(fake.tokens.values())])
        stack.enter_context(running_fake_aws(fake))
        fake.refuse("InsufficientInstanceCapacity", "us-east-1b")  # the cheapest zone has none
        path = tmp_path / "ec2.yaml"
        path.write_text(CAMPAIGN.format(steps=NOTICE_STEPS, user=sshd.user, port=sshd.port, python=standin_python,
                                        work=fake.workdir))
        env = {**os.environ, "BENCHCTL_HOME": str(home)}
        env.pop("BENCHCTL_DB", None)
        proc = subprocess.Popen([sys.executable, "-m", "benchctl", "run", str(path), "--poll-interval", "0.2",
                                 "--status-interval", "1"], cwd=REPO, env=env, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        node_events = fake.workdir / "benchctl" / "ec2" / KEY / "2" / "events.jsonl"  # attempt 1 was refused
        try:
            wait_for(lambda: '"warmup": false' in _text(node_events), timeout=180)
            (first,) = fake.live()
            imds.notify()  # EC2 posts the notice; it reclaims the node two minutes later
            wait_for(lambda: '"preempt_notice"' in _text(node_events), timeout=60)
            measured = _text(node_events).count('"warmup": false')
            fake.spot_terminate(first)
            imds.clear()  # the next instance has no notice
        except AssertionError:
            proc.kill()
            raise AssertionError(f"no notice was acted on: {proc.communicate()[1][-3000:]}") from None
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        assert fake.live() == []
        job = json.loads((node_events.parent / "job.json").read_text())
        assert job["instance_type"] == "c5.large", "the fabric preflight expects the type's EFA devices"
    engine = home_store(home)
    (campaign,) = q.campaigns(engine)
    (cell,) = q.cells(engine, campaign.id or 0)
    assert (cell.key, cell.state) == (KEY, "done")
    attempts = q.attempts(engine, cell.id or 0)
    assert [a.outcome for a in attempts] == ["launch_failed", "preempted", "done"]
    assert "InsufficientInstanceCapacity" in (attempts[0].detail or "")
    assert fake.refused == [("us-east-1b", "InsufficientInstanceCapacity")], "sent once, never re-sent there"
    assert [r["placement"] for r in fake.requests] == ["us-east-1a", "us-east-1a"], "the next zone's offer"
    assert all(a.hourly_usd == pytest.approx(0.041) for a in attempts[1:])
    (notice,) = q.events(engine, cell.id or 0, kind="preempt_notice")
    assert notice.attempt_id == attempts[1].id and json.loads(notice.data_json)["timed_steps"] == measured
    samples = [json.loads(e.data_json) | {"attempt": e.attempt_id}
               for e in q.events(engine, cell.id or 0, kind="sample", phase="profile")]
    timed = [s for s in samples if not s["warmup"]]
    assert len([s for s in timed if s["attempt"] == attempts[1].id]) == measured, "every step it measured kept"
    assert sorted(s["timed_index"] for s in timed) == list(range(NOTICE_STEPS)), "none lost or doubled"


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""

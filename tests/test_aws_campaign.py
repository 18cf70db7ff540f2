"""A campaign on AWS end to end: boto3 against moto's EC2, the node's SSH on a real sshd. The spot
instance is reclaimed mid-profile (state reason Server.SpotInstanceTermination), the cell resumes
on a new instance and finishes with exactly its timed steps; no instance is left running in moto,
and a canary AWS secret reaches nothing benchctl or the nodes wrote."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from store import queries as q
from tests.cloud_checks import CANARY, assert_canary_nowhere, measuring
from tests.conftest import REPO
from tests.fakes.aws_fake import FakeAWS, running_fake_aws
from tests.fakes.eviction import kill_container
from tests.fakes.sshd import SSHServer, running_sshd
from tests.local_campaign import home_store, wait_for

pytestmark = pytest.mark.slow

STEPS = 200
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


def test_a_spot_instance_reclaimed_mid_profile_resumes_on_a_new_one(home: Path, tmp_path: Path, cloud: Cloud) -> None:
    sshd, fake = cloud.sshd, cloud.fake
    path = tmp_path / "ec2.yaml"
    path.write_text(CAMPAIGN.format(steps=STEPS, user=sshd.user, port=sshd.port, python=sys.executable,
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

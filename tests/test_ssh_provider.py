"""The ``ssh`` provider end to end: a campaign whose payload runs over real SSH on a local sshd."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlmodel import Session, select

from benchctl.store import queries as q
from benchctl.store.models import Artifact
from tests.conftest import FAST_POLLS, cli_here, run_cli
from tests.fakes.sshd import SSHServer, running_sshd
from tests.local_campaign import home_store

CAMPAIGN = """\
name: viassh
budget_usd: 5
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
defaults: {{market: on-demand, max_attempts: 2}}
payload:
  phases: [preflight, profile]
  profile: {{device_batch_size: 2, sequence_len: 32, warmup_steps: 1, steps: 4}}
providers:
  ssh:
    nodes:
      - {{name: box-a, host: {host}, port: {port}, user: {user}, key: "{key}", gpu: cpu, count: 1,
         price_usd_per_hour: 0.5, python: "{python}", workdir: "{work}/box-a"}}
      - {{name: box-b, host: {host}, port: {port}, user: {user}, key: "{key}", gpu: cpu, count: 2,
         price_usd_per_hour: 1.0, python: "{python}", workdir: "{work}/box-b"}}
matrix:
  - {{provider: ssh, gpu: cpu, count: [1, 2]}}
  - {{provider: ssh, gpu: cpu, count: 1, env: {{KNOB: "1"}}}}
"""


@pytest.fixture(scope="module")
def sshd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SSHServer]:
    with running_sshd(tmp_path_factory.mktemp("sshd")) as server:
        yield server


def _campaign(tmp_path: Path, sshd: SSHServer, python: Path) -> Path:
    path = tmp_path / "viassh.yaml"
    path.write_text(CAMPAIGN.format(host=sshd.host, port=sshd.port, user=sshd.user, key=sshd.key,
                                    python=python, work=tmp_path / "machines"))
    return path


@pytest.mark.slow
def test_campaign_runs_over_ssh_and_frees_the_machines(home: Path, tmp_path: Path, sshd: SSHServer,
                                                       standin_python: Path) -> None:
    result = run_cli("run", str(_campaign(tmp_path, sshd, standin_python)), "--poll-interval", "0.2",
                     "--status-interval", "1", home=home, timeout=300)
    assert result.returncode == 0, result.stderr
    engine = home_store(home)
    (campaign,) = q.campaigns(engine)
    cells = {c.key: c for c in q.cells(engine, campaign.id or 0)}
    assert {c.state for c in cells.values()} == {"done"}
    hosts = {key: [a.host for a in q.attempts(engine, c.id or 0)] for key, c in cells.items()}
    assert hosts == {"ssh:cpux1:on-demand": ["box-a"], "ssh:cpux2:on-demand": ["box-b"],
                     "ssh:cpux1:on-demand:env=KNOB=1": ["box-a"]}, "two cells on box-a took turns"
    for cell in cells.values():
        (attempt,) = q.attempts(engine, cell.id or 0)
        assert attempt.hourly_usd == (1.0 if "cpux2" in cell.key else 0.5)
        assert len([e for e in q.events(engine, cell.id or 0, kind="sample", phase="profile")]) == 5
        local = home / "artifacts" / "viassh" / cell.key / "1"
        assert (local / "events.jsonl").exists() and (local / "artifacts").is_dir(), "artifacts came home"
        recorded = _artifacts(engine, cell.id or 0)
        assert recorded and all(a.local_path and a.bytes == Path(a.local_path).stat().st_size and
                                a.sha256 == hashlib.sha256(Path(a.local_path).read_bytes()).hexdigest()
                                for a in recorded), "each artifact is recorded with its size and sha256"
    assert not list((home / "ssh" / "claims").iterdir()), "every machine is free again"
    leftovers = [p for p in (tmp_path / "machines").rglob("*.pids")]
    assert leftovers == [], "the processes we started were ended at terminate"
    assert (home / "ssh" / "known_hosts" / "box-a").read_text().strip(), "host keys were pinned"


def test_ssh_cells_need_nodes(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    text = CAMPAIGN.format(host="h", port=22, user="u", key="k", python="p", work="w")
    path.write_text(text[:text.index("providers:")] + text[text.index("matrix:"):])
    result = cli_here("run", str(path), *FAST_POLLS, home=home)  # refused before any node
    assert result.returncode == 2
    assert "bad.yaml:9 matrix[0]: ssh cells need the machines to use: add providers.ssh.nodes" in result.stderr


def _artifacts(engine, cell_id: int) -> list[Artifact]:  # type: ignore[no-untyped-def]
    with Session(engine) as s:
        return list(s.exec(select(Artifact).where(Artifact.cell_id == cell_id)))

"""(slow) A 2-node ``ssh`` cell end to end through the CLI: two machines, each a real sshd on
127.0.0.1, and node 1's machine restarted mid-profile (its sshd and its connections gone, every
process we started there killed, then the same machine back), as the ssh provider sees a node lost."""

from __future__ import annotations

import json
import os
from contextlib import ExitStack
from pathlib import Path

import pytest

from benchctl.provisioners.base import Node
from benchctl.store import queries as q
from tests.conftest import FAST_POLLS
from tests.fakes.eviction import kill_container
from tests.fakes.sshd import SSHServer, running_sshd
from tests.local_campaign import only_cell, start, wait_for

CAMPAIGN = """\
name: sshpair
budget_usd: 5
target: {{model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}}
defaults: {{market: on-demand, max_attempts: 3}}
payload:
  phases: [preflight, profile]
  profile: {{device_batch_size: 2, sequence_len: 32, warmup_steps: 1, steps: {steps}}}
providers:
  ssh:
    nodes:
{machines}
matrix:
  - {{provider: ssh, gpu: cpu, count: 1, nodes: 2}}
"""
MACHINE = """\
      - {{name: {name}, host: {host}, port: {port}, user: {user}, key: "{key}", gpu: cpu, count: 1,
         price_usd_per_hour: 0.5, python: "{python}", workdir: "{workdir}"}}
"""
KEY = "ssh:cpux1:on-demand:nodes=2"
STEPS = 150
"""3 s of the stand-in's steps, whose every step waits for both nodes' ranks: box-b goes down
mid-profile. Its processes die once its sshd is back, so node 0's ranks fail (their peer gone) when
the controller can already see box-b restarted (a preemption), never while box-b does not answer (a
node that does not answer is running, and node 0's failure would be the attempt's)."""


def _campaign(tmp_path: Path, machines: dict[str, SSHServer], python: Path) -> Path:
    listed = "".join(MACHINE.format(name=name, host=s.host, port=s.port, user=s.user, key=s.key, python=python,
                                    workdir=tmp_path / "machines" / name) for name, s in machines.items())
    path = tmp_path / "sshpair.yaml"
    path.write_text(CAMPAIGN.format(steps=STEPS, machines=listed))
    return path


def _timed_step_taken(machine: Path) -> bool:
    """Node 0's payload on ``machine`` has recorded a timed profile step."""
    for events in machine.glob("benchctl/*/*/*/events.jsonl"):
        for line in events.read_text().splitlines():
            if '"phase": "profile"' in line and '"warmup": false' in line:
                return True
    return False


def _end_every_node(machines: Path) -> None:
    for pids in machines.glob("*/.benchctl/*.pids"):
        kill_container(pids.parent.parent, pids.stem)


def _processes_under(root: Path) -> list[int]:
    """The processes running in a directory under ``root`` (a payload runs in its attempt's)."""
    found = []
    for cwd in Path("/proc").glob("[0-9]*/cwd"):
        try:
            if Path(os.readlink(cwd)).is_relative_to(root):
                found.append(int(cwd.parent.name))
        except OSError:
            continue
    return found


@pytest.mark.slow
def test_a_two_node_ssh_cell_survives_node_1s_machine_restarted_mid_profile(home: Path, tmp_path: Path,
                                                                           standin_python: Path) -> None:
    # the ranks are the stand-in's (the real payload across nodes: test_cluster_local, tests/payload/)
    with ExitStack() as stack, ExitStack() as box_b:
        stack.callback(_end_every_node, tmp_path / "machines")  # last: whatever a failure left running
        servers = {"box-a": stack.enter_context(running_sshd(tmp_path / "sshd-a")),
                   "box-b": box_b.enter_context(running_sshd(tmp_path / "sshd-b"))}
        cli = start(home, "run", str(_campaign(tmp_path, servers, standin_python)), *FAST_POLLS)
        stack.callback(lambda: cli.poll() is None and cli.kill())
        wait_for(lambda: _timed_step_taken(tmp_path / "machines" / "box-a"), timeout=300)
        (pids,) = (tmp_path / "machines" / "box-b" / ".benchctl").glob("*.pids")
        box_b.close()  # box-b restarts: its sshd and every connection to it go,
        box_b.enter_context(running_sshd(tmp_path / "sshd-b", port=servers["box-b"].port))  # the same machine,
        kill_container(tmp_path / "machines" / "box-b", pids.stem)  # back without any process we started there
        _, err = cli.communicate(timeout=400)
    engine, cell = only_cell(home)
    attempts = q.attempts(engine, cell.id or 0)
    assert (cell.key, cell.state) == (KEY, "done"), (cell.reason, [(a.outcome, a.detail) for a in attempts],
                                                    err[-3000:])
    assert cli.returncode == 0, err
    first, *_, last = attempts
    assert pids.stem == f"{first.token}-n1"
    assert first.outcome == "preempted" and "node 1 of 2 preempted" in (first.detail or ""), first.detail
    assert last.outcome == "done" and last.token != first.token, "the profile went on on a new cluster"
    samples = [json.loads(e.data_json) for e in q.events(engine, cell.id or 0, kind="sample", phase="profile")]
    assert sorted(s["timed_index"] for s in samples if not s["warmup"]) == list(range(STEPS)), "each step once"
    assert {e.attempt_id for e in q.events(engine, cell.id or 0, kind="sample", phase="profile")} >= {first.id, last.id}
    for attempt in attempts:
        members = Node.from_dict(json.loads(attempt.node_json or "{}")).members()
        assert [(m.token, m.details["machine"]) for m in members] == [(attempt.token, "box-a"),
                                                                      (f"{attempt.token}-n1", "box-b")]
        ends = []
        for rank, member in enumerate(members):
            record = json.loads((home / "ssh" / "nodes" / f"{member.token}.json").read_text())
            assert record["terminated"], f"node {rank} of attempt {attempt.number} was terminated"
            ends.append(record["terminated_at"])
            job = json.loads((tmp_path / "machines" / member.details["machine"] / attempt.remote_dir
                              / "job.json").read_text())
            assert (job["nodes"], job["node_rank"], job["master_addr"]) == (2, rank, "127.0.0.1")
        assert attempt.terminated_at == max(ends), "billed until the last member was let go"
    assert (home / "artifacts" / "sshpair" / KEY / str(last.number) / "node-1" / "payload.log").is_file()
    (row, _, _), = q.results(engine)
    assert row.timed_steps == STEPS
    assert not list((home / "ssh" / "claims").iterdir()), "both machines are free again"
    assert not list((tmp_path / "machines").rglob("*.pids")), "every process group we started was ended"
    assert _processes_under(tmp_path / "machines") == [], "no process of any node is left running"

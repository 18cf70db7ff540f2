"""The local provider: nodes are process groups on this machine; transport, termination, preemption."""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from benchctl.provisioners.base import Node, NodeState, Offer, OfferRequest, ProviderError
from benchctl.provisioners.local import provider as local
from benchctl.provisioners.local.processes import node_processes
from benchctl.provisioners.local.provider import LocalProvider
from tests.conftest import FAST_POLLS, Tokens, run_cli


@pytest.fixture
def provider(tmp_path: Path) -> Iterator[LocalProvider]:
    prov = LocalProvider(tmp_path / "nodes")
    yield prov
    # never leave a process behind, whatever the test did
    for path in (tmp_path / "nodes").glob("*/node.json"):
        record = local._read_record(path.parent)
        if record is not None and record["node"] is not None:
            prov.terminate(Node.from_dict(record["node"]))


def _offer(provider: LocalProvider, count: int = 1) -> Offer:
    offer = provider.offers(OfferRequest(gpu="cpu", count=count, market="on-demand", price_usd_per_hour=0.5))[0]
    return offer


def _wait_for(predicate: Callable[[], object], timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return bool(predicate())


def test_cpu_offer(provider: LocalProvider) -> None:
    offers = provider.offers(OfferRequest(gpu="cpu", count=2, market="spot", price_usd_per_hour=1.25))
    assert [o.host for o in offers] == ["local-0", "local-1", "local-2", "local-3"]  # virtual hosts
    assert all(o.details == {} for o in offers)
    offer = offers[0]
    assert (offer.provider, offer.gpu, offer.count, offer.market, offer.hourly_usd, offer.region) == (
        "local", "cpu", 2, "spot", 1.25, "local")
    assert offer.vcpus == (os.cpu_count() or 1)
    free = provider.offers(OfferRequest(gpu="CPU", count=1, market="on-demand"))
    assert {o.hourly_usd for o in free} == {0.0}


def test_bad_hosts_are_excluded_and_faults_go_to_the_first_hosts(provider: LocalProvider) -> None:
    request = OfferRequest(gpu="cpu", count=1, market="spot", price_usd_per_hour=1.0, exclude_hosts=("local-0",),
                           extra={"faults": {"shm_mb": 64, "hosts": 2}})
    offers = provider.offers(request)
    assert [(o.host, o.details) for o in offers] == [
        ("local-1", {"faults": {"shm_mb": 64}, "cell": ""}), ("local-2", {}), ("local-3", {})]


def test_gpu_offer_without_gpus_is_empty(provider: LocalProvider) -> None:
    assert local._visible_gpus() == 0  # this machine has no nvidia-smi
    assert provider.offers(OfferRequest(gpu="H100_SXM", count=8, market="spot", price_usd_per_hour=2.0)) == []


def test_launch_owned_and_terminate(provider: LocalProvider, tok: Tokens) -> None:
    node = provider.launch(_offer(provider), token=tok("a"), campaign_tag="camp-1")
    assert (node.provider, node.node_id, node.token, node.campaign_tag) == ("local", tok("a"), tok("a"), "camp-1")
    leader = node.details["leader_pid"]
    assert provider.status(node) is NodeState.RUNNING
    assert node_processes(tok("a")) == [leader]
    assert [n.node_id for n in provider.owned("camp-1")] == [tok("a")]
    assert provider.owned("camp-1")[0] == node
    assert provider.owned("camp-2") == []

    provider.terminate(node)
    assert provider.status(node) is NodeState.TERMINATED
    assert node_processes(tok("a")) == []
    provider.terminate(node)  # idempotent
    assert provider.status(node) is NodeState.TERMINATED
    assert provider.owned("camp-1") == []


def test_terminate_unknown_node_is_success(provider: LocalProvider, tok: Tokens) -> None:
    node = provider.launch(_offer(provider), token=tok("gone"), campaign_tag="camp")
    provider.terminate(node)
    provider.remove(node)
    assert not (provider.root / tok("gone")).exists()
    provider.terminate(node)
    assert provider.status(node) is NodeState.TERMINATED


def test_remove_refuses_a_running_node(provider: LocalProvider, tok: Tokens) -> None:
    node = provider.launch(_offer(provider), token=tok("r"), campaign_tag="camp")
    with pytest.raises(ProviderError, match="terminate it first"):
        provider.remove(node)
    assert provider.status(node) is NodeState.RUNNING


def test_transport_run_and_files(provider: LocalProvider, tmp_path: Path, tok: Tokens) -> None:
    node = provider.launch(_offer(provider), token=tok("t"), campaign_tag="camp")
    transport = provider.transport(node)
    home = provider.root / tok("t") / "home"

    result = transport.run("pwd && echo out && echo err >&2 && exit 3")
    assert result.code == 3
    assert result.out.splitlines() == [str(home.resolve()), "out"]
    assert result.err == "err\n"
    assert transport.run("echo hi > made.txt").code == 0
    assert (home / "made.txt").read_text() == "hi\n"
    with pytest.raises(ProviderError, match="timed out"):
        transport.run("sleep 5", timeout=0.3)

    src = tmp_path / "src"
    (src / "pkg" / "__pycache__").mkdir(parents=True)
    (src / "pkg" / "mod.py").write_text("x = 1\n")
    (src / "pkg" / "__pycache__" / "mod.cpython-311.pyc").write_bytes(b"junk")
    (src / "job.json").write_text("{}")
    transport.put(str(src), "benchctl/cell/1")
    remote = home / "benchctl" / "cell" / "1"
    assert (remote / "pkg" / "mod.py").read_text() == "x = 1\n"
    assert (remote / "job.json").read_text() == "{}"
    assert not (remote / "pkg" / "__pycache__").exists()

    (remote / "artifacts").mkdir()
    (remote / "artifacts" / "a.txt").write_text("A")
    back = tmp_path / "back"
    transport.get("benchctl/cell/1/artifacts", str(back))
    assert (back / "artifacts" / "a.txt").read_text() == "A"
    transport.get("benchctl/cell/1/job.json", str(back))
    assert (back / "job.json").read_text() == "{}"
    transport.get("benchctl/cell/1/missing.txt", str(back))
    assert not (back / "missing.txt").exists()

    (remote / "events.jsonl").write_bytes(b"0123456789")
    assert transport.read_from("benchctl/cell/1/events.jsonl", 0) == b"0123456789"
    assert transport.read_from("benchctl/cell/1/events.jsonl", 4) == b"456789"
    assert transport.read_from("benchctl/cell/1/events.jsonl", 10) == b""
    assert transport.read_from("benchctl/cell/1/events.jsonl", 50) == b""
    assert transport.read_from("benchctl/cell/1/nope.jsonl", 0) == b""


def test_paths_may_not_leave_home(provider: LocalProvider, tmp_path: Path, tok: Tokens) -> None:
    node = provider.launch(_offer(provider), token=tok("p"), campaign_tag="camp")
    transport = provider.transport(node)
    with pytest.raises(ProviderError, match="leaves the node's home"):
        transport.read_from("../../etc/passwd", 0)
    with pytest.raises(ProviderError, match="leaves the node's home"):
        transport.put(str(tmp_path), "../../etc")
    with pytest.raises(ProviderError, match="leaves the node's home"):
        transport.get("../node.json", str(tmp_path / "x"))
    with pytest.raises(ProviderError, match="leaves the node's home"):
        transport.start("true", "../..")


def test_start_is_detached_and_killed_by_terminate(provider: LocalProvider, tok: Tokens) -> None:
    node = provider.launch(_offer(provider), token=tok("s"), campaign_tag="camp")
    transport = provider.transport(node)
    home = provider.root / tok("s") / "home"
    (home / "work").mkdir()
    leader = node.details["leader_pid"]

    started = time.monotonic()
    transport.start("echo $$ > pid.txt; pwd > cwd.txt; sleep 60", cwd="work")
    assert time.monotonic() - started < 10  # returned without waiting for the command
    assert _wait_for(lambda: (home / "work" / "cwd.txt").exists() and (home / "work" / "cwd.txt").read_text())
    pid = int((home / "work" / "pid.txt").read_text())
    assert (home / "work" / "cwd.txt").read_text().strip() == str((home / "work").resolve())
    time.sleep(0.2)
    members = node_processes(tok("s"))
    assert pid in members and leader in members  # still running after start() returned, marked as the node's
    assert os.getsid(pid) != os.getsid(0), "out of reach of the controller's terminal (Ctrl-C, hang-up)"

    provider.terminate(node)
    assert node_processes(tok("s")) == []
    assert provider.status(node) is NodeState.TERMINATED


def test_preempt_reads_as_preempted(provider: LocalProvider, tok: Tokens) -> None:
    node = provider.launch(_offer(provider), token=tok("x"), campaign_tag="camp")
    other = provider.launch(_offer(provider), token=tok("y"), campaign_tag="camp")
    provider.transport(node).start("sleep 60", cwd=".")
    provider.preempt(node)
    assert node_processes(tok("x")) == []
    assert provider.status(node) is NodeState.PREEMPTED
    with pytest.raises(ProviderError, match="gone"):
        provider.transport(node).run("true")
    assert provider.status(other) is NodeState.RUNNING
    # a preempted node is still ours until terminated (it may still bill)
    assert sorted(n.node_id for n in provider.owned("camp")) == [tok("x"), tok("y")]
    provider.terminate(node)
    assert provider.status(node) is NodeState.TERMINATED
    assert [n.node_id for n in provider.owned("camp")] == [tok("y")]


def test_node_round_trip(provider: LocalProvider, tok: Tokens) -> None:
    node = provider.launch(_offer(provider), token=tok("j"), campaign_tag="camp")
    raw = node.to_dict()
    assert raw["offer"]["hourly_usd"] == 0.5
    assert raw["details"]["leader_pid"] == node.details["leader_pid"]
    assert Node.from_dict(raw) == node
    assert isinstance(Node.from_dict(raw).offer, Offer)
    # after a controller restart, a node rebuilt from its record is fully usable
    rebuilt = Node.from_dict(raw)
    assert LocalProvider(provider.root).status(rebuilt) is NodeState.RUNNING
    assert LocalProvider(provider.root).transport(rebuilt).run("echo ok").out == "ok\n"


def test_a_launch_cut_short_leaves_nothing_running(provider: LocalProvider, tok: Tokens) -> None:
    import json
    import subprocess

    from benchctl.provisioners.local.processes import node_env

    node_dir = provider.root / tok("cut")
    node_dir.mkdir(parents=True)
    # what a controller that died between starting the leader and recording the node leaves behind
    (node_dir / "node.json").write_text(json.dumps({"node": None, "token": tok("cut"), "campaign_tag": "camp",
                                                    "terminated": False, "created_at": 0}))
    leader = subprocess.Popen(["sleep", "60"], env=node_env(tok("cut")), start_new_session=True)
    assert _wait_for(lambda: node_processes(tok("cut")))
    (cut,) = provider.owned("camp")  # listed, so that the orphan sweep or the attempt's reconcile ends it
    assert cut.token == tok("cut") and provider.status(cut) is NodeState.STARTING
    provider.terminate(cut)
    assert node_processes(tok("cut")) == []
    assert provider.owned("camp") == []
    leader.wait(timeout=5)


CREDENTIALS = {"BENCHCTL_DB": "postgresql://bench:canary-db-7f3@db.internal/bench",
               "DATABASE_URL": "postgresql://app:canary-app-7f3@db.internal/app",
               "AWS_SECRET_ACCESS_KEY": "canary-aws-7f3",
               "HTTPS_PROXY": "http://proxyuser:canary-proxy-7f3@proxy.internal:3128"}
"""Credentials in the controller's environment, some under innocent names (issue 13, item 7)."""


def test_a_local_node_inherits_no_credential(provider: LocalProvider, monkeypatch: pytest.MonkeyPatch,
                                             tok: Tokens) -> None:
    for name, value in CREDENTIALS.items():
        monkeypatch.setenv(name, value)
    node = provider.launch(_offer(provider), token=tok("env"), campaign_tag="camp")
    leader = Path(f"/proc/{node.details['leader_pid']}/environ").read_bytes().decode()
    seen = provider.transport(node).run("env").out
    for environment in (leader, seen):
        assert "canary" not in environment and "proxy.internal" not in environment, environment
    assert "PATH=" in seen and f"BENCHCTL_LOCAL_NODE={tok('env')}" in seen


CAMPAIGN = """\
name: creds
budget_usd: 5
target: {model: nanochat-d1, vocab_size: 512, target_param_data_ratio: 8.5, total_batch_size: 128}
defaults: {market: on-demand, max_attempts: 1}
payload:
  phases: [preflight, command]
  command: {run: env}
matrix:
  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5}
"""


@pytest.mark.slow
def test_a_campaign_leaves_no_controller_credential_anywhere(tmp_path: Path) -> None:
    """The node's environment (the command prints it) and its facts (env.txt) come back as
    artifacts: neither, nor the store, nor any other file under BENCHCTL_HOME holds a credential."""
    home, path = tmp_path / "home", tmp_path / "creds.yaml"
    path.write_text(CAMPAIGN)
    result = run_cli("--db", f"sqlite:///{home / 'benchctl.db'}", "run", str(path), *FAST_POLLS, home=home,
                     env=CREDENTIALS)
    assert result.returncode == 0, result.stdout + result.stderr
    printed = [p.read_text() for p in home.rglob("command.stdout")]  # on the node, and its copy back
    assert printed and all("PATH=" in text and "BENCHCTL_LOCAL_NODE=" in text for text in printed)
    env_txt = list(home.rglob("env.txt"))
    assert env_txt and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in env_txt)
    leaks = [str(p) for p in home.rglob("*") if p.is_file() and b"canary" in p.read_bytes()]
    assert leaks == [], "a controller credential reached these files"
    assert "canary" not in result.stdout + result.stderr

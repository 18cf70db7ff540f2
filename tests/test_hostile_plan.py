"""Values that could only fail once a node was rented are refused at ``plan`` (issue 31, item 9):
an environment value or command with a NUL, an absurd ``max_artifact_gb``, a FIFO (or any file that is
not a regular one) inside ``command.upload``, an ssh host or user that ssh would read as an option, a
host that is no DNS name or IP address.
The transport refuses such a destination too (records already in a store), and a node recorded with
one still terminates. Cell keys of coordinates that differ only in what the key's slug drops never
collide, and every key that never collided stays as it was."""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path

import pytest

from benchctl.campaign.spec import parse_campaign
from benchctl.provisioners.base import Node, NodeState, OfferRequest, ProviderError
from benchctl.provisioners.ssh import SSHNode, SSHProvider
from benchctl.provisioners.ssh_transport import SSHEndpoint, SSHTransport
from tests.conftest import cli_here
from tests.test_hostile_inputs import CAMPAIGN, command_campaign, refused

CELL = "  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 0.5}\n"


def plan(home: Path, tmp_path: Path, text: str) -> str:
    """The one line of a refused ``plan`` of ``text`` (exit 2), which names the file and its line."""
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return refused(cli_here("plan", str(path), home=home), f"{path}:")


@pytest.mark.parametrize(("old", "new", "words"), [
    (CELL.strip(), CELL.strip()[:-1] + ', env: {NCCL_ALGO: "Ring\\0"}}', ("c.yaml:6 matrix[0].env", "NCCL_ALGO",
                                                                         "NUL")),
    (CELL.strip(), CELL.strip()[:-1] + ', faults: {env: {X: "a\\0b"}}}', ("matrix[0].faults.env", "NUL")),
    ("payload: {", 'payload: {phases: [command], command: {run: "echo \\0"}, ', ("payload.command.run", "NUL")),
    ("budget_usd: 5", "budget_usd: 5\nmax_artifact_gb: 1.0e+300", ("c.yaml:3 max_artifact_gb",
                                                                   "less than or equal to 1000")),
])
def test_values_that_fail_only_on_the_node_are_refused_at_plan(home: Path, tmp_path: Path, old: str, new: str,
                                                               words: tuple[str, ...]) -> None:
    assert old in CAMPAIGN
    line = plan(home, tmp_path, CAMPAIGN.replace(old, new))
    assert all(word in line for word in words), line


def test_a_bounded_max_artifact_gb_still_plans(home: Path, tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(CAMPAIGN.replace("budget_usd: 5", "budget_usd: 5\nmax_artifact_gb: 1000"))
    assert cli_here("plan", str(path), home=home).returncode == 0


@pytest.mark.parametrize("kind", ["fifo", "socket"])
def test_an_upload_holding_a_fifo_or_socket_is_refused_at_plan(home: Path, tmp_path: Path, kind: str) -> None:
    """tar would block on the FIFO (or fail on the socket) while the rented node waits."""
    work = tmp_path / "work" / "data"
    work.mkdir(parents=True)
    (work / "train.py").write_text("print('hi')\n")
    special = work / "pipe"
    if kind == "fifo":
        os.mkfifo(special)
    else:
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(special))
    line = plan(home, tmp_path, command_campaign("work"))
    assert "payload.command.upload" in line and f"{special} is not a regular file" in line, line


# --- ssh destinations --------------------------------------------------------------------------------

SSH_CAMPAIGN = CAMPAIGN.replace(CELL, "  - {provider: ssh, gpu: cpu, count: 1}\n") + """\
providers:
  ssh:
    nodes:
      - {name: box, host: "HOST", user: "USER", gpu: cpu, count: 1, price_usd_per_hour: 0.5}
"""


@pytest.mark.parametrize(("host", "user", "words"), [
    ("127.0.0.1", "-oProxyCommand=touch /tmp/owned", "user: the ssh user '-oProxyCommand=touch /tmp/owned' starts "
                                                     "with '-'"),
    ("-oProxyCommand=x", "root", "host: the ssh host '-oProxyCommand=x' starts with '-'"),
    ("box one", "root", "host: the ssh host 'box one' holds a space"),
    ("127.0.0.1", "ro\\tot", "user: the ssh user 'ro\\tot' holds a space or a control character"),
    ("127.0.0.1", "ro\\x01ot", "holds a space or a control character"),
])
def test_an_ssh_host_or_user_that_ssh_would_misread_is_refused_at_plan(home: Path, tmp_path: Path, host: str,
                                                                      user: str, words: str) -> None:
    line = plan(home, tmp_path, SSH_CAMPAIGN.replace("HOST", host).replace("USER", user))
    assert "providers.ssh.nodes[0]" in line and words in line, line


@pytest.mark.parametrize(("host", "words"), [
    ("10.0.0.5/24", "'10.0.0.5/24' is not a DNS name, an IPv4 or an IPv6 address"),
    ("../../etc", "'../../etc' is not a DNS name"),
    ("me@box", "'me@box' is not a DNS name"),
    ("box;reboot", "'box;reboot' is not a DNS name"),
    ("box.-x.com", "'box.-x.com' is not a DNS name"),
    ("box:2222", "'box:2222' is not an IPv6 address (write one bare, without brackets or a port"),
    ("[::1]", "'[::1]' is not an IPv6 address"),
    ("256.1.1.1", "'256.1.1.1' is not an IPv4 address"),
])
def test_an_ssh_host_that_is_no_address_is_refused_at_plan(home: Path, tmp_path: Path, host: str, words: str) -> None:
    """Only a leading '-' and whitespace were refused: '10.0.0.5/24' or 'me@box' reached ssh (and named the
    machine's files) and failed only on a rented attempt."""
    line = plan(home, tmp_path, SSH_CAMPAIGN.replace("HOST", host).replace("USER", "root"))
    assert "providers.ssh.nodes[0].host" in line and words in line, line
    rendezvous = SSH_CAMPAIGN.replace("HOST", "10.0.0.5").replace("USER", "root").replace(
        "gpu: cpu, count: 1, price", f'rendezvous_host: "{host}", gpu: cpu, count: 1, price')
    assert "providers.ssh.nodes[0].rendezvous_host" in plan(home, tmp_path, rendezvous)


@pytest.mark.parametrize("host", ["gpu-01.example.com", "gpu_box", "box.example.com.", "10.0.0.5", "::1",
                                  "2001:db8::7", "fe80::1%eth0", "localhost"])
def test_dns_names_and_ip_addresses_are_ssh_hosts(host: str) -> None:
    assert SSHNode(host=host, rendezvous_host=host, user="me", gpu="cpu", count=1).host == host
    assert SSHTransport(SSHEndpoint(host=host, user="me"), Path("kh"), "tok").ssh_args()[-1] == f"me@{host}"


def test_a_stored_host_that_is_no_address_is_not_given_to_ssh(tmp_path: Path) -> None:
    transport = SSHTransport(SSHEndpoint(host="box/../x", user="me"), tmp_path / "known_hosts", "tok")
    with pytest.raises(ProviderError, match="is not a DNS name"):
        transport.ssh_args()


def test_a_token_of_another_form_names_no_path_outside_the_node_records(tmp_path: Path) -> None:
    """Tokens come back from the store and from claim files: one such as '../../planted' read and wrote
    ``<root>/nodes/../../planted.json``. Now it is encoded into one file name inside ``nodes/``."""
    from benchctl.provisioners.node_records import file_name

    root = tmp_path / "ssh"
    provider = SSHProvider(root, [SSHNode(name="box", host="127.0.0.1", user="me", gpu="cpu", count=1)])
    request = OfferRequest(gpu="cpu", count=1, market="on-demand")
    planted = tmp_path / "planted.json"
    planted.write_text(json.dumps({"terminated": False, "campaign_tag": "c", "node": {}}))
    (root / "claims" / "box").write_text("../../planted")  # a claim held by a record outside nodes/
    assert provider.offers(request), "a record outside nodes/ holds the machine"
    (root / "claims" / "box").unlink()
    node = provider.launch(provider.offers(request)[0], "../../escape", "c")
    assert not (tmp_path / "escape.json").exists()
    assert [p.name for p in (root / "nodes").iterdir()] == [f"{file_name('../../escape')}.json"]
    assert file_name("../../escape").startswith("+.._.._escape+")
    assert [n.token for n in provider.owned("c")] == [node.token] and not provider.offers(request)
    assert file_name("bc-0123456789abcdef-n1") == "bc-0123456789abcdef-n1"  # benchctl's tokens: as they are


def test_a_local_node_of_another_form_removes_nothing_outside_its_folder(tmp_path: Path) -> None:
    """The local provider's ``remove`` deleted ``<root>/<node_id>`` of a stored node: '../../victim' was
    a directory outside the provider's folder."""
    from benchctl.provisioners.base import Offer
    from benchctl.provisioners.local.provider import LocalProvider

    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep.txt").write_text("mine")
    (tmp_path / "home" / "nodes").mkdir(parents=True)  # as after a first launch
    provider = LocalProvider(tmp_path / "home" / "nodes")
    offer = Offer(provider="local", offer_id="local-0", gpu="cpu", count=1, vcpus=1, region="local", hourly_usd=0.0,
                  market="on-demand")
    stored = Node(provider="local", node_id="../../victim", token="../../victim", campaign_tag="c", offer=offer,
                  details={"leader_pid": None})
    assert provider.status(stored) is NodeState.TERMINATED
    provider.remove(stored)
    assert (victim / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize(("tag", "cell"), [("../../escape", "local:cpux1"),
                                           ("c", "local:cpux1:env=X=/../../../escape"),
                                           ("c", "local:cpux1:env=X=a/b")])
def test_the_local_preemption_counter_names_one_file_inside_its_folder(tmp_path: Path, tag: str, cell: str) -> None:
    """The counter of a cell's injected preemptions was ``<root>/preemptions/<tag>--<cell>``: a tag or a key
    (which carries the campaign's env values) holding '..' or '/' wrote it outside that folder, or in a
    folder of its own. Now it is one encoded file name there, and it still counts."""
    from benchctl.provisioners.local.provider import LocalProvider
    from benchctl.provisioners.node_records import file_name

    root = tmp_path / "home" / "nodes"
    root.mkdir(parents=True)
    provider = LocalProvider(root)
    faults = {"preempt_at_step": 2, "preemptions": 1}
    assert provider._preemption(faults, tag, cell) == ["--at-step", "2"]
    assert provider._preemption(faults, tag, cell) == [], "the one preemption is counted"
    assert [p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()] == [
        Path("home/nodes/preemptions") / file_name(f"{tag}--{cell}")]


def test_the_transport_never_gives_ssh_an_option_as_its_destination(tmp_path: Path) -> None:
    """The real OpenSSH client: a user ``-oProxyCommand=…`` before the fix made ssh run that command here."""
    marker = tmp_path / "owned"
    endpoint = SSHEndpoint(host="127.0.0.1", port=1, user=f"-oProxyCommand=touch {marker}")
    transport = SSHTransport(endpoint, tmp_path / "known_hosts", "tok", connect_timeout_s=1, retry_for_s=1)
    with pytest.raises(ProviderError, match="starts with '-'"):
        transport.run("true", timeout=10)
    transport.close()  # nothing to close, and no error
    assert list(tmp_path.glob("owned*")) == [], "ssh ran the planted ProxyCommand"
    good = SSHTransport(SSHEndpoint(host="127.0.0.1", user="me"), tmp_path / "known_hosts", "tok")
    assert good.ssh_args()[-2:] == ["--", "me@127.0.0.1"], "the destination comes after --"


def test_a_node_recorded_with_a_bad_destination_still_terminates(tmp_path: Path) -> None:
    """A record written before the fix (or tampered): ``down`` must end it, not fail on ssh forever."""
    machine = SSHNode(name="box", host="127.0.0.1", user="me", gpu="cpu", count=1)
    provider = SSHProvider(tmp_path / "ssh", [machine])
    node = provider.launch(provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand"))[0], "tok",
                           "campaign")
    marker = tmp_path / "owned"
    record_path = tmp_path / "ssh" / "nodes" / "tok.json"
    record = json.loads(record_path.read_text())
    record["node"]["details"]["endpoint"]["user"] = f"-oProxyCommand=touch {marker}"
    record_path.write_text(json.dumps(record))
    stored = Node.from_dict(record["node"])
    provider.terminate(stored)
    assert provider.status(stored) is NodeState.TERMINATED
    assert provider.owned("campaign") == []
    assert provider.offers(OfferRequest(gpu="cpu", count=1, market="on-demand")), "the machine is free again"
    assert list(tmp_path.glob("owned*")) == []
    assert node.token == stored.token


# --- cell keys ---------------------------------------------------------------------------------------

KEYED = CAMPAIGN.replace(CELL, "")


def _keys(cells: str) -> list[str]:
    return [c.key for c in parse_campaign(KEYED + cells, "c.yaml").cells]


def test_env_values_that_differ_only_in_punctuation_get_distinct_keys(home: Path, tmp_path: Path) -> None:
    cells = ('  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 0.5, env: {NCCL_ALGO: "Ring Tree"},'
             ' market: [spot, on-demand]}\n'
             '  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 0.5, env: {NCCL_ALGO: "Ring_Tree"},'
             ' market: [spot, on-demand]}\n'
             '  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 0.5, env: {NCCL_ALGO: "Ring/Tree"}}\n')
    keys = _keys(cells)
    assert len(set(keys)) == len(keys) == 5, keys
    assert all(k.startswith("local:cpux2:") and ":env=NCCL_ALGO=Ring_Tree:id=" in k for k in keys), keys
    spot, on_demand = keys[0], keys[1]
    assert spot.replace(":spot:", ":on-demand:") == on_demand, "a spot cell and its on-demand twin stay a pair"
    path = tmp_path / "c.yaml"
    path.write_text(KEYED + cells)
    assert cli_here("plan", str(path), home=home).returncode == 0


def test_env_values_holding_the_separators_get_distinct_keys() -> None:
    keys = _keys('  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 0.5, env: {A: "1,B=2"}}\n'
                 '  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 0.5, env: {A: "1", B: "2"}}\n')
    assert len(set(keys)) == 2 and all(":env=A=1,B=2:id=" in k for k in keys), keys


def test_keys_that_never_collided_are_unchanged() -> None:
    """Existing stores keep matching their cells: the same text as before the ``id=`` tag existed."""
    assert _keys('  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 0.5, env: {NCCL_ALGO: "Ring Tree"},'
                 ' market: [spot, on-demand]}\n'
                 '  - {provider: local, gpu: cpu, count: 1, price_usd_per_hour: 0.5, env: {NCCL_ALGO: "Ring_Tree"}}\n'
                 '  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 0.5, region: "us:east 1"}\n') == [
        "local:cpux2:spot:env=NCCL_ALGO=Ring_Tree", "local:cpux2:on-demand:env=NCCL_ALGO=Ring_Tree",
        "local:cpux1:on-demand:env=NCCL_ALGO=Ring_Tree", "local:cpux2:on-demand:region=us_east_1"]


def test_the_same_cell_twice_is_still_refused(home: Path, tmp_path: Path) -> None:
    cell = '  - {provider: local, gpu: cpu, count: 2, price_usd_per_hour: 0.5, env: {NCCL_ALGO: "Ring Tree"}}\n'
    line = plan(home, tmp_path, KEYED + cell + cell.replace("0.5", "0.7"))
    assert "repeats cell local:cpux2:on-demand:env=NCCL_ALGO=Ring_Tree of matrix[0]" in line, line
